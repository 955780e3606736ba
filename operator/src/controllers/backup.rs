//! Backup: scheduled etcd snapshots that are proven restorable.
//!
//! Inputs: `spec.backup`, the last outcome (`status.backup`), the members and their health, the
//! S3 credentials Secret (operator namespace), the current revision's static-pod resources.
//! Decision (pure: [`next_due`], [`pick_source`], [`destination`], [`to_delete`]): a backup is
//! due at the schedule's next time after the last attempt (at once when there was none, or
//! when `spec.backup.request` is new); it is streamed from the healthy follower with the highest
//! raft index (the leader only in a one-member cluster: a snapshot costs the member that sends
//! it disk and network, and the leader must keep the heartbeats going). The run
//! ([`run::take`], off the pass, bounded by `timeoutSeconds`): a marker key written through
//! raft, the follower waited for until it applied it, the snapshot streamed to scratch space,
//! its integrity and contents checked, then the snapshot, the revision's resources and last the
//! record stored (a backup without its record is incomplete); with `verify`, a restore into a
//! throwaway etcd must answer the marker ([`verify`]), and the record says so. Retention
//! deletes beyond `count` and `maxAgeHours` but never the newest good backup. Writes:
//! `status.backup`, Events `BackupSucceeded` / `BackupFailed`, metrics. It never changes
//! etcd's membership or configuration and never blocks the pass: a run in flight only holds
//! the next backup. Whether the last good backup is recent enough, condition `BackupReady`,
//! and what it holds (drains, upgrades) are decided in [`ready`].

pub mod preop;
pub mod ready;
pub mod run;
pub mod schedule;
mod start;
pub mod verify;

pub use schedule::{
    RETRY_AFTER, max_interval, next_due, next_scheduled, parse_schedule, parse_stamp, stamp,
};

use etcd_snapshot::store::{BackupName, Destination, S3Config};
use k8s_openapi::api::core::v1::Secret;
use membership::{MemberId, MemberUrl};
use time::OffsetDateTime;
use tokio::task::JoinHandle;

use crate::api::{Backup, BackupFailure};
use crate::certs::{format_time, parse_time};
use crate::etcd::EtcdObservation;
use crate::events::EventReason;
use crate::metrics::ResultLabel;
use crate::pass::Pass;
use crate::writer::etcd::{Outcome, Task};

use crate::controller::ControllerName;

const NAME: ControllerName = ControllerName::Backup;

/// A backup in flight.
#[derive(Debug)]
pub struct BackupRun {
    pub name: BackupName,
    pub request: String,
    handle: JoinHandle<run::Outcome>,
}

/// Why a backup failed, as `status.backup.lastFailure.reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailReason {
    Schedule,
    Credentials,
    Destination,
    NoSource,
    Snapshot,
    Verification,
    Timeout,
    Interrupted,
}

impl FailReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailReason::Schedule => "Schedule",
            FailReason::Credentials => "Credentials",
            FailReason::Destination => "Destination",
            FailReason::NoSource => "NoSource",
            FailReason::Snapshot => "Snapshot",
            FailReason::Verification => "Verification",
            FailReason::Timeout => "Timeout",
            FailReason::Interrupted => "Interrupted",
        }
    }
}

/// A failure with its reason and a sentence naming the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: FailReason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: FailReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// The member a snapshot is streamed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub id: MemberId,
    pub name: String,
    pub url: MemberUrl,
}

impl Source {
    pub fn label(&self) -> String {
        format!("{}={}", self.id, self.name)
    }
}

/// The healthy started follower (voter) with the highest raft index; the leader only when it is
/// the one voter. Learners are never used (they may not have caught up).
pub fn pick_source(obs: &EtcdObservation) -> Result<Source, Failure> {
    let voters: Vec<_> = obs.started_voters().collect();
    let healthy = |id: &MemberId| obs.health.get(id).is_some_and(|h| h.healthy);
    let as_source = |m: &membership::Member| {
        Some(Source {
            id: m.id,
            name: m.name.clone(),
            url: m.client_urls.first()?.clone(),
        })
    };
    if let [only] = voters.as_slice() {
        return if healthy(&only.id) {
            as_source(only).ok_or_else(|| {
                Failure::new(FailReason::NoSource, "the one voter has no client URL")
            })
        } else {
            Err(Failure::new(
                FailReason::NoSource,
                format!("the one voter {} is not healthy", only.name),
            ))
        };
    }
    voters
        .iter()
        .filter(|m| Some(m.id) != obs.leader && healthy(&m.id))
        .max_by_key(|m| {
            (
                obs.health.get(&m.id).and_then(|h| h.raft_index),
                std::cmp::Reverse(m.name.clone()),
            )
        })
        .and_then(|m| as_source(m))
        .ok_or_else(|| {
            Failure::new(
                FailReason::NoSource,
                format!(
                    "no healthy follower to stream a snapshot from ({} voters; the leader is not used: a snapshot would stall it)",
                    voters.len()
                ),
            )
        })
}

/// Keys of the credentials Secret.
pub const ACCESS_KEY_ID: &str = "accessKeyId";
pub const SECRET_ACCESS_KEY: &str = "secretAccessKey";

/// Where this backup goes: the local directory, or the bucket with the Secret's credentials.
pub fn destination(
    spec: &Backup,
    local_dir: &std::path::Path,
    operator_namespace: &str,
    secrets: &[Secret],
) -> Result<Destination, Failure> {
    let Some(s3) = &spec.s3 else {
        return Ok(Destination::Local {
            dir: local_dir.to_owned(),
        });
    };
    let name = &s3.credentials_secret;
    let secret = crate::observed::find(secrets, operator_namespace, name).ok_or_else(|| {
        Failure::new(
            FailReason::Credentials,
            format!(
                "spec.backup.s3.credentialsSecret: Secret {operator_namespace}/{name} not found"
            ),
        )
    })?;
    let key = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|v| String::from_utf8_lossy(&v.0).trim().to_owned())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Failure::new(
                    FailReason::Credentials,
                    format!(
                        "Secret {operator_namespace}/{name} (spec.backup.s3.credentialsSecret) has no key {k:?} (it needs {ACCESS_KEY_ID:?} and {SECRET_ACCESS_KEY:?})"
                    ),
                )
            })
    };
    Ok(Destination::S3(S3Config {
        endpoint: s3.endpoint.clone(),
        bucket: s3.bucket.clone(),
        prefix: s3.prefix.clone(),
        region: s3.region.clone(),
        access_key_id: key(ACCESS_KEY_ID)?,
        secret_access_key: key(SECRET_ACCESS_KEY)?,
    }))
}

/// A stored backup as retention sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub name: BackupName,
    /// Whole, recorded and (with `verify`) verified.
    pub good: bool,
}

/// The backups to delete (`stored` oldest first): beyond the newest `count`, or older than
/// `maxAgeHours`; never the newest good one.
pub fn to_delete(spec: &Backup, stored: &[Kept], now: OffsetDateTime) -> Vec<BackupName> {
    let newest_good = stored.iter().rev().find(|k| k.good).map(|k| &k.name);
    let count = usize::try_from(spec.retention.count).unwrap_or(usize::MAX);
    let beyond = stored.len().saturating_sub(count);
    let too_old = |k: &Kept| {
        spec.retention.max_age_hours > 0
            && parse_stamp(k.name.stamp()).is_some_and(|t| {
                now - t > time::Duration::hours(i64::from(spec.retention.max_age_hours))
            })
    };
    stored
        .iter()
        .enumerate()
        .filter(|(i, k)| (*i < beyond || too_old(k)) && Some(&k.name) != newest_good)
        .map(|(_, k)| k.name.clone())
        .collect()
}

/// Takes a finished backup into status (after the observer). `running` is this controller's
/// own state: the backup it started and has not collected.
pub async fn collect(p: &mut Pass<'_>, running: &mut Option<BackupRun>) {
    if !running.as_ref().is_some_and(|r| r.handle.is_finished()) {
        return;
    }
    let Some(done) = running.take() else {
        return;
    };
    let outcome = match done.handle.await {
        Ok(o) => o,
        Err(e) => run::Outcome::failed(Failure::new(
            FailReason::Interrupted,
            format!("the backup task ended: {e}"),
        )),
    };
    let mut status = p.status.backup.clone().unwrap_or_default();
    status.in_progress.clear();
    if !done.request.is_empty() {
        status.handled_request = done.request.clone();
    }
    if let Some(stored) = outcome.stored.clone() {
        status.stored = stored;
    }
    let m = &p.ctx.metrics;
    match outcome.result {
        Ok(good) => {
            m.backups
                .get_or_create(&ResultLabel {
                    result: "succeeded".into(),
                })
                .inc();
            let line = format!(
                "backup {} taken from {} at revision {} ({} bytes, {} ms) into {}{}",
                good.record.name,
                good.record.source_member,
                good.record.revision,
                good.record.size_bytes,
                good.record.duration_ms,
                good.record.destination,
                good.verified
                    .as_ref()
                    .map(|v| format!("; verified: {}", v.message))
                    .unwrap_or_default()
            );
            p.note(line.clone());
            p.event(EventReason::BackupSucceeded, line).await;
            status.last_success = Some(good.record);
            if good.verified.is_some() {
                status.last_verified = good.verified;
            }
            status.consecutive_failures = 0;
        }
        Err(f) => {
            m.backups
                .get_or_create(&ResultLabel {
                    result: "failed".into(),
                })
                .inc();
            status.consecutive_failures += 1;
            let line = format!(
                "backup {} failed ({}): {}",
                done.name,
                f.reason.as_str(),
                f.message
            );
            p.note(line.clone());
            p.event(EventReason::BackupFailed, line).await;
            status.last_failure = Some(BackupFailure {
                name: done.name.to_string(),
                time: format_time(p.o.now),
                reason: f.reason.as_str().into(),
                message: f.message,
            });
        }
    }
    p.status.backup = Some(status);
}

/// What the backup controller carries from pass to pass.
#[derive(Debug, Default)]
pub struct State {
    /// The backup being taken now.
    pub running: Option<BackupRun>,
    /// The schedule's longest gap between two runs (readiness and the gauge).
    pub schedule: ready::State,
}

/// Starts a backup into `st.running` when one is due (after the corruption check).
pub fn reconcile(p: &mut Pass<'_>, st: &mut State) {
    let Some(spec) = p.o.spec.backup.clone() else {
        p.ctx.metrics.backup_enabled.set(0);
        p.next(NAME, "off (spec.backup is not set)");
        return;
    };
    set_gauges(p, &spec, &mut st.schedule);
    if let Some(r) = st.running.as_ref() {
        p.next(NAME, format!("taking {}", r.name));
        p.busy = true;
        return;
    }
    if !p.o.managed {
        p.next(NAME, "none while managementState is Unmanaged");
        return;
    }
    record_interrupted(p);
    let Some(due) = due_time(p, &spec) else {
        return;
    };
    if p.not_yet(NAME, due, "next backup") {
        return;
    }
    let stamp = stamp(p.o.now);
    let Ok(name) = BackupName::new(&stamp) else {
        return;
    };
    p.next(NAME, format!("take backup {name}"));
    let client = match p.start_etcd(Task::Snapshot, &name.to_string()) {
        Outcome::Planned => return,
        Outcome::Made(client) => Some(client),
        Outcome::NoClient => None,
    };
    st.running = Some(start::start(p, name, spec, client));
}

/// Sets the backup gauges from status and the schedule.
fn set_gauges(p: &mut Pass<'_>, spec: &Backup, schedule: &mut ready::State) {
    let m = &p.ctx.metrics;
    m.backup_enabled.set(1);
    // From status, so a restarted or newly elected operator reports what its predecessor did.
    if let Some(st) = &p.status.backup {
        m.backup_consecutive_failures
            .set(i64::from(st.consecutive_failures));
        if let Some(good) = &st.last_success {
            m.backup_last_success
                .set(parse_time(&good.taken_at).map_or(0, |t| t.unix_timestamp()));
            m.backup_last_size
                .set(i64::try_from(good.size_bytes).unwrap_or(i64::MAX));
            m.backup_last_duration.set(good.duration_ms as f64 / 1000.0);
        }
    }
    // An invalid schedule leaves the gauge as it was (the controller is Degraded).
    if let Ok(interval) = ready::interval(schedule, &spec.schedule, p.o.now) {
        m.backup_max_interval
            .set(interval.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)));
    }
}

/// Records as failed a backup that status names but no task of this process runs.
fn record_interrupted(p: &mut Pass<'_>) {
    if let Some(status) = p
        .status
        .backup
        .as_mut()
        .filter(|s| !s.in_progress.is_empty())
    {
        // Status names a backup no task of this process runs: the operator restarted (or lost
        // its leadership) while it ran.
        let name = std::mem::take(&mut status.in_progress);
        status.consecutive_failures += 1;
        status.last_failure = Some(BackupFailure {
            name: name.clone(),
            time: format_time(p.o.now),
            reason: FailReason::Interrupted.as_str().into(),
            message: "the operator stopped while it ran".into(),
        });
        p.note(format!(
            "backup {name} was interrupted: the operator stopped while it ran"
        ));
    }
}

/// When the next backup is due; `None` (the controller Degraded) for an invalid schedule.
fn due_time(p: &mut Pass<'_>, spec: &Backup) -> Option<OffsetDateTime> {
    let due = match next_due(spec, p.status.backup.as_ref()) {
        Ok(d) => d,
        Err(e) => {
            p.cond(
                NAME.degraded(),
                true,
                crate::status::Reason::Failed(crate::category::Category::Spec),
                e.clone(),
            );
            p.next(NAME, e);
            return None;
        }
    };
    // Names are stamped to the second: never two attempts in one.
    let last_attempt = p
        .status
        .backup
        .as_ref()
        .and_then(|s| parse_time(&s.last_attempt_time));
    Some(last_attempt.map_or(due, |t| due.max(t + time::Duration::seconds(1))))
}

#[cfg(test)]
#[path = "backup_tests.rs"]
mod tests;
