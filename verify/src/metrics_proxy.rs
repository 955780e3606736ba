//! `etcd-verify metrics-proxy`: the only way into etcd's metrics from outside the node. etcd
//! serves its `--listen-metrics-urls` listeners with the *client* TLS settings, so a scraper
//! certificate trusted there would also be trusted on the client port (:2379), with read and
//! write access to every key. So etcd serves metrics only on a plain loopback listener
//! (`http://127.0.0.1:2382`, which the probes use too), and this proxy, a container of the etcd
//! pod, serves `https://<node-ip>:2381/metrics` to scrapers that present a certificate of a
//! separate metrics CA.
//!
//! ```text
//!   scraper ──mTLS (metrics CA)──► proxy :2381 ──plain http, loopback──► etcd 127.0.0.1:2382
//!               GET|HEAD /metrics ──► forwarded (Accept, Accept-Encoding only)
//!               any other path    ──► 404      other methods on /metrics ──► 405
//!               upstream down     ──► 502
//! ```
//!
//! Invariants: a connection without a client certificate chaining to `--client-ca-file` never
//! gets an HTTP answer; nothing but `/metrics` of the upstream is ever requested (whatever the
//! scraper asked, the upstream request is built from scratch); every upstream exchange is bounded
//! by `--upstream-timeout` and its answer by [`MAX_BODY`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

mod route;
mod serve;
mod tls;
mod upstream;

pub use route::{ALLOWED_METHODS, METRICS_PATH, Route, route};
pub use upstream::{Upstream, UpstreamError};

/// The largest answer taken from the upstream (etcd's metrics are a few hundred KiB).
pub const MAX_BODY: usize = 64 * 1024 * 1024;

/// What the proxy serves, and from where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Address scrapers connect to (`10.0.0.1:2381`).
    pub listen: SocketAddr,
    /// The proxy's serving certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, SEC1 EC or PKCS#1 RSA).
    pub key_file: PathBuf,
    /// CA certificates (PEM) a scraper's certificate must chain to.
    pub client_ca_file: PathBuf,
    /// etcd's plain metrics listener.
    pub upstream: Upstream,
    /// Bound on one upstream exchange: connect, request, whole answer.
    pub upstream_timeout: Duration,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("{flag} {}: cannot read: {source}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{flag} {}: {reason}", path.display())]
    BadFile {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "--key-file {} does not belong to the certificate in --cert-file {}",
        key.display(),
        cert.display()
    )]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    #[error("TLS set-up: {0}")]
    Tls(#[from] rustls::Error),
    #[error("--listen {addr}: cannot listen: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A bound proxy, ready to serve: its TLS material checked, its socket listening.
pub struct MetricsProxy {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    forwarder: Arc<upstream::Forwarder>,
}

impl std::fmt::Debug for MetricsProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsProxy")
            .field("listen", &self.listener.local_addr().ok())
            .field("forwarder", &self.forwarder)
            .finish_non_exhaustive()
    }
}

impl MetricsProxy {
    /// Loads and checks the TLS material, then binds `config.listen`.
    pub async fn bind(config: &ProxyConfig) -> Result<Self, ProxyError> {
        let acceptor = tls::acceptor(config)?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ProxyError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let forwarder = upstream::Forwarder::new(config.upstream.clone(), config.upstream_timeout);
        Ok(Self {
            listener,
            acceptor,
            forwarder: Arc::new(forwarder),
        })
    }

    /// The bound address (the port the kernel chose for port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the future is dropped, one task per connection.
    pub async fn serve(self) -> Infallible {
        serve::accept_loop(self.listener, self.acceptor, self.forwarder).await
    }
}
