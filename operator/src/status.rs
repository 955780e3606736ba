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

use crate::api::Condition;
use crate::events::EventReason;

/// How long a detail `*Degraded` condition must stay True before the aggregate `Degraded` does.
pub const DEGRADED_GRACE: time::Duration = time::Duration::seconds(60);

/// Condition types the operator sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConditionType {
    Available,
    Progressing,
    Degraded,
    Upgradeable,
    /// The last good (verified) backup is as recent as the schedule allows
    /// (`controllers::backup::ready`).
    BackupReady,
    EtcdMembersAvailable,
    EtcdMembersDegraded,
    EtcdMembersProgressing,
    NodeInstallerProgressing,
    NodeInstallerDegraded,
    /// The EtcdCluster cannot be decoded: the operator holds every action.
    SpecDegraded,
    CertSignerDegraded,
    EtcdObserverDegraded,
    MembershipControllerDegraded,
    TargetConfigControllerDegraded,
    RevisionControllerDegraded,
    InstallerControllerDegraded,
    EndpointsControllerDegraded,
    DefragControllerDegraded,
    BackupControllerDegraded,
    QuorumGuardControllerDegraded,
}

impl ConditionType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Available => "Available",
            ConditionType::Progressing => "Progressing",
            ConditionType::Degraded => "Degraded",
            ConditionType::Upgradeable => "Upgradeable",
            ConditionType::BackupReady => "BackupReady",
            ConditionType::EtcdMembersAvailable => "EtcdMembersAvailable",
            ConditionType::EtcdMembersDegraded => "EtcdMembersDegraded",
            ConditionType::EtcdMembersProgressing => "EtcdMembersProgressing",
            ConditionType::NodeInstallerProgressing => "NodeInstallerProgressing",
            ConditionType::NodeInstallerDegraded => "NodeInstallerDegraded",
            ConditionType::SpecDegraded => "SpecDegraded",
            ConditionType::CertSignerDegraded => "CertSignerDegraded",
            ConditionType::EtcdObserverDegraded => "EtcdObserverDegraded",
            ConditionType::MembershipControllerDegraded => "MembershipControllerDegraded",
            ConditionType::TargetConfigControllerDegraded => "TargetConfigControllerDegraded",
            ConditionType::RevisionControllerDegraded => "RevisionControllerDegraded",
            ConditionType::InstallerControllerDegraded => "InstallerControllerDegraded",
            ConditionType::EndpointsControllerDegraded => "EndpointsControllerDegraded",
            ConditionType::DefragControllerDegraded => "DefragControllerDegraded",
            ConditionType::BackupControllerDegraded => "BackupControllerDegraded",
            ConditionType::QuorumGuardControllerDegraded => "QuorumGuardControllerDegraded",
        }
    }

    /// The per-controller Degraded conditions.
    pub const CONTROLLERS: [ConditionType; 10] = [
        ConditionType::CertSignerDegraded,
        ConditionType::EtcdObserverDegraded,
        ConditionType::MembershipControllerDegraded,
        ConditionType::TargetConfigControllerDegraded,
        ConditionType::RevisionControllerDegraded,
        ConditionType::InstallerControllerDegraded,
        ConditionType::EndpointsControllerDegraded,
        ConditionType::DefragControllerDegraded,
        ConditionType::BackupControllerDegraded,
        ConditionType::QuorumGuardControllerDegraded,
    ];
}

/// Why a condition has its status: the `reason` field, one typed value per meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    AsExpected,
    Unknown,
    Progressing,
    Degraded,
    WithinGracePeriod,
    // etcd members
    Quorate,
    NotQuorate,
    EtcdUnreachable,
    UnhealthyMembers,
    AlarmRaised,
    BlockedByVerify,
    PlannedRestart,
    RemediationExhausted,
    NoSpace,
    MembersDivergent,
    // defragmentation
    Defragmenting,
    DefragmentationFailed,
    // membership and learner promotion
    Planned,
    Unmanaged,
    WaitingForQuorumGate,
    EtcdNotReady,
    LearnerAdded,
    LearnerPending,
    /// A learner add waits until the node's etcd pod no longer lists its removed member.
    RemovedMemberListed,
    LearnerCatchingUp,
    LearnerNotCatchingUp,
    LearnerPromoted,
    MemberRemoved(RemovalKind),
    MemberMoved,
    // installer
    AllNodesAtLatestRevision,
    Installing,
    Waiting,
    BackingOff,
    InstallerFailed,
    /// A node that ran a revision shows no etcd static pod.
    EtcdPodMissing,
    // payload status (Upgradeable)
    MembershipChanging,
    RevisionRollingOut,
    EtcdVersionChanging,
    QuorumAtRisk,
    /// The EtcdCluster cannot be decoded: every action held.
    SpecUnreadable,
    /// Backups are configured and `BackupReady` is False.
    BackupNotReady,
    // backups (BackupReady)
    BackupsNotConfigured,
    NoVerifiedBackup,
    BackupTooOld,
    BackupFailing,
    /// A disruptive operation is held: the backup taken for it failed (BackupControllerDegraded).
    PreOperationBackupFailing,
    // consumers of etcd (CertSignerDegraded)
    /// A CA rotation waited longer than a consumer's `reload.deadlineSeconds` for its pods to
    /// restart (it still waits).
    ConsumerNotReloaded,
    /// A `Restart` consumer's pods cannot be listed (or none are named): whether it picked up
    /// its Secret is unknown, so a CA rotation waits.
    ConsumerPodsUnreadable,
    /// A controller failed; the error's category (its CamelCase reason, e.g. `Conflict`).
    Failed(crate::category::Category),
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::AsExpected => "AsExpected",
            Reason::Unknown => "Unknown",
            Reason::Progressing => "Progressing",
            Reason::Degraded => "Degraded",
            Reason::WithinGracePeriod => "WithinGracePeriod",
            Reason::Quorate => "Quorate",
            Reason::NotQuorate => "NotQuorate",
            Reason::EtcdUnreachable => "EtcdUnreachable",
            Reason::UnhealthyMembers => "UnhealthyMembers",
            Reason::AlarmRaised => "AlarmRaised",
            Reason::BlockedByVerify => "BlockedByVerify",
            Reason::PlannedRestart => "PlannedRestart",
            Reason::RemediationExhausted => "RemediationExhausted",
            Reason::NoSpace => "NoSpace",
            Reason::MembersDivergent => "MembersDivergent",
            Reason::Defragmenting => "Defragmenting",
            Reason::DefragmentationFailed => "DefragmentationFailed",
            Reason::Planned => "Planned",
            Reason::Unmanaged => "Unmanaged",
            Reason::WaitingForQuorumGate => "WaitingForQuorumGate",
            Reason::EtcdNotReady => "EtcdNotReady",
            Reason::LearnerAdded => "LearnerAdded",
            Reason::LearnerPending => "LearnerPending",
            Reason::RemovedMemberListed => "RemovedMemberListed",
            Reason::LearnerCatchingUp => "LearnerCatchingUp",
            Reason::LearnerNotCatchingUp => "LearnerNotCatchingUp",
            Reason::LearnerPromoted => "LearnerPromoted",
            Reason::MemberRemoved(kind) => kind.event().as_str(),
            Reason::MemberMoved => "MemberPeerURLMoved",
            Reason::AllNodesAtLatestRevision => "AllNodesAtLatestRevision",
            Reason::Installing => "Installing",
            Reason::Waiting => "Waiting",
            Reason::BackingOff => "BackingOff",
            Reason::InstallerFailed => "InstallerFailed",
            Reason::EtcdPodMissing => "EtcdPodMissing",
            Reason::MembershipChanging => "MembershipChanging",
            Reason::RevisionRollingOut => "RevisionRollingOut",
            Reason::EtcdVersionChanging => "EtcdVersionChanging",
            Reason::QuorumAtRisk => "QuorumAtRisk",
            Reason::SpecUnreadable => "SpecUnreadable",
            Reason::BackupNotReady => "BackupNotReady",
            Reason::BackupsNotConfigured => "BackupsNotConfigured",
            Reason::NoVerifiedBackup => "NoVerifiedBackup",
            Reason::BackupTooOld => "BackupTooOld",
            Reason::BackupFailing => "BackupFailing",
            Reason::PreOperationBackupFailing => "PreOperationBackupFailing",
            Reason::ConsumerNotReloaded => "ConsumerNotReloaded",
            Reason::ConsumerPodsUnreadable => "ConsumerPodsUnreadable",
            Reason::Failed(category) => category.reason(),
        }
    }
}

/// A condition as computed this pass (no timestamp yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Computed {
    pub type_: ConditionType,
    pub status: bool,
    pub reason: Reason,
    pub message: String,
}

impl Computed {
    /// True with `problems` joined when there are any; False ("AsExpected") otherwise.
    pub fn from_problems(type_: ConditionType, reason: Reason, problems: &[String]) -> Self {
        if problems.is_empty() {
            Self::new(type_, false, Reason::AsExpected, "")
        } else {
            Self::new(type_, true, reason, problems.join("; "))
        }
    }

    pub fn new(
        type_: ConditionType,
        status: bool,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
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
    let available = available(get(ConditionType::EtcdMembersAvailable));
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
    detail.push(available);
    detail.push(if progressing.is_empty() {
        Computed::new(
            ConditionType::Progressing,
            false,
            Reason::AsExpected,
            "every node runs the latest revision; membership is as desired",
        )
    } else {
        Computed::new(
            ConditionType::Progressing,
            true,
            Reason::Progressing,
            join(&progressing),
        )
    });
    detail.push(degraded_aggregate(&degraded, &settling));
    detail
}

/// The detail conditions' messages, each prefixed with its type.
fn join(cs: &[Computed]) -> String {
    cs.iter()
        .map(|c| format!("{}: {}", c.type_.as_str(), c.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `Available` from `EtcdMembersAvailable`.
fn available(members: Option<Computed>) -> Computed {
    match members {
        Some(a) if a.status => {
            Computed::new(ConditionType::Available, true, Reason::Quorate, a.message)
        }
        Some(a) => Computed::new(
            ConditionType::Available,
            false,
            Reason::NotQuorate,
            a.message,
        ),
        None => Computed::new(
            ConditionType::Available,
            false,
            Reason::Unknown,
            "etcd membership not observed yet",
        ),
    }
}

/// `Degraded`: True for problems past the grace period, else False naming those within it.
fn degraded_aggregate(degraded: &[Computed], settling: &[Computed]) -> Computed {
    if !degraded.is_empty() {
        Computed::new(
            ConditionType::Degraded,
            true,
            Reason::Degraded,
            join(degraded),
        )
    } else if !settling.is_empty() {
        Computed::new(
            ConditionType::Degraded,
            false,
            Reason::WithinGracePeriod,
            format!(
                "not degraded unless this lasts {}s: {}",
                DEGRADED_GRACE.whole_seconds(),
                join(settling)
            ),
        )
    } else {
        Computed::new(ConditionType::Degraded, false, Reason::AsExpected, "")
    }
}

/// How long condition `type_` has been True before this pass: from its `lastTransitionTime` in
/// `previous`; zero when it was not True (it turns True now) or the time does not parse.
fn true_for(previous: &[Condition], type_: ConditionType, now: OffsetDateTime) -> time::Duration {
    previous
        .iter()
        .find(|p| p.type_ == type_.as_str() && p.status == "True")
        .and_then(|p| crate::certs::parse_time(&p.last_transition_time))
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
                reason: c.reason.as_str().to_owned(),
                message: c.message.clone(),
                last_transition_time: since,
            }
        })
        .collect();
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// Why a member is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemovalKind {
    UnstartedLearner,
    NodeGone,
    DataDirLost,
    Unhealthy,
    OddVoterCount,
    Divergent,
    /// A learner of a node that is leaving.
    LeavingNode,
    /// The standby learner, whose database file is renewed (etcd refuses to defragment a
    /// learner).
    StandbyRenewal,
}

impl RemovalKind {
    /// The Event it raises (its reason is also the metric label and the condition reason).
    pub fn event(self) -> EventReason {
        match self {
            RemovalKind::UnstartedLearner => EventReason::UnstartedLearnerRemoved,
            RemovalKind::NodeGone => EventReason::MemberOfGoneNodeRemoved,
            RemovalKind::DataDirLost => EventReason::MemberWithLostDataRemoved,
            RemovalKind::Unhealthy => EventReason::UnhealthyMemberReplaced,
            RemovalKind::OddVoterCount => EventReason::VoterRemovedForOddCount,
            RemovalKind::Divergent => EventReason::DivergentMemberReplaced,
            RemovalKind::LeavingNode => EventReason::MemberOfLeavingNodeRemoved,
            RemovalKind::StandbyRenewal => EventReason::StandbyLearnerRenewed,
        }
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
