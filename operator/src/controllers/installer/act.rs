//! The I/O half of the rollout: the plan line of the decided action ([`describe`]), and carrying
//! it out ([`act`]): the NodeInstallerProgressing condition, the installer pod with the node's
//! new target revision and its Event, and, once the gate allows the restart again, etcd
//! leadership moved off the leader's node and the installer pod annotated as approved.

use k8s_openapi::api::core::v1::Pod;
use membership::DenyRule;

use super::{NAME, RolloutAction, with_target};
use crate::api::NodeStatus;
use crate::category::Category;
use crate::certs::format_time;
use crate::controller::ControllerError;
use crate::events::EventReason;
use crate::pass::Pass;
use crate::podspec::{STATIC_POD_NAMESPACE as NS, installer_pod_name, render_installer};
use crate::retry::ErrorKind;
use crate::status::{ConditionType as C, Reason};
use etcd_installer::approval::RESTART_APPROVED;

/// The plan line of an action.
pub fn describe(action: &RolloutAction) -> String {
    match action {
        RolloutAction::Done => "every node runs the latest revision".to_owned(),
        RolloutAction::Install {
            node,
            revision,
            attempt,
        } => format!("install revision {revision} on {node} (attempt {attempt})"),
        RolloutAction::Approve { node, revision, .. } => format!(
            "approve the restart of etcd on {node} for revision {revision} (the quorum gate allows it now)"
        ),
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
        RolloutAction::Denied { denial, .. } if denial.rule == DenyRule::LoneVoter => format!(
            "{} (approve with spec.loneVoterRestart.approvedRevision)",
            crate::pass::denied_line(denial)
        ),
        RolloutAction::Denied { denial, .. } => crate::pass::denied_line(denial),
    }
}

pub(super) async fn act(p: &mut Pass<'_>, action: &RolloutAction) -> Result<(), ControllerError> {
    let progressing = C::NodeInstallerProgressing;
    let lone = matches!(action, RolloutAction::Denied { denial, .. } if denial.rule == DenyRule::LoneVoter);
    p.ctx
        .metrics
        .lone_voter_restart_pending
        .set(if lone { p.status.latest } else { 0 });
    match action {
        RolloutAction::Done => {
            let message = done_message(&p.status.node_statuses);
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
        } => install(p, node, *revision, *attempt).await?,
        RolloutAction::Approve {
            node,
            revision,
            attempt,
        } => approve(p, node, *revision, *attempt).await?,
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
        RolloutAction::Denied { node, denial } if lone => {
            let what = format!(
                "{node}: revision {} waits (approve with spec.loneVoterRestart.approvedRevision: {})",
                p.status.latest, p.status.latest
            );
            p.denied(progressing, what, denial);
        }
        RolloutAction::Denied { node, denial } => p.denied(progressing, node.clone(), denial),
    }
    Ok(())
}

/// NodeInstallerProgressing's message once every node has the latest revision.
fn done_message(statuses: &[NodeStatus]) -> String {
    let missing: Vec<&str> = statuses
        .iter()
        .filter(|s| !s.etcd_pod_missing_since.is_empty())
        .map(|s| s.node_name.as_str())
        .collect();
    if missing.is_empty() {
        "every node runs the latest revision".to_owned()
    } else {
        format!(
            "the latest revision is installed on every node, but {} show(s) no etcd pod (see NodeInstallerDegraded)",
            missing.join(", ")
        )
    }
}

/// Creates `node`'s installer pod for `revision`.
async fn install(
    p: &mut Pass<'_>,
    node: &str,
    revision: i64,
    attempt: u32,
) -> Result<(), ControllerError> {
    let pod: Pod =
        render_installer(node, revision, attempt, &p.ctx.config.images).map_err(|e| {
            ControllerError::new(NAME, ErrorKind::Permanent, Category::Render, e.to_string())
        })?;
    p.w.create(NS, &pod)
        .await
        .map_err(|e| ControllerError::write(NAME, &e))?;
    p.status.node_statuses =
        with_target(std::mem::take(&mut p.status.node_statuses), node, revision);
    let line = format!("installing revision {revision} on {node} (attempt {attempt})");
    p.note(line.clone());
    p.event(EventReason::InstallerPodCreated, line).await;
    let message = format!("installing revision {revision} on {node}");
    p.cond(
        C::NodeInstallerProgressing,
        true,
        Reason::Installing,
        message,
    );
    Ok(())
}

/// Moves leadership off `node`, then approves its installer's restart of etcd.
async fn approve(
    p: &mut Pass<'_>,
    node: &str,
    revision: i64,
    attempt: u32,
) -> Result<(), ControllerError> {
    let member = p.o.by_node.get(node).copied();
    p.move_leadership_off(member, "restarting its node").await;
    let name = installer_pod_name(node, revision, attempt);
    p.w.annotate::<Pod>(NS, &name, RESTART_APPROVED, &format_time(p.o.now))
        .await
        .map_err(|e| ControllerError::write(NAME, &e))?;
    p.note(format!(
        "approved the restart of etcd on {node} for revision {revision} ({name})"
    ));
    p.cond(
        C::NodeInstallerProgressing,
        true,
        Reason::Installing,
        format!("installing revision {revision} on {node}: restart approved"),
    );
    Ok(())
}
