//! The `upgrade` scenario: etcd 3.4 → 3.5 across three nodes under write load. The image first
//! names 3.5.1, a known-bad release: refused until the spec accepts it by name. Then the new
//! revision rolls node by node (never two at once, each member caught up before the next, the
//! leader's node last), every member comes back on 3.5.1, and etcd moves the cluster version to
//! 3.5, which the operator reports in `status.etcdVersion`. Going back to 3.4 is then refused
//! before anything restarts: etcd cannot run a 3.5 cluster on a 3.4 binary.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_operator::api::EtcdClusterStatus;

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;

const FROM: &str = "etcd-static-operator/etcd:3.4.23";
const TO: &str = "etcd-static-operator/etcd:3.5.1";
const SETTLE: Duration = Duration::from_secs(300);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn refused_with(s: &EtcdClusterStatus, image: &str, says: &str) -> bool {
    s.conditions.iter().any(|c| {
        c.type_ == "TargetConfigControllerDegraded"
            && c.status == "True"
            && c.message.contains(image)
            && c.message.contains(says)
    })
}

fn versions(s: &EtcdClusterStatus) -> BTreeMap<String, String> {
    s.members
        .iter()
        .map(|m| (m.name.clone(), m.version.clone()))
        .collect()
}

fn cluster_version(s: &EtcdClusterStatus) -> &str {
    s.etcd_version
        .as_ref()
        .map_or("", |v| v.cluster_version.as_str())
}

pub async fn upgrade(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let revision = before.latest_available_revision;
    if cluster_version(&before) != "3.4.0" {
        return Err(failed(format!(
            "before the upgrade status.etcdVersion is {:?}, expected cluster version 3.4.0",
            before.etcd_version
        )));
    }
    h.patch_spec(serde_json::json!({ "etcdImage": TO })).await?;
    let s = h
        .wait_status("3.5.1 refused as a known-bad release", SETTLE, |s| {
            refused_with(s, TO, "acceptKnownBadEtcdRelease is \"3.5.1\"")
        })
        .await?;
    if s.latest_available_revision != revision {
        return Err(failed("a revision was created for a refused image"));
    }
    h.patch_spec(serde_json::json!({ "acceptKnownBadEtcdRelease": "3.5.1" }))
        .await?;
    let rolled = watch_rollout(h, revision + 1).await?;
    let upgraded_at = Instant::now();
    let s = h
        .wait_status("etcd moved the cluster version to 3.5", SETTLE, |s| {
            cluster_version(s).starts_with("3.5.")
                && s.etcd_version
                    .as_ref()
                    .is_some_and(|v| v.state == "AtTarget")
        })
        .await?;
    let v = s.etcd_version.clone().unwrap_or_default();
    h.step(format!(
        "cluster version {} (was {}), reported {:.1}s after the last member ran 3.5.1: {}",
        v.cluster_version,
        v.previous_cluster_version,
        upgraded_at.elapsed().as_secs_f64(),
        v.message
    ));
    if rolled.len() != 3 {
        return Err(failed(format!("expected 3 nodes rolled, saw {rolled:?}")));
    }
    h.patch_spec(serde_json::json!({ "etcdImage": FROM }))
        .await?;
    let s = h
        .wait_status("the downgrade to 3.4 refused", SETTLE, |s| {
            refused_with(s, FROM, "below the cluster version 3.5")
        })
        .await?;
    if s.latest_available_revision != revision + 1 {
        return Err(failed(format!(
            "the refused downgrade changed the revision: {} (expected {})",
            s.latest_available_revision,
            revision + 1
        )));
    }
    let still = versions(&s);
    if still.values().any(|v| v != "3.5.1") {
        return Err(failed(format!("a member left 3.5.1: {still:?}")));
    }
    h.patch_spec(serde_json::json!({ "etcdImage": TO })).await?;
    h.wait_status("the refusal cleared, back on 3.5.1", SETTLE, |s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "TargetConfigControllerDegraded" && c.status == "False")
            && crate::view::settled(s, 3)
    })
    .await?;
    Ok(())
}

/// Follows the rollout to `revision` until every node runs it and every member reports 3.5.1:
/// never two nodes moving at once, and the node that starts moving is never the leader's while
/// another node still waits (the leader goes last). Returns the nodes in the order they moved.
async fn watch_rollout(h: &mut Harness, revision: i64) -> Result<Vec<String>, ControlPlaneError> {
    let started = Instant::now();
    let mut order: Vec<String> = Vec::new();
    let mut seen_versions = BTreeMap::new();
    loop {
        let s = h.status().await;
        let moving: Vec<&str> = s
            .node_statuses
            .iter()
            .filter(|n| n.target_revision == Some(revision))
            .map(|n| n.node_name.as_str())
            .collect();
        if moving.len() > 1 {
            return Err(failed(format!("{moving:?} were moving at once")));
        }
        if let Some(node) = moving.first()
            && !order.iter().any(|o| o == node)
        {
            let leader = s.members.iter().any(|m| m.name == *node && m.leader);
            let waiting = s
                .node_statuses
                .iter()
                .filter(|n| n.current_revision < revision && n.node_name != *node)
                .count();
            if leader && waiting > 0 {
                return Err(failed(format!(
                    "{node} (the leader) started moving while {waiting} node(s) still waited"
                )));
            }
            order.push((*node).to_owned());
            let leader = s
                .members
                .iter()
                .find(|m| m.leader)
                .map_or("unknown", |m| m.name.as_str());
            h.step(format!(
                "{node} moves to revision {revision} (leader {leader}, {waiting} node(s) after it)"
            ));
        }
        let now = versions(&s);
        for (name, v) in &now {
            if seen_versions.get(name) != Some(v) && !v.is_empty() {
                h.step(format!("{name} runs etcd {v}"));
                seen_versions.insert(name.clone(), v.clone());
            }
        }
        let done = crate::view::settled(&s, 3)
            && s.latest_available_revision == revision
            && now.values().all(|v| v == "3.5.1");
        if done {
            for n in &s.node_statuses {
                if !order.contains(&n.node_name) {
                    order.push(n.node_name.clone());
                }
            }
            return Ok(order);
        }
        if started.elapsed() > SETTLE {
            return Err(failed(format!(
                "the upgrade did not finish in {SETTLE:?}; moved so far: {order:?}; versions {now:?}\n{}",
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
