//! The day-2 scenarios, both on four nodes (three voters and the standby learner of an even node
//! count): `defrag` (a fragmented cluster defragmented one voter at a time, the leader last,
//! under the write load; the standby is not: etcd refuses to defragment a learner) and `nospace`
//! (a small quota filled until etcd raises `NOSPACE`; the operator removes the standby, whose own
//! file is at the quota, defragments every voter, finds that frees too little and says an admin
//! must delete data; once data is deleted and compacted it defragments again, disarms the alarm,
//! and writes resume and stay accepted; the standby's node joins again once the log moved on).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use etcd_operator::api::{DefragRecord, EtcdClusterStatus};

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;

const DEADLINE: Duration = Duration::from_secs(180);
/// The longest write gap the `defrag` scenario accepts, through the leader, while members are
/// defragmented (a client attached to the member being defragmented waits for it: reported,
/// not asserted).
const MAX_GAP: Duration = Duration::from_millis(250);
const MIB: usize = 1 << 20;

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn leader(s: &EtcdClusterStatus) -> Option<String> {
    s.members.iter().find(|m| m.leader).map(|m| m.name.clone())
}

fn records(s: &EtcdClusterStatus) -> Vec<DefragRecord> {
    s.defragmentation
        .as_ref()
        .map(|d| d.members.clone())
        .unwrap_or_default()
}

/// Writes `count` values of 1 MiB under `prefix` (stopping at the first refusal when
/// `until_refused`); returns how many were written and the refusal, if any.
async fn fill(
    h: &Harness,
    prefix: &str,
    count: usize,
    until_refused: bool,
) -> Result<(usize, Option<String>), ControlPlaneError> {
    let etcd = h.etcd().await?;
    let value = vec![b'x'; MIB - 1024];
    for i in 0..count {
        if let Err(e) = etcd.put(&format!("{prefix}{i:05}"), value.clone()).await {
            if until_refused {
                return Ok((i, Some(e.to_string())));
            }
            return Err(failed(format!("writing {prefix}{i:05}: {e}")));
        }
    }
    Ok((count, None))
}

/// Deletes everything under `prefix` and compacts to the current revision, as the API server's
/// compaction would.
async fn delete_and_compact(h: &mut Harness, prefix: &str) -> Result<(), ControlPlaneError> {
    let etcd = h.etcd().await?;
    let (deleted, revision) = etcd
        .delete_prefix(prefix)
        .await
        .map_err(|e| failed(format!("deleting {prefix}: {e}")))?;
    etcd.compact(revision)
        .await
        .map_err(|e| failed(format!("compacting at {revision}: {e}")))?;
    h.step(format!(
        "deleted {deleted} key(s) under {prefix} and compacted at revision {revision}"
    ));
    Ok(())
}

/// Waits until every member reports more than half of its database file free.
async fn wait_fragmented(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let etcd = h.etcd().await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        seen.clear();
        for url in h.node_endpoints() {
            match etcd.status_of(&url).await {
                Ok(s) => seen.push((s.db_size, s.db_size_in_use)),
                Err(e) => return Err(failed(format!("status of {url}: {e}"))),
            }
        }
        if seen.iter().all(|(total, in_use)| in_use * 2 < *total) {
            h.step(format!(
                "every member reports its file mostly free: {seen:?}"
            ));
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(failed(format!(
                "the members do not report the freed pages within 30s: (size, in use) {seen:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the status until every voter has a record started after `since_records` (the records
/// before), noting the order in which members were in progress; returns that order and the
/// final status.
async fn watch_defrags(
    h: &mut Harness,
    before: &[DefragRecord],
    voters: usize,
) -> Result<(Vec<String>, EtcdClusterStatus), ControlPlaneError> {
    let started = Instant::now();
    let mut order: Vec<String> = Vec::new();
    loop {
        let s = h.status().await;
        if let Some(p) = s
            .defragmentation
            .as_ref()
            .and_then(|d| d.in_progress.as_ref())
            && order.last() != Some(&p.member_name)
        {
            order.push(p.member_name.clone());
            let line = format!(
                "defragmenting {} (trigger {}, file {} bytes)",
                p.member_name, p.trigger, p.db_size_before
            );
            h.step(line);
        }
        let done: BTreeSet<String> = records(&s)
            .into_iter()
            .filter(|r| !before.contains(r) && !r.result.is_empty())
            .map(|r| r.member_name)
            .collect();
        if done.len() >= voters {
            h.step(format!(
                "every voter defragmented, in this order: {} (after {:.1}s)",
                order.join(", "),
                started.elapsed().as_secs_f64()
            ));
            return Ok((order, s));
        }
        if started.elapsed() > DEADLINE {
            return Err(failed(format!(
                "timed out after {DEADLINE:?} waiting for every voter to be defragmented; seen in progress: {order:?}; done: {done:?}\n{}",
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `defrag` on four nodes, three voters and the standby learner (#65: before, the learner made
/// the gate deny every voter's defragmentation, so an even node count never defragmented; a
/// 3-node cluster is the same story without the standby). The voters are defragmented one at a
/// time, the leader last; the standby is not (etcd refuses to defragment a learner).
pub(super) async fn defrag(h: &mut Harness) -> Result<(), ControlPlaneError> {
    with_standby(h).await?;
    Box::pin(defrag_voters(h)).await
}

/// The voters' part of `defrag`.
async fn defrag_voters(h: &mut Harness) -> Result<(), ControlPlaneError> {
    fill(h, "/sandbox-frag/", 24, false).await?;
    h.step("wrote 24 values of 1 MiB under /sandbox-frag/");
    let before = records(&h.status().await);
    delete_and_compact(h, "/sandbox-frag/").await?;
    let probe = super::leader_probe::LeaderProbe::start(h.etcd().await?, h.node_endpoints());
    let since = Instant::now();
    // Pages a compaction frees are reported as free only after the next write; wait until every
    // member reports them, so the pass the spec change below brings sees the fragmented files
    // (a settled cluster's sizes are otherwise looked at every resync, 60 s).
    wait_fragmented(h).await?;
    h.patch_spec(serde_json::json!({"defragmentation": {"minDbSizeMib": 16}}))
        .await?;
    let leader_before = leader(&h.status().await).ok_or_else(|| failed("no leader in status"))?;
    h.step(format!("{leader_before} leads"));
    let (order, s) = watch_defrags(h, &before, 3).await?;
    let (probe_acked, probe_failed, probe_gap) = probe.finish(since).await;
    let window = match &h.load {
        Some(l) => l.window(since).await,
        None => return Err(failed("no write load")),
    };
    h.step(format!(
        "while defragmenting: through the leader {probe_acked} write(s) acknowledged, {probe_failed} failed, longest gap {} ms; the write load (attached to one member, which waits while that member is held) {} acknowledged, {} failed, longest gap {} ms",
        probe_gap.as_millis(),
        window.acknowledged,
        window.failed,
        window.longest_gap.as_millis()
    ));
    let distinct: BTreeSet<&String> = order.iter().collect();
    if order.len() != 3 || distinct.len() != 3 {
        return Err(failed(format!(
            "expected three members defragmented one after another, saw {order:?}"
        )));
    }
    if order.last() != Some(&leader_before) {
        return Err(failed(format!(
            "the leader {leader_before} was not defragmented last: {order:?}"
        )));
    }
    if leader(&s).as_ref() == Some(&leader_before) {
        return Err(failed(format!(
            "{leader_before} still leads: its leadership was not handed away before its defragmentation"
        )));
    }
    for r in records(&s) {
        if r.result != "Succeeded" || r.db_size_after >= r.db_size_before {
            return Err(failed(format!(
                "{}: {} ({}), file {} -> {} bytes",
                r.member_name, r.result, r.message, r.db_size_before, r.db_size_after
            )));
        }
    }
    // A put that meets the leadership handover may be refused and is retried at once: what
    // counts is how long the cluster took no write (failures are in the step above).
    if probe_gap > MAX_GAP {
        return Err(failed(format!(
            "the cluster took no write for {} ms through the leader while members were defragmented (at most {} ms)",
            probe_gap.as_millis(),
            MAX_GAP.as_millis()
        )));
    }
    Ok(())
}

/// Fills the database until etcd refuses for space and the operator, having defragmented every
/// voter, reports that an admin must delete data. The first refusal may leave enough
/// fragmentation that defragmenting brings every file under the disarm line (90% of the quota):
/// the operator then disarms the alarm, and the fill goes on (at most three rounds) until what
/// is left is live data.
async fn fill_until_an_admin_is_needed(h: &mut Harness) -> Result<(), ControlPlaneError> {
    for round in 1..=3 {
        let prefix = format!("/sandbox-fill/{round}/");
        let (written, refused) = fill(h, &prefix, 200, true).await?;
        let refused = refused.ok_or_else(|| failed("200 MiB written under a 48 MiB quota"))?;
        if !refused.contains("space exceeded") {
            return Err(failed(format!(
                "the fill was refused for another reason: {refused}"
            )));
        }
        h.step(format!(
            "{written} MiB written under {prefix}, then etcd refused: {refused}"
        ));
        if admin_needed_or_disarmed(h).await? {
            return Ok(());
        }
        h.step("the operator's defragmentation brought every database under the disarm line and disarmed NOSPACE; filling again");
    }
    Err(failed(
        "three fills, and each time defragmenting gave enough back: no NOSPACE for an admin",
    ))
}

/// After a refused fill: `true` once the operator reports that an admin must delete data,
/// `false` once etcd takes a write again (the operator disarmed the alarm).
async fn admin_needed_or_disarmed(h: &mut Harness) -> Result<bool, ControlPlaneError> {
    let etcd = h.etcd().await?;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let s = h.status().await;
        let admin = s.conditions.iter().any(|c| {
            c.type_ == "EtcdMembersDegraded"
                && c.status == "True"
                && c.message.contains("An admin must delete data")
        });
        if admin {
            h.step("NOSPACE reported with what an admin must do");
            return Ok(true);
        }
        if etcd.put("/sandbox-fill/probe", b"x".to_vec()).await.is_ok() {
            return Ok(false);
        }
        if Instant::now() > deadline {
            return Err(failed(format!(
                "timed out after {}s waiting for NOSPACE reported with what an admin must do, or disarmed\n{}",
                DEADLINE.as_secs(),
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `nospace` on four nodes, three voters and the standby learner of an even node count (#65: a
/// 3-node cluster is the same story without the standby, which adds nothing this one lacks).
/// etcd refuses to defragment a learner, and the standby's own file, left at the quota, raised
/// `NOSPACE` again within a second of every disarm: the cluster refused every write for good.
/// Now the standby is renewed: removed under the alarm; its node joins again once the alarm is
/// cleared and the leader's log has moved 11,000 entries on (a learner added sooner replayed the
/// fill into a file as full as the old one), receiving the leader's defragmented file. The alarm
/// stays cleared, before and after n4 is back.
pub(super) async fn nospace(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = with_standby(h).await?;
    Box::pin(nospace_on(h, 3, standby)).await?;
    h.wait_status(
        "n4's learner add waits until the leader's log has moved on",
        DEADLINE,
        |s| {
            member_id(s, "n4").is_err()
                && s.conditions.iter().any(|c| {
                    c.type_ == "EtcdMembersProgressing"
                        && c.message.contains("n4 joins again as the standby once")
                })
        },
    )
    .await?;
    advance_log(h, REJOIN_AFTER_ENTRIES).await?;
    standby_renewed(h, &before, 43 * MIB as i64).await?;
    stays_disarmed(h).await
}

/// The operator's `REJOIN_AFTER_ENTRIES` (11,000: the snapshot count it renders and a tenth).
const REJOIN_AFTER_ENTRIES: usize = 11_000;

/// Moves the raft log `entries` on with small writes from 32 clients at once (as the API
/// server's steady writes would, faster).
async fn advance_log(h: &mut Harness, entries: usize) -> Result<(), ControlPlaneError> {
    const CLIENTS: usize = 32;
    let started = Instant::now();
    let mut writers = Vec::new();
    for c in 0..CLIENTS {
        let etcd = h.etcd().await?;
        writers.push(async move {
            for i in 0..entries.div_ceil(CLIENTS) {
                let key = format!("/sandbox-log/{c}/{}", i % 16);
                etcd.put(&key, b"x".to_vec())
                    .await
                    .map_err(|e| failed(format!("writing {key}: {e}")))?;
            }
            Ok::<(), ControlPlaneError>(())
        });
    }
    for r in futures::future::join_all(writers).await {
        r?;
    }
    h.step(format!(
        "the log moved {entries} entries on ({:.1}s)",
        started.elapsed().as_secs_f64()
    ));
    delete_and_compact(h, "/sandbox-log/").await
}

fn standby(s: &EtcdClusterStatus) -> bool {
    crate::view::settled_with_standby(s, 3, 1)
}

/// Adds n4, which stays the standby learner of four nodes; returns its member id.
async fn with_standby(h: &mut Harness) -> Result<String, ControlPlaneError> {
    h.cp.add_node("n4").await?;
    h.step("node n4 added: four nodes, so it stays the standby learner");
    let s = h
        .wait_status("3 voters and the standby learner n4", DEADLINE, standby)
        .await?;
    member_id(&s, "n4")
}

/// Waits until n4 is the standby again under another member id than `before` (renewed: etcd
/// refuses to defragment a learner) and checks its new file is under `max` bytes.
async fn standby_renewed(h: &mut Harness, before: &str, max: i64) -> Result<(), ControlPlaneError> {
    let s = h
        .wait_status(
            "n4 renewed: the standby learner again, a new member",
            DEADLINE,
            |s| standby(s) && member_id(s, "n4").is_ok_and(|id| id != before),
        )
        .await?;
    let after = member_id(&s, "n4")?;
    let url: membership::MemberUrl = format!("https://{}:2379", h.cp.node("n4")?.ip())
        .parse()
        .map_err(|e| failed(format!("n4's client URL: {e}")))?;
    let db = h
        .etcd()
        .await?
        .status_of(&url)
        .await
        .map_err(|e| failed(format!("status of n4: {e}")))?;
    h.step(format!(
        "standby n4: member {before} removed, {after} joined with a file of {} bytes ({} in use)",
        db.db_size, db.db_size_in_use
    ));
    if db.db_size >= max {
        return Err(failed(format!(
            "the renewed standby's file is {} bytes, at least {max}",
            db.db_size
        )));
    }
    Ok(())
}

/// The id of `node`'s member in `s`.
fn member_id(s: &EtcdClusterStatus, node: &str) -> Result<String, ControlPlaneError> {
    s.members
        .iter()
        .find(|m| m.name == node)
        .map(|m| m.id.clone())
        .ok_or_else(|| failed(format!("no member of {node} in status")))
}

/// The `nospace` story on a cluster of `voters` voters, settled as `settled` says.
async fn nospace_on(
    h: &mut Harness,
    voters: usize,
    settled: fn(&EtcdClusterStatus) -> bool,
) -> Result<(), ControlPlaneError> {
    let revision = h.status().await.latest_available_revision;
    h.patch_spec(serde_json::json!({"backendQuotaMib": 48}))
        .await?;
    h.wait_status("the 48 MiB quota on every node", DEADLINE, |s| {
        settled(s) && s.latest_available_revision > revision
    })
    .await?;
    h.step("the 48 MiB quota rolled out");
    fill_until_an_admin_is_needed(h).await?;
    // The operator tried every voter first; what it does after the cleanup comes after these.
    let before = records(&h.status().await);
    let acked_during_alarm = match &h.load {
        Some(l) => l.acknowledged().await,
        None => return Err(failed("no write load")),
    };
    delete_and_compact(h, "/sandbox-fill/").await?;
    let since = Instant::now();
    watch_defrags(h, &before, voters).await?;
    h.wait_status("the NOSPACE alarm cleared", DEADLINE, |s| {
        !s.conditions
            .iter()
            .any(|c| c.type_ == "EtcdMembersDegraded" && c.status == "True")
    })
    .await?;
    let Some(load) = &h.load else {
        return Err(failed("no write load"));
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while load.acknowledged().await <= acked_during_alarm + 5 {
        if Instant::now() > deadline {
            return Err(failed(format!(
                "writes did not resume after the disarm; last error: {:?}",
                load.last_error().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let w = load.window(since).await;
    h.step(format!(
        "writes resumed: {} acknowledged since the cleanup ({} failed)",
        w.acknowledged, w.failed
    ));
    stays_disarmed(h).await
}

/// After the disarm: 16 MiB more is written (a third of the quota, under what the cleanup
/// freed) and no member raises `NOSPACE` again. A member whose own file stayed at the quota
/// (one the operator left out) raises it on its next applied write, which refuses every write
/// of the cluster again.
async fn stays_disarmed(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let (written, refused) = fill(h, "/sandbox-after/", 16, true).await?;
    let etcd = h.etcd().await?;
    let alarms = etcd
        .alarms()
        .await
        .map_err(|e| failed(format!("alarm list: {e}")))?;
    if let Some(refused) = refused {
        return Err(failed(format!(
            "{written} MiB written after the disarm, then refused: {refused}; alarms {alarms:?}\n{}",
            h.describe().await
        )));
    }
    if !alarms.is_empty() {
        return Err(failed(format!(
            "16 MiB written after the disarm, and alarms are raised again: {alarms:?}\n{}",
            h.describe().await
        )));
    }
    delete_and_compact(h, "/sandbox-after/").await?;
    h.step("16 MiB more written after the disarm: no alarm raised again");
    Ok(())
}
