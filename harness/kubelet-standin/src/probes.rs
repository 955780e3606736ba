//! Liveness, readiness and startup probes (the kubelet prober stand-in).
//!
//! [`ProbeTracker`] is the pure threshold logic (`successThreshold`, `failureThreshold`);
//! [`check`] runs one probe attempt (httpGet over http or https **without certificate
//! verification**, as the kubelet does; tcpSocket; exec, which runs the command through the
//! `exec-container` helper inside the running container's mount and PID namespaces, with the
//! container's env); [`probe_loop`] drives
//! attempts on `initialDelaySeconds`/`periodSeconds`/`timeoutSeconds` and reports changes.

use std::time::Duration;

use k8s_openapi::api::core::v1::Probe;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod attempt;

pub use attempt::{Action, check, network_action};

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
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;

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
