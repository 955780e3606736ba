//! The `not-ready-node` scenario (#65, item 2): a node that is down must not hold every other
//! node's rollout.
//!
//! 1. Five voters (n4 and n5 join the three), settled.
//! 2. n5 powers off: its Node turns `Ready=Unknown`, its member unhealthy. Four healthy voters of
//!    five still tolerate one more restart, so a new revision can roll n1..n4.
//! 3. A forced redeployment: n1..n4 move to the new revision one by one; n5 is never made to
//!    move (no installer pod can run there) and `NodeInstallerProgressing` names it. Before #65
//!    the unready node ranked first, its installer pod was created and never ran, and no other
//!    node moved: a certificate renewal or an upgrade waited for a dead machine.
//! 4. n5 powers on, gets the revision, and five voters are settled.

use std::time::Duration;

use etcd_operator::api::EtcdClusterStatus;

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;

const SETTLE: Duration = Duration::from_secs(240);
const READY: [&str; 4] = ["n1", "n2", "n3", "n4"];

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn revision_of(s: &EtcdClusterStatus, node: &str) -> i64 {
    s.node_statuses
        .iter()
        .find(|n| n.node_name == node)
        .map_or(0, |n| n.current_revision)
}

/// The installer's condition naming n5 as not Ready.
fn n5_waits(s: &EtcdClusterStatus) -> Option<String> {
    s.conditions
        .iter()
        .find(|c| c.type_ == "NodeInstallerProgressing" && c.message.contains("n5 is not Ready"))
        .map(|c| c.message.clone())
}

pub async fn not_ready_node(h: &mut Harness) -> Result<(), ControlPlaneError> {
    for n in ["n4", "n5"] {
        h.cp.add_node(n).await?;
    }
    h.wait_settled(5, SETTLE).await?;
    h.cp.stop_node("n5").await?;
    h.step("n5 powered off");
    h.wait_status("n5's member unhealthy", SETTLE, |s| {
        s.members.iter().any(|m| m.name == "n5" && !m.healthy)
    })
    .await?;
    let before = h.status().await.latest_available_revision;
    h.patch_spec(serde_json::json!({"forceRedeploymentReason": "n5 is down"}))
        .await?;
    let s = h
        .wait_status(
            "n1..n4 on a revision newer than the one before, n5 named as not Ready",
            SETTLE,
            |s| {
                let latest = s.latest_available_revision;
                latest > before
                    && READY.iter().all(|n| revision_of(s, n) == latest)
                    && n5_waits(s).is_some()
            },
        )
        .await?;
    let latest = s.latest_available_revision;
    if revision_of(&s, "n5") >= latest {
        return Err(failed(format!(
            "n5 runs revision {latest} while powered off"
        )));
    }
    h.step(format!(
        "n1..n4 rolled to revision {latest} while n5 is down: {}",
        n5_waits(&s).unwrap_or_default()
    ));
    h.cp.restart_node("n5").await?;
    h.step("n5 powered on");
    h.wait_status(
        &format!("five voters, n5's etcd serving revision {latest}"),
        SETTLE,
        |s| crate::view::settled(s, 5) && revision_of(s, "n5") == latest,
    )
    .await?;
    let manifest = h.cp.node("n5")?.manifest_dir().join("etcd-pod.yaml");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| failed(format!("reading {}: {e}", manifest.display())))?;
    if !text.contains(&format!("revision: \"{latest}\"")) {
        return Err(failed(format!(
            "{} is not revision {latest}",
            manifest.display()
        )));
    }
    h.step(format!(
        "n5 got revision {latest} once Ready (its manifest on disk says so): five voters"
    ));
    Ok(())
}
