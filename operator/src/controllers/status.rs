//! Status conditions: typed condition types, a pure merge that keeps `lastTransitionTime` while a
//! condition's status doesn't change, and the aggregate `Available` / `Progressing` / `Degraded`
//! computed from the detail conditions, with messages that say what is happening and, when
//! waiting, what for.
//!
//! **Inertia.** The detail conditions (`EtcdMembersDegraded`, `<Controller>Degraded`, ...) say
//! at once what fails. The aggregate `Degraded` turns True only once one of them has been True
//! for [`DEGRADED_GRACE`] (measured from its `lastTransitionTime`): a member restarting, etcd
//! still starting during a bootstrap or one failed API call is not a degraded cluster. While a
//! problem is inside the grace period, `Degraded` stays False with reason `WithinGracePeriod`
//! and a message naming it. cluster-etcd-operator gives its union conditions the same inertia.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::api::Condition;

/// How long a detail `*Degraded` condition must stay True before the aggregate `Degraded` does.
pub const DEGRADED_GRACE: time::Duration = time::Duration::seconds(60);

/// Condition types the operator sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConditionType {
    Available,
    Progressing,
    Degraded,
    EtcdMembersAvailable,
    EtcdMembersDegraded,
    EtcdMembersProgressing,
    NodeInstallerProgressing,
    NodeInstallerDegraded,
    CertSignerDegraded,
    EtcdObserverDegraded,
    MembershipControllerDegraded,
    TargetConfigControllerDegraded,
    RevisionControllerDegraded,
    InstallerControllerDegraded,
    EndpointsControllerDegraded,
}

impl ConditionType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Available => "Available",
            ConditionType::Progressing => "Progressing",
            ConditionType::Degraded => "Degraded",
            ConditionType::EtcdMembersAvailable => "EtcdMembersAvailable",
            ConditionType::EtcdMembersDegraded => "EtcdMembersDegraded",
            ConditionType::EtcdMembersProgressing => "EtcdMembersProgressing",
            ConditionType::NodeInstallerProgressing => "NodeInstallerProgressing",
            ConditionType::NodeInstallerDegraded => "NodeInstallerDegraded",
            ConditionType::CertSignerDegraded => "CertSignerDegraded",
            ConditionType::EtcdObserverDegraded => "EtcdObserverDegraded",
            ConditionType::MembershipControllerDegraded => "MembershipControllerDegraded",
            ConditionType::TargetConfigControllerDegraded => "TargetConfigControllerDegraded",
            ConditionType::RevisionControllerDegraded => "RevisionControllerDegraded",
            ConditionType::InstallerControllerDegraded => "InstallerControllerDegraded",
            ConditionType::EndpointsControllerDegraded => "EndpointsControllerDegraded",
        }
    }

    /// The per-controller Degraded conditions.
    pub const CONTROLLERS: [ConditionType; 7] = [
        ConditionType::CertSignerDegraded,
        ConditionType::EtcdObserverDegraded,
        ConditionType::MembershipControllerDegraded,
        ConditionType::TargetConfigControllerDegraded,
        ConditionType::RevisionControllerDegraded,
        ConditionType::InstallerControllerDegraded,
        ConditionType::EndpointsControllerDegraded,
    ];
}

/// A condition as computed this pass (no timestamp yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Computed {
    pub type_: ConditionType,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Computed {
    /// True with `problems` joined when there are any; False ("AsExpected") otherwise.
    pub fn from_problems(type_: ConditionType, reason: &str, problems: &[String]) -> Self {
        if problems.is_empty() {
            Self::new(type_, false, "AsExpected", "")
        } else {
            Self::new(type_, true, reason, problems.join("; "))
        }
    }

    pub fn new(
        type_: ConditionType,
        status: bool,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// Merges several reports of one condition type: True if any is, with the True reports'
/// messages joined (the first True report's reason).
pub fn combine(conds: Vec<Computed>) -> Vec<Computed> {
    let mut out: Vec<Computed> = Vec::new();
    for c in conds {
        match out.iter_mut().find(|o| o.type_ == c.type_) {
            None => out.push(c),
            Some(o) if c.status && o.status => {
                if !c.message.is_empty() {
                    o.message = if o.message.is_empty() {
                        c.message
                    } else {
                        format!("{}; {}", o.message, c.message)
                    };
                }
            }
            Some(o) if c.status => *o = c,
            Some(_) => {}
        }
    }
    out
}

/// Adds the aggregate conditions to the detail ones (after [`combine`]). `previous` (the
/// conditions in status before this pass) and `now` give each True detail `*Degraded` condition
/// its age, for the inertia of the aggregate `Degraded`.
pub fn with_aggregates(
    detail: Vec<Computed>,
    previous: &[Condition],
    now: OffsetDateTime,
) -> Vec<Computed> {
    let mut detail = combine(detail);
    let get = |t: ConditionType| detail.iter().find(|c| c.type_ == t).cloned();
    let available = get(ConditionType::EtcdMembersAvailable);
    let progressing: Vec<Computed> = [
        ConditionType::EtcdMembersProgressing,
        ConditionType::NodeInstallerProgressing,
    ]
    .into_iter()
    .filter_map(get)
    .filter(|c| c.status)
    .collect();
    let (degraded, settling): (Vec<Computed>, Vec<Computed>) = detail
        .iter()
        .filter(|c| c.status && c.type_.as_str().ends_with("Degraded"))
        .cloned()
        .partition(|c| true_for(previous, c.type_, now) >= DEGRADED_GRACE);
    let join = |cs: &[Computed]| {
        cs.iter()
            .map(|c| format!("{}: {}", c.type_.as_str(), c.message))
            .collect::<Vec<_>>()
            .join("; ")
    };
    detail.push(match available {
        Some(a) if a.status => Computed::new(ConditionType::Available, true, "Quorate", a.message),
        Some(a) => Computed::new(ConditionType::Available, false, "NotQuorate", a.message),
        None => Computed::new(
            ConditionType::Available,
            false,
            "Unknown",
            "etcd membership not observed yet",
        ),
    });
    detail.push(if progressing.is_empty() {
        Computed::new(
            ConditionType::Progressing,
            false,
            "AsExpected",
            "every node runs the latest revision; membership is as desired",
        )
    } else {
        Computed::new(
            ConditionType::Progressing,
            true,
            "Progressing",
            join(&progressing),
        )
    });
    detail.push(if !degraded.is_empty() {
        Computed::new(ConditionType::Degraded, true, "Degraded", join(&degraded))
    } else if !settling.is_empty() {
        Computed::new(
            ConditionType::Degraded,
            false,
            "WithinGracePeriod",
            format!(
                "not degraded unless this lasts {}s: {}",
                DEGRADED_GRACE.whole_seconds(),
                join(&settling)
            ),
        )
    } else {
        Computed::new(ConditionType::Degraded, false, "AsExpected", "")
    });
    detail
}

/// How long condition `type_` has been True before this pass: from its `lastTransitionTime` in
/// `previous`; zero when it was not True (it turns True now) or the time does not parse.
fn true_for(previous: &[Condition], type_: ConditionType, now: OffsetDateTime) -> time::Duration {
    previous
        .iter()
        .find(|p| p.type_ == type_.as_str() && p.status == "True")
        .and_then(|p| OffsetDateTime::parse(&p.last_transition_time, &Rfc3339).ok())
        .map_or(time::Duration::ZERO, |since| now - since)
}

/// Merges computed conditions into the previous ones: `lastTransitionTime` changes only when the
/// status does. Output sorted by type.
pub fn merge(previous: &[Condition], computed: &[Computed], now: &str) -> Vec<Condition> {
    let mut out: Vec<Condition> = computed
        .iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            let since = previous
                .iter()
                .find(|p| p.type_ == c.type_.as_str() && p.status == status)
                .map_or_else(|| now.to_owned(), |p| p.last_transition_time.clone());
            Condition {
                type_: c.type_.as_str().to_owned(),
                status: status.to_owned(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: since,
            }
        })
        .collect();
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_status() {
        let first = merge(
            &[],
            &[Computed::new(
                ConditionType::EtcdMembersAvailable,
                true,
                "Quorate",
                "3 of 3",
            )],
            "t1",
        );
        let same = merge(
            &first,
            &[Computed::new(
                ConditionType::EtcdMembersAvailable,
                true,
                "Quorate",
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
                "NotQuorate",
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
                "AsExpected",
                "",
            ),
            Computed::new(
                ConditionType::EtcdMembersProgressing,
                true,
                "PlannedRestart",
                "n1 restarting",
            ),
            Computed::new(
                ConditionType::EtcdMembersProgressing,
                true,
                "LearnerPending",
                "learner 4 pending",
            ),
        ]);
        assert_eq!(c.len(), 1);
        assert!(c[0].status);
        assert_eq!(c[0].reason, "PlannedRestart");
        assert_eq!(c[0].message, "n1 restarting; learner 4 pending");
    }

    fn at(seconds: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(1_700_000_000 + seconds)
    }

    fn previous_true(type_: ConditionType, since: OffsetDateTime) -> Vec<Condition> {
        merge(
            &[],
            &[Computed::new(type_, true, "ApiError", "conflict")],
            &since.format(&Rfc3339).unwrap(),
        )
    }

    fn detail_with_revision_problem() -> Vec<Computed> {
        vec![
            Computed::new(
                ConditionType::EtcdMembersAvailable,
                true,
                "Quorate",
                "2 of 2 voters healthy",
            ),
            Computed::new(
                ConditionType::EtcdMembersProgressing,
                true,
                "LearnerPending",
                "waiting for learner 3 to start",
            ),
            Computed::new(
                ConditionType::NodeInstallerProgressing,
                false,
                "AllCurrent",
                "",
            ),
            Computed::new(
                ConditionType::RevisionControllerDegraded,
                true,
                "ApiError",
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
        assert_eq!(degraded.reason, "WithinGracePeriod");
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
                "AsExpected",
                "",
            )],
            &at(100).format(&Rfc3339).unwrap(),
        );
        let all = with_aggregates(detail_with_revision_problem(), &cleared, at(120));
        assert_eq!(
            find(&all, ConditionType::Degraded).reason,
            "WithinGracePeriod"
        );
        // And with nothing True, Degraded is plainly False.
        let healthy = vec![Computed::new(
            ConditionType::EtcdMembersAvailable,
            true,
            "Quorate",
            "3 of 3",
        )];
        let all = with_aggregates(healthy, &long_ago, at(120));
        let degraded = find(&all, ConditionType::Degraded);
        assert!(!degraded.status);
        assert_eq!(degraded.reason, "AsExpected");
    }
}
