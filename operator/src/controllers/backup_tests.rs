//! When a backup is due, which member it streams from, where it goes, and what retention
//! deletes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use membership::Member;

use super::*;
use crate::api::{BackupRetention, BackupStatus, S3Destination};
use crate::etcd::MemberObs;

fn id(i: u64) -> MemberId {
    MemberId::new(i).unwrap()
}

fn t(s: &str) -> OffsetDateTime {
    parse_time(s).unwrap()
}

fn obs(ids: &[u64], leader: u64, unhealthy: &[u64]) -> EtcdObservation {
    let mut o = EtcdObservation {
        members: ids
            .iter()
            .map(|i| {
                Member::voter(
                    id(*i),
                    &format!("n{i}"),
                    format!("https://10.0.0.{i}:2380").parse().unwrap(),
                )
                .with_client_url(format!("https://10.0.0.{i}:2379").parse().unwrap())
            })
            .collect(),
        leader: Some(id(leader)),
        ..Default::default()
    };
    for i in ids {
        o.health.insert(
            id(*i),
            MemberObs {
                healthy: !unhealthy.contains(i),
                raft_index: Some(100 + i),
                ..Default::default()
            },
        );
    }
    o
}

fn status(attempt: &str, failures: u32) -> BackupStatus {
    BackupStatus {
        last_attempt_time: attempt.into(),
        consecutive_failures: failures,
        ..Default::default()
    }
}

#[test]
fn due_at_once_then_by_schedule_and_sooner_after_a_failure() {
    let spec = Backup::default(); // hourly, on the hour
    assert_eq!(next_due(&spec, None).unwrap(), OffsetDateTime::UNIX_EPOCH);
    let after_good = status("2026-11-26T04:10:00Z", 0);
    assert_eq!(
        next_due(&spec, Some(&after_good)).unwrap(),
        t("2026-11-26T05:00:00Z")
    );
    let after_failure = status("2026-11-26T04:10:00Z", 1);
    assert_eq!(
        next_due(&spec, Some(&after_failure)).unwrap(),
        t("2026-11-26T04:15:00Z")
    );
    let late_failure = status("2026-11-26T04:58:00Z", 3);
    assert_eq!(
        next_due(&spec, Some(&late_failure)).unwrap(),
        t("2026-11-26T05:00:00Z"),
        "the schedule when it comes before the retry"
    );
    let requested = Backup {
        request: "now-1".into(),
        ..Backup::default()
    };
    assert_eq!(
        next_due(&requested, Some(&after_good)).unwrap(),
        OffsetDateTime::UNIX_EPOCH
    );
    let handled = BackupStatus {
        handled_request: "now-1".into(),
        ..after_good
    };
    assert_eq!(
        next_due(&requested, Some(&handled)).unwrap(),
        t("2026-11-26T05:00:00Z")
    );
}

#[test]
fn a_bad_schedule_names_itself() {
    for bad in ["0 * * *", "61 * * * *", "every hour", "0 0 * * * *"] {
        let spec = Backup {
            schedule: bad.into(),
            ..Backup::default()
        };
        let e = next_due(&spec, None).unwrap_err();
        assert!(e.contains("spec.backup.schedule") && e.contains(bad), "{e}");
    }
}

/// The macros a Kubernetes CronJob accepts mean what they mean there; anything else that is
/// not five fields is refused, a misspelt macro included.
#[test]
fn cronjob_macros_are_schedules() {
    let at = t("2026-11-26T04:10:00Z");
    let next = |s: &str| format_time(next_scheduled(&parse_schedule(s).unwrap(), at).unwrap());
    assert_eq!(next("@hourly"), "2026-11-26T05:00:00Z");
    assert_eq!(next("@daily"), "2026-11-27T00:00:00Z");
    assert_eq!(next("@midnight"), "2026-11-27T00:00:00Z");
    assert_eq!(next("@weekly"), "2026-11-29T00:00:00Z", "the next Sunday");
    assert_eq!(next("@monthly"), "2026-12-01T00:00:00Z");
    assert_eq!(next("@yearly"), "2027-01-01T00:00:00Z");
    assert_eq!(next("@annually"), "2027-01-01T00:00:00Z");
    assert_eq!(next(" @daily "), "2026-11-27T00:00:00Z");
    let daily = parse_schedule("@daily").unwrap();
    assert_eq!(max_interval(&daily, at), Some(Duration::from_secs(86400)));
    for bad in ["@Daily", "@fortnightly", "@every 1h", "@daily 0"] {
        let e = parse_schedule(bad).unwrap_err();
        assert!(e.contains(bad) && e.contains("@daily"), "{e}");
    }
}

#[test]
fn the_longest_gap_of_a_schedule() {
    let at = t("2026-11-26T04:10:00Z");
    let hourly = parse_schedule("0 * * * *").unwrap();
    assert_eq!(max_interval(&hourly, at), Some(Duration::from_secs(3600)));
    let workdays = parse_schedule("30 2 * * 1-5").unwrap();
    assert_eq!(
        max_interval(&workdays, at),
        Some(Duration::from_secs(3 * 86400)),
        "Friday to Monday"
    );
}

#[test]
fn streams_from_the_most_advanced_healthy_follower_never_the_leader() {
    let s = pick_source(&obs(&[1, 2, 3], 3, &[])).unwrap();
    assert_eq!(
        s.name, "n2",
        "n3 leads; n2 has the higher raft index of the followers"
    );
    let s = pick_source(&obs(&[1, 2, 3], 3, &[2])).unwrap();
    assert_eq!(s.name, "n1");
    let e = pick_source(&obs(&[1, 2, 3], 3, &[1, 2])).unwrap_err();
    assert_eq!(e.reason, FailReason::NoSource);
    assert!(e.message.contains("leader is not used"), "{}", e.message);
    let s = pick_source(&obs(&[1], 1, &[])).unwrap();
    assert_eq!(s.name, "n1", "a one-member cluster has only its leader");
    assert!(pick_source(&obs(&[1], 1, &[1])).is_err());
}

fn secret(name: &str, keys: &[(&str, &str)]) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some("etcd-operator".into());
    s.data = Some(
        keys.iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect::<BTreeMap<_, _>>(),
    );
    s
}

#[test]
fn the_destination_and_its_credentials() {
    let local = destination(&Backup::default(), "/b".as_ref(), "etcd-operator", &[]).unwrap();
    assert_eq!(local, Destination::Local { dir: "/b".into() });
    let spec = Backup {
        s3: Some(S3Destination {
            endpoint: "https://s3.example".into(),
            bucket: "etcd".into(),
            prefix: "cluster-a".into(),
            region: "eu-1".into(),
            credentials_secret: "backup-s3".into(),
        }),
        ..Backup::default()
    };
    let e = destination(&spec, "/b".as_ref(), "etcd-operator", &[]).unwrap_err();
    assert_eq!(e.reason, FailReason::Credentials);
    assert!(
        e.message.contains("etcd-operator/backup-s3 not found"),
        "{}",
        e.message
    );
    let partial = [secret("backup-s3", &[("accessKeyId", "AK")])];
    let e = destination(&spec, "/b".as_ref(), "etcd-operator", &partial).unwrap_err();
    assert!(e.message.contains("\"secretAccessKey\""), "{}", e.message);
    let full = [secret(
        "backup-s3",
        &[("accessKeyId", "AK"), ("secretAccessKey", "SK\n")],
    )];
    let Destination::S3(c) = destination(&spec, "/b".as_ref(), "etcd-operator", &full).unwrap()
    else {
        panic!("not S3");
    };
    assert_eq!(
        (c.access_key_id.as_str(), c.secret_access_key.as_str()),
        ("AK", "SK")
    );
    assert!(
        !format!("{c:?}").contains("SK"),
        "the secret never shows in Debug"
    );
}

fn kept(stamp: &str, good: bool) -> Kept {
    Kept {
        name: BackupName::new(stamp).unwrap(),
        good,
    }
}

#[test]
fn retention_keeps_the_newest_and_never_the_last_good_one() {
    let spec = Backup {
        retention: BackupRetention {
            count: 2,
            max_age_hours: 0,
        },
        ..Backup::default()
    };
    let now = t("2026-11-26T10:00:00Z");
    let stored = [
        kept("20261126T060000Z", true),
        kept("20261126T070000Z", true),
        kept("20261126T080000Z", false),
        kept("20261126T090000Z", false),
    ];
    let names: Vec<String> = to_delete(&spec, &stored, now)
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(
        names,
        ["etcd-backup-20261126T060000Z"],
        "07:00 is the newest good backup: kept although beyond the count"
    );
    let aged = Backup {
        retention: BackupRetention {
            count: 10,
            max_age_hours: 3,
        },
        ..Backup::default()
    };
    let names: Vec<String> = to_delete(&aged, &stored, now)
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(names, ["etcd-backup-20261126T060000Z"]);
    let only_old = [kept("20261120T060000Z", true)];
    assert!(
        to_delete(&aged, &only_old, now).is_empty(),
        "the last good one stays"
    );
}

#[test]
fn stamps_round_trip() {
    let at = t("2026-11-26T04:05:06Z");
    assert_eq!(stamp(at), "20261126T040506Z");
    assert_eq!(parse_stamp(&stamp(at)), Some(at));
    assert_eq!(parse_stamp("2026112"), None);
}
