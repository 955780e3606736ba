//! A light write probe for the scale-up timeline: one small put every 50 ms through the voters'
//! published endpoints with the operator's client certificate, each put's start and latency
//! recorded (acknowledged or not).

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

const PUT_TIMEOUT: Duration = Duration::from_secs(2);

impl Probe {
    pub fn start(client: Client, origin: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(Mutex::new(Vec::new()));
        let (s, w) = (stop.clone(), writes.clone());
        let task = tokio::spawn(async move {
            let mut etcd: Option<(Instant, EtcdClient)> = None;
            let mut seq = 0u64;
            while !s.load(Ordering::SeqCst) {
                if etcd
                    .as_ref()
                    .is_none_or(|(at, _)| at.elapsed() > Duration::from_secs(1))
                {
                    let endpoints = published_endpoints(&client, STATIC_NS).await;
                    let made = match operator_tls(&client, OPERATOR_NS).await {
                        Ok(tls) => EtcdClient::with_pem(endpoints, Some(&tls), PUT_TIMEOUT).ok(),
                        Err(_) => None,
                    };
                    match made {
                        Some(c) => etcd = Some((Instant::now(), c)),
                        None => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    }
                }
                let Some((_, c)) = etcd.as_ref() else {
                    continue;
                };
                let t = Instant::now();
                let key = format!("/bench-probe/{seq:010}");
                let ok = matches!(
                    tokio::time::timeout(PUT_TIMEOUT, c.put(&key, b"x".to_vec())).await,
                    Ok(Ok(_))
                );
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
