//! Remediation timing: due after `unhealthySeconds`, retries doubling, a limit, a reset.

use super::*;

fn t(s: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000 + s).unwrap()
}

fn rfc(s: i64) -> String {
    t(s).format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn policy() -> MemberRemediation {
    MemberRemediation {
        unhealthy_seconds: 600,
        max_retries: 3,
        retry_period_seconds: 600,
        min_healthy_seconds: 3600,
    }
}

fn record(attempts: u32, last: i64) -> RemediationStatus {
    RemediationStatus {
        node_name: "n2".into(),
        attempts,
        last_attempt_time: rfc(last),
        last_member_id: "2".into(),
        last_reason: "unhealthy".into(),
        ..Default::default()
    }
}

fn member(id: &str, name: &str, healthy: bool, since: i64) -> MemberStatus {
    MemberStatus {
        name: name.into(),
        id: id.into(),
        role: "Voter".into(),
        started: true,
        healthy,
        last_transition_time: rfc(since),
        ..Default::default()
    }
}

#[test]
fn due_after_the_unhealthy_time_then_backs_off_doubling_up_to_the_limit() {
    let p = policy();
    assert_eq!(
        assess(&p, None, t(0), t(599)),
        Assessment::Waiting { due: t(600) }
    );
    assert_eq!(
        assess(&p, None, t(0), t(600)),
        Assessment::Due {
            attempt: 1,
            unhealthy_for: Duration::seconds(600)
        }
    );
    // After one attempt at 1000 the next waits 600 s, after two 1200 s.
    assert_eq!(
        assess(&p, Some(&record(1, 1000)), t(0), t(1599)),
        Assessment::BackingOff {
            until: t(1600),
            attempts: 1
        }
    );
    assert!(matches!(
        assess(&p, Some(&record(1, 1000)), t(0), t(1600)),
        Assessment::Due { attempt: 2, .. }
    ));
    assert_eq!(
        assess(&p, Some(&record(2, 1000)), t(0), t(2000)),
        Assessment::BackingOff {
            until: t(2200),
            attempts: 2
        }
    );
    assert_eq!(
        assess(&p, Some(&record(3, 1000)), t(0), t(99_999)),
        Assessment::Exhausted { attempts: 3 }
    );
    let off = MemberRemediation {
        unhealthy_seconds: 0,
        ..p
    };
    assert_eq!(assess(&off, None, t(0), t(99_999)), Assessment::Disabled);
    // The doubling is capped at a day and never overflows.
    assert_eq!(retry_wait(&p, 60), Duration::hours(24));
    assert_eq!(retry_wait(&p, 0), Duration::seconds(600));
}

/// A Ready, schedulable control-plane node `n<i>` at 10.0.0.<i>.
fn cp(i: u8) -> ControlPlaneNode {
    ControlPlaneNode {
        target: crate::podspec::NodeTarget::new(&format!("n{i}"), [10, 0, 0, i].into()),
        ready: true,
        deleting: false,
        unschedulable: false,
        etcd_stopped: None,
        remove_member: None,
    }
}

fn id(n: u64) -> MemberId {
    MemberId::new(n).unwrap()
}

/// Three nodes with voters 1–3; member 2 (on n2) unhealthy since 100, member 3 since 100.
struct Fixture {
    nodes: Vec<ControlPlaneNode>,
    members: Vec<MemberStatus>,
    by_node: BTreeMap<String, MemberId>,
    records: Vec<RemediationStatus>,
    skip: Vec<MemberId>,
    voter_target: usize,
    /// Every node's guard reports its etcd as status does (n2's not Ready).
    guards: BTreeMap<String, GuardSignal>,
}

impl Fixture {
    fn three() -> Self {
        Fixture {
            nodes: vec![cp(1), cp(2), cp(3)],
            members: vec![
                member("1", "n1", true, 0),
                member("2", "n2", false, 100),
                member("3", "n3", true, 0),
            ],
            by_node: (1..=3).map(|i| (format!("n{i}"), id(i))).collect(),
            records: Vec::new(),
            skip: Vec::new(),
            voter_target: 3,
            guards: [
                ("n1", GuardSignal::Healthy),
                ("n2", GuardSignal::Unhealthy),
                ("n3", GuardSignal::Healthy),
            ]
            .into_iter()
            .map(|(n, g)| (n.to_owned(), g))
            .collect(),
        }
    }

    fn candidates(&self, policy: &MemberRemediation, now: i64) -> Vec<Candidate> {
        candidates(&RemediationInput {
            policy,
            members: &self.members,
            nodes: &self.nodes,
            by_node: &self.by_node,
            records: &self.records,
            skip: &self.skip,
            voter_target: self.voter_target,
            observing_since: t(0),
            guards: &self.guards,
            now: t(now),
        })
    }

    /// The assessment of member 2 (on n2) at `now`.
    fn n2(&self, now: i64) -> Assessment {
        let c = self.candidates(&policy(), now);
        let n2 = c.iter().find(|c| c.node == "n2").unwrap();
        n2.assessment.clone()
    }
}

#[test]
fn candidates_are_started_unhealthy_members_not_being_rolled() {
    let mut f = Fixture::three();
    f.members[2] = member("3", "n3", false, 100);
    f.skip = vec![id(3)];
    let c = f.candidates(&policy(), 800);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].node, "n2");
    assert_eq!(c[0].since, t(100));
    assert!(matches!(
        c[0].assessment,
        Assessment::Due { attempt: 1, .. }
    ));
}

#[test]
fn an_unhealthy_member_of_a_healthy_node_is_still_replaced_when_due() {
    let f = Fixture::three();
    assert_eq!(f.n2(699), Assessment::Waiting { due: t(700) });
    assert_eq!(
        f.n2(700),
        Assessment::Due {
            attempt: 1,
            unhealthy_for: Duration::seconds(600)
        }
    );
    // A standby learner (voters at the target) is no replacement in flight.
    let mut standby = Fixture::three();
    standby.nodes.push(cp(4));
    standby.members.push(MemberStatus {
        role: "Learner".into(),
        ..member("4", "n4", true, 0)
    });
    standby.by_node.insert("n4".into(), id(4));
    assert!(matches!(
        standby.n2(700),
        Assessment::Due { attempt: 1, .. }
    ));
}

#[test]
fn a_cordoned_nodes_member_is_held_by_the_admin() {
    let mut f = Fixture::three();
    f.nodes[1].unschedulable = true;
    assert_eq!(
        f.n2(99_999),
        Assessment::Held {
            hold: Hold::Cordoned
        }
    );
}

#[test]
fn a_not_ready_nodes_member_is_held_by_the_admin() {
    let mut f = Fixture::three();
    f.nodes[1].ready = false;
    assert_eq!(
        f.n2(99_999),
        Assessment::Held {
            hold: Hold::NotReady
        }
    );
}

#[test]
fn an_etcd_stopped_nodes_member_is_held_with_the_admins_reason() {
    let mut f = Fixture::three();
    f.nodes[1].etcd_stopped = Some("disk replacement, ticket 42".into());
    // The annotation wins over cordoning: it carries the reason.
    f.nodes[1].unschedulable = true;
    let hold = Hold::EtcdStopped("disk replacement, ticket 42".into());
    assert_eq!(f.n2(99_999), Assessment::Held { hold: hold.clone() });
    let c = f.candidates(&policy(), 99_999);
    let (cond, lines) = conditions(&c);
    assert!(!cond.status, "a hold is not Degraded");
    assert_eq!(
        lines,
        [
            "member 2 of n2 is unhealthy and held by the admin: node n2 is etcd-stopped (etcd.static-operator.io/etcd-stopped: disk replacement, ticket 42); it is not replaced while the hold lasts, and its unhealthy time counts again from when the hold ends"
        ]
    );
    // The node's record says so (made for it: no attempt yet).
    let mut records = Vec::new();
    record_holds(&mut records, &c, &rfc(99_999));
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].attempts, 0);
    assert_eq!(
        records[0].held_by_admin,
        "node n2 is etcd-stopped (etcd.static-operator.io/etcd-stopped: disk replacement, ticket 42)"
    );
    assert_eq!(records[0].last_held_time, rfc(99_999));
}

#[test]
fn when_the_hold_ends_the_unhealthy_time_counts_again_from_then() {
    let mut f = Fixture::three();
    f.nodes[1].unschedulable = true;
    let held = f.candidates(&policy(), 5000);
    let mut records = Vec::new();
    record_holds(&mut records, &held, &rfc(5000));
    // Uncordoned: member 2 went down at 100, but the hold was last seen at 5000.
    f.nodes[1].unschedulable = false;
    f.records = records;
    assert_eq!(f.n2(5001), Assessment::Waiting { due: t(5600) });
    assert!(matches!(f.n2(5600), Assessment::Due { attempt: 1, .. }));
    // The hold is cleared from the record; its time is kept.
    let mut records = f.records.clone();
    record_holds(&mut records, &f.candidates(&policy(), 5001), &rfc(5001));
    assert_eq!(records[0].held_by_admin, "");
    assert_eq!(records[0].last_held_time, rfc(5000));
}

#[test]
fn a_due_replacement_waits_for_one_in_flight() {
    // A learner for n4 that has not started yet.
    let mut unstarted = Fixture::three();
    unstarted.nodes.push(cp(4));
    unstarted.members.push(MemberStatus {
        name: String::new(),
        role: "Learner".into(),
        started: false,
        ..member("4", "", false, 0)
    });
    unstarted.by_node.insert("n4".into(), id(4));
    let want = |what: &str| Assessment::AwaitingReplacement {
        in_flight: what.to_owned(),
    };
    assert_eq!(
        unstarted.n2(700),
        want("member 4 added for n4 has not started yet")
    );
    // A started learner not yet promoted (voters below the target).
    let mut catching_up = Fixture::three();
    catching_up.members[2] = MemberStatus {
        role: "Learner".into(),
        ..member("3", "n3", true, 0)
    };
    assert_eq!(
        catching_up.n2(700),
        want("learner 3 (n3) is not promoted yet")
    );
    // n3's member removed by remediation and n3 without a member yet.
    let mut removed = Fixture::three();
    removed.members.remove(2);
    removed.by_node.remove("n3");
    let mut n3 = record(1, 600);
    n3.node_name = "n3".into();
    n3.last_member_id = "3".into();
    removed.records = vec![n3];
    assert_eq!(
        removed.n2(700),
        want(&format!(
            "remediation removed member 3 of n3 at {} and the node has no member yet",
            rfc(600)
        ))
    );
    let (_, lines) = conditions(&removed.candidates(&policy(), 700));
    assert_eq!(
        lines,
        [format!(
            "member 2 of n2 is due for replacement (unhealthy since {}) and waits: remediation removed member 3 of n3 at {} and the node has no member yet; one replacement at a time",
            rfc(100),
            rfc(600)
        )]
    );
    // A node's own replacement does not hold its retry: n2's learner stays unhealthy.
    let mut own = Fixture::three();
    own.members[1] = MemberStatus {
        role: "Learner".into(),
        ..member("2", "n2", false, 100)
    };
    assert!(matches!(own.n2(700), Assessment::Due { attempt: 1, .. }));
}

#[test]
fn records_count_attempts_and_reset_after_a_healthy_period() {
    let p = policy();
    let m2 = MemberId::new(2).unwrap();
    let mut records = Vec::new();
    record_attempt(&mut records, "n2", m2, "unhealthy", &rfc(0));
    record_attempt(&mut records, "n2", m2, "unhealthy again", &rfc(10));
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].attempts, 2);
    assert_eq!(records[0].last_reason, "unhealthy again");
    let by_node = BTreeMap::from([("n2".to_owned(), m2)]);
    let nodes = vec!["n2".to_owned()];
    // Healthy for less than minHealthySeconds: kept.
    let healthy = vec![member("2", "n2", true, 100)];
    assert_eq!(
        settle_records(&p, &records, &healthy, &by_node, &nodes, t(3699)).len(),
        1
    );
    // Healthy long enough: the count starts again.
    assert!(settle_records(&p, &records, &healthy, &by_node, &nodes, t(3700)).is_empty());
    // Still unhealthy, or no member: kept. A gone node: dropped.
    let sick = vec![member("2", "n2", false, 100)];
    assert_eq!(
        settle_records(&p, &records, &sick, &by_node, &nodes, t(99_999)).len(),
        1
    );
    assert_eq!(
        settle_records(&p, &records, &[], &BTreeMap::new(), &nodes, t(99_999)).len(),
        1
    );
    assert!(settle_records(&p, &records, &sick, &by_node, &[], t(0)).is_empty());
}

fn candidate(node: &str, member: u64, assessment: Assessment) -> Candidate {
    Candidate {
        node: node.to_owned(),
        member: MemberId::new(member).unwrap(),
        since: t(0),
        assessment,
    }
}

#[test]
fn conditions_by_assessment() {
    let ok = Computed::new(
        ConditionType::EtcdMembersDegraded,
        false,
        Reason::AsExpected,
        "",
    );
    let exhausted = |message: &str| {
        Computed::new(
            ConditionType::EtcdMembersDegraded,
            true,
            Reason::RemediationExhausted,
            message,
        )
    };
    let due = || Assessment::Due {
        attempt: 1,
        unhealthy_for: Duration::seconds(600),
    };
    let waiting_line = "member 2 of n2 unhealthy since 2027-01-15T08:00:00Z; replaced at 2027-01-15T08:10:00Z unless it recovers";
    let backing_off_line = "member 2 of n2 still unhealthy after 1 replacement(s); next attempt not before 2027-01-15T08:26:40Z";
    let exhausted_line = |m: u64, node: &str| {
        format!(
            "member {m} of {node} is still unhealthy after 3 replacement(s) (spec.memberRemediation.maxRetries); the operator stops replacing it: look at the node (disk, etcd logs, etcd-verify's report)"
        )
    };
    let disabled_line = "member 2 of n2 is unhealthy; remediation is off (spec.memberRemediation.unhealthySeconds: 0)";
    let cases: Vec<(&str, Vec<Candidate>, Computed, Vec<String>)> = vec![
        ("no candidates", vec![], ok.clone(), vec![]),
        (
            "due: acted on by membership, no line",
            vec![candidate("n2", 2, due())],
            ok.clone(),
            vec![],
        ),
        (
            "waiting for its time",
            vec![candidate("n2", 2, Assessment::Waiting { due: t(600) })],
            ok.clone(),
            vec![waiting_line.to_owned()],
        ),
        (
            "backing off",
            vec![candidate(
                "n2",
                2,
                Assessment::BackingOff {
                    until: t(1600),
                    attempts: 1,
                },
            )],
            ok.clone(),
            vec![backing_off_line.to_owned()],
        ),
        (
            "exhausted: degraded and a plan line",
            vec![candidate("n2", 2, Assessment::Exhausted { attempts: 3 })],
            exhausted(&exhausted_line(2, "n2")),
            vec![exhausted_line(2, "n2")],
        ),
        (
            "disabled",
            vec![candidate("n2", 2, Assessment::Disabled)],
            ok.clone(),
            vec![disabled_line.to_owned()],
        ),
        (
            "mixed: lines in candidate order, only the exhausted ones degrade",
            vec![
                candidate("n1", 1, due()),
                candidate("n2", 2, Assessment::Waiting { due: t(600) }),
                candidate("n3", 3, Assessment::Exhausted { attempts: 3 }),
                candidate("n4", 4, Assessment::Exhausted { attempts: 3 }),
            ],
            exhausted(&format!(
                "{}; {}",
                exhausted_line(3, "n3"),
                exhausted_line(4, "n4")
            )),
            vec![
                waiting_line.to_owned(),
                exhausted_line(3, "n3"),
                exhausted_line(4, "n4"),
            ],
        ),
    ];
    for (name, candidates, want_cond, want_lines) in cases {
        let (cond, lines) = conditions(&candidates);
        assert_eq!(cond, want_cond, "case: {name}");
        assert_eq!(lines, want_lines, "case: {name}");
    }
}

/// #65: unhealthy time nobody observed does not count. Member 2 went unhealthy at 100 as status
/// says; an operator that began watching at 650 (a restart, a new leader, the end of an API
/// outage) gives it the full `unhealthySeconds` (600) from then, not from 100.
#[test]
fn the_unhealthy_clock_starts_no_earlier_than_the_observer() {
    let f = Fixture::three();
    let late = |now: i64| {
        let c = candidates(&RemediationInput {
            policy: &policy(),
            members: &f.members,
            nodes: &f.nodes,
            by_node: &f.by_node,
            records: &f.records,
            skip: &f.skip,
            voter_target: f.voter_target,
            observing_since: t(650),
            guards: &f.guards,
            now: t(now),
        });
        c.into_iter().find(|c| c.node == "n2").unwrap()
    };
    assert_eq!(late(700).since, t(650));
    assert_eq!(late(700).assessment, Assessment::Waiting { due: t(1250) });
    assert!(matches!(late(1250).assessment, Assessment::Due { .. }));
}

#[test]
fn a_gap_in_observation_restarts_the_clock() {
    use crate::controllers::membership::remediation::{OBSERVATION_GAP, Observer};
    let mut o = Observer::default();
    assert_eq!(o.observe(t(100)), t(100), "the first pass starts it");
    assert_eq!(o.observe(t(105)), t(100));
    let within = t(105) + OBSERVATION_GAP;
    assert_eq!(
        o.observe(within),
        t(100),
        "a gap up to the bound is unbroken"
    );
    let after = within + OBSERVATION_GAP + Duration::seconds(1);
    assert_eq!(o.observe(after), after, "a longer gap restarts it");
    // A clock that went back (another observer's time) restarts it too.
    assert_eq!(o.observe(t(50)), t(50));
}

/// #65: "unhealthy" is the operator's own status call, over a path etcd's peers do not use. A
/// member due for replacement is replaced only when its node's quorum guard (probing etcd's
/// /health on the node) is not Ready either; a guard that is Ready, or no guard, holds it, and
/// the plan says why.
#[test]
fn a_replacement_needs_the_nodes_guard_to_agree() {
    let mut f = Fixture::three();
    assert!(matches!(f.n2(700), Assessment::Due { .. }));
    f.guards.insert("n2".into(), GuardSignal::Healthy);
    let held = f.n2(700);
    assert!(
        matches!(&held, Assessment::Unconfirmed { why } if why.contains("reports its etcd healthy")),
        "{held:?}"
    );
    f.guards.remove("n2");
    let none = f.n2(700);
    assert!(
        matches!(&none, Assessment::Unconfirmed { why } if why.contains("no quorum guard runs on n2")),
        "{none:?}"
    );
    let (_, lines) = conditions(&f.candidates(&policy(), 700));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("is not replaced") && l.contains("n2")),
        "{lines:?}"
    );
    // Not yet due: the guard changes nothing.
    assert!(matches!(f.n2(650), Assessment::Waiting { .. }));
}
