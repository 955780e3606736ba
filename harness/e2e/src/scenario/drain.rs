//! The `drain` scenario: nodes drained one after another for maintenance, as a platform's OS
//! update does. n1 is drained (`kubectl drain`'s calls: cordon, evict through
//! `pods/eviction`) and powered off; a drain of n2 starts at once and must be refused by the
//! quorum guard's PodDisruptionBudget until n1 is back, uncordoned, and its etcd member healthy.
//! Then n2 goes through the same. A sampler asks every member for its status all along: fewer
//! running voters than a quorum is a failure. The report gives how long the second drain waited.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use membership::{EtcdClient, MemberUrl};

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, STATIC_NS, retry_transport, wait_for};
use crate::drain::{DrainError, DrainOptions, DrainReport, drain, set_unschedulable};

const SETTLE: Duration = Duration::from_secs(240);
/// A member that does not answer its status this fast counts as down for one sample.
const ASK: Duration = Duration::from_secs(1);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// Running voters over time: the fewest seen, and when each endpoint, after it last stopped
/// answering, first answered again as a voter that knows its leader.
struct QuorumSampler {
    stop: Arc<AtomicBool>,
    fewest: Arc<Mutex<(usize, String)>>,
    healthy_since: Arc<Mutex<Vec<Option<Instant>>>>,
    task: tokio::task::JoinHandle<()>,
}

/// One member's answer: `None` when it did not answer as a voter, else whether it knows a leader.
async fn ask(client: &EtcdClient, url: &MemberUrl) -> Option<bool> {
    match tokio::time::timeout(ASK, client.status_of(url)).await {
        Ok(Ok(st)) if !st.is_learner => Some(st.leader != 0),
        _ => None,
    }
}

impl QuorumSampler {
    fn start(client: EtcdClient, urls: Vec<MemberUrl>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let fewest = Arc::new(Mutex::new((usize::MAX, String::new())));
        let healthy_since = Arc::new(Mutex::new(vec![None; urls.len()]));
        let (s, f, h) = (stop.clone(), fewest.clone(), healthy_since.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            while !s.load(Ordering::SeqCst) {
                // A running voter counts whether or not it knows a leader at this instant: a
                // restarted member can start an election (etcd 3.4 runs without pre-vote), a
                // blip of a second with every member up, not a loss of quorum.
                let answers: Vec<Option<bool>> =
                    futures::future::join_all(urls.iter().map(|u| ask(&client, u))).await;
                let count = answers.iter().filter(|a| a.is_some()).count();
                if let Ok(mut since) = h.lock() {
                    for (i, a) in answers.iter().enumerate() {
                        match (since[i], a) {
                            (None, Some(true)) => since[i] = Some(Instant::now()),
                            (Some(_), None) => since[i] = None,
                            _ => {}
                        }
                    }
                }
                if let Ok(mut least) = f.lock()
                    && count < least.0
                {
                    *least = (
                        count,
                        format!("{answers:?} at {:.1}s", started.elapsed().as_secs_f64()),
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self {
            stop,
            fewest,
            healthy_since,
            task,
        }
    }

    fn healthy_since(&self, i: usize) -> Option<Instant> {
        self.healthy_since.lock().ok().and_then(|s| s[i])
    }

    async fn finish(self) -> (usize, String) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.fewest
            .lock()
            .map(|f| f.clone())
            .unwrap_or((0, "sampler poisoned".into()))
    }
}

/// Waits until the budget's status (the disruption controller's) allows `allowed` evictions.
pub(super) async fn wait_budget(h: &mut Harness, allowed: i32) -> Result<(), ControlPlaneError> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(h.cp.client(), STATIC_NS);
    let started = Instant::now();
    wait_for(
        SETTLE,
        &format!("budget etcd-quorum-guard allowing {allowed} disruption(s)"),
        || {
            let api = api.clone();
            async move {
                let pdb = api.get_opt("etcd-quorum-guard").await.ok().flatten();
                let status = pdb.as_ref().and_then(|p| p.status.clone());
                let ok = status.as_ref().is_some_and(|s| {
                    s.disruptions_allowed == Some(allowed)
                        && s.observed_generation == pdb.as_ref().and_then(|p| p.metadata.generation)
                });
                if ok {
                    Ok(())
                } else {
                    Err(format!("{:?}", pdb.map(|p| (p.spec, p.status))))
                }
            }
        },
    )
    .await?;
    h.step(format!(
        "budget etcd-quorum-guard allows {allowed} disruption(s) (after {:.1}s)",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

fn guard_evicted(r: &DrainReport, node: &str) -> bool {
    r.evicted
        .iter()
        .any(|p| p == &format!("{STATIC_NS}/etcd-quorum-guard-{node}"))
}

/// Drains, powers off, powers on and uncordons `node`, with no other drain running.
pub(super) async fn maintain(
    h: &mut Harness,
    node: &str,
    options: &DrainOptions,
) -> Result<(), ControlPlaneError> {
    let client =
        crate::drain::client(Some(h.cp.api.kubeconfig()), h.cp.api.request_bound()).await?;
    let r = drain(&client, node, options, &|line| tracing::info!("{line}"))
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !guard_evicted(&r, node) || r.refusals != 0 {
        return Err(failed(format!("drain of {node}: {r:?}")));
    }
    h.step(format!("{node} drained at once: {:?}", r.evicted));
    h.cp.stop_node(node).await?;
    h.cp.restart_node(node).await?;
    // The client's connection may have been to the kube-apiserver of the node just stopped.
    retry_transport(&format!("uncordoning {node}"), || {
        set_unschedulable(&client, node, false)
    })
    .await?;
    h.step(format!("{node} powered off, on again and uncordoned"));
    Ok(())
}

/// Drains n1 (no refusal expected) and powers it off.
async fn drain_first(
    h: &mut Harness,
    client: &kube::Client,
    options: &DrainOptions,
) -> Result<(), ControlPlaneError> {
    let first = drain(client, "n1", options, &|line| tracing::info!("{line}"))
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !guard_evicted(&first, "n1") || first.refusals != 0 {
        return Err(failed(format!("the first drain: {first:?}")));
    }
    h.step(format!(
        "n1 drained in {:.1}s, no refusal: {:?}; skipped {:?}",
        first.took_s, first.evicted, first.skipped
    ));
    h.cp.stop_node("n1").await?;
    h.step("n1 powered off for maintenance (its etcd member down)");
    Ok(())
}

/// A running drain of n2, its refusal count, and when it evicted n2's guard.
type SecondDrain = (
    tokio::task::JoinHandle<Result<DrainReport, DrainError>>,
    Arc<AtomicU32>,
    Arc<Mutex<Option<Instant>>>,
);

/// Starts the drain of n2, counting its refusals and noting when n2's guard is evicted.
fn spawn_second_drain(client: &kube::Client, options: &DrainOptions) -> SecondDrain {
    let refusals = Arc::new(AtomicU32::new(0));
    let evicted_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let second = {
        let (client, options) = (client.clone(), options.clone());
        let (refusals, evicted_at) = (refusals.clone(), evicted_at.clone());
        tokio::spawn(async move {
            let say = move |line: String| {
                tracing::info!("{line}");
                if line.starts_with("error when evicting") {
                    refusals.fetch_add(1, Ordering::SeqCst);
                }
                if line == "pod/etcd-quorum-guard-n2 evicted"
                    && let Ok(mut at) = evicted_at.lock()
                {
                    *at = Some(Instant::now());
                }
            };
            drain(&client, "n2", &options, &say).await
        })
    };
    (second, refusals, evicted_at)
}

/// The drain of n2 is refused while n1 is down, until the operator sees n1's member down too.
async fn refused_while_n1_down(
    h: &mut Harness,
    client: &kube::Client,
    refusals: &AtomicU32,
) -> Result<(), ControlPlaneError> {
    let started = Instant::now();
    wait_for(SETTLE, "the drain of n2 refused twice", || {
        let n = refusals.load(Ordering::SeqCst);
        async move {
            if n >= 2 {
                Ok(())
            } else {
                Err(format!("{n} refusal(s)"))
            }
        }
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), STATIC_NS);
    let guard = pods.get_opt("etcd-quorum-guard-n2").await?;
    if guard.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
        return Err(failed("n2's guard went while n1 was down"));
    }
    h.step(format!(
        "the drain of n2 is refused while n1 is down ({} refusals in {:.1}s); n2's guard stays",
        refusals.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    ));
    // Held while the operator sees n1's member down too, not just while the probes do.
    h.wait_status("the operator sees n1's member down", SETTLE, |s| {
        s.members.iter().any(|m| m.name == "n1" && !m.healthy)
    })
    .await?;
    Ok(())
}

pub async fn drain_scenario(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.wait_status(
        "3 quorum guards Ready, budget minAvailable 2",
        SETTLE,
        |s| {
            s.quorum_guard
                .as_ref()
                .is_some_and(|q| (q.expected_guards, q.ready_guards, q.min_available) == (3, 3, 2))
        },
    )
    .await?;
    wait_budget(h, 1).await?;
    let sampler = QuorumSampler::start(h.etcd().await?, h.node_endpoints());
    let options = DrainOptions {
        retry_every: Duration::from_secs(1),
        timeout: SETTLE,
        force: false,
    };
    let client =
        crate::drain::client(Some(h.cp.api.kubeconfig()), h.cp.api.request_bound()).await?;
    drain_first(h, &client, &options).await?;

    // The second drain starts now and must wait for n1.
    let (second, refusals, evicted_at) = spawn_second_drain(&client, &options);
    refused_while_n1_down(h, &client, &refusals).await?;
    let held = refusals.load(Ordering::SeqCst);
    h.cp.restart_node("n1").await?;
    set_unschedulable(&client, "n1", false).await?;
    h.step(format!(
        "n1 powered on again and uncordoned (the drain of n2 refused {held} time(s) so far)"
    ));
    let report = tokio::time::timeout(SETTLE, second)
        .await
        .map_err(|_| failed(format!("the drain of n2 still waits after {SETTLE:?}")))?
        .map_err(|e| failed(format!("the drain of n2: {e}")))?
        .map_err(|e| failed(e.to_string()))?;
    let n1_healthy = sampler.healthy_since(0);
    let n2_evicted = evicted_at.lock().ok().and_then(|a| *a);
    match (n1_healthy, n2_evicted) {
        (Some(h1), Some(e2)) if h1 <= e2 => {}
        other => {
            return Err(failed(format!(
                "n2's guard was evicted before n1's member was healthy again: {other:?}"
            )));
        }
    }
    h.step(format!(
        "the drain of n2 went through once n1's member was healthy: waited {:.1}s, {} refusal(s), \
         last: {}",
        report.waited_s,
        report.refusals,
        report.last_refusal.clone().unwrap_or_default()
    ));
    h.cp.stop_node("n2").await?;
    h.cp.restart_node("n2").await?;
    set_unschedulable(&client, "n2", false).await?;
    h.step("n2 powered off, on again and uncordoned");
    wait_budget(h, 1).await?;
    maintain(h, "n3", &options).await?;
    h.wait_settled(3, SETTLE).await?;
    wait_budget(h, 1).await?;
    let (fewest, when) = sampler.finish().await;
    h.step(format!(
        "fewest running voters seen: {fewest} ({when}; Some(true): answers and knows its leader)"
    ));
    if fewest < 2 {
        return Err(failed(format!(
            "quorum lost: {fewest} running voter(s) ({when})"
        )));
    }
    Ok(())
}
