//! The operator's cost while idle: RSS and CPU from `/proc`, API requests counted by the proxy in
//! front of it, etcd gRPC requests from the managed members' own metrics (their
//! `grpc_server_handled_total` on the plain `:2382` listener, the node's own address here; nothing but the operator speaks gRPC to them while
//! the bench's load and probe are stopped, the node agents' probes are HTTP `/health` and TCP).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::opproc::CountedOperator;
use super::proxy::{self, Counts};
use super::{procstat, scrape};
use crate::controlplane::LocalControlPlane;

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IdleReport {
    pub window_s: f64,
    pub rss_kib: u64,
    /// Of `rss_kib`: anonymous memory (heap, stacks) and file-backed pages (the binary's code).
    pub rss_anon_kib: u64,
    pub rss_file_kib: u64,
    pub cpu_percent: f64,
    pub api_requests_per_min: f64,
    pub api_watches_per_min: f64,
    pub api_lists_per_min: f64,
    pub api_by_kind: Counts,
    /// Requests from the operator's start until the idle window (its initial lists and watches).
    pub startup_api_by_kind: Counts,
    pub etcd_requests_per_min: f64,
    pub etcd_by_method: BTreeMap<String, f64>,
    pub reconcile_passes_per_min: f64,
}

async fn etcd_grpc(cp: &LocalControlPlane) -> BTreeMap<String, f64> {
    let mut total = BTreeMap::new();
    for n in &cp.nodes {
        let addr = SocketAddr::new(n.ip(), etcd_operator::podspec::HEALTH_PORT);
        if let Ok(text) = scrape::get(addr, "/metrics").await {
            for (k, v) in scrape::sum_by(&text, "grpc_server_handled_total", "grpc_method") {
                *total.entry(k).or_insert(0.0) += v;
            }
        }
    }
    total
}

async fn reconcile_count(op: &CountedOperator) -> f64 {
    scrape::get(op.metrics, "/metrics")
        .await
        .map(|t| {
            scrape::sum_by(
                &t,
                "etcd_operator_reconcile_duration_seconds_count",
                "controller",
            )
            .into_values()
            .fold(0.0, f64::max)
        })
        .unwrap_or(0.0)
}

/// Measures a `window` of idleness (the cluster settled, nothing else writing).
pub async fn measure(
    cp: &LocalControlPlane,
    op: &CountedOperator,
    window: Duration,
) -> Result<IdleReport, String> {
    let startup = op.proxy.counts();
    let cpu0 = procstat::sample(op.pid()).ok_or("the operator is gone")?;
    let etcd0 = etcd_grpc(cp).await;
    let rec0 = reconcile_count(op).await;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let api1 = op.proxy.counts();
    let cpu1 = procstat::sample(op.pid()).ok_or("the operator is gone")?;
    let etcd1 = etcd_grpc(cp).await;
    let rec1 = reconcile_count(op).await;
    let minutes = t0.elapsed().as_secs_f64() / 60.0;
    let api = proxy::delta(&startup, &api1);
    let etcd: BTreeMap<String, f64> = etcd1
        .iter()
        .filter_map(|(k, v)| {
            let d = v - etcd0.get(k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| (k.clone(), d / minutes))
        })
        .collect();
    Ok(IdleReport {
        window_s: minutes * 60.0,
        rss_kib: cpu1.rss_kib,
        rss_anon_kib: cpu1.rss_anon_kib,
        rss_file_kib: cpu1.rss_file_kib,
        cpu_percent: procstat::cpu_percent(&cpu0, &cpu1),
        api_requests_per_min: api.values().sum::<u64>() as f64 / minutes,
        api_watches_per_min: proxy::total(&api, "watch") as f64 / minutes,
        api_lists_per_min: proxy::total(&api, "list") as f64 / minutes,
        api_by_kind: api,
        startup_api_by_kind: startup,
        etcd_requests_per_min: etcd.values().sum(),
        etcd_by_method: etcd,
        reconcile_passes_per_min: (rec1 - rec0) / minutes,
    })
}
