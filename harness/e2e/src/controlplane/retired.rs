//! An address a simulated node no longer has. On a real machine the old address is gone after
//! its node moved: etcd started there cannot bind it and a dial to it fails. Every loopback
//! address is bindable on Linux, so the sandbox stands that in by keeping the address reserved
//! and holding etcd's four ports on it: a stale etcd fails to bind (as a real one would), and a
//! peer that dials the old address gets its connection closed at once.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use etcd_fixture::LoopbackAddr;
use tokio::task::JoinHandle;

use super::ControlPlaneError;

/// Client, peer, metrics (TLS) and the plain health port of a sandbox node's etcd.
const ETCD_PORTS: [u16; 4] = [2379, 2380, 2381, 2382];

/// A retired node address, held until dropped.
#[derive(Debug)]
pub struct RetiredAddress {
    addr: LoopbackAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl RetiredAddress {
    /// Holds etcd's ports on `addr` (its etcd must have stopped).
    pub async fn hold(addr: LoopbackAddr) -> Result<Self, ControlPlaneError> {
        let mut tasks = Vec::new();
        for port in ETCD_PORTS {
            let at = SocketAddr::V4(SocketAddrV4::new(addr.ip(), port));
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| ControlPlaneError::Io(format!("holding retired address {at}"), e))?;
            tasks.push(tokio::spawn(async move {
                // Each connection is dropped as soon as it is accepted.
                while listener.accept().await.is_ok() {}
            }));
        }
        Ok(Self { addr, tasks })
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.addr.ip()
    }
}

impl Drop for RetiredAddress {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
