//! Member conditions: reachability, quorum, unhealthy members, planned restarts, alarms.

use membership::{AlarmKind, Member, Preflight, RaisedAlarm};

use super::*;
use crate::etcd::MemberObs;

fn id(i: u64) -> MemberId {
    MemberId::new(i).unwrap()
}

fn peer(i: u64) -> MemberUrl {
    format!("https://10.0.0.{i}:2380").parse().unwrap()
}

fn client(i: u64) -> MemberUrl {
    format!("https://10.0.0.{i}:2379").parse().unwrap()
}

fn voter(i: u64) -> Member {
    Member::voter(id(i), &format!("n{i}"), peer(i)).with_client_url(client(i))
}

fn learner(i: u64, started: bool) -> Member {
    let m = Member::unstarted_learner(id(i), peer(i));
    if started {
        m.started_as(&format!("n{i}")).with_client_url(client(i))
    } else {
        m
    }
}

fn up() -> Option<MemberObs> {
    Some(MemberObs {
        healthy: true,
        raft_index: Some(100),
        error: None,
        ..Default::default()
    })
}

fn down(why: &str) -> Option<MemberObs> {
    Some(MemberObs {
        healthy: false,
        raft_index: None,
        error: Some(why.to_owned()),
        ..Default::default()
    })
}

/// An observation of `members`, each with its health (`None`: no status entry at all).
fn obs(members: Vec<(Member, Option<MemberObs>)>) -> EtcdObservation {
    let mut o = EtcdObservation::default();
    for (m, h) in members {
        if let Some(h) = h {
            o.health.insert(m.id, h);
        }
        o.members.push(m);
    }
    o
}

fn with_alarms(mut o: EtcdObservation, alarms: Vec<RaisedAlarm>) -> EtcdObservation {
    o.preflight = Preflight {
        alarms,
        ..Default::default()
    };
    o
}

fn cond(t: C, status: bool, reason: Reason, message: &str) -> Computed {
    Computed::new(t, status, reason, message)
}

fn fine(t: C) -> Computed {
    Computed::new(t, false, Reason::AsExpected, "")
}

/// The four conditions every reachable observation yields, in order.
fn base(available: Computed, unhealthy: Computed, alarms: Computed) -> Vec<Computed> {
    vec![available, unhealthy, alarms, fine(C::EtcdObserverDegraded)]
}

fn quorate(summary: &str) -> Computed {
    cond(C::EtcdMembersAvailable, true, Reason::Quorate, summary)
}

fn not_quorate(summary: &str) -> Computed {
    cond(C::EtcdMembersAvailable, false, Reason::NotQuorate, summary)
}

fn unhealthy(message: &str) -> Computed {
    cond(
        C::EtcdMembersDegraded,
        true,
        Reason::UnhealthyMembers,
        message,
    )
}

fn planned(message: &str) -> Computed {
    cond(
        C::EtcdMembersProgressing,
        true,
        Reason::PlannedRestart,
        message,
    )
}

fn restarting(entries: &[(u64, &str, i64)]) -> BTreeMap<MemberId, (String, i64)> {
    entries
        .iter()
        .map(|(i, node, rev)| (id(*i), ((*node).to_owned(), *rev)))
        .collect()
}

/// (name, observation, restarting, expected conditions)
type ConditionCase = (
    &'static str,
    EtcdObservation,
    BTreeMap<MemberId, (String, i64)>,
    Vec<Computed>,
);

#[test]
fn member_conditions_table() {
    let healthy3 = || vec![(voter(1), up()), (voter(2), up()), (voter(3), up())];
    let one_down = || {
        vec![
            (voter(1), up()),
            (voter(2), up()),
            (voter(3), down("context deadline exceeded")),
        ]
    };
    let cases: Vec<ConditionCase> = vec![
        (
            "etcd unreachable: not available, observer degraded, nothing else",
            EtcdObservation {
                error: Some("connection refused".into()),
                // Whatever else the observation holds is not looked at.
                members: vec![voter(1)],
                ..Default::default()
            },
            restarting(&[(1, "n1", 4)]),
            vec![
                cond(
                    C::EtcdMembersAvailable,
                    false,
                    Reason::EtcdUnreachable,
                    "no etcd member answered: connection refused",
                ),
                cond(
                    C::EtcdObserverDegraded,
                    true,
                    Reason::EtcdUnreachable,
                    "connection refused",
                ),
            ],
        ),
        (
            "all voters healthy",
            obs(healthy3()),
            BTreeMap::new(),
            base(
                quorate("3 of 3 voters healthy (quorum 2)"),
                fine(C::EtcdMembersDegraded),
                fine(C::EtcdMembersDegraded),
            ),
        ),
        (
            "one unhealthy started voter: quorate but degraded, naming it",
            obs(one_down()),
            BTreeMap::new(),
            base(
                quorate("2 of 3 voters healthy (quorum 2)"),
                unhealthy("n3 (3): context deadline exceeded"),
                fine(C::EtcdMembersDegraded),
            ),
        ),
        (
            "two unhealthy voters: not quorate, both named",
            obs(vec![
                (voter(1), up()),
                (voter(2), down("no leader")),
                (voter(3), down("connection refused")),
            ]),
            BTreeMap::new(),
            base(
                not_quorate("1 of 3 voters healthy (quorum 2)"),
                unhealthy("n2 (2): no leader; n3 (3): connection refused"),
                fine(C::EtcdMembersDegraded),
            ),
        ),
        (
            "a healthy learner does not count towards quorum",
            obs(vec![
                (voter(1), up()),
                (voter(2), down("no leader")),
                (voter(3), down("no leader")),
                (learner(4, true), up()),
            ]),
            BTreeMap::new(),
            base(
                not_quorate("1 of 3 voters healthy (quorum 2)"),
                unhealthy("n2 (2): no leader; n3 (3): no leader"),
                fine(C::EtcdMembersDegraded),
            ),
        ),
        (
            "an unhealthy started learner is degraded too",
            obs({
                let mut m = healthy3();
                m.push((learner(4, true), down("connection refused")));
                m
            }),
            BTreeMap::new(),
            base(
                quorate("3 of 3 voters healthy (quorum 2)"),
                unhealthy("n4 (4): connection refused"),
                fine(C::EtcdMembersDegraded),
            ),
        ),
        (
            "the unhealthy voter is restarting for a revision: progress, not degraded",
            obs(one_down()),
            restarting(&[(3, "n3", 7)]),
            {
                let mut v = base(
                    quorate("2 of 3 voters healthy (quorum 2)"),
                    fine(C::EtcdMembersDegraded),
                    fine(C::EtcdMembersDegraded),
                );
                v.push(planned("n3 restarting for revision 7"));
                v
            },
        ),
        (
            "another member restarting does not hide the unhealthy one",
            obs(one_down()),
            restarting(&[(2, "n2", 7)]),
            base(
                quorate("2 of 3 voters healthy (quorum 2)"),
                unhealthy("n3 (3): context deadline exceeded"),
                fine(C::EtcdMembersDegraded),
            ),
        ),
        (
            "a healthy member whose node is rolled is not reported",
            obs(healthy3()),
            restarting(&[(1, "n1", 7)]),
            base(
                quorate("3 of 3 voters healthy (quorum 2)"),
                fine(C::EtcdMembersDegraded),
                fine(C::EtcdMembersDegraded),
            ),
        ),
        (
            "an unstarted learner is neither degraded nor progress when not restarting",
            obs({
                let mut m = healthy3();
                m.push((learner(4, false), down("not started")));
                m
            }),
            BTreeMap::new(),
            base(
                quorate("3 of 3 voters healthy (quorum 2)"),
                fine(C::EtcdMembersDegraded),
                fine(C::EtcdMembersDegraded),
            ),
        ),
        (
            "an unstarted learner whose node is rolled is a member starting",
            obs({
                let mut m = healthy3();
                m.push((learner(4, false), down("not started")));
                m
            }),
            restarting(&[(4, "n4", 2)]),
            {
                let mut v = base(
                    quorate("3 of 3 voters healthy (quorum 2)"),
                    fine(C::EtcdMembersDegraded),
                    fine(C::EtcdMembersDegraded),
                );
                v.push(planned("n4 starting member 4 for revision 2"));
                v
            },
        ),
        (
            "two planned restarts are joined",
            obs({
                let mut m = one_down();
                m.push((learner(4, false), None));
                m
            }),
            restarting(&[(3, "n3", 5), (4, "n4", 5)]),
            {
                let mut v = base(
                    quorate("2 of 3 voters healthy (quorum 2)"),
                    fine(C::EtcdMembersDegraded),
                    fine(C::EtcdMembersDegraded),
                );
                v.push(planned(
                    "n3 restarting for revision 5; n4 starting member 4 for revision 5",
                ));
                v
            },
        ),
        (
            "a raised alarm degrades the members",
            with_alarms(
                obs(healthy3()),
                vec![RaisedAlarm {
                    member: id(2),
                    kind: AlarmKind::NoSpace,
                }],
            ),
            BTreeMap::new(),
            base(
                quorate("3 of 3 voters healthy (quorum 2)"),
                fine(C::EtcdMembersDegraded),
                cond(
                    C::EtcdMembersDegraded,
                    true,
                    Reason::AlarmRaised,
                    "alarm NOSPACE on member 2 is raised; membership changes wait until it is cleared",
                ),
            ),
        ),
        (
            "several alarms and an unhealthy member are reported separately",
            with_alarms(
                obs(one_down()),
                vec![
                    RaisedAlarm {
                        member: id(1),
                        kind: AlarmKind::NoSpace,
                    },
                    RaisedAlarm {
                        member: id(3),
                        kind: AlarmKind::Corrupt,
                    },
                ],
            ),
            BTreeMap::new(),
            base(
                quorate("2 of 3 voters healthy (quorum 2)"),
                unhealthy("n3 (3): context deadline exceeded"),
                cond(
                    C::EtcdMembersDegraded,
                    true,
                    Reason::AlarmRaised,
                    "alarm NOSPACE on member 1 is raised; membership changes wait until it is cleared; \
                     alarm CORRUPT on member 3 is raised; membership changes wait until it is cleared",
                ),
            ),
        ),
        (
            "no members at all: not quorate",
            obs(Vec::new()),
            BTreeMap::new(),
            base(
                not_quorate("0 of 0 voters healthy (quorum 1)"),
                fine(C::EtcdMembersDegraded),
                fine(C::EtcdMembersDegraded),
            ),
        ),
    ];
    for (name, o, r, want) in cases {
        assert_eq!(member_conditions(&o, &r), want, "case: {name}");
    }
}

#[test]
fn a_member_without_a_status_entry_is_unhealthy() {
    // No health entry at all (its status call was never made): unhealthy, named, without a reason.
    let o = obs(vec![(voter(1), up()), (voter(2), up()), (voter(3), None)]);
    let conds = member_conditions(&o, &BTreeMap::new());
    assert_eq!(conds[0], quorate("2 of 3 voters healthy (quorum 2)"));
    assert_eq!(conds[1].type_, C::EtcdMembersDegraded);
    assert!(conds[1].status, "{conds:?}");
    assert_eq!(conds[1].reason, Reason::UnhealthyMembers);
    assert!(conds[1].message.starts_with("n3 (3)"), "{conds:?}");
}
