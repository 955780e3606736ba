//! Quorum guard: makes evictions (what `kubectl drain` uses) unable to take a second
//! control-plane node while etcd cannot lose one.
//!
//! Inputs: the selected control-plane nodes (cordoned or not), the guard pods in the static-pod
//! namespace (label `app=etcd-quorum-guard`, with their Ready condition), etcd as the observer
//! saw it, the nodes' revisions, and PodDisruptionBudget `etcd-quorum-guard`. Decision
//! ([`decide`], pure): one guard pod per node that is not cordoned (each Ready while its node's
//! etcd answers `/health`, the kubelet's probe); guards of nodes that left the selection go; and
//! the budget's `minAvailable`:
//! - **nodes − 1** while nothing is at risk: a drain may take one node; the next drain's
//!   eviction is refused (429) until that node is uncordoned, its guard is back and its etcd is
//!   healthy, because a drained node's guard is not recreated while it stays cordoned;
//! - **nodes** (no eviction at all) while etcd is at risk in a way the probes may not show yet:
//!   a membership change or a revision rollout in flight, etcd not answering, or a member the
//!   operator sees down while its guard still reads Ready (a dead node's kubelet reports nothing,
//!   and its pods stay Ready for about 40 s on a real cluster);
//! - **nodes** as well, on any number of nodes (one included), while backups are configured and
//!   `BackupReady` is False ([`super::backup::ready`]): no voluntary disruption until a recent
//!   verified backup exists. A `kubectl drain` then waits (its evictions are refused with 429 and
//!   retried) until a backup lands; the way out is to fix or take one
//!   (`spec.backup.request`), not to force the drain.
//!
//! A member that is down and whose guard is not Ready needs no tightening: the probes already
//! count it, and its own node can still be drained (`IfHealthyBudget`), which costs etcd nothing.
//! Writes: guard pods (create, delete), the budget (create, replace). Never evicts or deletes a
//! guard of a selected node: that is the drain's decision, through the budget.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use membership::MemberId;

use super::membership::voter_policy;
use crate::api::QuorumGuardStatus;
use crate::category::Category;
use crate::controller::{ControllerError, ControllerName};
use crate::observed::{ControlPlaneNode, Observed, find};
use crate::pass::Pass;
use crate::podspec::{
    HEALTH_PORT, STATIC_POD_NAMESPACE as NS, guard_pod_name, health_host, render_guard,
};
use crate::retry::ErrorKind;

const NAME: ControllerName = ControllerName::QuorumGuard;

/// The guards' label (`app=etcd-quorum-guard`), the budget's selector.
pub const GUARD_APP: &str = "etcd-quorum-guard";
/// The PodDisruptionBudget over the guards.
pub const GUARD_PDB: &str = "etcd-quorum-guard";

/// A guard pod as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardPod {
    pub name: String,
    pub node: String,
    pub ready: bool,
    pub deleting: bool,
    /// Its readiness probe's host and port (`None`: no HTTP probe).
    pub probe: Option<(String, i32)>,
    /// Its probe is not the one rendered now (set by the caller): replaced.
    pub stale: bool,
}

/// The host and port of a pod's first container's HTTP readiness probe.
fn probe_of(p: &Pod) -> Option<(String, i32)> {
    let get = p
        .spec
        .as_ref()?
        .containers
        .first()?
        .readiness_probe
        .as_ref()?
        .http_get
        .as_ref()?;
    let port = match &get.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => *i,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_) => return None,
    };
    Some((get.host.clone().unwrap_or_default(), port))
}

/// The guard pods among `pods` (label `app=etcd-quorum-guard`), sorted by name.
pub fn guard_pods(pods: &[Pod]) -> Vec<GuardPod> {
    let mut out: Vec<GuardPod> = pods
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .is_some_and(|a| a == GUARD_APP)
        })
        .map(|p| GuardPod {
            name: p.metadata.name.clone().unwrap_or_default(),
            node: p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
            ready: p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            deleting: p.metadata.deletion_timestamp.is_some(),
            probe: probe_of(p),
            stale: false,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What the guard controller does this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardPlan {
    /// Nodes whose guard pod is created.
    pub create: Vec<String>,
    /// Guard pods deleted (their node left the selection).
    pub delete: Vec<String>,
    /// Guards the budget counts: one per selected node.
    pub expected: usize,
    pub ready: usize,
    /// The budget's `minAvailable`.
    pub min_available: i32,
    /// Why no node may be drained now (empty: one may).
    pub blocked_by: Vec<String>,
}

/// What kind of risk holds drains (and upgrades: [`crate::driver::payload_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RiskKind {
    EtcdUnreachable,
    MembershipChange,
    MemberDown,
    Rollout,
    /// Backups are configured and `BackupReady` is False (not from [`risks`]: the caller adds
    /// it, from [`super::backup::ready`]).
    BackupNotReady,
}

/// One reason etcd cannot lose a node now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Risk {
    pub kind: RiskKind,
    pub text: String,
}

fn risk(kind: RiskKind, text: String) -> Risk {
    Risk { kind, text }
}

/// Why etcd cannot lose a node now in a way the guards' probes may not show yet.
pub fn risks(o: &Observed, guards: &[GuardPod]) -> Vec<Risk> {
    use RiskKind::{EtcdUnreachable, MemberDown, MembershipChange, Rollout};
    let obs = &o.etcd;
    if let Some(e) = &obs.error {
        return vec![risk(EtcdUnreachable, format!("etcd did not answer: {e}"))];
    }
    if obs.members.is_empty() {
        return vec![risk(EtcdUnreachable, "etcd did not answer".to_owned())];
    }
    let mut out = Vec::new();
    let eligible = o.nodes.iter().filter(|n| n.leaving().is_none()).count();
    let voters = obs.members.iter().filter(|m| !m.is_learner).count();
    for m in &obs.members {
        if !m.is_started() {
            out.push(risk(
                MembershipChange,
                format!("member {} has not started yet (joining)", m.id),
            ));
        } else if m.is_learner && voters < voter_policy::voter_target(eligible) {
            out.push(risk(
                MembershipChange,
                format!("learner {} waits to be promoted", m.name),
            ));
        } else if !obs.is_healthy(m.id) {
            let guard_ready = guards
                .iter()
                .any(|g| g.node == m.name && g.ready && !g.deleting);
            if guard_ready {
                out.push(risk(
                    MemberDown,
                    format!(
                        "member {} is down while its guard still reads Ready",
                        m.name
                    ),
                ));
            }
        }
    }
    let with_member: BTreeSet<&str> = o.by_node.keys().map(String::as_str).collect();
    for n in o.nodes.iter().filter(|n| n.leaving().is_none()) {
        if !with_member.contains(n.target.name.as_str()) {
            out.push(risk(
                MembershipChange,
                format!("node {} has no etcd member yet", n.target.name),
            ));
        }
    }
    let on_nodes: BTreeSet<MemberId> = o.by_node.values().copied().collect();
    for m in obs.members.iter().filter(|m| !on_nodes.contains(&m.id)) {
        let who = if m.name.is_empty() {
            m.id.to_string()
        } else {
            m.name.clone()
        };
        out.push(risk(
            MembershipChange,
            format!("member {who} is on no selected node (to be removed)"),
        ));
    }
    let latest = o.prev.latest_available_revision;
    for s in &o.prev.node_statuses {
        if latest > 0 && !s.runs(latest) {
            out.push(risk(
                Rollout,
                format!(
                    "node {} moves to revision {latest} (runs {})",
                    s.node_name, s.current_revision
                ),
            ));
        }
    }
    out
}

/// Guards to create and delete, and the budget, from the nodes, the guards and the risks.
pub fn decide(nodes: &[ControlPlaneNode], guards: &[GuardPod], risks: &[Risk]) -> GuardPlan {
    let selected: BTreeMap<&str, &ControlPlaneNode> = nodes
        .iter()
        .filter(|n| n.leaving().is_none())
        .map(|n| (n.target.name.as_str(), n))
        .collect();
    let has_guard: BTreeSet<&str> = guards
        .iter()
        .filter(|g| g.name == guard_pod_name(&g.node))
        .map(|g| g.node.as_str())
        .collect();
    let create = selected
        .values()
        .filter(|n| !n.unschedulable && !has_guard.contains(n.target.name.as_str()))
        .map(|n| n.target.name.clone())
        .collect();
    let delete = guards
        .iter()
        .filter(|g| {
            !g.deleting
                && (!selected.contains_key(g.node.as_str())
                    || g.name != guard_pod_name(&g.node)
                    || g.stale)
        })
        .map(|g| g.name.clone())
        .collect();
    let expected = selected.len();
    let ready = guards
        .iter()
        .filter(|g| g.ready && !g.deleting && selected.contains_key(g.node.as_str()))
        .count();
    // One node: waiting cannot make draining it safe (etcd goes with it either way), so the
    // budget holds it only for a backup, which waiting does make safer.
    let backup_held = risks.iter().any(|r| r.kind == RiskKind::BackupNotReady);
    let min_available = match expected {
        0 => 0,
        1 if !backup_held => 0,
        n if risks.is_empty() => n - 1,
        n => n,
    };
    GuardPlan {
        create,
        delete,
        expected,
        ready,
        min_available: i32::try_from(min_available).unwrap_or(i32::MAX),
        blocked_by: risks.iter().map(|r| r.text.clone()).collect(),
    }
}

/// The budget's spec for `min_available` guards.
pub fn budget_spec(min_available: i32) -> PodDisruptionBudgetSpec {
    PodDisruptionBudgetSpec {
        min_available: Some(IntOrString::Int(min_available)),
        selector: Some(LabelSelector {
            match_labels: Some([("app".to_owned(), GUARD_APP.to_owned())].into()),
            ..Default::default()
        }),
        unhealthy_pod_eviction_policy: Some("IfHealthyBudget".to_owned()),
        ..Default::default()
    }
}

/// The plan line.
pub fn describe(plan: &GuardPlan) -> String {
    let mut line = format!(
        "{}/{} guard(s) Ready; budget minAvailable {}",
        plan.ready, plan.expected, plan.min_available
    );
    if plan.blocked_by.is_empty() {
        line.push_str(": a drain may take one node");
    } else {
        line.push_str(&format!(": no drain now ({})", plan.blocked_by.join("; ")));
    }
    for n in &plan.create {
        line.push_str(&format!("; create the guard on {n}"));
    }
    for g in &plan.delete {
        line.push_str(&format!("; delete {g}"));
    }
    line
}

/// The EtcdCluster as the guards' and the budget's controller: `kubectl drain` evicts a pod
/// that declares a controller without `--force`, and they go when the EtcdCluster goes.
fn owner(p: &Pass<'_>) -> Option<OwnerReference> {
    let mut o = p.o.cluster.controller_owner_ref(&())?;
    // Blocking the owner's deletion would need permission to update its finalizers.
    o.block_owner_deletion = None;
    Some(o)
}

/// Runs after etcd was read (whatever later controllers did), so the budget follows etcd even
/// in a pass that stopped early. `backup`: the risk `BackupReady` is, if any.
pub async fn reconcile(p: &mut Pass<'_>, backup: Option<&Risk>) -> Result<(), ControllerError> {
    let _t = p.ctx.metrics.time(NAME.as_str());
    let mut guards = guard_pods(&p.inputs.pods);
    // A guard rendered by an older operator (its probe elsewhere) is replaced.
    let local = p.o.spec.local_client_listener;
    for g in &mut guards {
        let wanted =
            p.o.nodes
                .iter()
                .find(|n| n.target.name == g.node)
                .map(|n| (health_host(&n.target, local).1, i32::from(HEALTH_PORT)));
        g.stale = wanted.is_some() && g.probe != wanted;
    }
    let mut at_risk = risks(&p.o, &guards);
    at_risk.extend(backup.cloned());
    let plan = decide(&p.o.nodes, &guards, &at_risk);
    p.next(NAME, describe(&plan));
    p.ctx.metrics.quorum_guards(plan.expected, plan.ready);
    p.status.quorum_guard = Some(QuorumGuardStatus {
        expected_guards: i64::try_from(plan.expected).unwrap_or(i64::MAX),
        ready_guards: i64::try_from(plan.ready).unwrap_or(i64::MAX),
        min_available: i64::from(plan.min_available),
        drain_blocked_by: plan.blocked_by.clone(),
    });
    let images = p.ctx.config.images.clone();
    let owner = owner(p);
    for node in &plan.create {
        let Some(target) = p.o.nodes.iter().find(|n| &n.target.name == node) else {
            continue;
        };
        let mut pod = render_guard(&target.target, &images, local).map_err(|e| {
            ControllerError::new(NAME, ErrorKind::Permanent, Category::Render, e.to_string())
        })?;
        pod.metadata.owner_references = owner.clone().map(|o| vec![o]);
        p.w.create(NS, &pod)
            .await
            .map_err(|e| ControllerError::write(NAME, &e))?;
    }
    for name in &plan.delete {
        p.w.delete::<Pod>(NS, name)
            .await
            .map_err(|e| ControllerError::write(NAME, &e))?;
    }
    let current = find(&p.inputs.pdbs, NS, GUARD_PDB);
    let changed =
        p.w.pdb(
            NS,
            GUARD_PDB,
            current,
            budget_spec(plan.min_available),
            owner.as_ref(),
        )
        .await
        .map_err(|e| ControllerError::write(NAME, &e))?;
    if changed && current.is_some() {
        p.note(format!(
            "quorum guard budget: minAvailable {} of {}{}",
            plan.min_available,
            plan.expected,
            if plan.blocked_by.is_empty() {
                String::new()
            } else {
                format!(" ({})", plan.blocked_by.join("; "))
            }
        ));
    }
    p.succeeded(NAME);
    Ok(())
}

#[cfg(test)]
#[path = "quorum_guard_tests.rs"]
mod tests;
