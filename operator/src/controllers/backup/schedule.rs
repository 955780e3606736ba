//! When backups are due: the cron schedule (five fields or a CronJob macro such as `@daily`,
//! UTC), the retry after a failure, a new
//! request, and the UTC stamps that name backups (pure).

use std::time::Duration;

use time::OffsetDateTime;

use crate::api::{Backup, BackupStatus};
use crate::certs::{format_time, parse_time};

/// After a failure the next attempt comes after this long, or at the next scheduled time if
/// that is sooner.
pub const RETRY_AFTER: time::Duration = time::Duration::minutes(5);

/// `YYYYMMDDTHHMMSSZ` of `t` (UTC): [`format_time`] without its separators.
pub fn stamp(t: OffsetDateTime) -> String {
    format_time(t).replace(['-', ':'], "")
}

/// The time of a [`stamp`].
pub fn parse_stamp(s: &str) -> Option<OffsetDateTime> {
    let part = |r: std::ops::Range<usize>| s.get(r);
    if s.len() != 16 || part(8..9)? != "T" || part(15..16)? != "Z" {
        return None;
    }
    parse_time(&format!(
        "{}-{}-{}T{}:{}:{}Z",
        part(0..4)?,
        part(4..6)?,
        part(6..8)?,
        part(9..11)?,
        part(11..13)?,
        part(13..15)?
    ))
}

fn to_chrono(t: OffsetDateTime) -> chrono::NaiveDateTime {
    chrono::DateTime::from_timestamp(t.unix_timestamp(), 0)
        .unwrap_or_default()
        .naive_utc()
}

fn from_chrono(t: chrono::NaiveDateTime) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(t.and_utc().timestamp())
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// The macros a Kubernetes CronJob's schedule accepts (robfig/cron's descriptors, as the
/// CronJob documentation lists them), each with the five fields it stands for.
pub const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// The schedule, parsed (five fields, or one of [`MACROS`]; UTC).
pub fn parse_schedule(schedule: &str) -> Result<croner::Cron, String> {
    let trimmed = schedule.trim();
    let fields = MACROS
        .iter()
        .find(|(name, _)| *name == trimmed)
        .map_or(trimmed, |(_, fields)| fields);
    if fields.split_whitespace().count() != 5 {
        return Err(format!(
            "spec.backup.schedule {schedule:?}: expected five fields (minute hour day-of-month month day-of-week) or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
        ));
    }
    fields
        .parse::<croner::Cron>()
        .map_err(|e| format!("spec.backup.schedule {schedule:?}: {e}"))
}

/// The first scheduled time strictly after `after`.
pub fn next_scheduled(cron: &croner::Cron, after: OffsetDateTime) -> Option<OffsetDateTime> {
    cron.find_next_occurrence(&to_chrono(after), false)
        .ok()
        .map(from_chrono)
}

/// The longest gap between two scheduled times over the next 400 days' first 500 times (what
/// `EtcdBackupTooOld` compares a backup's age with).
pub fn max_interval(cron: &croner::Cron, from: OffsetDateTime) -> Option<Duration> {
    let mut prev = next_scheduled(cron, from)?;
    let mut longest = time::Duration::ZERO;
    for _ in 0..500 {
        let Some(next) = next_scheduled(cron, prev) else {
            break;
        };
        longest = longest.max(next - prev);
        if next - from > time::Duration::days(400) {
            break;
        }
        prev = next;
    }
    Duration::try_from(longest).ok().filter(|d| !d.is_zero())
}

/// When the next backup is due: at once without any attempt or with a new request; for a
/// disruptive operation's need with no attempt since it arose, at the need's time (a whole
/// second, [`super::preop::backup_due`]); after a failure [`RETRY_AFTER`] later (or the next scheduled time if sooner); else the next
/// scheduled time after the last attempt.
pub fn next_due(spec: &Backup, last: Option<&BackupStatus>) -> Result<OffsetDateTime, String> {
    let cron = parse_schedule(&spec.schedule)?;
    let Some(last) = last else {
        return Ok(OffsetDateTime::UNIX_EPOCH);
    };
    if !spec.request.is_empty() && spec.request != last.handled_request {
        return Ok(OffsetDateTime::UNIX_EPOCH);
    }
    if let Some(due) = super::preop::backup_due(last) {
        // A disruptive operation waits for a backup taken at or after this (whole) second.
        return Ok(due);
    }
    let Some(attempt) = parse_time(&last.last_attempt_time) else {
        return Ok(OffsetDateTime::UNIX_EPOCH);
    };
    let scheduled = next_scheduled(&cron, attempt)
        .ok_or_else(|| format!("spec.backup.schedule {:?} never fires", spec.schedule))?;
    Ok(if last.consecutive_failures > 0 {
        scheduled.min(attempt + RETRY_AFTER)
    } else {
        scheduled
    })
}
