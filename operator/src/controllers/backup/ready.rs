//! `BackupReady`: is there a backup recent enough to lose nothing more than the schedule
//! allows, should what the operator or an admin does next go wrong?
//!
//! Inputs: `spec.backup`, `status.backup` (its last good and last verified backup, its failures),
//! the schedule's longest gap between two runs ([`super::max_interval`], cached per schedule for
//! a day in [`State`]) and `now`. Decision ([`decide`], pure):
//! - **no `spec.backup`**: False, reason `BackupsNotConfigured`. Nothing waits for a backup then
//!   (no backup will ever come); False, not Unknown, because the operator knows there is none.
//! - **True** (`AsExpected`) when the last good backup was taken no longer ago than the
//!   [`allowed_age`]: the schedule's longest gap + `spec.backup.timeoutSeconds` + [`MARGIN`] (5
//!   minutes). One scheduled run may take its whole timeout before it is verified; a run that is
//!   missed or fails lets the age pass the limit. The hourly default allows 1h20m. "Good" is
//!   what `status.backup` records as such: with `spec.backup.verify` (the default) the last
//!   backup a restore proved readable (`lastVerified`), its age counted from when it was
//!   *taken* (the recovery point, not the verification); with `verify: false`, the last backup
//!   taken and stored (`lastSuccess`), as the admin chose.
//! - **False** otherwise, with the reason: `BackupFailing` when the last attempt failed (or the
//!   schedule is invalid, so none is attempted), else `NoVerifiedBackup` when there is no good
//!   backup yet, else `BackupTooOld`; the message names the backup, its age and the limit.
//!
//! While backups are configured and `BackupReady` is False, it is a [`Risk`] of kind
//! [`RiskKind::BackupNotReady`]: `Upgradeable` is False with reason `BackupNotReady`
//! ([`crate::driver::payload_status`]) and the quorum guard's budget allows no eviction at all
//! ([`super::super::quorum_guard`]). A backup taken at once (`spec.backup.request`) that is
//! verified lifts both.

use std::time::Duration;

use etcd_snapshot::store::BACKUP_PREFIX;
use time::OffsetDateTime;

use super::{RETRY_AFTER, max_interval, parse_schedule, parse_stamp};
use crate::api::{Backup, BackupStatus};
use crate::certs::parse_time;
use crate::controllers::quorum_guard::{Risk, RiskKind};
use crate::pass::Pass;
use crate::status::{ConditionType as C, Reason};

/// What the allowed age adds to the schedule's gap and the timeout: a pass's latency in
/// collecting a finished backup (the same five minutes as the retry after a failure).
pub const MARGIN: time::Duration = RETRY_AFTER;

/// `BackupReady` as decided for this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// `spec.backup` is set.
    pub configured: bool,
    pub ready: bool,
    pub reason: Reason,
    pub message: String,
}

impl Readiness {
    fn new(configured: bool, ready: bool, reason: Reason, message: String) -> Self {
        Self {
            configured,
            ready,
            reason,
            message,
        }
    }

    /// What it holds (drains, upgrades): backups are configured and not ready.
    pub fn risk(&self) -> Option<Risk> {
        (self.configured && !self.ready).then(|| Risk {
            kind: RiskKind::BackupNotReady,
            text: format!(
                "BackupReady is False ({}): {}",
                self.reason.as_str(),
                self.message
            ),
        })
    }
}

/// How old the last good backup may be: the schedule's longest gap, plus the timeout a run may
/// take, plus [`MARGIN`].
pub fn allowed_age(spec: &Backup, interval: Duration) -> time::Duration {
    time::Duration::try_from(interval).unwrap_or(time::Duration::MAX)
        + time::Duration::seconds(i64::from(spec.timeout_seconds))
        + MARGIN
}

/// `d` for people: `1h20m`, `45m`, `2d3h`, `30s`.
pub fn human(d: time::Duration) -> String {
    let s = d.whole_seconds().max(0);
    let (days, hours, minutes, seconds) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    let parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")];
    let out: String = parts
        .iter()
        .skip_while(|(n, _)| *n == 0)
        .take(2)
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if out.is_empty() { "0s".to_owned() } else { out }
}

/// The last good backup's name and when it was taken (see the module doc for "good").
fn last_good(spec: &Backup, status: &BackupStatus) -> Option<(String, OffsetDateTime)> {
    let success = status.last_success.as_ref();
    if !spec.verify {
        let r = success?;
        return Some((r.name.clone(), parse_time(&r.taken_at)?));
    }
    let v = status.last_verified.as_ref()?;
    let taken = success
        .filter(|r| r.name == v.name)
        .and_then(|r| parse_time(&r.taken_at))
        .or_else(|| v.name.strip_prefix(BACKUP_PREFIX).and_then(parse_stamp))
        .or_else(|| parse_time(&v.time))?;
    Some((v.name.clone(), taken))
}

/// The limit and how it is made up.
fn limit_rule(spec: &Backup, interval: Duration, limit: time::Duration) -> String {
    format!(
        "the limit is {} (the schedule's longest gap {} + timeoutSeconds {} + {})",
        human(limit),
        human(time::Duration::try_from(interval).unwrap_or(time::Duration::MAX)),
        spec.timeout_seconds,
        human(MARGIN)
    )
}

/// The failed attempts since the last good backup, if any.
fn failure_line(status: &BackupStatus) -> Option<String> {
    status
        .last_failure
        .as_ref()
        .filter(|_| status.consecutive_failures > 0)
        .map(|f| {
            format!(
                "{} attempt(s) failed in a row, the last ({}, {}): {}",
                status.consecutive_failures, f.name, f.reason, f.message
            )
        })
}

/// `BackupReady` from the spec, the status, the schedule's longest gap (or why it has none) and
/// `now`.
pub fn decide(
    spec: Option<&Backup>,
    status: Option<&BackupStatus>,
    interval: Result<Option<Duration>, String>,
    now: OffsetDateTime,
) -> Readiness {
    let Some(spec) = spec else {
        return Readiness::new(
            false,
            false,
            Reason::BackupsNotConfigured,
            "spec.backup is not set: no backups are taken, and nothing waits for one".to_owned(),
        );
    };
    let failing = |message: String| Readiness::new(true, false, Reason::BackupFailing, message);
    let interval = match interval {
        Ok(Some(i)) => i,
        Ok(None) => {
            return failing(format!(
                "spec.backup.schedule {:?} never fires: no backup is taken",
                spec.schedule
            ));
        }
        Err(e) => return failing(format!("{e}: no backup is taken")),
    };
    let limit = allowed_age(spec, interval);
    let rule = limit_rule(spec, interval, limit);
    let what = if spec.verify {
        "the last verified backup"
    } else {
        "the last good backup (not verified: spec.backup.verify is false)"
    };
    let empty = BackupStatus::default();
    let status = status.unwrap_or(&empty);
    let last = last_good(spec, status);
    let last_line = match &last {
        Some((name, taken)) => format!("{what} {name} was taken {} ago", human(now - *taken)),
        None => format!(
            "there is no {} backup yet",
            if spec.verify { "verified" } else { "good" }
        ),
    };
    let failure = failure_line(status);
    let in_progress = if status.in_progress.is_empty() {
        String::new()
    } else {
        format!("; backup {} is being taken", status.in_progress)
    };
    if let Some((_, taken)) = &last
        && now - *taken <= limit
    {
        let note = failure.map(|f| format!("; {f}")).unwrap_or_default();
        return Readiness::new(
            true,
            true,
            Reason::AsExpected,
            format!("{last_line}; {rule}{note}"),
        );
    }
    let (reason, message) = match (failure, &last) {
        (Some(f), _) => (Reason::BackupFailing, format!("{f}; {last_line}; {rule}")),
        (None, None) => (Reason::NoVerifiedBackup, format!("{last_line}; {rule}")),
        (None, Some(_)) => (Reason::BackupTooOld, format!("{last_line}; {rule}")),
    };
    Readiness::new(true, false, reason, format!("{message}{in_progress}"))
}

/// The schedule's longest gap between two runs, from the cache when it was computed for this
/// schedule within the last day (computing it walks up to 500 runs); why there is none when the
/// schedule does not parse.
pub fn interval(
    st: &mut State,
    schedule: &str,
    now: OffsetDateTime,
) -> Result<Option<Duration>, String> {
    if let Some((cached, at, interval)) = &st.interval
        && cached == schedule
        && now - *at < time::Duration::days(1)
    {
        return Ok(*interval);
    }
    let cron = parse_schedule(schedule)?;
    let interval = max_interval(&cron, now);
    st.interval = Some((schedule.to_owned(), now, interval));
    Ok(interval)
}

/// What readiness carries from pass to pass: the schedule's longest gap between two runs, for
/// the schedule it was computed for and when (recomputed on a new schedule or after a day: it
/// walks up to 500 runs).
#[derive(Debug, Default)]
pub struct State {
    interval: Option<(String, OffsetDateTime, Option<Duration>)>,
}

/// Sets `BackupReady` for this pass (every pass, also one that stopped early: it needs no
/// etcd) and returns what it holds.
pub fn reconcile(p: &mut Pass<'_>, st: &mut State) -> Option<Risk> {
    let spec = p.o.spec.backup.clone();
    let interval = match &spec {
        Some(s) => interval(st, &s.schedule, p.o.now),
        None => Ok(None),
    };
    let r = decide(spec.as_ref(), p.status.backup.as_ref(), interval, p.o.now);
    p.cond(C::BackupReady, r.ready, r.reason, r.message.clone());
    r.risk()
}

#[cfg(test)]
#[path = "ready_tests.rs"]
mod tests;
