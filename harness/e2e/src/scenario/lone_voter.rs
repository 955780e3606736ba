//! The `lone-voter-restart` scenario (issue 31, item 3): a one-node control plane. Its only voter
//! cannot restart without stopping etcd, so the quorum gate (rule 11) holds the first revision on
//! n1, which keeps its bootstrap manifest: `NodeInstallerProgressing` names the revision and the
//! field that approves it, `etcd-operator plan` prints the same. The admin approves the outage
//! (`spec.loneVoterRestart.approvedRevision`); n1 restarts into the revision, writes fail for
//! the outage and none acknowledged is lost, and `status.members` shows it serving the client
//! certificate of that revision (read from a TLS handshake). Then n2 joins as the standby
//! learner (#65): a forced redeployment holds n1 for an approval as on one node, and rolls it
//! once approved (before, the standby made the gate wait for voters that never come). Then n3
//! joins, and a forced redeployment rolls all three without any approval: with three voters
//! every restart keeps quorum.

use std::time::Duration;

use etcd_operator::api::EtcdClusterStatus;

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;
use crate::view::settled_with_standby;

const DEADLINE: Duration = Duration::from_secs(240);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// The installer's condition while the gate holds a lone voter's restart.
fn held(s: &EtcdClusterStatus) -> Option<String> {
    s.conditions
        .iter()
        .find(|c| {
            c.type_ == "NodeInstallerProgressing"
                && c.reason == "WaitingForQuorumGate"
                && c.message.contains("spec.loneVoterRestart.approvedRevision")
        })
        .map(|c| c.message.clone())
}

/// What n1 serves (`status.members`) and the expiry of its client certificate in the Secret.
fn served(s: &EtcdClusterStatus) -> Option<(String, String)> {
    let serves = s
        .members
        .iter()
        .find(|m| m.name == "n1")?
        .serving_certificate_expiry
        .clone();
    let issued = s
        .certificates
        .as_ref()?
        .leaves
        .iter()
        .find(|l| l.name.ends_with("/etcd-serving-n1.crt"))?
        .not_after
        .clone();
    (!serves.is_empty()).then_some((serves, issued))
}

fn n1_revision(s: &EtcdClusterStatus) -> i64 {
    s.node_statuses
        .iter()
        .find(|n| n.node_name == "n1")
        .map_or(0, |n| n.current_revision)
}

pub async fn lone_voter_restart(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let s = h
        .wait_status("n1's restart held for an approval", DEADLINE, |s| {
            held(s).is_some() && s.latest_available_revision > 0
        })
        .await?;
    let latest = s.latest_available_revision;
    if n1_revision(&s) >= latest {
        return Err(failed(format!(
            "n1 already runs revision {latest} unapproved"
        )));
    }
    h.step(format!("held: {}", held(&s).unwrap_or_default()));
    let plan = h.plan().await?;
    let line = plan.lines().find(|l| l.contains("[lone_voter]"));
    h.step(format!("plan: {}", line.unwrap_or("no lone_voter line")));
    if line.is_none() {
        return Err(failed(format!(
            "plan does not name the lone voter:\n{plan}"
        )));
    }
    h.patch_spec(serde_json::json!({"loneVoterRestart": {"approvedRevision": latest}}))
        .await?;
    h.wait_settled(1, DEADLINE).await?;
    h.step(format!("n1 restarted into revision {latest} once approved"));
    let s = h
        .wait_status(
            "n1 serves the client certificate of its revision (a TLS handshake shows it)",
            DEADLINE,
            |s| served(s).is_some_and(|(serves, issued)| serves == issued),
        )
        .await?;
    let (serves, _) = served(&s).unwrap_or_default();
    h.step(format!(
        "n1 serves etcd-all-certs/etcd-serving-n1.crt, expiring {serves}"
    ));
    lone_upgrade(h).await?;
    two_nodes(h).await?;
    h.cp.add_node("n3").await?;
    h.wait_settled(3, DEADLINE).await?;
    let before = h.status().await.latest_available_revision;
    h.patch_spec(serde_json::json!({"forceRedeploymentReason": "three voters need no approval"}))
        .await?;
    h.wait_settled_after(3, before, DEADLINE).await?;
    h.step("n3 joined; a forced redeployment rolled all three without approval");
    Ok(())
}

/// kubeadm#3297: kubeadm verified a one-node stacked etcd upgrade through the API that the
/// restarting etcd itself serves. Here the API is served from n1's etcd too: the image moves to
/// 3.7.3, the next minor (#66: the default is 3.6.16; the move first waits until n1 snapshotted
/// past what 3.5 could have written, `etcd_version::minor_log`), the restart is held
/// for an approval, and once approved n1 restarts onto it with the API down meanwhile; the
/// operator, which cannot see anything while the API is down, picks up where it was when the
/// API returns and reports the member on 3.7.3 and the node settled. Nothing is rolled back.
async fn lone_upgrade(h: &mut Harness) -> Result<(), ControlPlaneError> {
    const PATCH: &str = "etcd-static-operator/etcd:3.7.3";
    if let Err(e) = kubelet_standin::images::ImageTable::standard(&h.cp.bin_dir).lookup(PATCH) {
        let why = format!("SKIPPED the lone voter's upgrade to {PATCH}: {e}");
        eprintln!("lone-voter-restart: {why}");
        h.step(why);
        return Ok(());
    }
    let before = h.status().await.latest_available_revision;
    h.patch_spec(serde_json::json!({ "etcdImage": PATCH }))
        .await?;
    let s = h
        .wait_status(
            "the upgrade's restart held for an approval",
            DEADLINE,
            |s| held(s).is_some() && s.latest_available_revision > before,
        )
        .await?;
    let latest = s.latest_available_revision;
    h.patch_spec(serde_json::json!({"loneVoterRestart": {"approvedRevision": latest}}))
        .await?;
    let s = h
        .wait_status(
            &format!("n1 on revision {latest}, its member reporting 3.7.3"),
            DEADLINE,
            |s| {
                crate::view::settled(s, 1)
                    && n1_revision(s) >= latest
                    && s.members
                        .iter()
                        .any(|m| m.name == "n1" && m.version == "3.7.3")
            },
        )
        .await?;
    h.step(format!(
        "approved, n1 restarted onto 3.7.3 through the outage of the API it serves; revision {}",
        n1_revision(&s)
    ));
    Ok(())
}

/// #65: n2 joins as the standby learner (two nodes keep one voter). A forced redeployment rolls
/// n2 and holds n1 for an approval as on one node; approved, n1 restarts into it. Before #65 the
/// standby made the gate wait for voters that never come, approved or not.
async fn two_nodes(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.cp.add_node("n2").await?;
    let s = h
        .wait_status("n2 the standby learner beside n1", DEADLINE, |s| {
            settled_with_standby(s, 1, 1)
        })
        .await?;
    h.step("n2 joined as the standby learner: one voter on two nodes");
    let before = s.latest_available_revision;
    h.patch_spec(serde_json::json!({"forceRedeploymentReason": "two nodes, one voter"}))
        .await?;
    let s = h
        .wait_status("n1's restart held for an approval again", DEADLINE, |s| {
            held(s).is_some() && s.latest_available_revision > before
        })
        .await?;
    let latest = s.latest_available_revision;
    h.step(format!(
        "held beside the standby: {}",
        held(&s).unwrap_or_default()
    ));
    h.patch_spec(serde_json::json!({"loneVoterRestart": {"approvedRevision": latest}}))
        .await?;
    h.wait_status(
        &format!("n1 and n2 on revision {latest}, n2 still the standby"),
        DEADLINE,
        |s| settled_with_standby(s, 1, 1) && s.latest_available_revision == latest,
    )
    .await?;
    h.step(format!(
        "approved: n1 restarted into revision {latest} beside the standby"
    ));
    Ok(())
}
