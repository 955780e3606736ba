//! The `corruption` scenario: one member's copy of a key is changed on disk while its node is
//! stopped (bbolt checksums no data page, so etcd serves the changed value as its own). A
//! compaction before it starts again keeps etcd's own start-up check from comparing (the peers
//! no longer have its revision), as happens to any member that was down longer than the
//! compaction interval. The operator's scheduled `HashKV` comparison must name that member
//! within one check interval; with `replaceMinority` the member is replaced and a later check
//! finds every copy equal.

use std::time::{Duration, Instant};

use etcd_operator::api::EtcdClusterStatus;
use membership::{EtcdClient, MemberUrl};

use super::harness::{Harness, member_of};
use crate::controlplane::ControlPlaneError;

const INTERVAL_S: u64 = 10;
const SETTLE: Duration = Duration::from_secs(240);
const CANARY_KEY: &str = "/sandbox-canary";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn canary(fill: u8) -> Vec<u8> {
    let mut v = b"canary-".to_vec();
    v.extend(std::iter::repeat_n(fill, 64));
    v
}

fn check_result(s: &EtcdClusterStatus) -> Option<(&str, Vec<&str>)> {
    let c = s.corruption_check.as_ref()?;
    Some((
        c.result.as_str(),
        c.divergent_members
            .iter()
            .map(|d| d.name.as_str())
            .collect(),
    ))
}

/// Replaces every copy of `from` with `to` (same length) in `path`; returns how many.
fn rewrite(path: &std::path::Path, from: &[u8], to: &[u8]) -> Result<usize, ControlPlaneError> {
    let mut bytes =
        std::fs::read(path).map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
    let mut n = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if bytes[i..i + from.len()] == *from {
            bytes[i..i + from.len()].copy_from_slice(to);
            n += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    std::fs::write(path, bytes).map_err(|e| failed(format!("writing {}: {e}", path.display())))?;
    Ok(n)
}

/// Corrupts n2's copy of the canary while it is stopped; returns n2's member id from before.
async fn corrupt_n2(
    h: &mut Harness,
    etcd: &EtcdClient,
    n2: &MemberUrl,
) -> Result<String, ControlPlaneError> {
    let old = member_of(&h.status().await, "n2").ok_or_else(|| failed("n2 has no member"))?;
    h.cp.stop_node("n2").await?;
    let db = h.cp.node("n2")?.data_dir().join("member/snap/db");
    let copies = rewrite(&db, &canary(b'A'), &canary(b'B'))?;
    if copies == 0 {
        return Err(failed(format!(
            "{CANARY_KEY} not found in {}",
            db.display()
        )));
    }
    h.step(format!(
        "n2 stopped; its copy of {CANARY_KEY} changed on disk ({copies} place(s) in {})",
        db.display()
    ));
    let marker = etcd
        .put("/sandbox-canary-compaction", b"1".to_vec())
        .await
        .map_err(|e| failed(format!("writing the compaction marker: {e}")))?;
    etcd.compact(marker)
        .await
        .map_err(|e| failed(format!("compacting at {marker}: {e}")))?;
    h.cp.restart_node("n2").await?;
    h.step(format!(
        "compacted at revision {marker} (past n2's), n2 started again"
    ));
    // The clock starts when n2 serves (etcd's own start-up check has passed it by then).
    let deadline = Instant::now() + Duration::from_secs(60);
    while etcd.status_of(n2).await.is_err() {
        if Instant::now() > deadline {
            return Err(failed("n2's etcd did not answer within 60s of its start"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.step("n2 serves again");
    Ok(old)
}

pub(super) async fn corruption(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.patch_spec(serde_json::json!({"corruptionCheck": {"intervalSeconds": INTERVAL_S}}))
        .await?;
    h.wait_status("a check found every copy equal", SETTLE, |s| {
        check_result(s).is_some_and(|(r, _)| r == "Consistent")
    })
    .await?;
    let etcd = h.etcd().await?;
    let revision = etcd
        .put(CANARY_KEY, canary(b'A'))
        .await
        .map_err(|e| failed(format!("writing {CANARY_KEY}: {e}")))?;
    let n2 =
        h.cp.node("n2")
            .map(|n| format!("https://{}:2379", n.ip()))?
            .parse()
            .map_err(|e| failed(format!("n2's client URL: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let applied = etcd.status_of(&n2).await.map(|s| s.revision);
        if applied.as_ref().is_ok_and(|r| *r >= revision) {
            break;
        }
        if Instant::now() > deadline {
            return Err(failed(format!(
                "n2 did not apply revision {revision} within 30s: {applied:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let old = corrupt_n2(h, &etcd, &n2).await?;
    let started = Instant::now();
    let limit = Duration::from_secs(INTERVAL_S * 3 + 30);
    let s = h
        .wait_status("the check named n2 as divergent", limit, |s| {
            check_result(s).is_some_and(|(r, d)| r == "Divergent" && d == ["n2"])
                && s.conditions.iter().any(|c| {
                    c.type_ == "EtcdMembersDegraded"
                        && c.status == "True"
                        && c.reason == "MembersDivergent"
                        && c.message.contains("n2")
                })
        })
        .await?;
    let detected = started.elapsed();
    h.step(format!(
        "detected {:.1}s after n2 served again (check interval {INTERVAL_S}s): {}",
        detected.as_secs_f64(),
        s.corruption_check
            .as_ref()
            .map(|c| c.message.clone())
            .unwrap_or_default()
    ));
    h.patch_spec(serde_json::json!({"corruptionCheck": {"replaceMinority": true}}))
        .await?;
    h.wait_status("n2's divergent member replaced", SETTLE, |s| {
        member_of(s, "n2").is_some_and(|id| id != old)
    })
    .await?;
    h.wait_settled(3, SETTLE).await?;
    h.wait_status("a later check found every copy equal", SETTLE, |s| {
        check_result(s).is_some_and(|(r, _)| r == "Consistent")
    })
    .await?;
    let value = etcd
        .get(CANARY_KEY)
        .await
        .map_err(|e| failed(format!("reading {CANARY_KEY}: {e}")))?;
    if value != Some(canary(b'A')) {
        return Err(failed(format!(
            "{CANARY_KEY} reads {:?} after the repair",
            value.map(|v| String::from_utf8_lossy(&v).into_owned())
        )));
    }
    Ok(())
}
