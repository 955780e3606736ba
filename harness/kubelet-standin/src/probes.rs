//! Liveness, readiness and startup probes (the kubelet prober stand-in).
//!
//! [`ProbeTracker`] is the pure threshold logic (`successThreshold`, `failureThreshold`);
//! [`check`] runs one probe attempt (httpGet over http or https **without certificate
//! verification**, as the kubelet does; tcpSocket; exec, which runs the command through the
//! `exec-container` helper inside the running container's mount and PID namespaces, with the
//! container's env); [`probe_loop`] drives
//! attempts on `initialDelaySeconds`/`periodSeconds`/`timeoutSeconds` and reports changes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::rustls;
use tokio_util::sync::CancellationToken;

use crate::runner::{Launch, Process};

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Startup => "startup",
            ProbeKind::Liveness => "liveness",
            ProbeKind::Readiness => "readiness",
        }
    }
}

/// A probe's timing fields with the API defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn secs(v: Option<i32>, default: i32, min: i32) -> Duration {
    Duration::from_secs(u64::try_from(v.unwrap_or(default).max(min)).unwrap_or(0))
}

fn count(v: Option<i32>, default: i32) -> u32 {
    u32::try_from(v.unwrap_or(default).max(1)).unwrap_or(1)
}

impl Timings {
    pub fn of(probe: &Probe, kind: ProbeKind) -> Self {
        Timings {
            initial_delay: secs(probe.initial_delay_seconds, 0, 0),
            period: secs(probe.period_seconds, 10, 1),
            timeout: secs(probe.timeout_seconds, 1, 1),
            // Liveness and startup probes must use 1 (API validation); enforce it.
            success_threshold: if kind == ProbeKind::Readiness {
                count(probe.success_threshold, 1)
            } else {
                1
            },
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// Pure threshold logic for one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTracker {
    timings: Timings,
    successes: u32,
    failures: u32,
    result: bool,
}

impl ProbeTracker {
    /// Readiness and startup start as failed, liveness as succeeded (kubelet semantics).
    pub fn new(kind: ProbeKind, timings: Timings) -> Self {
        ProbeTracker {
            timings,
            successes: 0,
            failures: 0,
            result: kind == ProbeKind::Liveness,
        }
    }

    pub fn result(&self) -> bool {
        self.result
    }

    /// Records one attempt; returns the new result when it flipped.
    pub fn record(&mut self, ok: bool) -> Option<bool> {
        if ok {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            if !self.result && self.successes >= self.timings.success_threshold {
                self.result = true;
                return Some(true);
            }
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.result && self.failures >= self.timings.failure_threshold {
                self.result = false;
                return Some(false);
            }
        }
        None
    }

    /// Whether the failure threshold is reached (for startup probes that never succeeded).
    pub fn exhausted(&self) -> bool {
        self.failures >= self.timings.failure_threshold
    }
}

/// One probe's action, resolved against the container (named ports, default host).
#[derive(Debug, Clone)]
pub enum Action {
    Http {
        https: bool,
        host: String,
        port: u16,
        path: String,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: String,
        port: u16,
    },
    /// Runs through the helper like the container (launch prepared by the pod worker).
    Exec(Box<Launch>),
}

fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("bad port {p}")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("named port {name:?} not found in container")),
    }
}

/// Resolves the probe's network action; `None` when it is an exec probe (or has no action).
pub fn network_action(
    probe: &Probe,
    container: &Container,
    pod_ip: &str,
) -> Result<Option<Action>, String> {
    if let Some(h) = &probe.http_get {
        let https = h
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"));
        return Ok(Some(Action::Http {
            https,
            host: h
                .host
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| pod_ip.to_string()),
            port: resolve_port(&h.port, container)?,
            path: h
                .path
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "/".into()),
            headers: h
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        }));
    }
    if let Some(t) = &probe.tcp_socket {
        return Ok(Some(Action::Tcp {
            host: t
                .host
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| pod_ip.to_string()),
            port: resolve_port(&t.port, container)?,
        }));
    }
    if probe.grpc.is_some() {
        return Err("grpc probes are not supported by the node agent stand-in".into());
    }
    Ok(None)
}

#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

async fn http_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &str,
) -> Result<(), String> {
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 512];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad HTTP response {:?}", line.lines().next().unwrap_or("")))?;
    if (200..400).contains(&status) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {status}"))
    }
}

async fn check_inner(action: &Action) -> Result<(), String> {
    match action {
        Action::Tcp { host, port } => {
            TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
            Ok(())
        }
        Action::Http {
            https,
            host,
            port,
            path,
            headers,
        } => {
            let tcp = TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
            let mut request = format!(
                "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/kubelet-standin-standin\r\nAccept: */*\r\nConnection: close\r\n"
            );
            for (k, v) in headers {
                request.push_str(&format!("{k}: {v}\r\n"));
            }
            request.push_str("\r\n");
            if *https {
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| e.to_string())?;
                let tls = tokio_rustls::TlsConnector::from(tls_config()?)
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("tls: {e}"))?;
                http_exchange(tls, &request).await
            } else {
                http_exchange(tcp, &request).await
            }
        }
        Action::Exec(_) => Err("exec probes run through check()".into()),
    }
}

/// One probe attempt bounded by `timeout`. An exec probe's process is stopped and reaped
/// when the attempt times out or `cancel` fires, so no probe process outlives its container.
pub async fn check(
    action: &Action,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<(), String> {
    match action {
        Action::Exec(launch) => {
            let mut p = Process::spawn(launch).await.map_err(|e| e.to_string())?;
            let outcome = tokio::select! {
                exit = tokio::time::timeout(timeout, p.wait()) => Some(exit),
                _ = cancel.cancelled() => None,
            };
            match outcome {
                Some(Ok(exit)) if exit.code == 0 => Ok(()),
                Some(Ok(exit)) => Err(format!("command exited with {}", exit.code)),
                Some(Err(_)) => {
                    p.stop(Duration::ZERO).await;
                    Err(format!("command timed out after {timeout:?}"))
                }
                None => {
                    p.stop(Duration::ZERO).await;
                    Err("probe cancelled".into())
                }
            }
        }
        _ => tokio::select! {
            r = tokio::time::timeout(timeout, check_inner(action)) => {
                r.unwrap_or_else(|_| Err(format!("probe timed out after {timeout:?}")))
            }
            _ = cancel.cancelled() => Err("probe cancelled".into()),
        },
    }
}

/// What a probe loop reports to its container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeEvent {
    /// The startup probe succeeded.
    Started,
    /// Readiness flipped.
    Ready(bool),
    /// Liveness failed, or the startup probe exhausted its failures: kill the container.
    Failed { kind: ProbeKind, message: String },
}

/// Runs one probe until cancelled (or until a startup probe decides, or liveness fails).
pub async fn probe_loop(
    kind: ProbeKind,
    timings: Timings,
    action: Action,
    events: mpsc::Sender<ProbeEvent>,
    cancel: CancellationToken,
) {
    let mut tracker = ProbeTracker::new(kind, timings);
    if cancelled_sleep(&cancel, timings.initial_delay).await {
        return;
    }
    loop {
        let outcome = check(&action, timings.timeout, &cancel).await;
        if cancel.is_cancelled() {
            return;
        }
        let message = outcome.as_ref().err().cloned().unwrap_or_default();
        if let Err(m) = &outcome {
            tracing::debug!(probe = kind.as_str(), message = %m, "probe attempt failed");
        }
        let flipped = tracker.record(outcome.is_ok());
        let event = match (kind, flipped) {
            (ProbeKind::Startup, Some(true)) => Some(ProbeEvent::Started),
            (ProbeKind::Startup, _) if tracker.exhausted() => {
                Some(ProbeEvent::Failed { kind, message })
            }
            (ProbeKind::Liveness, Some(false)) => Some(ProbeEvent::Failed { kind, message }),
            (ProbeKind::Readiness, Some(r)) => Some(ProbeEvent::Ready(r)),
            _ => None,
        };
        if let Some(e) = event {
            let last = matches!(e, ProbeEvent::Started | ProbeEvent::Failed { .. });
            if events.send(e).await.is_err() || last {
                return;
            }
        }
        if cancelled_sleep(&cancel, timings.period).await {
            return;
        }
    }
}

/// Sleeps `d` unless cancelled first; returns whether it was cancelled.
pub async fn cancelled_sleep(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = cancel.cancelled() => true,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn t(success: u32, failure: u32) -> Timings {
        Timings {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    #[test]
    fn readiness_needs_consecutive_successes_and_failures() {
        let mut r = ProbeTracker::new(ProbeKind::Readiness, t(2, 3));
        assert!(!r.result());
        assert_eq!(r.record(true), None);
        assert_eq!(r.record(false), None);
        assert_eq!(r.record(true), None);
        assert_eq!(r.record(true), Some(true));
        assert_eq!(r.record(false), None);
        assert_eq!(r.record(false), None);
        assert_eq!(r.record(true), None, "a success resets the failure count");
        assert_eq!(r.record(false), None);
        assert_eq!(r.record(false), None);
        assert_eq!(r.record(false), Some(false));
    }

    #[test]
    fn liveness_starts_alive_and_startup_exhausts() {
        let mut l = ProbeTracker::new(ProbeKind::Liveness, t(1, 2));
        assert!(l.result());
        assert_eq!(l.record(false), None);
        assert_eq!(l.record(false), Some(false));
        let mut s = ProbeTracker::new(ProbeKind::Startup, t(1, 2));
        s.record(false);
        assert!(!s.exhausted());
        s.record(false);
        assert!(s.exhausted());
    }

    #[test]
    fn timings_defaults() {
        let p = Probe::default();
        let tm = Timings::of(&p, ProbeKind::Liveness);
        assert_eq!(tm.period, Duration::from_secs(10));
        assert_eq!(tm.timeout, Duration::from_secs(1));
        assert_eq!(tm.failure_threshold, 3);
        let p = Probe {
            success_threshold: Some(3),
            ..Default::default()
        };
        assert_eq!(Timings::of(&p, ProbeKind::Liveness).success_threshold, 1);
        assert_eq!(Timings::of(&p, ProbeKind::Readiness).success_threshold, 3);
    }

    #[tokio::test]
    async fn tcp_and_http_checks_against_a_local_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for code in [200u16, 500, 204] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b).await;
                let resp = format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n");
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        let http = |path: &str| Action::Http {
            https: false,
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: vec![],
        };
        let d = Duration::from_secs(2);
        assert!(
            check(&http("/health"), d, &CancellationToken::new())
                .await
                .is_ok()
        );
        let err = check(&http("/health"), d, &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(err.contains("500"), "{err}");
        // tcpSocket consumes one accept.
        assert!(
            check(
                &Action::Tcp {
                    host: "127.0.0.1".into(),
                    port
                },
                d,
                &CancellationToken::new()
            )
            .await
            .is_ok()
        );
        server.await.unwrap();
        assert!(
            check(
                &Action::Tcp {
                    host: "127.0.0.1".into(),
                    port
                },
                d,
                &CancellationToken::new()
            )
            .await
            .is_err()
        );
    }

    #[tokio::test]
    async fn https_probe_skips_certificate_verification() {
        // A self-signed certificate for a name that is not the address probed.
        let ck =
            rcgen::generate_simple_self_signed(vec!["not-this-host.example".to_string()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![ck.cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let srv = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let mut b = [0u8; 1024];
            let n = tls.read(&mut b).await.unwrap();
            let req = String::from_utf8_lossy(&b[..n]).into_owned();
            let _ = tls
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .await;
            let _ = tls.shutdown().await;
            req
        });
        let action = Action::Http {
            https: true,
            host: "127.0.0.1".into(),
            port,
            path: "/readyz".into(),
            headers: vec![("X-Probe".into(), "1".into())],
        };
        check(&action, Duration::from_secs(5), &CancellationToken::new())
            .await
            .unwrap();
        let req = srv.await.unwrap();
        assert!(req.starts_with("GET /readyz HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("X-Probe: 1\r\n"), "{req}");
    }
}
