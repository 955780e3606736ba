//! A counting HTTP/1.1 proxy in front of the Kubernetes API, so the requests of exactly one
//! client (the operator, pointed at the proxy by its own kubeconfig) can be counted by kind:
//! watch, list, get, create, update, patch, delete. Bytes are forwarded unchanged; only the
//! request heads are parsed (bodies by `Content-Length` or chunked encoding).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Request counts by `"<kind> <resource>"`, e.g. `"watch pods"`.
pub type Counts = BTreeMap<String, u64>;

/// A running proxy.
#[derive(Debug)]
pub struct CountingProxy {
    pub addr: SocketAddr,
    counts: Arc<Mutex<Counts>>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    /// Listens on `listen` (port 0: any) and forwards to `upstream`.
    pub async fn start(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Mutex::new(Counts::new()));
        let c = counts.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let c = c.clone();
                tokio::spawn(async move {
                    if let Err(e) = forward(conn, upstream, c).await {
                        tracing::debug!(error = %e, "bench proxy connection ended");
                    }
                });
            }
        });
        Ok(Self { addr, counts, task })
    }

    /// Counts so far.
    pub fn counts(&self) -> Counts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    counts: Arc<Mutex<Counts>>,
) -> std::io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    let (cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
        let _ = cw.shutdown().await;
    });
    let mut reader = BufReader::new(cr);
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            if reader.read_until(b'\n', &mut line).await? == 0 {
                let _ = sw.shutdown().await;
                let _ = back.await;
                return Ok(());
            }
            head.extend_from_slice(&line);
            if line == b"\r\n" || line == b"\n" {
                break;
            }
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut lines = text.lines();
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        if let Ok(mut c) = counts.lock() {
            *c.entry(classify(method, target)).or_insert(0) += 1;
        }
        let mut length = 0u64;
        let mut chunked = false;
        for l in lines {
            if let Some((k, v)) = l.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                if k == "content-length" {
                    length = v.parse().unwrap_or(0);
                } else if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                    chunked = true;
                }
            }
        }
        sw.write_all(&head).await?;
        if chunked {
            loop {
                let mut size_line = Vec::new();
                reader.read_until(b'\n', &mut size_line).await?;
                sw.write_all(&size_line).await?;
                let size_text = String::from_utf8_lossy(&size_line);
                let size = u64::from_str_radix(
                    size_text.trim().split(';').next().unwrap_or("0").trim(),
                    16,
                )
                .unwrap_or(0);
                if size == 0 {
                    // Trailers up to the empty line.
                    loop {
                        let mut t = Vec::new();
                        if reader.read_until(b'\n', &mut t).await? == 0 {
                            break;
                        }
                        sw.write_all(&t).await?;
                        if t == b"\r\n" || t == b"\n" {
                            break;
                        }
                    }
                    break;
                }
                let mut body = (&mut reader).take(size + 2);
                tokio::io::copy(&mut body, &mut sw).await?;
            }
        } else if length > 0 {
            let mut body = (&mut reader).take(length);
            tokio::io::copy(&mut body, &mut sw).await?;
        }
    }
}

/// `"<kind> <resource>"` of one request: kind is watch, list, get, create, update, patch,
/// delete (or the method); resource the plural (`leases`, `etcdclusters`, ...).
pub fn classify(method: &str, target: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match segs.first() {
        Some(&"api") => segs.get(2..).unwrap_or_default(),
        Some(&"apis") => segs.get(3..).unwrap_or_default(),
        _ => &[],
    };
    let scoped: &[&str] = if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        &rest[2..]
    } else {
        rest
    };
    let resource = scoped.first().copied().unwrap_or("other");
    let collection = scoped.len() == 1;
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let kind = match method {
        "GET" if watch => "watch",
        "GET" if collection => "list",
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        other => other,
    };
    let sub = if scoped.len() >= 3 {
        format!("/{}", scoped[2])
    } else {
        String::new()
    };
    format!("{kind} {resource}{sub}")
}

/// Total of the counts whose kind is `kind`.
pub fn total(counts: &Counts, kind: &str) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| k.split_whitespace().next() == Some(kind))
        .map(|(_, v)| *v)
        .sum()
}

/// `after - before`, entries that did not change left out.
pub fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_requests() {
        assert_eq!(
            classify(
                "GET",
                "/api/v1/namespaces/openshift-etcd/pods?labelSelector=a%3Db&watch=true&resourceVersion=5"
            ),
            "watch pods"
        );
        assert_eq!(classify("GET", "/api/v1/nodes?limit=500"), "list nodes");
        assert_eq!(classify("GET", "/api/v1/namespaces"), "list namespaces");
        assert_eq!(classify("GET", "/api/v1/namespaces/x"), "get namespaces");
        assert_eq!(
            classify(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/o/leases/etcd-operator-lock"
            ),
            "update leases"
        );
        assert_eq!(
            classify(
                "PATCH",
                "/apis/etcd.example.com/v1/etcdclusters/cluster/status"
            ),
            "patch etcdclusters/status"
        );
        assert_eq!(
            classify("POST", "/api/v1/namespaces/o/events"),
            "create events"
        );
    }
}
