//! `BackupReady` from the spec, the status and `now`: fresh, too old, none yet, failing, not
//! configured; the age counted from when the backup was taken; what it holds.

use std::time::Duration;

use super::*;
use crate::api::{BackupFailure, BackupRecord, BackupVerification};

const HOUR: Duration = Duration::from_secs(3600);

fn t(s: &str) -> OffsetDateTime {
    parse_time(s).unwrap()
}

fn record(stamp: &str, taken_at: &str) -> BackupRecord {
    BackupRecord {
        name: format!("etcd-backup-{stamp}"),
        taken_at: taken_at.into(),
        ..Default::default()
    }
}

/// A backup taken at 10:00:00 and verified at 10:10:00 on 2024-05-01.
fn verified_at_ten() -> BackupStatus {
    BackupStatus {
        last_success: Some(record("20240501T100000Z", "2024-05-01T10:00:00Z")),
        last_verified: Some(BackupVerification {
            name: "etcd-backup-20240501T100000Z".into(),
            time: "2024-05-01T10:10:00Z".into(),
            message: "restored; marker read back".into(),
        }),
        last_attempt_time: "2024-05-01T10:00:00Z".into(),
        ..Default::default()
    }
}

fn failed(mut s: BackupStatus, failures: u32) -> BackupStatus {
    s.consecutive_failures = failures;
    s.last_failure = Some(BackupFailure {
        name: "etcd-backup-20240501T110000Z".into(),
        time: "2024-05-01T11:00:05Z".into(),
        reason: "Credentials".into(),
        message: "Secret etcd-operator/s3 not found".into(),
    });
    s
}

fn hourly(status: &BackupStatus, now: &str) -> Readiness {
    decide(
        Some(&Backup::default()),
        Some(status),
        Ok(Some(HOUR)),
        t(now),
    )
}

#[test]
fn the_limit_is_the_longest_gap_plus_the_timeout_plus_five_minutes() {
    let spec = Backup::default();
    assert_eq!(allowed_age(&spec, HOUR), time::Duration::minutes(80));
    let daily = max_interval(
        &parse_schedule("30 2 * * *").unwrap(),
        t("2024-05-01T00:00:00Z"),
    );
    assert_eq!(
        allowed_age(&spec, daily.unwrap()),
        time::Duration::hours(24) + time::Duration::minutes(20)
    );
    let slow = Backup {
        timeout_seconds: 3600,
        ..Backup::default()
    };
    assert_eq!(allowed_age(&slow, HOUR), time::Duration::minutes(125));
}

#[test]
fn a_verified_backup_within_the_limit_is_ready() {
    let r = hourly(&verified_at_ten(), "2024-05-01T11:15:00Z");
    assert!(r.ready && r.configured, "{r:?}");
    assert_eq!(r.reason, Reason::AsExpected);
    assert_eq!(
        r.message,
        "the last verified backup etcd-backup-20240501T100000Z was taken 1h15m ago; the limit is \
         1h20m (the schedule's longest gap 1h + timeoutSeconds 900 + 5m)"
    );
    assert_eq!(r.risk(), None);
}

#[test]
fn the_age_counts_from_when_the_backup_was_taken_not_verified() {
    // Taken at 10:00, verified at 10:10: at 11:20:01 it is 1h20m01s old, past the limit.
    let r = hourly(&verified_at_ten(), "2024-05-01T11:20:01Z");
    assert!(!r.ready);
    assert_eq!(r.reason, Reason::BackupTooOld);
    assert!(
        r.message.starts_with(
            "the last verified backup etcd-backup-20240501T100000Z was taken 1h20m ago; the limit is 1h20m"
        ),
        "{}",
        r.message
    );
    // Without the record of the success (another backup succeeded since, unverified), the
    // name's stamp says when it was taken.
    let mut s = verified_at_ten();
    s.last_success = Some(record("20240501T110000Z", "2024-05-01T11:00:00Z"));
    assert_eq!(
        hourly(&s, "2024-05-01T11:20:01Z").reason,
        Reason::BackupTooOld
    );
    assert!(hourly(&s, "2024-05-01T11:19:59Z").ready);
}

#[test]
fn too_old_names_the_age_the_limit_and_the_backup_in_flight() {
    let mut s = verified_at_ten();
    s.in_progress = "etcd-backup-20240501T130000Z".into();
    let r = hourly(&s, "2024-05-01T13:02:00Z");
    assert_eq!(
        (r.ready, r.reason),
        (false, Reason::BackupTooOld),
        "{}",
        r.message
    );
    assert_eq!(
        r.message,
        "the last verified backup etcd-backup-20240501T100000Z was taken 3h2m ago; the limit is \
         1h20m (the schedule's longest gap 1h + timeoutSeconds 900 + 5m); backup \
         etcd-backup-20240501T130000Z is being taken"
    );
    let risk = r.risk().unwrap();
    assert_eq!(risk.kind, RiskKind::BackupNotReady);
    assert!(
        risk.text
            .starts_with("BackupReady is False (BackupTooOld): the last verified"),
        "{}",
        risk.text
    );
}

#[test]
fn no_verified_backup_yet() {
    let first = BackupStatus {
        in_progress: "etcd-backup-20240501T100000Z".into(),
        ..Default::default()
    };
    let r = hourly(&first, "2024-05-01T10:00:30Z");
    assert_eq!((r.ready, r.reason), (false, Reason::NoVerifiedBackup));
    assert!(
        r.message
            .starts_with("there is no verified backup yet; the limit is 1h20m"),
        "{}",
        r.message
    );
    assert!(r.message.ends_with("is being taken"), "{}", r.message);
    let none = decide(
        Some(&Backup::default()),
        None,
        Ok(Some(HOUR)),
        t("2024-05-01T10:00:00Z"),
    );
    assert_eq!(none.reason, Reason::NoVerifiedBackup);
    // Taken but not verified does not count while spec.backup.verify is on.
    let unverified = BackupStatus {
        last_success: Some(record("20240501T100000Z", "2024-05-01T10:00:00Z")),
        ..Default::default()
    };
    assert_eq!(
        hourly(&unverified, "2024-05-01T10:05:00Z").reason,
        Reason::NoVerifiedBackup
    );
    // With verify off, the last good backup counts, and the message says it is unverified.
    let off = Backup {
        verify: false,
        ..Backup::default()
    };
    let r = decide(
        Some(&off),
        Some(&unverified),
        Ok(Some(HOUR)),
        t("2024-05-01T10:05:00Z"),
    );
    assert!(r.ready, "{r:?}");
    assert!(
        r.message
            .contains("not verified: spec.backup.verify is false"),
        "{}",
        r.message
    );
}

#[test]
fn failing_attempts_are_named_once_the_backup_is_too_old() {
    let s = failed(verified_at_ten(), 3);
    let r = hourly(&s, "2024-05-01T12:00:00Z");
    assert_eq!((r.ready, r.reason), (false, Reason::BackupFailing));
    assert_eq!(
        r.message,
        "3 attempt(s) failed in a row, the last (etcd-backup-20240501T110000Z, Credentials): \
         Secret etcd-operator/s3 not found; the last verified backup \
         etcd-backup-20240501T100000Z was taken 2h ago; the limit is 1h20m (the schedule's \
         longest gap 1h + timeoutSeconds 900 + 5m)"
    );
    // Never succeeded and failing: failing, not merely none yet.
    let never = failed(BackupStatus::default(), 1);
    let r = hourly(&never, "2024-05-01T11:00:10Z");
    assert_eq!(r.reason, Reason::BackupFailing);
    assert!(
        r.message.contains("there is no verified backup yet"),
        "{}",
        r.message
    );
    // A failure while the last verified backup is still recent: ready, the failure said.
    let r = hourly(&s, "2024-05-01T11:10:00Z");
    assert!(r.ready);
    assert!(
        r.message.ends_with("Secret etcd-operator/s3 not found"),
        "{}",
        r.message
    );
}

#[test]
fn a_schedule_that_takes_no_backup_is_failing() {
    let r = decide(
        Some(&Backup::default()),
        Some(&verified_at_ten()),
        Err("spec.backup.schedule \"x\": expected five fields".into()),
        t("2024-05-01T10:05:00Z"),
    );
    assert_eq!((r.ready, r.reason), (false, Reason::BackupFailing));
    assert!(r.message.ends_with("no backup is taken"), "{}", r.message);
    let r = decide(
        Some(&Backup::default()),
        None,
        Ok(None),
        t("2024-05-01T10:05:00Z"),
    );
    assert_eq!(r.reason, Reason::BackupFailing);
    assert!(r.message.contains("never fires"), "{}", r.message);
}

#[test]
fn without_spec_backup_it_is_false_and_holds_nothing() {
    let r = decide(
        None,
        Some(&verified_at_ten()),
        Ok(None),
        t("2024-05-01T10:05:00Z"),
    );
    assert!(!r.ready && !r.configured);
    assert_eq!(r.reason, Reason::BackupsNotConfigured);
    assert_eq!(r.risk(), None);
}

#[test]
fn ages_read_as_people_say_them() {
    let d = time::Duration::seconds;
    assert_eq!(human(d(0)), "0s");
    assert_eq!(human(d(30)), "30s");
    assert_eq!(human(d(4500)), "1h15m");
    assert_eq!(human(d(7200)), "2h");
    assert_eq!(human(d(7261)), "2h1m");
    assert_eq!(human(d(86400 * 2 + 3 * 3600 + 59)), "2d3h");
    assert_eq!(human(d(-5)), "0s");
}
