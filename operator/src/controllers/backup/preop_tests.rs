use super::*;
use crate::api::{BackupFailure, BackupRecord, BackupVerification, PreOperationNeed};

fn at(s: &str) -> OffsetDateTime {
    parse_time(s).expect("an RFC 3339 time")
}

fn since0() -> OffsetDateTime {
    at("2026-11-26T12:00:00Z")
}

fn good(taken: &str) -> BackupStatus {
    BackupStatus {
        last_success: Some(BackupRecord {
            name: "b1".into(),
            taken_at: taken.into(),
            ..Default::default()
        }),
        last_verified: Some(BackupVerification {
            name: "b1".into(),
            time: taken.into(),
            message: String::new(),
        }),
        last_attempt_time: taken.into(),
        ..Default::default()
    }
}

fn view(status: Option<&BackupStatus>) -> View<'_> {
    View {
        configured: true,
        verify: true,
        under_way: false,
        since: since0(),
        status,
        now: since0() + time::Duration::minutes(1),
    }
}

#[test]
fn every_operation_requests_a_backup_when_none_exists() {
    for op in Operation::ALL {
        assert_eq!(Operation::parse(op.as_str()), Some(op));
        assert_eq!(decide(&view(None)), Gate::RequestBackup, "{op:?}");
    }
}

#[test]
fn without_backups_configured_nothing_waits() {
    let v = View {
        configured: false,
        ..view(None)
    };
    assert_eq!(decide(&v), Gate::Proceed);
}

#[test]
fn a_backup_older_than_the_need_does_not_count() {
    let s = good("2026-11-26T11:59:59Z");
    assert_eq!(decide(&view(Some(&s))), Gate::RequestBackup);
    let s = good("2026-11-26T12:00:01Z");
    assert_eq!(decide(&view(Some(&s))), Gate::Proceed);
}

#[test]
fn an_unverified_backup_counts_only_without_verify() {
    let mut s = good("2026-11-26T12:00:01Z");
    s.last_verified = None;
    assert_eq!(decide(&view(Some(&s))), Gate::RequestBackup);
    let v = View {
        verify: false,
        ..view(Some(&s))
    };
    assert_eq!(decide(&v), Gate::Proceed);
}

#[test]
fn a_backup_in_flight_waits() {
    let mut s = good("2026-11-26T11:00:00Z");
    s.in_progress = "backup-x".into();
    assert_eq!(
        decide(&view(Some(&s))),
        Gate::Wait(WaitReason::BackupInFlight)
    );
}

#[test]
fn a_failed_backup_holds_and_sets_degraded() {
    let mut s = good("2026-11-26T11:00:00Z");
    s.consecutive_failures = 1;
    s.last_attempt_time = "2026-11-26T12:00:20Z".into();
    s.last_failure = Some(BackupFailure {
        name: "b2".into(),
        time: "2026-11-26T12:00:30Z".into(),
        reason: "Snapshot".into(),
        message: String::new(),
    });
    assert_eq!(
        decide(&view(Some(&s))),
        Gate::Wait(WaitReason::BackupFailing)
    );
    // Not recorded as a need yet: nothing is held.
    let now = since0() + time::Duration::minutes(1);
    assert!(held_by_failure(&s, true, now).is_empty());
    s.pre_operation = vec![need(Operation::CaRotation, "2026-11-26T12:00:00Z")];
    assert_eq!(
        held_by_failure(&s, true, now),
        vec![(Operation::CaRotation, since0())]
    );
    // A failure from before the need holds nothing: a backup is requested for it.
    s.pre_operation = vec![need(Operation::CaRotation, "2026-11-26T12:01:00Z")];
    assert!(held_by_failure(&s, true, now).is_empty());
    // Nor does one recorded after the need for an attempt started before it.
    s.pre_operation = vec![need(Operation::CaRotation, "2026-11-26T12:00:25Z")];
    assert!(held_by_failure(&s, true, now).is_empty());
    let v = View {
        since: at("2026-11-26T12:00:25Z"),
        ..view(Some(&s))
    };
    assert_eq!(decide(&v), Gate::RequestBackup);
    assert_eq!(backup_due(&s), Some(at("2026-11-26T12:00:25Z")));
    // A good backup taken since releases it.
    s.pre_operation = vec![need(Operation::CaRotation, "2026-11-26T12:00:00Z")];
    let mut released = good("2026-11-26T12:00:40Z");
    released.pre_operation = s.pre_operation.clone();
    assert!(held_by_failure(&released, true, now).is_empty());
}

fn need(op: Operation, since: &str) -> PreOperationNeed {
    PreOperationNeed {
        operation: op.as_str().into(),
        since: since.into(),
    }
}

#[test]
fn an_operation_under_way_never_waits() {
    let v = View {
        under_way: true,
        ..view(None)
    };
    assert_eq!(decide(&v), Gate::Proceed);
}

#[test]
fn a_recorded_need_survives_and_asks_for_a_backup_once() {
    let mut s = good("2026-11-26T11:00:00Z");
    s.pre_operation = vec![PreOperationNeed {
        operation: "Defrag".into(),
        since: "2026-11-26T12:00:00Z".into(),
    }];
    let later = since0() + time::Duration::hours(1);
    assert_eq!(since(Some(&s), Operation::Defrag, later), since0());
    assert_eq!(since(Some(&s), Operation::CaRotation, later), later);
    assert_eq!(backup_due(&s), Some(since0()));
    s.last_attempt_time = "2026-11-26T12:00:05Z".into();
    assert_eq!(backup_due(&s), None);
}

#[test]
fn a_need_is_recorded_at_the_next_whole_second() {
    assert_eq!(need_time(since0()), since0());
    let late = since0() + time::Duration::milliseconds(1);
    assert_eq!(need_time(late), since0() + time::Duration::SECOND);
    assert_eq!(
        since(None, Operation::Defrag, late),
        since0() + time::Duration::SECOND
    );
}

/// The backup the controller takes for a need counts for it: one backup, never a second
/// (`taken_at` and attempt times are whole seconds, rounded down).
#[test]
fn the_backup_taken_for_a_need_counts_for_it() {
    use crate::certs::format_time;
    let spec = crate::api::Backup {
        schedule: "0 0 1 1 *".into(),
        ..Default::default()
    };
    let mut s = good("2026-11-26T11:00:00Z");
    s.last_attempt_time = "2026-11-26T11:59:59Z".into();
    for ms in [0, 1, 400, 999] {
        let now = since0() + time::Duration::milliseconds(ms);
        let due_at = since(Some(&s), Operation::Defrag, now);
        let mut st = s.clone();
        st.pre_operation = vec![need(Operation::Defrag, &format_time(due_at))];
        let v = View {
            since: since(Some(&st), Operation::Defrag, now),
            now,
            ..view(Some(&st))
        };
        assert_eq!(decide(&v), Gate::RequestBackup, "{ms} ms");
        // The controller starts it when due (not before) and records it to the second.
        let due = super::super::next_due(&spec, Some(&st)).expect("a schedule");
        assert!(
            due >= due_at && due - now < time::Duration::SECOND,
            "{ms} ms"
        );
        let start = due.max(now);
        st.last_attempt_time = format_time(start);
        st.last_success = Some(BackupRecord {
            name: "b2".into(),
            taken_at: format_time(start),
            ..Default::default()
        });
        st.last_verified = Some(BackupVerification {
            name: "b2".into(),
            time: format_time(start),
            message: String::new(),
        });
        assert_eq!(backup_due(&st), None, "{ms} ms: no second backup");
        let v = View {
            since: since(Some(&st), Operation::Defrag, start),
            now: start,
            ..view(Some(&st))
        };
        assert_eq!(decide(&v), Gate::Proceed, "{ms} ms");
    }
}

#[test]
fn an_upgrade_is_due_until_every_member_runs_the_target() {
    use crate::etcd_version::{Version, upgrade_state};
    let v = |s: &str| Version::parse(s).expect("a version");
    assert_eq!(
        upgrade_state(Some(v("3.5.9")), &[v("3.5.9"), v("3.5.9")]),
        None
    );
    assert_eq!(
        upgrade_state(Some(v("3.6.0")), &[v("3.5.9"), v("3.5.9")]),
        Some(false)
    );
    assert_eq!(
        upgrade_state(Some(v("3.6.0")), &[v("3.6.0"), v("3.5.9")]),
        Some(true)
    );
    assert_eq!(upgrade_state(None, &[v("3.5.9")]), None);
}

/// A need recorded in the same second as the last good backup but after it: that backup misses
/// what was written in between and must not count (status times are whole seconds).
#[test]
fn a_backup_taken_earlier_in_the_needs_second_does_not_count() {
    let mut s = good("2026-11-26T12:00:00Z");
    let now = since0() + time::Duration::milliseconds(700);
    let first = since(Some(&s), Operation::Defrag, now);
    s.pre_operation = vec![PreOperationNeed {
        operation: Operation::Defrag.as_str().into(),
        since: crate::certs::format_time(first),
    }];
    let later = now + time::Duration::milliseconds(200);
    let v = View {
        since: since(Some(&s), Operation::Defrag, later),
        now: later,
        ..view(Some(&s))
    };
    assert_eq!(decide(&v), Gate::RequestBackup);
}
