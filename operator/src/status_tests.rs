use super::*;
use time::format_description::well_known::Rfc3339;

#[test]
fn transition_time_moves_only_with_status() {
    let first = merge(
        &[],
        &[Computed::new(
            ConditionType::EtcdMembersAvailable,
            true,
            Reason::Quorate,
            "3 of 3",
        )],
        "t1",
    );
    let same = merge(
        &first,
        &[Computed::new(
            ConditionType::EtcdMembersAvailable,
            true,
            Reason::Quorate,
            "2 of 3",
        )],
        "t2",
    );
    assert_eq!(same[0].last_transition_time, "t1");
    assert_eq!(same[0].message, "2 of 3");
    let flipped = merge(
        &same,
        &[Computed::new(
            ConditionType::EtcdMembersAvailable,
            false,
            Reason::NotQuorate,
            "1 of 3",
        )],
        "t3",
    );
    assert_eq!(flipped[0].last_transition_time, "t3");
}

#[test]
fn reports_of_one_type_combine() {
    let c = combine(vec![
        Computed::new(
            ConditionType::EtcdMembersProgressing,
            false,
            Reason::AsExpected,
            "",
        ),
        Computed::new(
            ConditionType::EtcdMembersProgressing,
            true,
            Reason::PlannedRestart,
            "n1 restarting",
        ),
        Computed::new(
            ConditionType::EtcdMembersProgressing,
            true,
            Reason::LearnerPending,
            "learner 4 pending",
        ),
    ]);
    assert_eq!(c.len(), 1);
    assert!(c[0].status);
    assert_eq!(c[0].reason, Reason::PlannedRestart);
    assert_eq!(c[0].message, "n1 restarting; learner 4 pending");
}

fn at(seconds: i64) -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(1_700_000_000 + seconds)
}

fn previous_true(type_: ConditionType, since: OffsetDateTime) -> Vec<Condition> {
    merge(
        &[],
        &[Computed::new(
            type_,
            true,
            Reason::Failed(crate::category::Category::Api),
            "conflict",
        )],
        &since.format(&Rfc3339).unwrap(),
    )
}

fn detail_with_revision_problem() -> Vec<Computed> {
    vec![
        Computed::new(
            ConditionType::EtcdMembersAvailable,
            true,
            Reason::Quorate,
            "2 of 2 voters healthy",
        ),
        Computed::new(
            ConditionType::EtcdMembersProgressing,
            true,
            Reason::LearnerPending,
            "waiting for learner 3 to start",
        ),
        Computed::new(
            ConditionType::NodeInstallerProgressing,
            false,
            Reason::AllNodesAtLatestRevision,
            "",
        ),
        Computed::new(
            ConditionType::RevisionControllerDegraded,
            true,
            Reason::Failed(crate::category::Category::Api),
            "conflict",
        ),
    ]
}

fn find(all: &[Computed], t: ConditionType) -> Computed {
    all.iter().find(|c| c.type_ == t).cloned().unwrap()
}

#[test]
fn aggregates_say_what_is_happening() {
    let previous = previous_true(ConditionType::RevisionControllerDegraded, at(0));
    let all = with_aggregates(detail_with_revision_problem(), &previous, at(61));
    assert!(find(&all, ConditionType::Available).status);
    assert_eq!(
        find(&all, ConditionType::Progressing).message,
        "EtcdMembersProgressing: waiting for learner 3 to start"
    );
    let degraded = find(&all, ConditionType::Degraded);
    assert!(degraded.status);
    assert_eq!(degraded.message, "RevisionControllerDegraded: conflict");
}

#[test]
fn degraded_waits_out_the_grace_period() {
    // New this pass: the detail condition says so at once, the aggregate waits.
    let all = with_aggregates(detail_with_revision_problem(), &[], at(0));
    assert!(find(&all, ConditionType::RevisionControllerDegraded).status);
    let degraded = find(&all, ConditionType::Degraded);
    assert!(!degraded.status);
    assert_eq!(degraded.reason, Reason::WithinGracePeriod);
    assert_eq!(
        degraded.message,
        "not degraded unless this lasts 60s: RevisionControllerDegraded: conflict"
    );
    // Still inside the grace period 59 s later.
    let previous = previous_true(ConditionType::RevisionControllerDegraded, at(0));
    let all = with_aggregates(detail_with_revision_problem(), &previous, at(59));
    assert!(!find(&all, ConditionType::Degraded).status);
    // At 60 s it counts.
    let all = with_aggregates(detail_with_revision_problem(), &previous, at(60));
    assert!(find(&all, ConditionType::Degraded).status);
}

#[test]
fn grace_restarts_when_the_problem_went_away() {
    // The detail condition was True long ago, then False: its age counts from now again.
    let long_ago = previous_true(ConditionType::RevisionControllerDegraded, at(0));
    let cleared = merge(
        &long_ago,
        &[Computed::new(
            ConditionType::RevisionControllerDegraded,
            false,
            Reason::AsExpected,
            "",
        )],
        &at(100).format(&Rfc3339).unwrap(),
    );
    let all = with_aggregates(detail_with_revision_problem(), &cleared, at(120));
    assert_eq!(
        find(&all, ConditionType::Degraded).reason,
        Reason::WithinGracePeriod
    );
    // And with nothing True, Degraded is plainly False.
    let healthy = vec![Computed::new(
        ConditionType::EtcdMembersAvailable,
        true,
        Reason::Quorate,
        "3 of 3",
    )];
    let all = with_aggregates(healthy, &long_ago, at(120));
    let degraded = find(&all, ConditionType::Degraded);
    assert!(!degraded.status);
    assert_eq!(degraded.reason, Reason::AsExpected);
}
