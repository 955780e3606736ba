//! etcd's `/version` endpoint: the member's own version and the **cluster version**, the version
//! the leader decided the whole cluster runs at (the lowest minor any member runs; it moves up
//! only after every member has been upgraded). The gRPC API does not carry the cluster version,
//! so it is read here with one HTTP/1.1 GET over the client's TLS identity, bounded by the call
//! timeout.
//!
//! The HTTP is hyper's HTTP/1 client on one connection per call (no pool: a call is rare, and a
//! fresh connection per call is what the health and metrics checks want too): it reads the
//! status line, headers and a body of any framing (`Content-Length`, chunked, or up to the close)
//! as HTTP says, and the body is bounded by [`MAX_ANSWER`].

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::header::{CONNECTION, HOST};
use hyper::{Request, StatusCode, Version};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::client_error::{EndpointFailure, FailureKind};
use crate::{ClientError, MemberUrl};

/// What `/version` says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct VersionInfo {
    /// The member's etcd version.
    #[serde(rename = "etcdserver")]
    pub server: String,
    /// The cluster version (`3.5.0`), or `not_decided` before the leader decided one.
    #[serde(rename = "etcdcluster")]
    pub cluster: String,
}

/// The largest body read. `/version` is a few dozen bytes; etcd's `/metrics` a few hundred KiB.
pub const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// Why one GET got no whole answer.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Connecting, or the TLS handshake.
    #[error("{0}")]
    Connect(#[from] std::io::Error),
    /// `https` without TLS material.
    #[error("https endpoint without TLS material")]
    NoTls,
    /// The host is no valid TLS server name.
    #[error("{0}")]
    ServerName(String),
    /// The request could not be built (a path that is not a URI path).
    #[error("request: {0}")]
    Request(#[from] hyper::http::Error),
    /// The HTTP exchange: not HTTP, cut off, refused.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// The body: cut off, or longer than [`MAX_ANSWER`].
    #[error("body: {0}")]
    Body(String),
}

/// One answer: status, HTTP version and the whole body.
#[derive(Debug)]
struct Answer {
    version: Version,
    status: StatusCode,
    body: Bytes,
}

/// GETs `/version` from `endpoint` within `limit`.
pub(crate) async fn get(
    endpoint: &MemberUrl,
    tls: Option<&Arc<rustls::ClientConfig>>,
    limit: Duration,
) -> Result<VersionInfo, ClientError> {
    let failure = |kind, message: String| {
        ClientError::Endpoint(EndpointFailure {
            endpoint: endpoint.clone(),
            kind,
            message,
        })
    };
    let answer = tokio::time::timeout(limit, fetch(endpoint, "/version", tls))
        .await
        .map_err(|_| failure(FailureKind::Timeout, format!("no answer within {limit:?}")))?
        .map_err(|e| {
            let kind = if crate::tls::is_tls_failure(&e) {
                FailureKind::Tls
            } else {
                FailureKind::Unreachable
            };
            failure(kind, format!("GET /version: {e}"))
        })?;
    parse(&answer).map_err(|reason| ClientError::BadAnswer {
        endpoint: endpoint.clone(),
        reason: format!("GET /version: {reason}"),
    })
}

/// One HTTP/1.1 GET of `path` from `endpoint` (TLS when its scheme says so, with `tls`) within
/// `limit`: the status line (`HTTP/1.1 200 OK`) and the body. For checks of etcd's metrics and
/// health listeners.
pub async fn http_get(
    endpoint: &MemberUrl,
    path: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    limit: Duration,
) -> Result<(String, String), String> {
    let answer = tokio::time::timeout(limit, fetch(endpoint, path, tls))
        .await
        .map_err(|_| format!("GET {path}: no answer within {limit:?}"))?
        .map_err(|e| format!("GET {path}: {e}"))?;
    Ok((
        format!("{:?} {}", answer.version, answer.status),
        String::from_utf8_lossy(&answer.body).into_owned(),
    ))
}

/// Connects to `endpoint` (TLS when its scheme says so) and GETs `path`.
async fn fetch(
    endpoint: &MemberUrl,
    path: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Answer, FetchError> {
    let tcp = TcpStream::connect(endpoint.authority()).await?;
    match (endpoint.is_tls(), tls) {
        (true, Some(config)) => {
            let host = endpoint
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|e| FetchError::ServerName(e.to_string()))?;
            let stream = tokio_rustls::TlsConnector::from(Arc::clone(config))
                .connect(name, tcp)
                .await?;
            exchange(stream, endpoint, path).await
        }
        (true, None) => Err(FetchError::NoTls),
        (false, _) => exchange(tcp, endpoint, path).await,
    }
}

/// One request on `stream`, the connection driven alongside it (no task is spawned, so a
/// timeout that drops this future drops the connection too).
async fn exchange<S>(stream: S, endpoint: &MemberUrl, path: &str) -> Result<Answer, FetchError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(FetchError::Http)?;
    let request = Request::get(path)
        .header(HOST, endpoint.authority())
        .header(CONNECTION, "close")
        .body(Empty::<Bytes>::new())?;
    let answer = async move {
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| FetchError::Body(e.to_string()))?
            .to_bytes();
        Ok::<_, FetchError>(Answer {
            version: parts.version,
            status: parts.status,
            body,
        })
    };
    tokio::pin!(answer, connection);
    tokio::select! {
        a = &mut answer => a,
        c = &mut connection => {
            // The connection ended (the server closed it): what it delivered is still read.
            c?;
            answer.await
        }
    }
}

/// The status must be 200; the body is the JSON object.
fn parse(answer: &Answer) -> Result<VersionInfo, String> {
    if answer.status != StatusCode::OK {
        return Err(format!(
            "answered {} {:?}",
            answer.status,
            truncate(&String::from_utf8_lossy(&answer.body))
        ));
    }
    serde_json::from_slice(&answer.body).map_err(|e| {
        format!(
            "{e} in {:?}",
            truncate(&String::from_utf8_lossy(&answer.body))
        )
    })
}

fn truncate(s: &str) -> String {
    s.chars().take(120).collect()
}

#[cfg(test)]
#[path = "http_version_tests.rs"]
mod tests;
