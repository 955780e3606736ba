//! Worker Nodes for the bench's cost-at-scale step: a thousand Node objects without the
//! control-plane label, each with an address and a Ready condition, and a heartbeat that writes
//! every Node's status once per period, spread evenly over it (the kubelet's
//! `nodeStatusUpdateFrequency` is 10 s). No kubelet or process stands behind them: the step
//! measures what their objects and writes cost an operator that should never see them.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::task::JoinHandle;

/// Requests in flight while creating, deleting or heartbeating.
const CONCURRENCY: usize = 16;

fn name(i: usize) -> String {
    format!("worker-{i:04}")
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn status(i: usize) -> serde_json::Value {
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 200, 0, 0)) + i as u32);
    serde_json::json!({
        "addresses": [{"type": "InternalIP", "address": ip.to_string()}],
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "bench worker", "lastHeartbeatTime": now(), "lastTransitionTime": now(),
        }],
    })
}

/// Creates `count` worker Nodes (an existing one is kept) and sets their status.
pub async fn create(client: &Client, count: usize) -> Result<(), String> {
    let api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let node: Node = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name(i), "labels": {
                        "kubernetes.io/hostname": name(i),
                        "node-role.kubernetes.io/worker": "",
                    }},
                }))
                .map_err(|e| e.to_string())?;
                match api.create(&PostParams::default(), &node).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(format!("creating Node {}: {e}", name(i))),
                }
                beat(&api, i).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn beat(api: &Api<Node>, i: usize) -> Result<(), String> {
    let patch = Patch::Merge(serde_json::json!({ "status": status(i) }));
    api.patch_status(&name(i), &PatchParams::default(), &patch)
        .await
        .map(|_| ())
        .map_err(|e| format!("heartbeat of Node {}: {e}", name(i)))
}

/// Deletes the worker Nodes.
pub async fn delete(client: &Client, count: usize) -> Result<(), String> {
    let api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                match api.delete(&name(i), &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(format!("deleting Node {}: {e}", name(i))),
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// The heartbeat running in the background.
#[derive(Debug)]
pub struct Heartbeat {
    task: JoinHandle<()>,
    done: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    started: Instant,
}

/// What the heartbeat wrote.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct HeartbeatReport {
    pub status_writes_per_s: f64,
    pub failed: u64,
}

impl Heartbeat {
    /// Writes each of the `count` Nodes' status once per `period`, in order, paced evenly.
    pub fn start(client: &Client, count: usize, period: Duration) -> Self {
        let api: Api<Node> = Api::all(client.clone());
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (d, f) = (done.clone(), failed.clone());
        let gap = period / u32::try_from(count.max(1)).unwrap_or(u32::MAX);
        let task = tokio::spawn(async move {
            let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
            let mut tick = tokio::time::interval(gap);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for i in (0..count).cycle() {
                tick.tick().await;
                // At most CONCURRENCY writes in flight: a slow API slows the heartbeat down
                // (and the report says how fast it really went) instead of piling up tasks.
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let (api, d, f) = (api.clone(), d.clone(), f.clone());
                tokio::spawn(async move {
                    let counter = if beat(&api, i).await.is_ok() { d } else { f };
                    counter.fetch_add(1, Ordering::Relaxed);
                    drop(permit);
                });
            }
        });
        Self {
            task,
            done,
            failed,
            started: Instant::now(),
        }
    }

    /// Stops the heartbeat and says what it wrote.
    pub fn stop(self) -> HeartbeatReport {
        self.task.abort();
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        HeartbeatReport {
            status_writes_per_s: self.done.load(Ordering::Relaxed) as f64 / secs,
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}
