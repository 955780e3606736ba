//! etcd's `/version` endpoint: the member's own version and the **cluster version**, the version
//! the leader decided the whole cluster runs at (the lowest minor any member runs; it moves up
//! only after every member has been upgraded). The gRPC API does not carry the cluster version,
//! so it is read here with one HTTP/1.1 GET over the client's TLS identity, bounded by the call
//! timeout.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
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

/// The answer is a few dozen bytes; anything past this is not etcd.
const MAX_ANSWER: u64 = 64 * 1024;

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
    let answer = tokio::time::timeout(limit, exchange(endpoint, tls))
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
/// `limit`: the status line and the body. For checks of etcd's metrics and health listeners.
pub async fn http_get(
    endpoint: &MemberUrl,
    path: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    limit: Duration,
) -> Result<(String, String), String> {
    let answer = tokio::time::timeout(limit, exchange_path(endpoint, path, tls))
        .await
        .map_err(|_| format!("GET {path}: no answer within {limit:?}"))?
        .map_err(|e| format!("GET {path}: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok((
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    ))
}

async fn exchange(
    endpoint: &MemberUrl,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> std::io::Result<Vec<u8>> {
    exchange_path(endpoint, "/version", tls).await
}

async fn exchange_path(
    endpoint: &MemberUrl,
    path: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> std::io::Result<Vec<u8>> {
    let tcp = TcpStream::connect(endpoint.authority()).await?;
    match (endpoint.is_tls(), tls) {
        (true, Some(config)) => {
            let host = endpoint
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let stream = tokio_rustls::TlsConnector::from(Arc::clone(config))
                .connect(name, tcp)
                .await?;
            request(stream, endpoint, path).await
        }
        (true, None) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "https endpoint without TLS material",
        )),
        (false, _) => request(tcp, endpoint, path).await,
    }
}

async fn request<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    endpoint: &MemberUrl,
    path: &str,
) -> std::io::Result<Vec<u8>> {
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        endpoint.authority()
    );
    stream.write_all(head.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.take(MAX_ANSWER).read_to_end(&mut answer).await?;
    Ok(answer)
}

/// The status line must say 200; the body is the JSON object.
fn parse(answer: &[u8]) -> Result<VersionInfo, String> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP answer: {:?}", truncate(&text)))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("answered {status:?}"));
    }
    // A chunked body frames the object with size lines: the object is what is between braces.
    let object = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) if a < b => &body[a..=b],
        _ => return Err(format!("no JSON object in {:?}", truncate(body))),
    };
    serde_json::from_str(object).map_err(|e| format!("{e} in {:?}", truncate(object)))
}

fn truncate(s: &str) -> String {
    s.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_bad_ones_are_named() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 44\r\n\r\n{\"etcdserver\":\"3.5.1\",\"etcdcluster\":\"3.4.0\"}";
        assert_eq!(
            parse(ok).unwrap(),
            VersionInfo {
                server: "3.5.1".into(),
                cluster: "3.4.0".into()
            }
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2c\r\n{\"etcdserver\":\"3.4.23\",\"etcdcluster\":\"not_decided\"}\r\n0\r\n\r\n";
        assert_eq!(parse(chunked).unwrap().cluster, "not_decided");
        let e = parse(b"HTTP/1.1 404 Not Found\r\n\r\n404 page not found").unwrap_err();
        assert!(e.contains("404"), "{e}");
        let e = parse(b"HTTP/1.1 200 OK\r\n\r\n{\"etcdserver\":3}").unwrap_err();
        assert!(e.contains("etcdserver"), "{e}");
        assert!(
            parse(b"garbage")
                .unwrap_err()
                .contains("not an HTTP answer")
        );
    }
}
