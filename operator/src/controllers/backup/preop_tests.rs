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
fn a_failed_backup_holds_and_turns_overdue_after_the_deadline() {
    let mut s = good("2026-11-26T11:00:00Z");
    s.consecutive_failures = 1;
    s.last_failure = Some(BackupFailure {
        name: "b2".into(),
        time: "2026-11-26T12:00:30Z".into(),
        reason: "Snapshot".into(),
        message: String::new(),
    });
    assert_eq!(
        decide(&view(Some(&s))),
        Gate::Wait(WaitReason::BackupFailing { overdue: false })
    );
    let late = View {
        now: since0() + FAILING_DEADLINE,
        ..view(Some(&s))
    };
    assert_eq!(
        decide(&late),
        Gate::Wait(WaitReason::BackupFailing { overdue: true })
    );
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
    assert!(wants_backup(&s));
    s.last_attempt_time = "2026-11-26T12:00:05Z".into();
    assert!(!wants_backup(&s));
}

#[test]
fn an_upgrade_is_due_until_every_member_runs_the_target() {
    use crate::controllers::etcd_version::{Version, upgrade_state};
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
