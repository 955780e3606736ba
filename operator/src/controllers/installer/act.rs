//! The I/O half of the rollout: the plan line of the decided action ([`describe`]), and carrying
//! it out ([`act`]): the NodeInstallerProgressing condition, the installer pod with the node's
//! new target revision and its Event, and etcd leadership moved off the leader's node before
//! that node restarts.

use k8s_openapi::api::core::v1::Pod;

use super::{NAME, RolloutAction, with_target};
use crate::certs::format_time;
use crate::controllers::ControllerError;
use crate::pass::Pass;
use crate::podspec::{STATIC_POD_NAMESPACE as NS, render_installer};
use crate::retry::ErrorKind;
use crate::status::{ConditionType as C, Reason};

/// The plan line of an action.
pub fn describe(action: &RolloutAction) -> String {
    match action {
        RolloutAction::Done => "every node runs the latest revision".to_owned(),
        RolloutAction::Install {
            node,
            revision,
            attempt,
        } => format!("install revision {revision} on {node} (attempt {attempt})"),
        RolloutAction::Wait { node, reason } => format!("waiting: {node}: {reason}"),
        RolloutAction::BackOff {
            node,
            reason,
            until,
            ..
        } => format!(
            "backing off: {node}: {reason}; next try after {}",
            format_time(*until)
        ),
        RolloutAction::Denied { denial, .. } => crate::pass::denied_line(denial),
    }
}

pub(super) async fn act(p: &mut Pass<'_>, action: &RolloutAction) -> Result<(), ControllerError> {
    let progressing = C::NodeInstallerProgressing;
    match action {
        RolloutAction::Done => {
            let missing: Vec<&str> = p
                .node_statuses
                .iter()
                .filter(|s| !s.etcd_pod_missing_since.is_empty())
                .map(|s| s.node_name.as_str())
                .collect();
            let message = if missing.is_empty() {
                "every node runs the latest revision".to_owned()
            } else {
                format!(
                    "the latest revision is installed on every node, but {} show(s) no etcd pod (see NodeInstallerDegraded)",
                    missing.join(", ")
                )
            };
            p.cond(
                progressing,
                false,
                Reason::AllNodesAtLatestRevision,
                message,
            );
        }
        RolloutAction::Install {
            node,
            revision,
            attempt,
        } => {
            move_leadership_off(p, node).await;
            let pod: Pod = render_installer(node, *revision, *attempt, &p.ctx.config.images)
                .map_err(|e| {
                    ControllerError::new(NAME, ErrorKind::Permanent, "render", e.to_string())
                })?;
            p.w.create(NS, &pod)
                .await
                .map_err(|e| ControllerError::write(NAME, &e))?;
            p.node_statuses = with_target(std::mem::take(&mut p.node_statuses), node, *revision);
            let line = format!("installing revision {revision} on {node} (attempt {attempt})");
            p.note(line.clone());
            p.event(false, "InstallerPodCreated", line).await;
            let message = format!("installing revision {revision} on {node}");
            p.cond(progressing, true, Reason::Installing, message);
        }
        RolloutAction::Wait { node, reason } => {
            p.cond(
                progressing,
                true,
                Reason::Waiting,
                format!("{node}: {reason}"),
            );
            p.note(format!("{node}: {reason}"));
        }
        RolloutAction::BackOff {
            node,
            until,
            reason,
            ..
        } => {
            let message = format!("{node}: {reason}; retrying after {}", format_time(*until));
            p.cond(progressing, true, Reason::BackingOff, message);
            p.note(format!("{node}: backing off: {reason}"));
        }
        RolloutAction::Denied { node, denial } => p.denied(progressing, node.clone(), denial),
    }
    Ok(())
}

/// Before the leader's node is restarted, hands leadership to the healthy voter with the
/// highest raft index, so the restart costs no election. A failure is logged and the restart
/// goes on: etcd also transfers leadership when it is stopped gracefully.
async fn move_leadership_off(p: &mut Pass<'_>, node: &str) {
    if p.w.dry_run() {
        return;
    }
    let member = p.o.by_node.get(node).copied();
    let (Some((url, target)), Some(leader)) =
        (p.o.etcd.leadership_handover(member), p.o.etcd.leader)
    else {
        return;
    };
    let Some(client) = p.st.etcd.current() else {
        return;
    };
    match client.move_leader(&url, target).await {
        Ok(()) => {
            p.note(format!(
                "moved etcd leadership from {leader} to {target} before restarting its node"
            ));
            let note = format!(
                "moved leadership from {leader} to {target} before restarting the leader's node"
            );
            p.event(false, "LeaderMoved", note).await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not move leadership before restarting the leader")
        }
    }
}
