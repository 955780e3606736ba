//! The rollouts `restore-from-backup` makes after its backup: the nodes then run revisions the
//! restored API never saw (#65).

use super::SETTLE;
use crate::controlplane::ControlPlaneError;
use crate::scenario::harness::Harness;

/// After the snapshot, `times` forced redeployments, each rolled to every node: the nodes then
/// run a revision numbered above every one the snapshot (and so the restored API) knows of.
pub(super) async fn revisions_move_on(
    h: &mut Harness,
    times: usize,
) -> Result<(), ControlPlaneError> {
    let from = h.status().await.latest_available_revision;
    for i in 1..=times {
        let latest = h.status().await.latest_available_revision;
        let reason = format!("after the snapshot, rollout {i}");
        h.patch_spec(serde_json::json!({ "forceRedeploymentReason": reason }))
            .await?;
        h.wait_settled_after(3, latest, SETTLE).await?;
    }
    let to = h.status().await.latest_available_revision;
    h.step(format!(
        "{times} forced rollouts after the snapshot: every node moved from revision {from} to {to}, which the restored API will not know of"
    ));
    Ok(())
}
