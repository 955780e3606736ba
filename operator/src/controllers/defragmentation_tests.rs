//! The defragmentation decision: triggers, order (followers first, the leader after a handover),
//! the gate, catching up, back-off after failures, requests, and NOSPACE disarm or admin message.

use membership::{Member, Preflight, RaisedAlarm};

use super::*;
use crate::api::StandbyRenewal;
use crate::etcd::MemberObs;

const MIB: i64 = 1 << 20;

fn id(i: u64) -> MemberId {
    MemberId::new(i).unwrap()
}

fn voter(i: u64) -> Member {
    Member::voter(
        id(i),
        &format!("n{i}"),
        format!("https://10.0.0.{i}:2380").parse().unwrap(),
    )
    .with_client_url(format!("https://10.0.0.{i}:2379").parse().unwrap())
}

/// Three healthy voters, n1 leading, each with a file of `total` MiB of which `in_use` MiB live.
fn cluster(dbs: [(i64, i64); 3]) -> EtcdObservation {
    let mut o = EtcdObservation {
        leader: Some(id(1)),
        ..Default::default()
    };
    for (i, db) in (1..=3).zip(dbs) {
        o.members.push(voter(i));
        o.health.insert(id(i), healthy_with(db));
    }
    o
}

/// A healthy, caught-up member with a file of `total` MiB, `in_use` MiB live.
fn healthy_with((total, in_use): (i64, i64)) -> MemberObs {
    MemberObs {
        healthy: true,
        raft_index: Some(1000),
        applied_index: Some(1000),
        revision: Some(500),
        db: Some(DbSize {
            total: total * MIB,
            in_use: in_use * MIB,
        }),
        ..Default::default()
    }
}

fn nospace(mut o: EtcdObservation) -> EtcdObservation {
    o.preflight = Preflight {
        alarms: vec![RaisedAlarm {
            member: id(2),
            kind: AlarmKind::NoSpace,
        }],
        ..Default::default()
    };
    o
}

fn spec() -> Defragmentation {
    Defragmentation::default()
}

fn now() -> OffsetDateTime {
    OffsetDateTime::parse(
        "2026-11-25T12:00:00Z",
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap()
}

fn view<'a>(
    obs: &'a EtcdObservation,
    spec: &'a Defragmentation,
    status: &'a DefragmentationStatus,
) -> View<'a> {
    View {
        obs,
        spec,
        status,
        quota_bytes: 100 << 20,
        running: None,
        unsettled: None,
        now: now(),
    }
}

fn defragments(step: Step) -> (String, Trigger) {
    match step {
        Step::Defragment(d) => (d.name, d.trigger),
        other => panic!("expected a defragmentation, got {other:?}"),
    }
}

#[test]
fn thresholds_pick_followers_first_and_hand_the_leader_s_leadership_away_last() {
    // Every member 200 MiB with 50 MiB in use (75% free): all due; n1 leads.
    let o = cluster([(200, 50), (200, 50), (200, 50)]);
    let (s, st) = (spec(), DefragmentationStatus::default());
    assert_eq!(
        defragments(decide(&view(&o, &s, &st))),
        ("n2".into(), Trigger::Threshold)
    );
    // n2 and n3 done (their files shrank): the leader is next, after a handover to the most
    // advanced healthy voter.
    let mut o = cluster([(200, 50), (50, 50), (50, 50)]);
    o.health.get_mut(&id(3)).unwrap().raft_index = Some(1001);
    match decide(&view(&o, &s, &st)) {
        Step::MoveLeader { from, to, .. } => assert_eq!((from, to), (id(1), id(3))),
        other => panic!("expected a leadership move, got {other:?}"),
    }
    // Once n3 leads, n1 is a follower and is defragmented.
    o.leader = Some(id(3));
    assert_eq!(defragments(decide(&view(&o, &s, &st))).0, "n1");
}

#[test]
fn below_either_threshold_nothing_is_due() {
    let (s, st) = (spec(), DefragmentationStatus::default());
    // Big but dense; fragmented but small.
    for dbs in [[(200, 150); 3], [(50, 1); 3]] {
        let o = cluster(dbs);
        assert!(matches!(decide(&view(&o, &s, &st)), Step::Idle(_)));
    }
    let manual = Defragmentation {
        automatic: false,
        ..spec()
    };
    let o = cluster([(200, 50); 3]);
    assert!(matches!(decide(&view(&o, &manual, &st)), Step::Idle(_)));
}

#[test]
fn waits_for_settling_catch_up_and_the_running_one() {
    let (s, st) = (spec(), DefragmentationStatus::default());
    let o = cluster([(200, 50); 3]);
    let mut v = view(&o, &s, &st);
    v.unsettled = Some("node n3 runs the latest revision 4 (it runs 3)");
    assert!(matches!(decide(&v), Step::Wait(w) if w.contains("n3 runs")));
    let mut v = view(&o, &s, &st);
    v.running = Some("n2");
    assert!(matches!(decide(&v), Step::Wait(w) if w.contains("defragmenting n2")));
    // n2 was just defragmented and has not applied what the leader committed.
    let mut lag = cluster([(200, 50); 3]);
    lag.health.get_mut(&id(2)).unwrap().applied_index = Some(500);
    match decide(&view(&lag, &s, &st)) {
        Step::Wait(w) => assert!(w.contains("n2 is catching up (applied 500"), "{w}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_gate_refuses_while_a_voter_is_unhealthy() {
    let (s, st) = (spec(), DefragmentationStatus::default());
    let mut o = cluster([(200, 50); 3]);
    o.health.get_mut(&id(3)).unwrap().healthy = false;
    match decide(&view(&o, &s, &st)) {
        Step::Denied(d) => assert_eq!(d.rule, membership::DenyRule::VoterUnhealthy),
        other => panic!("{other:?}"),
    }
}

fn record(name: &str, result: &str, end: &str, request: &str) -> DefragRecord {
    DefragRecord {
        member_name: name.into(),
        member_id: "2".into(),
        trigger: "Threshold".into(),
        request: request.into(),
        start_time: end.into(),
        end_time: end.into(),
        result: result.into(),
        message: "no answer within 300s".into(),
        ..Default::default()
    }
}

#[test]
fn a_failed_member_is_not_retried_before_retry_after() {
    let s = spec();
    let o = cluster([(50, 50), (200, 50), (50, 50)]);
    let st = DefragmentationStatus {
        members: vec![record("n2", "TimedOut", "2026-11-25T11:30:00Z", "")],
        ..Default::default()
    };
    match decide(&view(&o, &s, &st)) {
        Step::Idle(w) => assert!(w.contains("n2: last defragmentation TimedOut"), "{w}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(failures(&st).len(), 1);
    // An hour later it is tried again.
    let st = DefragmentationStatus {
        members: vec![record("n2", "TimedOut", "2026-11-25T10:59:00Z", "")],
        ..Default::default()
    };
    assert_eq!(defragments(decide(&view(&o, &s, &st))).0, "n2");
    // An interrupted run (the operator restarted) is neither a failure nor a reason to wait.
    let st = DefragmentationStatus {
        members: vec![record("n2", INTERRUPTED, "2026-11-25T11:59:00Z", "")],
        ..Default::default()
    };
    assert_eq!(defragments(decide(&view(&o, &s, &st))).0, "n2");
    assert!(failures(&st).is_empty());
}

#[test]
fn a_request_reaches_every_voter_once() {
    let s = Defragmentation {
        request: "after-cleanup".into(),
        ..spec()
    };
    let o = cluster([(50, 50); 3]);
    let mut st = DefragmentationStatus::default();
    assert_eq!(
        defragments(decide(&view(&o, &s, &st))),
        ("n2".into(), Trigger::Request)
    );
    st.members = vec![
        record("n2", SUCCEEDED, "2026-11-25T11:59:00Z", "after-cleanup"),
        record("n3", SUCCEEDED, "2026-11-25T11:59:00Z", "after-cleanup"),
    ];
    assert!(!request_done(&view(&o, &s, &st)));
    assert!(matches!(
        decide(&view(&o, &s, &st)),
        Step::MoveLeader { .. }
    ));
    st.members.push(record(
        "n1",
        SUCCEEDED,
        "2026-11-25T11:59:30Z",
        "after-cleanup",
    ));
    assert!(request_done(&view(&o, &s, &st)));
    st.handled_request = "after-cleanup".into();
    assert!(matches!(decide(&view(&o, &s, &st)), Step::Idle(_)));
}

#[test]
fn nospace_defragments_below_thresholds_then_disarms() {
    let (s, st) = (spec(), DefragmentationStatus::default());
    // 95 MiB files of a 100 MiB quota, 10 MiB live after the admin's delete and compaction.
    let o = nospace(cluster([(95, 10); 3]));
    assert_eq!(
        defragments(decide(&view(&o, &s, &st))),
        ("n2".into(), Trigger::NoSpace)
    );
    // All three defragmented: disarm n2's alarm.
    let o = nospace(cluster([(11, 10); 3]));
    assert_eq!(decide(&view(&o, &s, &st)), Step::Disarm(vec![id(2)]));
}

fn nospace_try(name: &str, end: &str, revision: i64) -> DefragRecord {
    DefragRecord {
        trigger: "NoSpace".into(),
        revision,
        ..record(name, SUCCEEDED, end, "")
    }
}

#[test]
fn nospace_with_live_data_at_the_quota_tries_each_voter_then_asks_an_admin() {
    let s = spec();
    let o = nospace(cluster([(100, 97); 3]));
    // Not tried during this alarm yet: due although little is reported free (pages a
    // compaction freed are not reported until the next write).
    let st = DefragmentationStatus::default();
    assert_eq!(
        defragments(decide(&view(&o, &s, &st))),
        ("n2".into(), Trigger::NoSpace)
    );
    // Every voter tried at the current revision, within the minute: an admin must act.
    let tried = |end: &str, revision: i64| DefragmentationStatus {
        members: ["n1", "n2", "n3"]
            .iter()
            .map(|n| nospace_try(n, end, revision))
            .collect(),
        ..Default::default()
    };
    let st = tried("2026-11-25T11:59:30Z", 500);
    match decide(&view(&o, &s, &st)) {
        Step::AdminMustDelete(m) => {
            assert!(m.contains("An admin must delete data"), "{m}");
            assert!(m.contains("n1: file 100.0 MiB, live data 97.0 MiB"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // Keys were deleted since (the revision moved): tried again at once.
    let st = tried("2026-11-25T11:59:30Z", 400);
    assert_eq!(defragments(decide(&view(&o, &s, &st))).1, Trigger::NoSpace);
    // And a minute after the last try in any case.
    let st = tried("2026-11-25T11:58:59Z", 500);
    assert_eq!(defragments(decide(&view(&o, &s, &st))).1, Trigger::NoSpace);
    // Unless the last try took long: a store that took 30 s waits five minutes.
    let mut st = tried("2026-11-25T11:58:59Z", 500);
    for r in &mut st.members {
        r.duration_ms = 30_000;
    }
    assert!(matches!(
        decide(&view(&o, &s, &st)),
        Step::AdminMustDelete(_)
    ));
    let mut st = tried("2026-11-25T11:54:59Z", 500);
    for r in &mut st.members {
        r.duration_ms = 30_000;
    }
    assert_eq!(defragments(decide(&view(&o, &s, &st))).1, Trigger::NoSpace);
}

#[test]
fn a_single_voter_is_defragmented_only_under_nospace() {
    let s = spec();
    let st = DefragmentationStatus::default();
    let mut o = cluster([(200, 50); 3]);
    o.members.truncate(1);
    o.health.retain(|k, _| *k == id(1));
    match decide(&view(&o, &s, &st)) {
        Step::Denied(d) => assert_eq!(d.rule, membership::DenyRule::QuorumAfterAction),
        other => panic!("{other:?}"),
    }
    let o = nospace(o);
    assert_eq!(defragments(decide(&view(&o, &s, &st))).0, "n1");
}

#[test]
fn under_nospace_a_defragmentation_never_waits_for_a_backup() {
    let s = Defragmentation {
        request: "after-cleanup".into(),
        ..spec()
    };
    let st = DefragmentationStatus::default();
    // The remedy for an outage: etcd refuses writes until the space is back.
    let o = nospace(cluster([(95, 10); 3]));
    let v = view(&o, &s, &st);
    let step = decide(&v);
    assert_eq!(defragments(step.clone()), ("n2".into(), Trigger::NoSpace));
    assert!(!waits_for_backup(&step, v.nospace()));
    let handover = Step::MoveLeader {
        leader_url: "https://10.0.0.1:2379".parse().unwrap(),
        from: id(1),
        to: id(3),
    };
    assert!(!waits_for_backup(&handover, true));
    // Without the alarm, a requested one (and the handover before it) waits for its backup.
    let o = cluster([(50, 50); 3]);
    let v = view(&o, &s, &st);
    let step = decide(&v);
    assert_eq!(defragments(step.clone()), ("n2".into(), Trigger::Request));
    assert!(waits_for_backup(&step, v.nospace()));
    assert!(waits_for_backup(&handover, false));
    assert!(!waits_for_backup(&Step::Idle(String::new()), false));
}

/// Adds started learner `i` (a standby) with a file of `total` MiB, `in_use` MiB live.
fn with_standby(mut o: EtcdObservation, i: u64, db: (i64, i64)) -> EtcdObservation {
    o.members.push(Member {
        is_learner: true,
        ..voter(i)
    });
    o.health.insert(id(i), healthy_with(db));
    o
}

/// #65: four nodes, three voters and the standby learner. The learner held every voter's
/// defragmentation back (gate rule 8 denied while any learner existed), so nothing was ever
/// defragmented and NOSPACE never cleared; now the voters are, the leader last, and the alarm
/// (the learner's too) is disarmed once the voters are under the line. The learner is never
/// asked: etcd refuses `Defragment` on a learner.
#[test]
fn a_standby_learner_holds_nothing_back() {
    let (s, st) = (spec(), DefragmentationStatus::default());
    let o = with_standby(cluster([(200, 50); 3]), 4, (200, 50));
    assert_eq!(
        defragments(decide(&view(&o, &s, &st))),
        ("n2".into(), Trigger::Threshold)
    );
    let mut o = with_standby(cluster([(200, 50), (50, 50), (50, 50)]), 4, (200, 50));
    o.health.get_mut(&id(3)).unwrap().raft_index = Some(1001);
    assert!(matches!(
        decide(&view(&o, &s, &st)),
        Step::MoveLeader { from, .. } if from == id(1)
    ));
    let alarmed = |mut o: EtcdObservation| {
        o = nospace(o);
        o.preflight.alarms.push(RaisedAlarm {
            member: id(4),
            kind: AlarmKind::NoSpace,
        });
        o
    };
    let o = alarmed(with_standby(cluster([(95, 40); 3]), 4, (95, 40)));
    assert_eq!(
        defragments(decide(&view(&o, &s, &st))),
        ("n2".into(), Trigger::NoSpace)
    );
    // The learner's own file is still at the quota: disarming now, it would raise NOSPACE
    // again on its next applied write (measured: the operator disarmed every 0.7 s and the
    // cluster refused every write); it is renewed first (membership removes it).
    let o = alarmed(with_standby(cluster([(40, 40); 3]), 4, (95, 40)));
    let due = standby_due(&view(&o, &s, &st)).unwrap();
    assert_eq!(due.id, id(4));
    assert!(
        due.describe()
            .contains("etcd refuses to defragment a learner")
    );
    assert!(matches!(
        decide(&view(&o, &s, &st)),
        Step::Wait(why) if why.contains("standby learner n4 is renewed")
    ));
    // Removed, its alarm is disarmed with the voters'.
    let mut o = alarmed(cluster([(40, 40); 3]));
    o.members.retain(|m| m.id != id(4));
    assert_eq!(decide(&view(&o, &s, &st)), Step::Disarm(vec![id(2), id(4)]));
    // A standby under the line stays.
    let o = alarmed(with_standby(cluster([(40, 40); 3]), 4, (40, 40)));
    assert_eq!(standby_due(&view(&o, &s, &st)), None);
    assert_eq!(decide(&view(&o, &s, &st)), Step::Disarm(vec![id(2), id(4)]));
}

/// #65: without NOSPACE a fragmented standby is left alone (a new learner would replay the same
/// history into the same file; promoted, it is defragmented as a voter).
#[test]
fn a_fragmented_standby_is_left_alone_without_nospace() {
    let (s, st) = (spec(), DefragmentationStatus::default());
    let o = with_standby(cluster([(50, 50); 3]), 4, (200, 50));
    assert_eq!(standby_due(&view(&o, &s, &st)), None);
    let o = nospace(with_standby(cluster([(50, 50); 3]), 4, (200, 50)));
    let mut v = view(&o, &s, &st);
    v.running = Some("n2");
    assert_eq!(standby_due(&v), None, "not while a defragmentation runs");
}

/// #65: a renewed standby's node joins again only once the leader's log moved
/// [`REJOIN_AFTER_ENTRIES`] on (a learner added sooner replays what filled the old file), and
/// waits while no leader is known.
#[test]
fn a_renewed_standby_rejoins_after_the_log_moved_on() {
    let renewal = StandbyRenewal {
        node: "n4".into(),
        member_id: "4".into(),
        raft_index: 1_000,
        time: "2026-11-25T12:00:00Z".into(),
    };
    let wait = rejoin_wait(&renewal, Some(11_999)).unwrap();
    assert!(wait.contains("reaches 12000 (it is 11999)"), "{wait}");
    assert!(
        rejoin_wait(&renewal, None)
            .unwrap()
            .contains("(it is unknown)")
    );
    assert_eq!(rejoin_wait(&renewal, Some(12_000)), None);
}

/// #65: two nodes, one voter and the standby learner, under NOSPACE: the lone voter is
/// defragmented (a pause under NOSPACE loses nothing), then the alarm disarmed. Before, the
/// learner made the gate deny the voter, and the API stayed read-only until an admin acted.
#[test]
fn nospace_on_two_nodes_clears_without_an_admin() {
    let (s, st) = (spec(), DefragmentationStatus::default());
    let two = |n1: (i64, i64), n2: (i64, i64)| {
        let mut o = EtcdObservation {
            leader: Some(id(1)),
            ..Default::default()
        };
        o.members.push(voter(1));
        o.health.insert(id(1), healthy_with(n1));
        let mut o = with_standby(o, 2, n2);
        o.preflight = Preflight {
            alarms: vec![RaisedAlarm {
                member: id(1),
                kind: AlarmKind::NoSpace,
            }],
            ..Default::default()
        };
        o
    };
    let o = two((95, 40), (95, 40));
    assert_eq!(
        defragments(decide(&view(&o, &s, &st))),
        ("n1".into(), Trigger::NoSpace)
    );
    // The standby's own file at the quota is renewed first (it would raise NOSPACE again).
    let o = two((40, 40), (95, 40));
    assert!(matches!(decide(&view(&o, &s, &st)), Step::Wait(_)));
    let o = two((40, 40), (40, 40));
    assert_eq!(decide(&view(&o, &s, &st)), Step::Disarm(vec![id(1)]));
    // Without NOSPACE the lone voter is not held (writes would pause).
    let mut o = two((200, 50), (200, 50));
    o.preflight = Preflight::default();
    assert!(matches!(
        decide(&view(&o, &s, &st)),
        Step::Denied(d) if d.message.contains("would not keep quorum")
    ));
}
