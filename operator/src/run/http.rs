//! The operator's HTTP endpoints: `/metrics` (OpenMetrics text), `/readyz` (the caches are
//! synced) and `/healthz` (the control loop has completed a pass recently).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

/// How long the loop may go without finishing a pass before liveness fails.
pub const STALL_LIMIT: Duration = Duration::from_secs(300);

/// What the endpoints read.
#[derive(Clone, Debug)]
pub struct Health {
    pub metrics: Arc<Metrics>,
    pub ready: Arc<std::sync::atomic::AtomicBool>,
    /// Unix seconds of the last finished loop iteration.
    pub last_loop: Arc<AtomicI64>,
}

impl Health {
    pub fn beat(&self) {
        self.last_loop.store(unix_now(), Ordering::SeqCst);
    }
}

fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

async fn metrics(
    State(h): State<Health>,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    (
        StatusCode::OK,
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(),
    )
}

async fn readyz(State(h): State<Health>) -> (StatusCode, &'static str) {
    if h.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced\n")
    }
}

async fn healthz(State(h): State<Health>) -> (StatusCode, String) {
    let age = unix_now() - h.last_loop.load(Ordering::SeqCst);
    if age <= i64::try_from(STALL_LIMIT.as_secs()).unwrap_or(i64::MAX) {
        (StatusCode::OK, "ok\n".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("control loop stalled for {age}s\n"),
        )
    }
}

/// Serves until the task is dropped.
pub async fn serve(addr: SocketAddr, health: Health) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz))
        .with_state(health);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, app).await
}
