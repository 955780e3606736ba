//! `NodeInstallerDegraded`, a pure helper of the installer controller: the nodes whose newest
//! revision failed to install, and the nodes that ran a revision and show no etcd static pod,
//! each with what it means and what the rollout does next (install again after the grace
//! period, or leave it while an admin's `etcd.static-operator.io/etcd-stopped` holds it).

use crate::api::NodeStatus;
use crate::certs::{format_time, parse_time};
use crate::observed::objects::ETCD_STOPPED_ANNOTATION;
use crate::status::{Computed, ConditionType as C, Reason};

/// `NodeInstallerDegraded`: nodes whose newest revision failed, and nodes that show no etcd
/// pod (why, and what the operator does about it).
pub fn node_problems(statuses: &[NodeStatus], grace: time::Duration) -> Computed {
    let failed = statuses.iter().filter(|s| {
        s.last_failed_revision.is_some() && s.last_failed_revision > Some(s.current_revision)
    });
    let mut problems: Vec<String> = failed
        .map(|s| {
            format!(
                "{} failed revision {} {} time(s): {}",
                s.node_name,
                s.last_failed_revision.unwrap_or_default(),
                s.last_failed_count,
                s.last_failed_reason
            )
        })
        .collect();
    // A failed install is the reason when there is one; otherwise it is the missing pods.
    let reason = if problems.is_empty() {
        Reason::EtcdPodMissing
    } else {
        Reason::InstallerFailed
    };
    problems.extend(statuses.iter().filter_map(|s| missing_pod_line(s, grace)));
    Computed::from_problems(C::NodeInstallerDegraded, reason, &problems)
}

/// What a node without its etcd pod means and what happens next.
pub(super) fn missing_pod_line(s: &NodeStatus, grace: time::Duration) -> Option<String> {
    let since = parse_time(&s.etcd_pod_missing_since)?;
    let what = format!(
        "{} shows no etcd static pod since {} (its manifest was moved out of the node's manifests directory, or its kubelet lost it)",
        s.node_name, s.etcd_pod_missing_since
    );
    Some(if !s.etcd_stopped_by_admin.is_empty() {
        format!(
            "{what}; stopped by an admin ({ETCD_STOPPED_ANNOTATION}: {}): not installed again until the annotation is removed",
            s.etcd_stopped_by_admin
        )
    } else if s.current_revision == 0 {
        format!("{what}; its revision is being installed again")
    } else {
        format!(
            "{what}; revision {} is installed again at {} unless the Node is annotated {ETCD_STOPPED_ANNOTATION}",
            s.current_revision,
            format_time(since + grace)
        )
    })
}
