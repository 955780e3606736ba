//! The `upgrade` scenario: etcd 3.4 → 3.5 across three nodes under write load. The cluster
//! starts on 3.4.23 ([`FROM`], given to `render` and the operator as their etcd image); the
//! image moves to 3.5.16 and the new revision rolls node by node (never two at once, each member
//! caught up before the next, the leader's node last), every member comes back on 3.5.16, and
//! etcd moves the cluster version to 3.5, which the operator reports in `status.etcdVersion`.
//! Then a patch upgrade to 3.5.30 rolls the same way when that optional build is installed
//! (skipped, loudly, when not). 3.5.1 is refused as a known-bad release (it is also below the
//! running patch; the known-bad policy is the reason the operator gives), and going back to 3.4
//! is refused as below the cluster version: etcd cannot run a 3.5 cluster on a 3.4 binary. No
//! refusal makes a revision. [`upgrade_minors`] goes on from the newest 3.5 to 3.6 and 3.7.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_operator::api::EtcdClusterStatus;
use kubelet_standin::images::ImageTable;

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;

/// The etcd image the scenario's cluster starts on.
pub const FROM: &str = "etcd-static-operator/etcd:3.4.23";
const TO: &str = "etcd-static-operator/etcd:3.5.16";
/// The patch upgrade, when `scripts/install-deps` installed that optional build.
const PATCH: &str = "etcd-static-operator/etcd:3.5.30";
/// The newest 3.5 (built from etcd's Go modules), past the patch floor 3.6 asks of 3.5: where
/// `upgrade-minors` starts.
pub const NEWEST_35: &str = "etcd-static-operator/etcd:3.5.36";
/// The minor upgrade.
const V36: &str = "etcd-static-operator/etcd:3.6.16";
/// The next one, right after.
const V37: &str = "etcd-static-operator/etcd:3.7.3";
/// A known-bad release, below the running patch as well.
const KNOWN_BAD: &str = "etcd-static-operator/etcd:3.5.1";
/// The condition reason of every refusal of the version policy (its error category).
const VERSION_REFUSED: &str = "EtcdVersionRefused";
const SETTLE: Duration = Duration::from_secs(300);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn refused_with(s: &EtcdClusterStatus, image: &str, says: &str) -> bool {
    s.conditions.iter().any(|c| {
        c.type_ == "TargetConfigControllerDegraded"
            && c.status == "True"
            && c.reason == VERSION_REFUSED
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

/// The version an image's tag names (`…/etcd:3.5.16` → `3.5.16`).
fn version_of(image: &str) -> &str {
    image.rsplit(':').next().unwrap_or(image)
}

pub async fn upgrade(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let mut revision = before.latest_available_revision;
    if cluster_version(&before) != "3.4.0" {
        return Err(failed(format!(
            "before the upgrade status.etcdVersion is {:?}, expected cluster version 3.4.0",
            before.etcd_version
        )));
    }
    revision = minor_upgrade(h, TO, "3.5", revision).await?;
    let running = match ImageTable::standard(&h.cp.bin_dir).lookup(PATCH) {
        Ok(_) => {
            revision = roll_to(h, PATCH, revision).await?;
            PATCH
        }
        Err(e) => {
            let why = format!("SKIPPED the patch upgrade to {PATCH}: {e}");
            eprintln!("upgrade: {why}");
            h.step(why);
            TO
        }
    };
    refusals(
        h,
        revision,
        running,
        &[
            (KNOWN_BAD, "a known-bad release"),
            (FROM, "below the cluster version 3.5"),
        ],
    )
    .await
    .map(|_| ())
}

/// The `upgrade-minors` scenario (#66): a cluster born on the newest 3.5 (3.5.36, past the
/// patch floor etcd's 3.6 upgrade guide asks) moves to 3.6.16 node by node, and the cluster
/// version 3.6 is reported; going back to 3.5.36 is then refused as below the cluster version
/// 3.6. Right after, the image moves on to 3.7.3, which cannot replay the entries 3.5 wrote:
/// before it, the operator holds the move until every member has snapshotted past the raft
/// index at which it saw the cluster version 3.6 (`etcd_version::minor_log`), advancing the log
/// itself; then 3.7.3 rolls node by node (before the hold, its first member crash-looped:
/// `docs/etcd-versions.md`). All three are built from etcd's Go modules.
pub async fn upgrade_minors(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let mut revision = h.status().await.latest_available_revision;
    revision = minor_upgrade(h, V36, "3.6", revision).await?;
    revision = refusals(
        h,
        revision,
        V36,
        &[(NEWEST_35, "below the cluster version 3.6")],
    )
    .await?;
    let at36 = h.status().await.etcd_version.unwrap_or_default();
    let Some(boundary) = at36.cluster_version_raft_index else {
        return Err(failed(format!(
            "status.etcdVersion records no raft index for the cluster version {}: {at36:?}",
            at36.cluster_version
        )));
    };
    h.step(format!(
        "cluster version {} first seen at raft index {boundary}",
        at36.cluster_version
    ));
    minor_upgrade(h, V37, "3.7", revision).await?;
    let advanced = super::failover_audit::cluster_events(&h.cp, &["EtcdLogAdvanced"])
        .await
        .map_err(failed)?;
    let Some(first) = advanced.first() else {
        return Err(failed(
            "no EtcdLogAdvanced Event: the move to 3.7 was not held until every member snapshotted past the entries 3.5 wrote",
        ));
    };
    h.step(format!(
        "{} EtcdLogAdvanced Event(s) before the move to 3.7, the first: {}",
        advanced.iter().map(|e| e.count).sum::<i32>(),
        first.note
    ));
    Ok(())
}

/// Rolls to `image` of the next minor `minor`, then waits until etcd moved the cluster version
/// to it and the operator reports that.
async fn minor_upgrade(
    h: &mut Harness,
    image: &str,
    minor: &str,
    revision: i64,
) -> Result<i64, ControlPlaneError> {
    let revision = roll_to(h, image, revision).await?;
    let at = Instant::now();
    let s = h
        .wait_status(
            &format!("etcd moved the cluster version to {minor}"),
            SETTLE,
            |s| {
                cluster_version(s).starts_with(&format!("{minor}."))
                    && s.etcd_version
                        .as_ref()
                        .is_some_and(|v| v.state == "AtTarget")
            },
        )
        .await?;
    let v = s.etcd_version.clone().unwrap_or_default();
    h.step(format!(
        "cluster version {} (was {}), reported {:.1}s after the last member ran {}: {}",
        v.cluster_version,
        v.previous_cluster_version,
        at.elapsed().as_secs_f64(),
        version_of(image),
        v.message
    ));
    Ok(revision)
}

/// A known-bad release and a version below the cluster version are refused while `running`
/// runs: no revision, no member moved; then the spec goes back to `running`. Returns the latest
/// revision.
async fn refusals(
    h: &mut Harness,
    revision: i64,
    running: &str,
    refused: &[(&str, &str)],
) -> Result<i64, ControlPlaneError> {
    for &(image, says) in refused {
        h.patch_spec(serde_json::json!({ "etcdImage": image }))
            .await?;
        let s = h
            .wait_status(&format!("{image} refused: {says}"), SETTLE, |s| {
                refused_with(s, image, says)
            })
            .await?;
        if s.latest_available_revision != revision {
            return Err(failed(format!(
                "the refused {image} changed the revision: {} (expected {revision})",
                s.latest_available_revision
            )));
        }
        let still = versions(&s);
        if still.values().any(|v| v != version_of(running)) {
            return Err(failed(format!(
                "a member left {}: {still:?}",
                version_of(running)
            )));
        }
    }
    h.patch_spec(serde_json::json!({ "etcdImage": running }))
        .await?;
    h.wait_status(
        &format!("the refusal cleared, back on {running}"),
        SETTLE,
        |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "TargetConfigControllerDegraded" && c.status == "False")
                && crate::view::settled(s, 3)
        },
    )
    .await?;
    Ok(revision)
}

/// Moves the spec to `image` and follows its rollout (one new revision after `revision`, which
/// it returns) to every node.
async fn roll_to(h: &mut Harness, image: &str, revision: i64) -> Result<i64, ControlPlaneError> {
    h.patch_spec(serde_json::json!({ "etcdImage": image }))
        .await?;
    let next = revision + 1;
    let rolled = watch_rollout(h, next, version_of(image)).await?;
    if rolled.len() != 3 {
        return Err(failed(format!(
            "{image}: expected 3 nodes rolled, saw {rolled:?}"
        )));
    }
    h.step(format!("every member runs {image}, rolled {rolled:?}"));
    Ok(next)
}

/// Follows the rollout to `revision` until every node runs it and every member reports `version`:
/// never two nodes moving at once, and the node that starts moving is never the leader's while
/// another node still waits (the leader goes last). Returns the nodes in the order they moved.
async fn watch_rollout(
    h: &mut Harness,
    revision: i64,
    version: &str,
) -> Result<Vec<String>, ControlPlaneError> {
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
            && now.values().all(|v| v == version);
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
