//! The accept loop: one task per connection, a bounded TLS handshake (a failed one is logged at
//! debug and ends only that connection), then HTTP/1.1 answered by [`route`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use super::route::{ALLOWED_METHODS, Route, route};
use super::upstream::Forwarder;

/// Bound on a client's TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on reading a request's headers once the connection is up.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (out of file descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts connections forever, each served by its own task.
pub(super) async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    forwarder: Arc<Forwarder>,
) -> Infallible {
    loop {
        match listener.accept().await {
            Ok((tcp, peer)) => {
                tokio::spawn(connection(
                    tcp,
                    peer,
                    acceptor.clone(),
                    Arc::clone(&forwarder),
                ));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// One scraper connection: the handshake (client certificate required), then its requests.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    forwarder: Arc<Forwarder>,
) {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let service = service_fn(move |request| {
        let forwarder = Arc::clone(&forwarder);
        async move { Ok::<_, Infallible>(answer(&request, &forwarder).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// The answer to one request: forwarded, 404 or 405.
async fn answer(request: &Request<Incoming>, forwarder: &Forwarder) -> Response<Full<Bytes>> {
    match route(request.method(), request.uri().path()) {
        Route::Forward => {
            forwarder
                .forward(request.method().clone(), request.headers())
                .await
        }
        Route::NotFound => text(
            StatusCode::NOT_FOUND,
            "not found: this proxy serves only /metrics\n".into(),
        ),
        Route::MethodNotAllowed => {
            let mut response = text(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method not allowed: /metrics answers {ALLOWED_METHODS}\n"),
            );
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
            response
        }
    }
}

/// A plain-text answer.
pub(super) fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
