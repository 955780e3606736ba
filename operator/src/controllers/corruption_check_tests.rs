//! When a check is due, which members stay named as divergent, and what the condition says.

use membership::Member;

use super::*;

fn id(i: u64) -> MemberId {
    MemberId::new(i).unwrap()
}

fn obs(ids: &[u64]) -> EtcdObservation {
    EtcdObservation {
        members: ids
            .iter()
            .map(|i| {
                Member::voter(
                    id(*i),
                    &format!("n{i}"),
                    format!("https://10.0.0.{i}:2380").parse().unwrap(),
                )
            })
            .collect(),
        ..Default::default()
    }
}

fn last(result: &str, divergent: &[u64]) -> CorruptionCheckStatus {
    CorruptionCheckStatus {
        last_check_time: "2026-11-25T12:00:00Z".into(),
        revision: 4711,
        result: result.into(),
        divergent_members: divergent
            .iter()
            .map(|i| DivergentMember {
                name: format!("n{i}"),
                id: id(*i).to_string(),
            })
            .collect(),
        checked_members: vec!["n1".into(), "n2".into(), "n3".into()],
        message: "members hold different data".into(),
    }
}

fn t(s: &str) -> OffsetDateTime {
    crate::certs::parse_time(s).unwrap()
}

#[test]
fn a_check_is_due_an_interval_after_the_last_and_at_once_without_one() {
    let spec = CorruptionCheck::default();
    let voters = ["n1", "n2", "n3"];
    assert_eq!(
        next_due(&spec, None, &voters),
        Some(OffsetDateTime::UNIX_EPOCH)
    );
    assert_eq!(
        next_due(&spec, Some(&last(CONSISTENT, &[])), &voters),
        Some(t("2026-11-25T12:05:00Z"))
    );
    // n4 was not compared last time (down, or new): at once.
    assert_eq!(
        next_due(&spec, Some(&last(CONSISTENT, &[])), &["n1", "n4"]),
        Some(OffsetDateTime::UNIX_EPOCH)
    );
    // An inconclusive check waits its interval whoever it missed.
    assert_eq!(
        next_due(&spec, Some(&last(INCONCLUSIVE, &[])), &["n1", "n4"]),
        Some(t("2026-11-25T12:05:00Z"))
    );
    let off = CorruptionCheck {
        interval_seconds: 0,
        ..spec
    };
    assert_eq!(next_due(&off, Some(&last(CONSISTENT, &[])), &voters), None);
}

#[test]
fn only_a_divergent_result_names_members_and_only_those_still_members() {
    let o = obs(&[1, 2, 3]);
    assert_eq!(divergent(Some(&last(DIVERGENT, &[2])), &o), vec![id(2)]);
    assert!(divergent(Some(&last(CONSISTENT, &[])), &o).is_empty());
    // An inconclusive check carries the members of the last conclusive one.
    assert_eq!(divergent(Some(&last(INCONCLUSIVE, &[2])), &o), vec![id(2)]);
    // n2 was replaced: its old id is gone, the new member is not blamed.
    assert!(divergent(Some(&last(DIVERGENT, &[2])), &obs(&[1, 3, 9])).is_empty());
}

#[test]
fn the_condition_names_the_member_and_what_happens_next() {
    let o = obs(&[1, 2, 3]);
    let c = condition(Some(&last(DIVERGENT, &[2])), &o, false).unwrap();
    assert_eq!(
        (c.type_, c.status, c.reason),
        (C::EtcdMembersDegraded, true, Reason::MembersDivergent)
    );
    assert!(c.message.contains("n2 (2)"), "{}", c.message);
    assert!(c.message.contains("at revision 4711"), "{}", c.message);
    assert!(
        c.message.contains("replaceMinority is off"),
        "{}",
        c.message
    );
    let c = condition(Some(&last(DIVERGENT, &[2])), &o, true).unwrap();
    assert!(
        c.message.contains("replaced through the quorum gate"),
        "{}",
        c.message
    );
    assert!(condition(Some(&last(INCONCLUSIVE, &[])), &o, false).is_none());
    assert!(condition(Some(&last(INCONCLUSIVE, &[2])), &o, false).is_some());
    assert!(condition(None, &o, false).is_none());
}
