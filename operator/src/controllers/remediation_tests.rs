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

#[test]
fn candidates_are_started_unhealthy_members_not_being_rolled() {
    let p = policy();
    let m2 = MemberId::new(2).unwrap();
    let m3 = MemberId::new(3).unwrap();
    let members = vec![
        member("1", "n1", true, 0),
        member("2", "n2", false, 100),
        member("3", "n3", false, 100),
    ];
    let by_node = BTreeMap::from([
        ("n1".to_owned(), MemberId::new(1).unwrap()),
        ("n2".to_owned(), m2),
        ("n3".to_owned(), m3),
    ]);
    let c = candidates(&p, &members, &by_node, &[], &[m3], t(800));
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].node, "n2");
    assert_eq!(c[0].since, t(100));
    assert!(matches!(
        c[0].assessment,
        Assessment::Due { attempt: 1, .. }
    ));
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
