//! Learner promotion: when a learner is promoted, waited for or held, and when it is not
//! catching up.

use membership::{AlarmKind, DenyRule, MemberHealth, MemberUrl, Preflight, RaisedAlarm};

use super::*;
use crate::etcd::MemberObs;

fn t(s: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000 + s).unwrap()
}

fn id(i: u8) -> MemberId {
    MemberId::new(u64::from(i)).unwrap()
}

fn url(i: u8) -> MemberUrl {
    format!("https://10.0.0.{i}:2380").parse().unwrap()
}

fn voter_member(i: u8) -> Member {
    Member::voter(id(i), &format!("n{i}"), url(i))
}

fn learner_member(i: u8, started: bool) -> Member {
    let m = Member::unstarted_learner(id(i), url(i));
    if started {
        m.started_as(&format!("n{i}"))
    } else {
        m
    }
}

fn voter(i: u8, healthy: bool) -> MemberHealth {
    MemberHealth {
        member: voter_member(i),
        healthy,
    }
}

fn learner(i: u8, started: bool, healthy: bool) -> MemberHealth {
    MemberHealth {
        member: learner_member(i, started),
        healthy,
    }
}

fn view(members: Vec<MemberHealth>) -> ClusterView {
    ClusterView {
        members,
        ..Default::default()
    }
}

/// What `decide` should return.
#[derive(Debug)]
enum Want {
    Nothing,
    Step(MembershipStep),
    /// Denied for `promote learner <id>` by this rule.
    Denied(u8, DenyRule),
}

#[test]
fn decide_table() {
    let alarmed = {
        let mut v = view(vec![voter(1, true), learner(2, true, true)]);
        v.preflight = Preflight {
            alarms: vec![RaisedAlarm {
                member: id(1),
                kind: AlarmKind::NoSpace,
            }],
            ..Default::default()
        };
        v
    };
    // (name, cluster, voters, target, expected)
    let cases: Vec<(&str, ClusterView, usize, usize, Want)> = vec![
        (
            "no learner, voters at target",
            view(vec![voter(1, true), voter(2, true), voter(3, true)]),
            3,
            3,
            Want::Nothing,
        ),
        (
            "no learner, voters below target",
            view(vec![voter(1, true)]),
            1,
            3,
            Want::Nothing,
        ),
        (
            "unstarted learner is waited for",
            view(vec![voter(1, true), learner(2, false, false)]),
            1,
            3,
            Want::Step(MembershipStep::Waiting {
                message: "waiting for learner 2 to start".into(),
            }),
        ),
        (
            "unstarted learner is waited for even at the target",
            view(vec![
                voter(1, true),
                voter(2, true),
                voter(3, true),
                learner(4, false, false),
            ]),
            3,
            3,
            Want::Step(MembershipStep::Waiting {
                message: "waiting for learner 4 to start".into(),
            }),
        ),
        (
            "started healthy learner below target is promoted",
            view(vec![voter(1, true), learner(2, true, true)]),
            1,
            3,
            Want::Step(MembershipStep::Promote {
                id: id(2),
                node: "n2".into(),
            }),
        ),
        (
            "started learner with one unhealthy voter of three still promotable",
            view(vec![
                voter(1, true),
                voter(2, true),
                voter(3, false),
                learner(4, true, true),
            ]),
            3,
            5,
            Want::Step(MembershipStep::Promote {
                id: id(4),
                node: "n4".into(),
            }),
        ),
        (
            "started learner at the target is a standby (no step)",
            view(vec![
                voter(1, true),
                voter(2, true),
                voter(3, true),
                learner(4, true, true),
            ]),
            3,
            3,
            Want::Nothing,
        ),
        (
            "started learner above the target is a standby (no step)",
            view(vec![
                voter(1, true),
                voter(2, true),
                voter(3, true),
                voter(5, true),
                learner(4, true, true),
            ]),
            4,
            3,
            Want::Nothing,
        ),
        (
            "gate refuses: a voter unhealthy leaves no quorum",
            view(vec![
                voter(1, true),
                voter(2, false),
                learner(3, true, true),
            ]),
            2,
            3,
            Want::Denied(3, DenyRule::NoQuorum),
        ),
        (
            "gate refuses: the started learner is unhealthy",
            view(vec![voter(1, true), learner(2, true, false)]),
            1,
            3,
            Want::Denied(2, DenyRule::LearnerNotReady),
        ),
        (
            "gate refuses: an alarm is raised",
            alarmed,
            1,
            3,
            Want::Denied(2, DenyRule::Preflight),
        ),
    ];
    for (name, cluster, voters, target, want) in cases {
        let members: Vec<&Member> = cluster.members.iter().map(|m| &m.member).collect();
        let got = decide(&members, voters, target, &cluster);
        match (&want, &got) {
            (Want::Nothing, None) => {}
            (Want::Step(w), Some(g)) if w == g => {}
            (Want::Denied(i, rule), Some(MembershipStep::Denied { step, denial }))
                if *step == format!("promote learner {}", id(*i)) && denial.rule == *rule =>
            {
                assert!(
                    denial.message.starts_with(step.as_str()),
                    "case: {name}: denial does not name the action: {denial:?}"
                );
            }
            _ => panic!("case: {name}: want {want:?}, got {got:?}"),
        }
    }
}

/// Voters 1..=3 (1 leads at raft index 120) and started learner 4 (raft index 90).
fn promoting_obs(learner_index: Option<u64>, leader_index: Option<u64>) -> EtcdObservation {
    let mut o = EtcdObservation {
        members: vec![
            voter_member(1),
            voter_member(2),
            voter_member(3),
            learner_member(4, true),
            learner_member(5, false),
        ],
        leader: Some(id(1)),
        ..Default::default()
    };
    for i in 1..=3 {
        o.health.insert(
            id(i),
            MemberObs {
                healthy: true,
                raft_index: if i == 1 { leader_index } else { Some(110) },
                error: None,
                ..Default::default()
            },
        );
    }
    o.health.insert(
        id(4),
        MemberObs {
            healthy: true,
            raft_index: learner_index,
            error: None,
            ..Default::default()
        },
    );
    o
}

/// (name, observation, learner_added, promoting, now, expected)
type CatchUpCase = (
    &'static str,
    EtcdObservation,
    BTreeMap<MemberId, OffsetDateTime>,
    Option<MemberId>,
    OffsetDateTime,
    Option<Computed>,
);

#[test]
fn not_catching_up_table() {
    let deadline = time::Duration::seconds(300);
    let added = BTreeMap::from([(id(4), t(0)), (id(5), t(0))]);
    let degraded = |message: &str| {
        Some(Computed::new(
            C::EtcdMembersDegraded,
            true,
            Reason::LearnerNotCatchingUp,
            message,
        ))
    };
    // (name, obs, learner_added, promoting, now, expected)
    let cases: Vec<CatchUpCase> = vec![
        (
            "not promoting",
            promoting_obs(Some(90), Some(120)),
            added.clone(),
            None,
            t(10_000),
            None,
        ),
        (
            "promoting a member that is not a learner",
            promoting_obs(Some(90), Some(120)),
            added.clone(),
            Some(id(2)),
            t(10_000),
            None,
        ),
        (
            "promoting an unstarted learner",
            promoting_obs(Some(90), Some(120)),
            added.clone(),
            Some(id(5)),
            t(10_000),
            None,
        ),
        (
            "promoting a member that does not exist",
            promoting_obs(Some(90), Some(120)),
            added.clone(),
            Some(id(9)),
            t(10_000),
            None,
        ),
        (
            "within the deadline",
            promoting_obs(Some(90), Some(120)),
            added.clone(),
            Some(id(4)),
            t(100),
            None,
        ),
        (
            "exactly at the deadline",
            promoting_obs(Some(90), Some(120)),
            added.clone(),
            Some(id(4)),
            t(300),
            None,
        ),
        (
            "first seen now (no record): within the deadline",
            promoting_obs(Some(90), Some(120)),
            BTreeMap::new(),
            Some(id(4)),
            t(10_000),
            None,
        ),
        (
            "past the deadline",
            promoting_obs(Some(90), Some(120)),
            added.clone(),
            Some(id(4)),
            t(301),
            degraded(
                "learner 4 (n4) was added 301s ago and etcd still refuses to promote it (learner raft index 90, leader 120)",
            ),
        ),
        (
            "past the deadline, raft indexes unknown",
            promoting_obs(None, None),
            added.clone(),
            Some(id(4)),
            t(900),
            degraded(
                "learner 4 (n4) was added 900s ago and etcd still refuses to promote it (learner raft index ?, leader ?)",
            ),
        ),
        (
            "past the deadline, no leader known",
            EtcdObservation {
                leader: None,
                ..promoting_obs(Some(90), Some(120))
            },
            added.clone(),
            Some(id(4)),
            t(400),
            degraded(
                "learner 4 (n4) was added 400s ago and etcd still refuses to promote it (learner raft index 90, leader ?)",
            ),
        ),
    ];
    for (name, obs, added, promoting, now, want) in cases {
        assert_eq!(
            not_catching_up(&obs, &added, promoting, deadline, now),
            want,
            "case: {name}"
        );
    }
}
