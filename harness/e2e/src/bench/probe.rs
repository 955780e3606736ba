//! A light write probe for the scale-up timeline: one small put every 50 ms through the voters'
//! published endpoints with the operator's client certificate (or, for the etcd floor, through
//! the fixture cluster's client), each put's start and latency recorded (acknowledged or not).
//!
//! It fails over the way kube-apiserver's etcd client does: every published endpoint, the last
//! one that answered first, each attempt bounded by [`ATTEMPT_TIMEOUT`], and a failed attempt
//! (a closed connection, a refusal, a timeout) moves on to the next endpoint at once, within
//! [`PUT_TIMEOUT`] for the whole put. The endpoint list is re-read every second; the client (and
//! its connections) is rebuilt only when the list changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::Client;
use membership::EtcdClient;
use tokio::sync::Mutex;

use crate::controlplane::{OPERATOR_NS, STATIC_NS};
use crate::scenario::load::{operator_tls, published_endpoints};

/// One put of the probe.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct ProbeWrite {
    /// Start of the put, seconds after the probe's origin.
    pub at_s: f64,
    pub latency_ms: f64,
    pub ok: bool,
}

/// A running probe.
pub struct Probe {
    stop: Arc<AtomicBool>,
    writes: Arc<Mutex<Vec<ProbeWrite>>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").finish_non_exhaustive()
    }
}

/// Bound on one put, every attempt included.
const PUT_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on one attempt at one endpoint.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);

/// Tries each endpoint from `*first` on (wrapping), each attempt bounded by the client's call
/// timeout, until one acknowledges or `PUT_TIMEOUT` has passed; remembers the one that answered.
async fn put_with_failover(c: &EtcdClient, first: &mut usize, key: &str) -> bool {
    let endpoints = c.endpoints();
    if endpoints.is_empty() {
        return false;
    }
    let started = Instant::now();
    let mut i = *first % endpoints.len();
    while started.elapsed() < PUT_TIMEOUT {
        let left = PUT_TIMEOUT.saturating_sub(started.elapsed());
        let attempt = c.put_at(&endpoints[i], key, b"x".to_vec());
        if let Ok(Ok(_)) = tokio::time::timeout(left, attempt).await {
            *first = i;
            return true;
        }
        i = (i + 1) % endpoints.len();
    }
    false
}

impl Probe {
    /// Probes the control plane's published endpoints (read through `client`).
    pub fn start(client: Client, origin: Instant) -> Self {
        Self::spawn(Some(client), None, origin)
    }

    /// Probes a fixed etcd client: the floor's fixture cluster, with no Kubernetes around it.
    pub fn on(etcd: EtcdClient, origin: Instant) -> Self {
        Self::spawn(None, Some(etcd), origin)
    }

    fn spawn(kube: Option<Client>, fixed: Option<EtcdClient>, origin: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(Mutex::new(Vec::new()));
        let (s, w) = (stop.clone(), writes.clone());
        let task = tokio::spawn(async move {
            let mut etcd: Option<EtcdClient> = fixed;
            let mut read_at: Option<Instant> = None;
            let mut first = 0usize;
            let mut seq = 0u64;
            while !s.load(Ordering::SeqCst) {
                if let Some(client) = kube.as_ref()
                    && read_at.is_none_or(|at| at.elapsed() > Duration::from_secs(1))
                {
                    read_at = Some(Instant::now());
                    let endpoints = published_endpoints(client, STATIC_NS).await;
                    if etcd
                        .as_ref()
                        .is_none_or(|c| c.endpoints() != endpoints.as_slice())
                        && let Ok(tls) = operator_tls(client, OPERATOR_NS).await
                        && let Ok(c) = EtcdClient::with_pem(endpoints, Some(&tls), ATTEMPT_TIMEOUT)
                    {
                        etcd = Some(c);
                    }
                }
                let Some(c) = etcd.as_ref() else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let t = Instant::now();
                let key = format!("/bench-probe/{seq:010}");
                let ok = put_with_failover(c, &mut first, &key).await;
                seq += 1;
                w.lock().await.push(ProbeWrite {
                    at_s: t.duration_since(origin).as_secs_f64(),
                    latency_ms: t.elapsed().as_secs_f64() * 1000.0,
                    ok,
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { stop, writes, task }
    }

    /// Stops the probe; its writes.
    pub async fn finish(self) -> Vec<ProbeWrite> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.writes.lock().await.clone()
    }
}

/// Longest time between two acknowledged probe writes (ms): from the end of one to the end of
/// the next.
pub fn longest_gap_ms(writes: &[ProbeWrite]) -> f64 {
    let ends: Vec<f64> = writes
        .iter()
        .filter(|w| w.ok)
        .map(|w| w.at_s * 1000.0 + w.latency_ms)
        .collect();
    ends.windows(2).map(|p| p[1] - p[0]).fold(0.0, f64::max)
}
