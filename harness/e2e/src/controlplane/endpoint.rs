//! **A stand-in for the control-plane load balancer** (kubeadm's `--control-plane-endpoint`
//! behind haproxy, OpenShift's `api-int`): a TCP pass-through on an address of its own in front
//! of every node's kube-apiserver. TLS goes end to end (the client verifies the kube-apiserver's
//! certificate, which names this address too). Like haproxy with `option httpchk GET /readyz`
//! (`check-ssl`, verified against the cluster CA),
//! it checks each backend's `/readyz` every [`CHECK_EVERY`] and sends new connections round
//! robin to the Ready ones; when none is Ready, or a connection is refused, it tries the others
//! in turn. Open connections are left alone: a client of a kube-apiserver that stops sees its
//! connection end and reconnects, as behind a real balancer.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// How often each backend's `/readyz` is checked.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// Bound on one check and on one connection attempt to a backend.
const TIMEOUT: Duration = Duration::from_secs(1);

/// The running balancer (stopped on drop).
#[derive(Debug)]
pub struct ApiEndpoint {
    backends: Arc<Mutex<Vec<Backend>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Clone, Debug)]
struct Backend {
    addr: SocketAddr,
    ready: bool,
}

impl Drop for ApiEndpoint {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl ApiEndpoint {
    /// Listens on `listen` and balances over `backends` (`ip:6443` of each kube-apiserver),
    /// checking them with the cluster CA `ca_der` (DER).
    pub async fn start(
        listen: SocketAddr,
        backends: &[SocketAddr],
        ca_der: Vec<u8>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let backends = Arc::new(Mutex::new(
            backends
                .iter()
                .map(|&addr| Backend { addr, ready: false })
                .collect::<Vec<_>>(),
        ));
        let next = Arc::new(AtomicUsize::new(0));
        let b = backends.clone();
        let accept = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let order = connect_order(&b, next.fetch_add(1, Ordering::Relaxed));
                tokio::spawn(forward(conn, order));
            }
        });
        let check = tokio::spawn(check_loop(backends.clone(), ca_der));
        Ok(Self {
            backends,
            tasks: vec![accept, check],
        })
    }

    /// Adds a backend (a control-plane node joined later).
    pub fn add_backend(&self, addr: SocketAddr) {
        if let Ok(mut b) = self.backends.lock()
            && !b.iter().any(|x| x.addr == addr)
        {
            b.push(Backend { addr, ready: false });
        }
    }
}

impl ApiEndpoint {
    /// Removes a backend (its control-plane node is gone).
    pub fn remove_backend(&self, addr: SocketAddr) {
        if let Ok(mut b) = self.backends.lock() {
            b.retain(|x| x.addr != addr);
        }
    }
}

/// The backends to try for connection number `n`: the Ready ones round robin from `n`, then
/// the others.
fn connect_order(backends: &Mutex<Vec<Backend>>, n: usize) -> Vec<SocketAddr> {
    let list = backends.lock().map(|b| b.clone()).unwrap_or_default();
    let len = list.len().max(1);
    let rotated = (0..list.len()).map(|i| &list[(n + i) % len]);
    let (ready, down): (Vec<&Backend>, Vec<&Backend>) = rotated.partition(|b| b.ready);
    ready.iter().chain(down.iter()).map(|b| b.addr).collect()
}

/// Pipes `client` to the first backend in `order` that accepts.
async fn forward(mut client: TcpStream, order: Vec<SocketAddr>) {
    for addr in order {
        if let Ok(Ok(mut upstream)) = tokio::time::timeout(TIMEOUT, TcpStream::connect(addr)).await
        {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            return;
        }
    }
}

/// Checks every backend's `/readyz` forever.
async fn check_loop(backends: Arc<Mutex<Vec<Backend>>>, ca_der: Vec<u8>) {
    loop {
        let addrs: Vec<SocketAddr> = backends
            .lock()
            .map(|b| b.iter().map(|x| x.addr).collect())
            .unwrap_or_default();
        for addr in addrs {
            let ready = readyz(addr, &ca_der).await;
            if let Ok(mut b) = backends.lock()
                && let Some(x) = b.iter_mut().find(|x| x.addr == addr)
            {
                x.ready = ready;
            }
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// `GET https://<addr>/readyz` answers `ok` (anonymous, as kube-apiserver allows for
/// `/readyz`).
async fn readyz(addr: SocketAddr, ca_der: &[u8]) -> bool {
    let Ok(uri) = format!("https://{addr}").parse() else {
        return false;
    };
    let mut config = kube::Config::new(uri);
    config.root_cert = Some(vec![ca_der.to_vec()]);
    config.connect_timeout = Some(TIMEOUT);
    config.read_timeout = Some(TIMEOUT);
    let Ok(client) = kube::Client::try_from(config) else {
        return false;
    };
    let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(TIMEOUT, client.request_text(req)).await,
        Ok(Ok(body)) if body.trim() == "ok"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backends(ready: &[bool]) -> Mutex<Vec<Backend>> {
        Mutex::new(
            ready
                .iter()
                .enumerate()
                .map(|(i, &ready)| Backend {
                    addr: SocketAddr::from(([127, 0, 0, 1], 7000 + i as u16)),
                    ready,
                })
                .collect(),
        )
    }

    fn ports(order: Vec<SocketAddr>) -> Vec<u16> {
        order.iter().map(|a| a.port()).collect()
    }

    #[test]
    fn ready_backends_come_first_round_robin_and_the_others_after() {
        let b = backends(&[true, false, true]);
        assert_eq!(ports(connect_order(&b, 0)), [7000, 7002, 7001]);
        assert_eq!(ports(connect_order(&b, 1)), [7002, 7000, 7001]);
        assert_eq!(ports(connect_order(&b, 2)), [7002, 7000, 7001]);
    }

    #[test]
    fn with_none_ready_every_backend_is_tried() {
        let b = backends(&[false, false]);
        assert_eq!(ports(connect_order(&b, 1)), [7001, 7000]);
    }
}
