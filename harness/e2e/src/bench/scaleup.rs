//! One operator scale-up, timed: one or more nodes are added to a settled cluster at once; the
//! clock starts when the first new Node is Ready and stops when every new member has its final
//! role (a healthy voter, or, when the odd-voter policy keeps it as the standby learner of an
//! even node count, a started, healthy learner) and every node runs the final revision
//! ([`crate::view::settled_with_standby`]). Status and Nodes are polled every 50 ms; sub-phases
//! are the first poll that shows them (for several nodes: the first learner added, every new
//! member started, every new member promoted).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use etcd_operator::api::EtcdClusterStatus;
use etcd_operator::observed::node_ready;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use super::probe::{Probe, ProbeWrite, longest_gap_ms};
use super::procstat;
use crate::scenario::Harness;

/// One status poll, reduced to what the timeline shows.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Sample {
    /// Seconds after the new node was Ready (negative before).
    pub at_s: f64,
    pub latest_revision: i64,
    pub voters: usize,
    pub learners: usize,
    /// (node, current revision, target revision) per node.
    pub nodes: Vec<(String, i64, Option<i64>)>,
}

/// The scale-up's phases, seconds after the new Node was Ready.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Phases {
    /// add_node → first new Node Ready (the agent's registration; not measured).
    pub node_ready_after_add_s: f64,
    pub learner_added_s: Option<f64>,
    pub learner_started_s: Option<f64>,
    pub promoted_s: Option<f64>,
    /// Member in its final role and every node on the final revision: the measured time.
    pub done_s: f64,
    pub final_revision: i64,
    pub revisions_created: i64,
}

/// Operator process cost during the scale-up.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ScaleUpCost {
    pub cpu_percent: f64,
    pub cpu_s: f64,
    pub max_rss_kib: u64,
    pub api_requests: u64,
    pub api_requests_by_kind: std::collections::BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ScaleUpReport {
    /// The nodes added.
    pub nodes: Vec<String>,
    pub phases: Phases,
    pub probe_writes: usize,
    pub probe_failed: usize,
    pub probe_longest_gap_ms: f64,
    pub cost: ScaleUpCost,
    pub samples: Vec<Sample>,
    pub writes: Vec<ProbeWrite>,
}

/// The member counts a scale-up ends with.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub voters: usize,
    /// Standby learners (the new member stays one when the node count is even).
    pub learners: usize,
}

/// What the polls during a scale-up saw: when each sub-phase first showed, and every status.
struct Observed {
    ready_at: Option<Instant>,
    added: Option<Instant>,
    started: Option<Instant>,
    promoted: Option<Instant>,
    samples: Vec<(Instant, EtcdClusterStatus)>,
    max_rss: u64,
    done: Instant,
}

/// Polls Nodes and status every 50 ms until the new members are settled at `target`.
async fn observe(
    h: &mut Harness,
    names: &[String],
    before: &BTreeSet<String>,
    target: Target,
    pid: Option<u32>,
    origin: Instant,
    deadline: Duration,
) -> Result<Observed, String> {
    let nodes: Api<Node> = Api::all(h.cp.client());
    let mut ready_at: Option<Instant> = None;
    let (mut added, mut started, mut promoted) = (None, None, None);
    let mut samples: Vec<(Instant, EtcdClusterStatus)> = Vec::new();
    let mut max_rss = 0u64;
    let done = loop {
        let now = Instant::now();
        if ready_at.is_none() {
            for name in names {
                if let Ok(Some(n)) = nodes.get_opt(name).await
                    && node_ready(&n)
                {
                    ready_at = Some(now);
                    h.step(format!("bench: node {name} Ready"));
                    break;
                }
            }
        }
        let s = h.status().await;
        let new: Vec<_> = s
            .members
            .iter()
            .filter(|m| !before.contains(&m.id))
            .collect();
        if !new.is_empty() {
            added.get_or_insert(now);
        }
        let all = |f: fn(&&etcd_operator::api::MemberStatus) -> bool| {
            new.len() == names.len() && new.iter().all(f)
        };
        if all(|m| m.started || m.role == "Voter") {
            started.get_or_insert(now);
        }
        if all(|m| m.role == "Voter") {
            promoted.get_or_insert(now);
        }
        if let Some(p) = pid.and_then(procstat::sample) {
            max_rss = max_rss.max(p.rss_kib);
        }
        let final_role = if target.learners == 0 {
            promoted.is_some()
        } else {
            started.is_some()
        };
        let settled =
            crate::view::settled_with_standby(&s, target.voters, target.learners) && final_role;
        samples.push((now, s));
        if settled && ready_at.is_some() {
            break now;
        }
        if origin.elapsed() > deadline {
            return Err(format!(
                "the scale-up to {target:?} did not settle in {deadline:?}\n{}",
                h.describe().await
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    Ok(Observed {
        ready_at,
        added,
        started,
        promoted,
        samples,
        max_rss,
        done,
    })
}

/// One status poll, `at_s` seconds after the new node was Ready, as the timeline shows it.
fn sample(at_s: f64, s: &EtcdClusterStatus) -> Sample {
    Sample {
        at_s,
        latest_revision: s.latest_available_revision,
        voters: s.members.iter().filter(|m| m.role == "Voter").count(),
        learners: s.members.iter().filter(|m| m.role == "Learner").count(),
        nodes: s
            .node_statuses
            .iter()
            .map(|n| (n.node_name.clone(), n.current_revision, n.target_revision))
            .collect(),
    }
}

/// Adds the nodes `names` and measures until the cluster is settled at `target`.
/// `pid` is the operator's, `counts` the proxy's request counter (if any).
pub async fn measure(
    h: &mut Harness,
    names: &[String],
    target: Target,
    pid: Option<u32>,
    proxy: Option<&super::proxy::CountingProxy>,
    deadline: Duration,
) -> Result<ScaleUpReport, String> {
    let before: BTreeSet<String> = h.status().await.members.into_iter().map(|m| m.id).collect();
    let before_latest = h.status().await.latest_available_revision;
    let origin = Instant::now();
    let probe = Probe::start(h.cp.client(), origin);
    let cpu0 = pid.and_then(procstat::sample);
    let api0 = proxy.map(|p| p.counts()).unwrap_or_default();
    for name in names {
        h.cp.add_node(name)
            .await
            .map_err(|e| format!("adding {name}: {e}"))?;
        h.step(format!("bench: node {name} added"));
    }
    let Observed {
        ready_at,
        added,
        started,
        promoted,
        samples,
        max_rss,
        done,
    } = observe(h, names, &before, target, pid, origin, deadline).await?;
    h.step(format!("bench: settled at {target:?}"));
    let writes = probe.finish().await;
    let cpu1 = pid.and_then(procstat::sample);
    let api1 = proxy.map(|p| p.counts()).unwrap_or_default();
    let ready = ready_at.unwrap_or(origin);
    let rel = |t: Instant| {
        if t >= ready {
            t.duration_since(ready).as_secs_f64()
        } else {
            -ready.duration_since(t).as_secs_f64()
        }
    };
    let offset = rel(origin);
    let last = samples.last().map(|(_, s)| s.clone()).unwrap_or_default();
    let phases = Phases {
        node_ready_after_add_s: -offset,
        learner_added_s: added.map(rel),
        learner_started_s: started.map(rel),
        promoted_s: promoted.map(rel),
        done_s: rel(done),
        final_revision: last.latest_available_revision,
        revisions_created: last.latest_available_revision - before_latest,
    };
    let cost = match (cpu0, cpu1) {
        (Some(a), Some(b)) => ScaleUpCost {
            cpu_percent: procstat::cpu_percent(&a, &b),
            cpu_s: b.cpu_s - a.cpu_s,
            max_rss_kib: max_rss,
            api_requests: super::proxy::delta(&api0, &api1).values().sum(),
            api_requests_by_kind: super::proxy::delta(&api0, &api1),
        },
        _ => ScaleUpCost::default(),
    };
    let samples = samples
        .into_iter()
        .map(|(t, s)| sample(rel(t), &s))
        .collect();
    let writes: Vec<ProbeWrite> = writes
        .into_iter()
        .map(|w| ProbeWrite {
            at_s: w.at_s + offset,
            ..w
        })
        .collect();
    Ok(ScaleUpReport {
        nodes: names.to_vec(),
        phases,
        probe_writes: writes.len(),
        probe_failed: writes.iter().filter(|w| !w.ok).count(),
        probe_longest_gap_ms: longest_gap_ms(&writes),
        cost,
        samples,
        writes,
    })
}
