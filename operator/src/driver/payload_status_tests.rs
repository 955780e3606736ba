//! `Upgradeable` and `status.versions` from hand-built observations.

use membership::{Member, MemberId, MemberUrl};

use super::*;
use crate::etcd::MemberObs;

fn risk(kind: RiskKind, text: &str) -> Risk {
    Risk {
        kind,
        text: text.into(),
    }
}

#[test]
fn upgradeable_when_nothing_is_in_flight() {
    let (ok, reason, message) = upgradeable(&[], &[], None);
    assert!(ok);
    assert_eq!(reason, Reason::AsExpected);
    assert!(message.starts_with("no membership change"), "{message}");
}

#[test]
fn the_first_risk_names_the_reason_and_every_one_is_said() {
    let risks = [
        risk(RiskKind::Rollout, "node n2 moves to revision 5 (runs 4)"),
        risk(
            RiskKind::MembershipChange,
            "learner n4 waits to be promoted",
        ),
    ];
    let (ok, reason, message) = upgradeable(&risks, &[], None);
    assert!(!ok);
    assert_eq!(reason, Reason::RevisionRollingOut);
    assert_eq!(
        message,
        "node n2 moves to revision 5 (runs 4); learner n4 waits to be promoted"
    );
    let (_, reason, _) = upgradeable(&risks[1..], &[], None);
    assert_eq!(reason, Reason::MembershipChanging);
}

#[test]
fn backups_not_ready_hold_upgrades_after_every_other_reason() {
    let backup = risk(
        RiskKind::BackupNotReady,
        "BackupReady is False (NoVerifiedBackup): there is no verified backup yet",
    );
    let (ok, reason, message) = upgradeable(std::slice::from_ref(&backup), &[], None);
    assert!(!ok);
    assert_eq!(reason, Reason::BackupNotReady);
    assert_eq!(reason.as_str(), "BackupNotReady");
    assert_eq!(
        message,
        "BackupReady is False (NoVerifiedBackup): there is no verified backup yet"
    );
    let rollout = risk(RiskKind::Rollout, "node n2 moves to revision 5 (runs 4)");
    let (_, reason, message) = upgradeable(&[rollout, backup], &[], None);
    assert_eq!(reason, Reason::RevisionRollingOut);
    assert!(
        message.ends_with("there is no verified backup yet"),
        "{message}"
    );
}

#[test]
fn a_down_member_or_a_version_change_holds_upgrades() {
    let (ok, reason, message) = upgradeable(&[], &["n3".into()], None);
    assert!(!ok);
    assert_eq!(
        (reason, message.as_str()),
        (Reason::QuorumAtRisk, "member n3 is down")
    );
    let guard_ready = [risk(
        RiskKind::MemberDown,
        "member n3 is down while its guard still reads Ready",
    )];
    let (_, _, message) = upgradeable(&guard_ready, &["n3".into()], None);
    assert_eq!(
        message,
        "member n3 is down while its guard still reads Ready"
    );
    let rolling = EtcdVersionStatus {
        state: "Rolling".into(),
        message: "n1 runs 3.5.1, n2 and n3 run 3.4.23".into(),
        ..EtcdVersionStatus::default()
    };
    let (ok, reason, message) = upgradeable(&[], &[], Some(&rolling));
    assert!(!ok);
    assert_eq!(reason, Reason::EtcdVersionChanging);
    assert_eq!(
        message,
        "the etcd version change is Rolling: n1 runs 3.5.1, n2 and n3 run 3.4.23"
    );
    let done = EtcdVersionStatus {
        state: "AtTarget".into(),
        ..EtcdVersionStatus::default()
    };
    assert!(upgradeable(&[], &[], Some(&done)).0);
}

fn observation(versions: &[Option<&str>]) -> EtcdObservation {
    let mut obs = EtcdObservation::default();
    for (i, v) in versions.iter().enumerate() {
        let id = MemberId::new(i as u64 + 1).unwrap();
        let url: MemberUrl = format!("https://10.0.0.{}:2380", i + 1).parse().unwrap();
        obs.members
            .push(Member::voter(id, &format!("n{}", i + 1), url));
        obs.health.insert(
            id,
            MemberObs {
                healthy: v.is_some(),
                version: v.map(str::to_owned),
                ..MemberObs::default()
            },
        );
    }
    obs
}

#[test]
fn the_etcd_version_moves_only_once_every_member_runs_it() {
    let v = |name: &str, version: &str| OperandVersion {
        name: name.into(),
        version: version.into(),
    };
    let before = versions(&observation(&[Some("3.4.23"); 3]), &[]);
    assert_eq!(
        before,
        vec![v("operator", OPERATOR_VERSION), v("etcd", "3.4.23")]
    );
    let mixed = observation(&[Some("3.5.1"), Some("3.4.23"), Some("3.4.23")]);
    assert_eq!(
        versions(&mixed, &before),
        before,
        "kept while members differ"
    );
    let one_silent = observation(&[Some("3.5.1"), Some("3.5.1"), None]);
    assert_eq!(
        versions(&one_silent, &before),
        before,
        "kept while one is silent"
    );
    let after = versions(&observation(&[Some("3.5.1"); 3]), &before);
    assert_eq!(after[1], v("etcd", "3.5.1"));
    assert_eq!(
        versions(&EtcdObservation::default(), &[]),
        vec![v("operator", OPERATOR_VERSION)]
    );
}

#[test]
fn related_objects_name_what_must_gather_collects() {
    let got = related_objects("etcd-operator");
    let names: Vec<String> = got
        .iter()
        .map(|o| format!("{}/{}/{}/{}", o.group, o.resource, o.namespace, o.name))
        .collect();
    assert_eq!(
        names,
        [
            "/namespaces//etcd",
            "/namespaces//etcd-operator",
            "etcd.static-operator.io/etcdclusters//cluster",
            "policy/poddisruptionbudgets/etcd/etcd-quorum-guard",
        ]
    );
}
