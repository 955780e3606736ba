//! The upstream: etcd's plain loopback metrics listener (`http://host:port`, nothing else), and
//! one bounded exchange with it per scrape, on a fresh connection.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{
    ACCEPT, ACCEPT_ENCODING, CONNECTION, CONTENT_ENCODING, CONTENT_TYPE, HOST, HeaderMap,
    HeaderValue,
};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::{MAX_BODY, METRICS_PATH};

/// A validated upstream URL: `http`, a host and an explicit port, nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// `host:port` (IPv6 in brackets), what the socket connects to and the `Host` header.
    authority: String,
    host_header: HeaderValue,
}

/// Why a string is not a usable upstream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}; expected etcd's plain metrics listener, http://<host>:<port>")]
pub struct UpstreamError {
    reason: String,
}

fn reject(reason: impl Into<String>) -> UpstreamError {
    UpstreamError {
        reason: reason.into(),
    }
}

impl FromStr for Upstream {
    type Err = UpstreamError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let url = url::Url::parse(s).map_err(|e| reject(format!("not a URL: {e}")))?;
        if url.scheme() != "http" {
            return Err(reject(format!("scheme {:?} is not http", url.scheme())));
        }
        let host = url.host_str().ok_or_else(|| reject("no host"))?;
        // `url` reports a default port (80) as absent even when it was written out.
        let written_default = url
            .port_or_known_default()
            .filter(|p| s.trim_end_matches('/').ends_with(&format!(":{p}")));
        let port = url
            .port()
            .or(written_default)
            .ok_or_else(|| reject("no explicit port"))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(reject("credentials are not accepted"));
        }
        if !matches!(url.path(), "" | "/") {
            return Err(reject(format!("a path ({}) is not accepted", url.path())));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(reject("a query or fragment is not accepted"));
        }
        let authority = format!("{host}:{port}");
        let host_header = HeaderValue::from_str(&authority)
            .map_err(|e| reject(format!("{authority} is no Host header: {e}")))?;
        Ok(Self {
            authority,
            host_header,
        })
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.authority)
    }
}

/// Why one exchange with the upstream failed.
#[derive(Debug, thiserror::Error)]
enum ForwardError {
    #[error("connect: {0}")]
    Connect(#[from] std::io::Error),
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("body: {0}")]
    Body(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Forwards scrapes to the upstream's `/metrics`.
#[derive(Debug)]
pub(super) struct Forwarder {
    upstream: Upstream,
    timeout: Duration,
}

impl Forwarder {
    pub(super) fn new(upstream: Upstream, timeout: Duration) -> Self {
        Self { upstream, timeout }
    }

    /// The upstream's answer to `method /metrics` with the scraper's content negotiation
    /// (`Accept`, `Accept-Encoding`), or a 502 naming the upstream and the error.
    pub(super) async fn forward(
        &self,
        method: Method,
        headers: &HeaderMap,
    ) -> Response<Full<Bytes>> {
        let request = self.request(method, headers);
        let answer = tokio::time::timeout(self.timeout, self.exchange(request))
            .await
            .unwrap_or(Err(ForwardError::Timeout(self.timeout)));
        answer.unwrap_or_else(|e| {
            tracing::warn!(upstream = %self.upstream, error = %e, "upstream failed");
            bad_gateway(&self.upstream, &e)
        })
    }

    /// `method /metrics`, built from scratch: only the negotiation headers are the scraper's.
    fn request(&self, method: Method, headers: &HeaderMap) -> Request<Empty<Bytes>> {
        let mut request = Request::new(Empty::new());
        *request.method_mut() = method;
        *request.uri_mut() = Uri::from_static(METRICS_PATH);
        let out = request.headers_mut();
        out.insert(HOST, self.upstream.host_header.clone());
        out.insert(CONNECTION, HeaderValue::from_static("close"));
        for name in [ACCEPT, ACCEPT_ENCODING] {
            for value in headers.get_all(&name) {
                out.append(name.clone(), value.clone());
            }
        }
        request
    }

    /// One request on a fresh connection, driven alongside it (nothing spawned: dropping this
    /// future at the timeout drops the connection).
    async fn exchange(
        &self,
        request: Request<Empty<Bytes>>,
    ) -> Result<Response<Full<Bytes>>, ForwardError> {
        let tcp = TcpStream::connect(&self.upstream.authority).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        let answer = async move {
            let response = sender.send_request(request).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(|e| ForwardError::Body(e.to_string()))?
                .to_bytes();
            Ok::<_, ForwardError>(relay(parts.status, &parts.headers, body))
        };
        tokio::pin!(answer, connection);
        tokio::select! {
            a = &mut answer => a,
            c = &mut connection => {
                // The upstream closed the connection: what it delivered is still read.
                c?;
                answer.await
            }
        }
    }
}

/// The scraper's answer: the upstream's status, `Content-Type`, `Content-Encoding` and body.
fn relay(status: StatusCode, headers: &HeaderMap, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    for name in [CONTENT_TYPE, CONTENT_ENCODING] {
        if let Some(value) = headers.get(&name) {
            response.headers_mut().insert(name, value.clone());
        }
    }
    response
}

/// 502 with one line of text naming the upstream and what went wrong.
fn bad_gateway(upstream: &Upstream, error: &ForwardError) -> Response<Full<Bytes>> {
    let line = format!("upstream {upstream}: {error}").replace(['\r', '\n'], " ");
    super::serve::text(StatusCode::BAD_GATEWAY, format!("{line}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_host_and_port() {
        for (text, shown) in [
            ("http://127.0.0.1:2382", "http://127.0.0.1:2382"),
            ("http://127.0.0.1:2382/", "http://127.0.0.1:2382"),
            ("http://[::1]:2382", "http://[::1]:2382"),
            ("http://localhost:2382", "http://localhost:2382"),
            ("http://127.0.0.1:80", "http://127.0.0.1:80"),
        ] {
            let upstream: Upstream = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(upstream.to_string(), shown);
        }
    }

    #[test]
    fn rejects_everything_else_saying_why() {
        for (text, why) in [
            ("https://127.0.0.1:2382", "scheme \"https\" is not http"),
            ("127.0.0.1:2382", "not a URL"),
            ("localhost:2382", "scheme \"localhost\" is not http"),
            ("http://127.0.0.1", "no explicit port"),
            ("http://127.0.0.1:2382/metrics", "a path (/metrics)"),
            ("http://127.0.0.1:2382/?x=1", "query"),
            ("http://127.0.0.1:2382#f", "fragment"),
            ("http://u:p@127.0.0.1:2382", "credentials"),
            ("", "not a URL"),
        ] {
            let e = text.parse::<Upstream>().err().map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains(why)),
                "{text:?}: {e:?} should say {why:?}"
            );
        }
    }

    #[test]
    fn only_the_negotiation_headers_are_forwarded() {
        let forwarder = Forwarder::new(
            "http://127.0.0.1:2382".parse().unwrap(),
            Duration::from_secs(1),
        );
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("text/plain"));
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        headers.insert("authorization", HeaderValue::from_static("Bearer x"));
        headers.insert(HOST, HeaderValue::from_static("10.0.0.1:2381"));
        let request = forwarder.request(Method::HEAD, &headers);
        assert_eq!(request.method(), Method::HEAD);
        assert_eq!(request.uri(), "/metrics");
        let mut names: Vec<&str> = request.headers().keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["accept", "accept-encoding", "connection", "host"]);
        assert_eq!(request.headers()[HOST], "127.0.0.1:2382");
    }

    #[test]
    fn a_502_is_one_line_naming_the_upstream() {
        let upstream: Upstream = "http://127.0.0.1:2382".parse().unwrap();
        let error = ForwardError::Body("cut\noff".into());
        let response = bad_gateway(&upstream, &error);
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        let body = futures_body(response);
        assert_eq!(body, "upstream http://127.0.0.1:2382: body: cut off\n");
    }

    fn futures_body(response: Response<Full<Bytes>>) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = runtime
            .block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }
}
