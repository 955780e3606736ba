//! One probe attempt: an action resolved against its container ([`network_action`]), then run
//! once ([`check`]): httpGet over http or https without certificate verification, as the
//! kubelet does; tcpSocket; exec through the container's helper.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_util::sync::CancellationToken;

use crate::runner::{Launch, Process};

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
