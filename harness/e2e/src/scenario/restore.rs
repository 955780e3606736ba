//! The `restore-from-snapshot` scenario: every member's data is gone, and `etcd-recover
//! from-snapshot` brings the cluster back from a snapshot an admin saved with `etcdctl`.
//!
//! 1. Under write load, a snapshot is saved with `etcdctl snapshot save` (the default etcd
//!    build's, 3.6.16) through n1's client URL (the operator's client certificate), outside
//!    every node root; its store revision (`etcdutl snapshot status`) becomes the load's
//!    cut-off: a write acknowledged at or
//!    below it must survive, one above it (until the wipe) is the expected loss (`rpo_writes`);
//!    every write acknowledged after the wipe must survive too.
//!    With the operator's backup (`restore-from-backup`), two forced rollouts follow, so every
//!    node runs a revision numbered above all the restored API knows of (#65: such nodes must
//!    still be moved and their members added back).
//! 2. Bad input while quorum is healthy: a copy with one flipped byte is invalid (exit 2, the
//!    integrity hash), the real snapshot is refused (exit 1, "quorum is healthy").
//! 3. Every node stops, its data dir is wiped, its node agent starts again: `etcd-verify` keeps
//!    every etcd down (no data), and the API, served from n1's etcd, is down with it.
//! 4. Another cluster's snapshot (a throwaway one-member etcd's) is refused (exit 1, "not this
//!    cluster's"). Each bad input leaves n1's manifest byte-identical and no recovery record.
//! 5. `etcd-recover from-snapshot <snapshot>` on n1: etcd 3.6.16's `etcdutl snapshot restore
//!    --bump-revision --mark-compacted` makes a new one-member cluster whose store revision is
//!    above every revision a write was acknowledged at before the wipe (checked on etcd's header
//!    revision, and on the first write acknowledged afterwards); the operator adds n2 and n3
//!    back, 3 voters, every member id new.
//!
//! `rto_s` is the time from the wipe to the first write acknowledged afterwards.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_operator::api::EtcdClusterStatus;

use super::api_recovery::ApiAcrossRecovery;
use super::harness::{Harness, Recovery, describe_members, member_of, members_of};
use super::runbook::excerpt;
use crate::controlplane::ControlPlaneError;

mod rollouts;
mod snapshot;
use rollouts::revisions_move_on;
use snapshot::{
    figure_after, from_snapshot, must_refuse, other_cluster_snapshot, save_snapshot,
    snapshot_revision, write_tls,
};

const SETTLE: Duration = Duration::from_secs(240);
/// One `etcdctl` or `etcdutl` call.
const ETCDCTL_DEADLINE: Duration = Duration::from_secs(60);
/// One `etcd-recover` run (`from-snapshot` bounds itself at 300 s by default).
const RECOVER_DEADLINE: Duration = Duration::from_secs(360);
/// How long the write load gets, once the cluster settled, to have a write acknowledged.
const FIRST_WRITE_DEADLINE: Duration = Duration::from_secs(60);
const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// What the operator logs when etcd's history changed under its caches.
const RELIST_LOG: &str = "every cache relists";
/// Where the restore runs: the API stand-in talks to this node's etcd only.
const TARGET: &str = "n1";
/// `etcd-recover` exit codes.
const EXIT_OK: i32 = 0;
const EXIT_REFUSED: i32 = 1;
const EXIT_INVALID: i32 = 2;

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

pub async fn restore_from_snapshot(h: &mut Harness) -> Result<(), ControlPlaneError> {
    restore(h, Source::Etcdctl).await
}

pub async fn restore_from_backup(h: &mut Harness) -> Result<(), ControlPlaneError> {
    restore(h, Source::Backup).await
}

/// Where the snapshot comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// An admin's `etcdctl snapshot save`.
    Etcdctl,
    /// The operator's scheduled backups: one to the local directory, then one to an S3 bucket
    /// (Garage on loopback); the restore downloads the S3 one.
    Backup,
}

/// The snapshot to restore: what `etcd-recover` is given, a local copy (for the bad-input
/// copies), its store revision, and the bucket's settings when it is in one.
struct Acquired {
    arg: String,
    local: PathBuf,
    revision: i64,
    env: Vec<(&'static str, String)>,
    /// Keeps the S3 server up until the restore is done.
    _s3: Option<super::backups::S3Server>,
}

async fn acquire(
    h: &mut Harness,
    source: Source,
    dir: &Path,
) -> Result<Acquired, ControlPlaneError> {
    match source {
        Source::Backup => super::backups::take_backups(h, dir)
            .await
            .map(|b| Acquired {
                arg: b.url,
                local: b.local,
                revision: b.revision,
                env: b.env,
                _s3: Some(b.server),
            }),
        Source::Etcdctl => {
            let tls = write_tls(h, dir).await?;
            let snapshot = dir.join("snapshot.db");
            let endpoint = format!("https://{}:2379", h.cp.node(TARGET)?.ip());
            let saving = Instant::now();
            let saved = save_snapshot(&endpoint, Some(&tls), &snapshot).await?;
            let saved_at = Instant::now();
            let revision = snapshot_revision(&snapshot).await?;
            let size = std::fs::metadata(&snapshot).map(|m| m.len()).unwrap_or(0);
            h.step(format!(
                "etcdctl snapshot save from {TARGET} ({endpoint}) took {:.1}s: {} ({size} bytes), store revision {revision}: {}",
                saved_at.duration_since(saving).as_secs_f64(),
                snapshot.display(),
                excerpt(&saved.stdout)
            ));
            Ok(Acquired {
                arg: snapshot.display().to_string(),
                local: snapshot,
                revision,
                env: Vec::new(),
                _s3: None,
            })
        }
    }
}

/// Step 1: the snapshot, outside every node root, made the write load's cut-off.
async fn take_snapshot(
    h: &mut Harness,
    source: Source,
) -> Result<(PathBuf, Acquired), ControlPlaneError> {
    let dir = h.cp.path().join("restore-from-snapshot");
    std::fs::create_dir_all(&dir)
        .map_err(|e| failed(format!("creating {}: {e}", dir.display())))?;
    let acquired = Box::pin(acquire(h, source, &dir)).await?;
    let revision = acquired.revision;
    let load = h
        .load
        .as_ref()
        .ok_or_else(|| failed("the write load is not running"))?;
    load.set_cutoff(revision).await;
    let acked_at_save = load.acknowledged().await;
    h.step(format!(
        "the snapshot's store revision {revision} is the load's cut-off ({acked_at_save} write(s) acknowledged so far)"
    ));
    Ok((dir, acquired))
}

/// Step 2: bad input while quorum is healthy is refused; returns another cluster's snapshot.
async fn refused_while_healthy(
    h: &mut Harness,
    dir: &Path,
    snapshot: &Path,
) -> Result<PathBuf, ControlPlaneError> {
    let bytes = std::fs::read(snapshot)
        .map_err(|e| failed(format!("reading {}: {e}", snapshot.display())))?;
    let mut flipped_bytes = bytes.clone();
    let at = flipped_bytes.len() / 2;
    if let Some(b) = flipped_bytes.get_mut(at) {
        *b ^= 0x01;
    }
    let flipped = dir.join("snapshot-flipped.db");
    std::fs::write(&flipped, &flipped_bytes)
        .map_err(|e| failed(format!("writing {}: {e}", flipped.display())))?;
    Box::pin(must_refuse(
        h,
        &format!("a copy with byte {at} flipped"),
        &flipped,
        EXIT_INVALID,
        "integrity hash",
    ))
    .await?;
    Box::pin(must_refuse(
        h,
        "the snapshot, quorum healthy",
        snapshot,
        EXIT_REFUSED,
        "quorum is healthy",
    ))
    .await?;
    let other = dir.join("other-cluster.db");
    let other_member = Box::pin(other_cluster_snapshot(&other)).await?;
    h.step(format!(
        "another cluster's snapshot saved from a throwaway etcd ({other_member}): {}",
        other.display()
    ));
    Ok(other)
}

/// Step 3: every member's data gone; returns when, and the writes acknowledged above `revision`.
async fn wipe_every_member(
    h: &mut Harness,
    revision: i64,
) -> Result<(Instant, u64, i64), ControlPlaneError> {
    for n in NODES {
        h.cp.stop_node(n).await?;
    }
    h.step("n1, n2 and n3 stopped: the API is down");
    for n in NODES {
        let data = h.cp.node(n)?.data_dir();
        std::fs::remove_dir_all(&data)
            .map_err(|e| failed(format!("wiping {}: {e}", data.display())))?;
    }
    let wiped_at = Instant::now();
    let (acked_above, highest) = match h.load.as_ref() {
        Some(l) => {
            l.end_cutoff().await;
            l.acknowledged_above(revision).await
        }
        None => (0, 0),
    };
    h.step(format!(
        "every data dir wiped; {acked_above} write(s) had been acknowledged above the snapshot's revision {revision} (the highest at revision {highest}: without a revision bump the restore would take the store revision back by at least {})",
        highest - revision
    ));
    for n in NODES {
        h.cp.restart_node(n).await?;
    }
    h.step("node agents restarted with no data (etcd-verify keeps every etcd down)");
    Ok((wiped_at, acked_above, highest))
}

/// Step 5: the restore; returns when it started and ended, and the member it says it restored.
async fn run_from_snapshot(
    h: &mut Harness,
    acquired: &Acquired,
) -> Result<(Instant, Instant, Option<String>), ControlPlaneError> {
    let restoring = Instant::now();
    let ran = Box::pin(from_snapshot(h, &acquired.arg, &acquired.env)).await?;
    let restored_at = Instant::now();
    if ran.code != Some(EXIT_OK) {
        return Err(failed(format!(
            "etcd-recover from-snapshot {} on {TARGET} exited {:?} after {:.1}s:\n{}",
            acquired.arg,
            ran.code,
            ran.took.as_secs_f64(),
            ran.said()
        )));
    }
    h.step(format!(
        "etcd-recover from-snapshot {} on {TARGET} (exit 0, {:.1}s):\n{}{}",
        acquired.arg,
        ran.took.as_secs_f64(),
        ran.stdout.trim_end(),
        if ran.stderr.trim().is_empty() {
            String::new()
        } else {
            format!("\n[stderr]\n{}", excerpt(&ran.stderr))
        }
    ));
    let recover_says = figure_after(&ran.stdout, "store revision ").map(str::to_owned);
    let revision = acquired.revision;
    if recover_says.as_deref() != Some(revision.to_string().as_str()) {
        h.step(format!(
            "NOTE: etcd-recover read store revision {recover_says:?}, etcdctl snapshot status {revision}"
        ));
    }
    let restored_member =
        figure_after(&ran.stdout, "one-member cluster (member ").map(str::to_owned);
    Ok((restoring, restored_at, restored_member))
}

/// The operator adopts the restored cluster and adds the other nodes back, every member id new.
async fn wait_new_members(
    h: &mut Harness,
    ids_before: &[(&str, String)],
) -> Result<(Instant, Instant, EtcdClusterStatus, Vec<String>), ControlPlaneError> {
    let old_ids: Vec<String> = ids_before.iter().map(|(_, id)| id.clone()).collect();
    let s = h
        .wait_status(
            "the operator shows the restored cluster: no old member id in the status",
            SETTLE,
            |s| !s.members.is_empty() && s.members.iter().all(|m| !old_ids.contains(&m.id)),
        )
        .await?;
    let adopted_at = Instant::now();
    h.step(format!("status members: {}", describe_members(&s)));
    let s = h
        .wait_status(
            "3 healthy voters, every node on the latest revision, every member id new",
            SETTLE,
            |s| crate::view::settled(s, 3) && s.members.iter().all(|m| !old_ids.contains(&m.id)),
        )
        .await?;
    let settled_at = Instant::now();
    let mut same = Vec::new();
    let mut now_ids = Vec::new();
    for (n, old) in ids_before {
        let new = member_of(&s, n).ok_or_else(|| failed(format!("{n} has no member")))?;
        if &new == old {
            same.push(format!("{n} kept {old}"));
        }
        now_ids.push(format!("{n}={new}"));
    }
    if !same.is_empty() {
        return Err(failed(format!(
            "the restore made a new cluster, but {}",
            same.join(", ")
        )));
    }
    Ok((adopted_at, settled_at, s, now_ids))
}

/// The restored member is on [`TARGET`] and the cluster has the restore's token everywhere.
fn check_restored_identity(
    h: &mut Harness,
    before: &EtcdClusterStatus,
    s: &EtcdClusterStatus,
    restored_member: Option<&str>,
) -> Result<(), ControlPlaneError> {
    if let Some(m) = restored_member
        && member_of(s, TARGET).is_none_or(|id| !id.eq_ignore_ascii_case(m))
    {
        return Err(failed(format!(
            "etcd-recover restored member {m} on {TARGET}, the status shows {:?}",
            member_of(s, TARGET)
        )));
    }
    // The restore made a new cluster with its own token: the operator learned it from the
    // restored node's manifest, and every revision carries it, not the lost cluster's.
    let token_before = before
        .cluster_identity
        .as_ref()
        .map(|c| c.initial_cluster_token.clone());
    let token_now = s
        .cluster_identity
        .as_ref()
        .map(|c| c.initial_cluster_token.clone());
    match &token_now {
        Some(t) if t.starts_with("etcd-recover-") && Some(t) != token_before.as_ref() => {
            super::scenarios::every_manifest_carries(h, t)?;
            h.step(format!(
                "status.clusterIdentity: token {t} (the restore's; before: {token_before:?}); every node's manifest carries it"
            ));
        }
        other => {
            return Err(failed(format!(
                "after the restore status.clusterIdentity names token {other:?} (before: {token_before:?}), not the restore's"
            )));
        }
    }
    Ok(())
}

/// The operator saw the new cluster id and listed its caches anew.
fn check_relisted(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let log = h.cp.operator_log();
    let relisted = log
        .lines()
        .find(|l| l.contains(RELIST_LOG))
        .ok_or_else(|| {
            failed(format!(
                "the operator never logged {RELIST_LOG:?} after the restore made a new cluster"
            ))
        })?;
    h.step(format!(
        "the operator relisted its caches: {}",
        relisted.trim()
    ));
    Ok(())
}

async fn restore(h: &mut Harness, source: Source) -> Result<(), ControlPlaneError> {
    h.recovery = Some(Recovery::default());
    let api = ApiAcrossRecovery::start(h).await?;
    let before = h.status().await;
    let ids_before = members_of(&before, &NODES)?;

    // 1. The snapshot, outside every node root.
    let (dir, acquired) = take_snapshot(h, source).await?;
    let (snapshot, revision) = (acquired.local.clone(), acquired.revision);
    if source == Source::Backup {
        revisions_move_on(h, 2).await?;
    }

    // 2. Bad input while quorum is healthy.
    let other = Box::pin(refused_while_healthy(h, &dir, &snapshot)).await?;

    // 3. Every member's data gone.
    let (wiped_at, acked_above, highest) = wipe_every_member(h, revision).await?;

    // 4. Another cluster's snapshot, with quorum lost.
    Box::pin(must_refuse(
        h,
        "another cluster's snapshot",
        &other,
        EXIT_REFUSED,
        "not this cluster's",
    ))
    .await?;

    // 5. The restore.
    let (restoring, restored_at, restored_member) =
        Box::pin(run_from_snapshot(h, &acquired)).await?;

    // The API answers again, at first with the status the snapshot holds (the old members).
    let s = h
        .wait_status(
            "the API answers again (the EtcdCluster as the snapshot holds it)",
            SETTLE,
            |s| !s.members.is_empty(),
        )
        .await?;
    let api_back_at = Instant::now();
    h.step(format!("status members: {}", describe_members(&s)));
    // Boxed: this future is large in a debug build, and restore's own must stay small.
    Box::pin(revision_went_forward(h, highest, wiped_at)).await?;
    // The operator adopts the new cluster and adds the other nodes back.
    let (adopted_at, settled_at, s, now_ids) = wait_new_members(h, &ids_before).await?;
    check_restored_identity(h, &before, &s, restored_member.as_deref())?;
    h.step(format!(
        "3 voters, every member new: {} (before: {})",
        now_ids.join(", "),
        ids_before
            .iter()
            .map(|(n, id)| format!("{n}={id}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    // The restore made a new cluster: the operator must have seen the new cluster id and
    // listed its caches anew (not waited for resourceVersions of the lost cluster).
    check_relisted(h)?;

    // RTO: from the wipe to the first write acknowledged afterwards.
    let first = h.first_write_after(wiped_at, FIRST_WRITE_DEADLINE).await?;
    let rto = first.duration_since(wiped_at);
    let api_rto_s = match api {
        Some(api) => Some(Box::pin(api.after(h, wiped_at, Some(revision))).await?),
        None => None,
    };
    h.recovery = Some(Recovery {
        rto_s: Some(rto.as_secs_f64()),
        api_rto_s,
    });
    let since = |at: Instant| at.saturating_duration_since(wiped_at).as_secs_f64();
    h.step(format!(
        "RTO {:.1}s. After the wipe: etcd-recover +{:.1}s..+{:.1}s, API back +{:.1}s, first write acknowledged +{:.1}s, the new cluster in the status +{:.1}s, 3 voters +{:.1}s (the operator took {:.1}s after etcd-recover); snapshot at revision {revision}, {acked_above} write(s) acknowledged above it before the wipe",
        rto.as_secs_f64(),
        since(restoring),
        since(restored_at),
        since(api_back_at),
        since(first),
        since(adopted_at),
        since(settled_at),
        settled_at.duration_since(restored_at).as_secs_f64(),
    ));
    Ok(())
}

/// The restored cluster's store revision is above `highest`, every revision a write was
/// acknowledged at before the wipe: etcd's header revision on [`TARGET`] now, and the revision
/// of the first write acknowledged after the wipe (without a bump it would reuse the lost
/// revisions above the snapshot's).
async fn revision_went_forward(
    h: &mut Harness,
    highest: i64,
    wiped_at: Instant,
) -> Result<(), ControlPlaneError> {
    let endpoint = format!("https://{}:2379", h.cp.node(TARGET)?.ip())
        .parse()
        .map_err(|e| failed(format!("{TARGET}'s client URL: {e}")))?;
    let header = h
        .etcd()
        .await?
        .status_of(&endpoint)
        .await
        .map_err(|e| failed(format!("status of {TARGET} after the restore: {e}")))?
        .revision;
    h.first_write_after(wiped_at, FIRST_WRITE_DEADLINE).await?;
    let load = h
        .load
        .as_ref()
        .ok_or_else(|| failed("the write load is not running"))?;
    let first = load.first_revision_after(wiped_at).await.unwrap_or(0);
    if header <= highest || first <= highest {
        return Err(failed(format!(
            "the restore took the store revision back: {TARGET}'s header revision {header}, the first write acknowledged after the restore at {first}, but a write was acknowledged at {highest} before the wipe"
        )));
    }
    h.step(format!(
        "the restored store revision went forward: {TARGET}'s header revision {header}, the first write acknowledged after the restore at {first}, above {highest} (the highest acknowledged before the wipe)"
    ));
    Ok(())
}
