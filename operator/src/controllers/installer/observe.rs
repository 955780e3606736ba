//! The rollout's first half, pure: what a node's status becomes from what is observed of it (its
//! pods, its installer, its etcd), before the rollout picks its one action.

use time::OffsetDateTime;

use super::{InstallerPhase, NodeView};
use crate::api::NodeStatus;
use crate::certs::{format_time, parse_time};

/// Folds observations into a node's status. A node that ran a revision and shows no etcd pod
/// (not while it is being moved) is recorded with the time it was first seen so; past `grace`,
/// on a Ready node no admin marked as stopped, nothing runs there, so its current revision is 0
/// and the rollout installs the latest again.
pub(super) fn observe(
    node: &NodeView,
    latest: i64,
    now: OffsetDateTime,
    grace: time::Duration,
) -> NodeStatus {
    let mut s = node.status.clone();
    s.node_name = node.name.clone();
    s.etcd_stopped_by_admin = node.etcd_stopped.clone().unwrap_or_default();
    if node.pod.is_some() {
        s.etcd_pod_missing_since.clear();
    } else if s.etcd_pod_missing_since.is_empty()
        && s.target_revision.is_none()
        && s.current_revision > 0
    {
        s.etcd_pod_missing_since = format_time(now);
    }
    let reinstall = node.pod.is_none()
        && node.node_ready
        && node.etcd_stopped.is_none()
        && parse_time(&s.etcd_pod_missing_since).is_some_and(|since| now - since >= grace);
    if reinstall {
        s.current_revision = 0;
    }
    if let Some(revision) = node.serving_revision()
        && revision > s.current_revision
    {
        s.current_revision = revision;
    }
    // A node without a member (its member removed, no learner added yet) has nothing to serve:
    // it is on the revision its pod runs, where `etcd-verify` archives the removed member's data
    // and waits. It holds no other node's move meanwhile.
    if node.member.is_none()
        && let Some(pod) = &node.pod
        && pod.revision > s.current_revision
    {
        s.current_revision = pod.revision;
    }
    // An installer for a newer revision is a move in flight even if its target was never written
    // (the operator crashed between creating the pod and writing status).
    // Not the installer that put the vanished pod's revision there before it vanished.
    if s.target_revision.is_none()
        && let Some(inst) = &node.installer
        && inst.revision > s.current_revision
        && !(s.last_failed_revision == Some(inst.revision) && s.last_failed_count >= inst.attempt)
        && !(reinstall && inst.phase == InstallerPhase::Succeeded)
    {
        s.target_revision = Some(inst.revision);
    }
    if s.target_revision.is_some_and(|t| t <= s.current_revision) {
        s.target_revision = None;
    }
    if let (Some(target), Some(inst)) = (s.target_revision, &node.installer)
        && inst.revision == target
        && let InstallerPhase::Failed(message) = &inst.phase
    {
        let already = s.last_failed_revision == Some(target) && s.last_failed_count >= inst.attempt;
        if !already {
            s.last_failed_revision = Some(target);
            s.last_failed_count = inst.attempt;
            s.last_failed_reason = message.clone();
            s.last_failed_time = format_time(now);
        }
        s.target_revision = None;
    }
    // A node without its pod keeps it until the missing-pod rule reinstalls it (current 0).
    let on_current = node
        .pod
        .as_ref()
        .is_none_or(|p| p.revision == s.current_revision);
    s.equivalent_to_revision = (node.equivalent_to_latest
        && s.target_revision.is_none()
        && s.current_revision > 0
        && s.current_revision < latest
        && on_current)
        .then_some(latest);
    s
}
