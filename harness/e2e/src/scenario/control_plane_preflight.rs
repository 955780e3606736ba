//! The forced-rollout phase of `api-availability` on the stacked control plane (issue 33, item
//! 4): the quorum gate's control-plane preflight. n2's kube-scheduler manifest is moved out of its manifests
//! directory (its node agent stops the pod, the mirror pod goes), then a redeployment is
//! forced. Restarting n2's own etcd is allowed; restarting n1's or n3's must wait, with the
//! denial naming the missing scheduler on a condition, until the manifest is back; then the
//! rollout finishes on every node.

use std::time::Duration;

use etcd_operator::api::EtcdClusterStatus;

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;

/// Plus [`Harness::control_plane_slack`] (it runs only on the stacked control plane).
const DEADLINE: Duration = Duration::from_secs(240);
const MANIFEST: &str = "kube-scheduler.json";
const NAMED: &str = "missing: kube-scheduler on n2";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// The message of a condition held by the quorum gate for the missing scheduler.
fn held_for_scheduler(s: &EtcdClusterStatus) -> Option<String> {
    s.conditions
        .iter()
        .find(|c| c.reason == "WaitingForQuorumGate" && c.message.contains(NAMED))
        .map(|c| format!("{}: {}", c.type_, c.message))
}

fn rolled_out(s: &EtcdClusterStatus, revision: i64) -> bool {
    !s.node_statuses.is_empty()
        && s.node_statuses
            .iter()
            .all(|n| n.current_revision >= revision && n.target_revision.is_none())
}

pub async fn held_while_a_scheduler_is_missing(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let dir = h.cp.node("n2")?.manifest_dir();
    let (manifest, aside) = (
        dir.join(MANIFEST),
        dir.with_file_name("kube-scheduler.json.aside"),
    );
    std::fs::rename(&manifest, &aside)
        .map_err(|e| failed(format!("moving {}: {e}", manifest.display())))?;
    h.step("n2's kube-scheduler manifest moved out of its manifests directory");
    let deadline = DEADLINE + h.control_plane_slack();
    let revision = h.status().await.latest_available_revision + 1;
    h.patch_spec(serde_json::json!({"forceRedeploymentReason": "control-plane preflight"}))
        .await?;
    let held = h
        .wait_status("a restart held for n2's kube-scheduler", deadline, |s| {
            held_for_scheduler(s).is_some()
        })
        .await?;
    if rolled_out(&held, revision) {
        return Err(failed(
            "the rollout finished while n2's kube-scheduler was missing",
        ));
    }
    let line = held_for_scheduler(&held).unwrap_or_default();
    h.step(format!("held by the gate: {line}"));
    std::fs::rename(&aside, &manifest)
        .map_err(|e| failed(format!("restoring {}: {e}", manifest.display())))?;
    h.step("n2's kube-scheduler manifest restored");
    h.wait_status("the forced rollout finished on every node", deadline, |s| {
        rolled_out(s, revision)
    })
    .await?;
    h.step(format!(
        "revision {revision} rolled out once the scheduler was back"
    ));
    Ok(())
}
