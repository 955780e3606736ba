//! Calls the harness repeats when their connection fails: behind the control-plane endpoint a
//! kube-apiserver the harness was balanced to may stop under a call (a node powered off, a
//! restart in a rollout), and the next connection goes to another, as a controller's next pass
//! would find.

use std::future::Future;
use std::time::{Duration, Instant};

use super::ControlPlaneError;

/// How long an idempotent call is retried while its connection fails ([`retry_transport`]).
pub const RECONNECT: Duration = Duration::from_secs(60);

/// Whether `e` is the connection failing rather than an answer (a kube-apiserver that stopped
/// with a request of ours on its connection: behind the control-plane endpoint the next
/// connection goes to another).
pub fn is_transport(e: &kube::Error) -> bool {
    matches!(e, kube::Error::HyperError(_) | kube::Error::Service(_))
}

/// Runs the idempotent `call` again while it fails on the connection ([`is_transport`]), for
/// at most [`RECONNECT`]; an answer (an API error included) ends it at once, as it was. The harness does
/// what a controller's next pass would do where a node it just stopped held its connection.
pub async fn retry_transport<T, F, Fut>(what: &str, mut call: F) -> Result<T, ControlPlaneError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let started = Instant::now();
    loop {
        match call().await {
            Err(e) if is_transport(&e) && started.elapsed() < RECONNECT => {
                tracing::info!("{what}: {e}; again on a new connection");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other.map_err(ControlPlaneError::Kube),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use k8s_openapi::api::core::v1::Node;
    use kube::{Api, Client};

    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", "Conflict").with_code(code),
        ))
    }

    #[tokio::test]
    async fn a_call_is_run_again_while_its_connection_fails_and_an_answer_ends_it() {
        let calls = AtomicU32::new(0);
        let out = retry_transport("a call", || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 => Err(kube::Error::Service("connection closed".into())),
                    1 => Err(api_error(409)),
                    _ => Ok(n),
                }
            }
        })
        .await;
        assert!(
            matches!(out, Err(ControlPlaneError::Kube(kube::Error::Api(ref s))) if s.code == 409),
            "{out:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_transport_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        let e = Api::<Node>::all(client)
            .get("n1")
            .await
            .expect_err("nothing listens there");
        assert!(is_transport(&e), "{e:?}");
        assert!(!is_transport(&api_error(500)));
    }

    /// A server that takes the connection and never answers: with a read bound (as the stacked
    /// control plane's client has) the call fails in time, as a transport error.
    #[tokio::test]
    async fn a_server_that_never_answers_is_a_transport_error_once_the_read_bound_passes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listen");
        let addr = listener.local_addr().expect("addr");
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let mut config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
        config.read_timeout = Some(Duration::from_millis(500));
        let client = Client::try_from(config).expect("client");
        let started = Instant::now();
        let e = Api::<Node>::all(client)
            .get("n1")
            .await
            .expect_err("nothing answers");
        silent.abort();
        assert!(is_transport(&e), "{e:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
