//! Installer (the rollout): moves nodes to the latest revision one at a time, through installer
//! pods. One name everywhere: module, `InstallerControllerDegraded`, `NodeInstaller*`
//! conditions, Event `InstallerPodCreated`, metric label `installer`.
//!
//! Inputs: the latest revision, each node's pods and status, the members and the leader.
//! Writes: installer pods, node statuses, leadership handed off before the leader's node
//! restarts, deletion of finished installer pods. Never more than one node at a time, never one
//! the quorum gate refuses.
//!
//! [`decide`] is pure. It first folds what it observes into each node's status (a pod on a newer
//! revision whose etcd serves, [`NodeView::serving_revision`], becomes `currentRevision`, as does
//! the pod's revision on a node without a member; a failed installer becomes `lastFailed*`),
//! then picks at most one action:
//! * a node already moving (`targetRevision` set) is followed to the end: its installer runs, then
//!   its etcd must serve on the target; a newer revision supersedes the target once the
//!   installer finished (the node moves straight on, without waiting on a stale one);
//! * otherwise the next node below the latest revision is chosen: nodes with no static pod, an
//!   unready pod, an etcd blocked by `etcd-verify`, or a member still on the node's old address
//!   first, then the others, the etcd leader last, and a node whose Node is not Ready never (it
//!   waits, named, until it is Ready: no installer pod could run there);
//! * before the next node restarts, every started voter has applied what the leader committed
//!   (the member restarted before has caught up);
//! * every install asks the quorum gate (`RollNode`), twice: before its installer pod is made,
//!   and again once that pod's container is seen running, right before the restart: only then is
//!   the pod annotated as approved, and the installer writes the new manifest only on an approval
//!   within [`crate::podspec::APPROVAL_WINDOW`] of its start (`etcd_installer::approval`);
//! * a failed install is retried after a capped exponential back-off, and while it backs off no
//!   other node is moved (a bad revision stops at its first node).
//!
//! Installer pods are named `installer-<revision>-<node>-<attempt>`, so a failure is recorded
//! exactly once and a retry is a new pod.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use membership::{Action, ClusterView, Denial, MemberId, Verdict, gate};
use time::OffsetDateTime;

use crate::api::NodeStatus;
use crate::certs::parse_time;
use crate::controller::{ControllerError, ControllerName};
use crate::metrics::NodeLabel;
pub use crate::observed::node_view::{
    InstallerPhase, InstallerState, NodeView, PodState, RestartApproval, STARTING_REQUEUE,
    STARTING_WINDOW,
};
use crate::observed::objects;
use crate::pass::Pass;
use crate::podspec::STATIC_POD_NAMESPACE as NS;
use node_problems::missing_pod_line;
pub use node_problems::node_problems;

mod act;
pub mod equivalence;
mod observe;
pub use equivalence::equivalent_lines;
pub mod node_problems;
pub mod rollout_hold;
use act::act;
pub use act::describe;
use observe::observe;

const NAME: ControllerName = ControllerName::Installer;

/// First retry delay after a failed install; doubles per failure up to [`MAX_BACKOFF`].
pub const BASE_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The one action of this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutAction {
    /// Every node runs the latest revision Ready.
    Done,
    /// Create installer pod `installer-<revision>-<node>-<attempt>`.
    Install {
        node: String,
        revision: i64,
        attempt: u32,
    },
    /// The quorum gate, asked again now that the installer runs, still allows the restart:
    /// approve it on the installer pod (`etcd_installer::approval`).
    Approve {
        node: String,
        revision: i64,
        attempt: u32,
    },
    /// Waiting on something that will change by itself (an installer, a pod getting Ready).
    Wait { node: String, reason: String },
    /// A failed install backs off until `until`.
    BackOff {
        node: String,
        revision: i64,
        until: OffsetDateTime,
        reason: String,
    },
    /// The quorum gate refused to roll the node now.
    Denied { node: String, denial: Denial },
}

/// The decision: updated node statuses plus one action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutDecision {
    pub statuses: Vec<NodeStatus>,
    pub action: RolloutAction,
}

/// Back-off after `failures` consecutive failures.
pub fn backoff(failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(10);
    BASE_BACKOFF.saturating_mul(1 << shift).min(MAX_BACKOFF)
}

/// Rank for choosing the next node: lower goes first. A node whose Node is not Ready comes last:
/// no installer pod runs there (#65: it was picked first, as its pods show unready, and every
/// other node's rollout waited behind an installer pod that never ran).
fn rank(node: &NodeView) -> (u8, String) {
    let group = match &node.pod {
        _ if !node.node_ready => 3,
        None => 0,
        _ if node.serves_elsewhere => 0,
        Some(p) if p.blocked.is_some() || !p.ready => 0,
        Some(_) if node.is_leader => 2,
        Some(_) => 1,
    };
    (group, node.name.clone())
}

/// Decides the rollout step.
pub fn decide(
    nodes: &[NodeView],
    latest: i64,
    cluster: &ClusterView,
    lagging: Option<(&str, String)>,
    now: OffsetDateTime,
    missing_pod_grace: time::Duration,
) -> RolloutDecision {
    let mut views: Vec<NodeView> = nodes.to_vec();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    for v in &mut views {
        v.status = observe(v, latest, now, missing_pod_grace);
    }
    let statuses: Vec<NodeStatus> = views.iter().map(|v| v.status.clone()).collect();
    let decision = |action| RolloutDecision {
        statuses: statuses.clone(),
        action,
    };
    if latest == 0 {
        return decision(RolloutAction::Done);
    }
    let mut view = cluster.clone();
    if let Some(moving) = views.iter().find(|v| v.status.target_revision.is_some()) {
        view.rolling_node = Some(moving.name.clone());
        return decision(follow(moving, latest, &view));
    }
    let mut pending: Vec<&NodeView> = views
        .iter()
        .filter(|v| v.status.current_revision < latest && !v.status.runs(latest))
        .collect();
    pending.sort_by_key(|v| rank(v));
    let Some(next) = pending.first() else {
        return decision(RolloutAction::Done);
    };
    if !next.node_ready {
        // Every node left is not Ready: no node is made to move where its installer cannot
        // run, so a later revision still rolls every Ready node.
        return decision(RolloutAction::Wait {
            node: next.name.clone(),
            reason: format!(
                "Node {} is not Ready: no installer pod can run there; it gets revision {latest} once it is Ready",
                next.name
            ),
        });
    }
    let s = &next.status;
    if s.last_failed_revision == Some(latest)
        && let Some(failed_at) = parse_time(&s.last_failed_time)
    {
        let until = failed_at + backoff(s.last_failed_count);
        if now < until {
            return decision(RolloutAction::BackOff {
                node: next.name.clone(),
                revision: latest,
                until,
                reason: format!(
                    "install of revision {latest} failed {} time(s): {}",
                    s.last_failed_count, s.last_failed_reason
                ),
            });
        }
    }
    // The member restarted before must have caught up before the next restart (a restart of the
    // lagging member itself is not held: it may be what brings it back).
    if let Some((member, why)) = lagging
        && member != next.name
    {
        return decision(RolloutAction::Wait {
            node: next.name.clone(),
            reason: format!("{why}; the next restart waits until it has caught up"),
        });
    }
    decision(install_or_deny(next, latest, &view))
}

/// The next action for the node already moving to its target revision.
fn follow(moving: &NodeView, latest: i64, view: &ClusterView) -> RolloutAction {
    let target = moving.status.target_revision.unwrap_or(latest);
    let installer = moving.installer.as_ref().filter(|i| i.revision == target);
    let name = moving.name.clone();
    match installer.map(|i| &i.phase) {
        None => install_or_deny(moving, target, view),
        Some(InstallerPhase::Running) => match installer.map(|i| (i.approval, i.attempt)) {
            Some((RestartApproval::Awaited, attempt)) => {
                approve_or_deny(moving, target, attempt, view)
            }
            Some((RestartApproval::Given, _)) => RolloutAction::Wait {
                node: name,
                reason: format!("installer for revision {target} runs, its restart approved"),
            },
            _ => RolloutAction::Wait {
                node: name,
                reason: format!("installer for revision {target} is starting"),
            },
        },
        Some(InstallerPhase::Succeeded) if target < latest => install_or_deny(moving, latest, view),
        Some(InstallerPhase::Succeeded) => match &moving.pod {
            Some(p) if p.blocked.is_some() && p.revision == target => RolloutAction::Wait {
                node: name,
                reason: format!(
                    "etcd-verify blocks etcd on revision {target}: {}",
                    p.blocked.clone().unwrap_or_default()
                ),
            },
            _ => RolloutAction::Wait {
                node: name,
                reason: format!(
                    "waiting for etcd to serve on revision {target} (its pod Ready, or running with the member healthy)"
                ),
            },
        },
        // Recorded by `observe`, which cleared the target; not reached.
        Some(InstallerPhase::Failed(m)) => RolloutAction::Wait {
            node: name,
            reason: m.clone(),
        },
    }
}

/// The gate asked again for the installer that now runs (its verdict at the pod's creation may
/// no longer hold: #65).
fn approve_or_deny(
    node: &NodeView,
    revision: i64,
    attempt: u32,
    view: &ClusterView,
) -> RolloutAction {
    gated(node, view, || RolloutAction::Approve {
        node: node.name.clone(),
        revision,
        attempt,
    })
}

/// `allowed()` when the quorum gate allows rolling `node`, else the denial.
fn gated(
    node: &NodeView,
    view: &ClusterView,
    allowed: impl FnOnce() -> RolloutAction,
) -> RolloutAction {
    let action = Action::RollNode {
        node: node.name.clone(),
        member: node.member,
    };
    match gate(view, &action) {
        Verdict::Allow => allowed(),
        Verdict::Deny(denial) => RolloutAction::Denied {
            node: node.name.clone(),
            denial,
        },
    }
}

fn install_or_deny(node: &NodeView, revision: i64, view: &ClusterView) -> RolloutAction {
    gated(node, view, || {
        // Past the failures of this revision, and past an installer pod of it still there (the
        // same revision installed again on a node whose etcd pod vanished): its name must be new.
        let s = &node.status;
        let after_failures = if s.last_failed_revision == Some(revision) {
            s.last_failed_count + 1
        } else {
            1
        };
        let after_pod = node
            .installer
            .as_ref()
            .filter(|i| i.revision == revision)
            .map_or(1, |i| i.attempt + 1);
        RolloutAction::Install {
            node: node.name.clone(),
            revision,
            attempt: after_failures.max(after_pod),
        }
    })
}

/// Applies an `Install` to the statuses (sets the node's target).
pub fn with_target(mut statuses: Vec<NodeStatus>, node: &str, revision: i64) -> Vec<NodeStatus> {
    for s in &mut statuses {
        if s.node_name == node {
            s.target_revision = Some(revision);
        }
    }
    statuses
}

/// Runs the installer controller. `add_refused`: membership's learner add that etcd refuses for
/// its health window (membership's hand-off: serving nodes' restarts wait meanwhile);
/// `standby`: the learner membership keeps as a standby (the quorum gate's rule 11).
pub async fn reconcile(
    p: &mut Pass<'_>,
    add_refused: Option<&rollout_hold::AddRefused>,
    standby: Option<MemberId>,
) -> Result<(), ControllerError> {
    let _t = p.ctx.metrics.time(NAME.as_str());
    let mut views: Vec<NodeView> = p.o.node_views(&p.status.node_statuses);
    mark_equivalent(&mut views, p);
    let mut cluster = p.cluster_view();
    cluster.standby = standby;
    let d = decide(
        &views,
        p.status.latest,
        &cluster,
        p.o.etcd.lagging_voter(),
        p.o.now,
        missing_pod_grace(p),
    );
    for s in &d.statuses {
        let before = p
            .status
            .node_statuses
            .iter()
            .find(|b| b.node_name == s.node_name);
        if before.is_some_and(|b| b.current_revision < s.current_revision) {
            p.note(format!(
                "etcd on {} serves revision {}",
                s.node_name, s.current_revision
            ));
            // Controllers before this one may have waited on this node (the quorum gate on a
            // learner add): come back at once rather than after the idle pause.
            p.busy = true;
            p.report.requeue_after = p.report.requeue_after.min(STARTING_REQUEUE);
        }
    }
    p.status.node_statuses = d.statuses;
    node_metrics(p);
    p.conds
        .push(node_problems(&p.status.node_statuses, missing_pod_grace(p)));
    let action = rollout_hold::hold(d.action, &views, add_refused, p.o.now);
    p.next(NAME, describe(&action));
    for line in equivalent_lines(&p.status.node_statuses) {
        p.next(NAME, line);
    }
    for line in p
        .status
        .node_statuses
        .iter()
        .filter_map(|s| missing_pod_line(s, missing_pod_grace(p)))
        .collect::<Vec<_>>()
    {
        p.next(NAME, line);
    }
    act(p, &action).await?;
    if !matches!(action, RolloutAction::Done) {
        p.busy = true;
    }
    if views.iter().any(|v| v.etcd_starting(p.o.now)) {
        p.report.requeue_after = p.report.requeue_after.min(STARTING_REQUEUE);
    }
    let current: BTreeMap<String, i64> = p
        .status
        .node_statuses
        .iter()
        .map(|s| (s.node_name.clone(), s.current_revision))
        .collect();
    let prunable = objects::prunable_installers(&p.inputs.pods, &current);
    if !prunable.is_empty() {
        p.next(
            NAME,
            format!("delete finished installer pods {}", prunable.join(", ")),
        );
    }
    for name in prunable {
        p.w.delete::<Pod>(NS, &name)
            .await
            .map_err(|e| ControllerError::write(NAME, &e))?;
    }
    p.succeeded(NAME);
    Ok(())
}

/// Each node's current revision and the one it is equivalent to (0: none).
fn node_metrics(p: &Pass<'_>) {
    let m = &p.ctx.metrics;
    m.node_current_revision.clear();
    m.node_equivalent_revision.clear();
    for s in &p.status.node_statuses {
        let label = NodeLabel {
            node: s.node_name.clone(),
        };
        let current = m.node_current_revision.get_or_create(&label);
        current.set(s.current_revision);
        let equivalent = m.node_equivalent_revision.get_or_create(&label);
        equivalent.set(s.equivalent_to_revision.unwrap_or(0));
    }
}

/// Marks the nodes whose revision is equivalent to the latest ([`equivalence::equivalent`]),
/// from the revisions' copies: a node whose etcd serves on it, or one already found equivalent
/// to this latest revision whose etcd pod is still on it (a voter rebooting on its revision is
/// not moved while it starts; `etcd-verify` lets its member start there).
fn mark_equivalent(views: &mut [NodeView], p: &Pass<'_>) {
    let latest = p.status.latest;
    for v in views.iter_mut() {
        let s = &v.status;
        let known = (s.equivalent_to_revision == Some(latest)).then_some(s.current_revision);
        let Some(serving) = v.serving_revision().or(known).filter(|r| *r < latest) else {
            continue;
        };
        let target = p.o.nodes.iter().find(|n| n.target.name == v.name);
        let Some(peer_url) = target.and_then(|n| n.target.peer_url().ok()) else {
            continue;
        };
        let started = v.member.filter(|id| {
            p.o.etcd
                .members
                .iter()
                .any(|m| m.id == *id && m.is_started())
        });
        let pod = objects::etcd_pod_of(&p.inputs.pods, &v.name);
        let member = equivalence::RunningMember {
            id: started,
            peer_url: &peer_url,
            serving: Some(serving),
            pod,
        };
        let copies = equivalence::Copies {
            configmaps: &p.inputs.configmaps,
            secrets: &p.inputs.secrets,
        };
        let found = equivalence::equivalent(copies, &v.name, member, latest);
        v.equivalent_to_latest = found.is_ok();
    }
}

fn missing_pod_grace(p: &Pass<'_>) -> time::Duration {
    time::Duration::seconds(i64::from(p.o.spec.missing_pod_grace_seconds))
}

#[cfg(test)]
#[path = "installer_tests.rs"]
mod tests;
