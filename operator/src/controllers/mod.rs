//! The operator's controllers, one module each, run by [`crate::pass`] in [`ControllerName::ORDER`].
//!
//! The contract every controller follows: a `//!` paragraph naming its inputs, its decision, its
//! writes and what it never does; a pure `decide` over the pass's observed view (tested with
//! hand-built values, no client); one function that carries the decision out through the pass's
//! [`crate::writer::Writer`] (the same code runs for `etcd-operator plan`, where the writer only
//! records, so the plan text and the action cannot drift); and a [`ControllerError`] whose
//! [`ErrorKind`] says whether it is retried with back-off or waits for an input to change.
//! A controller's name ([`ControllerName::as_str`]) is the one used in its plan line, its metric
//! labels, its log field and (through [`ControllerName::degraded`]) its Degraded condition.

pub mod address_move;
pub mod backup;
pub mod ca_rotation;
pub mod cert_signer;
pub mod cluster_operator;
pub mod cluster_token;
pub mod consumers;
pub mod corruption_check;
pub mod defrag;
pub mod endpoints;
pub mod etcd_observer;
pub mod etcd_version;
pub mod installer;
pub mod learner_promotion;
pub mod member_status;
pub mod membership;
pub mod node_problems;
pub mod node_view;
pub mod payload_status;
pub mod quorum_guard;
pub mod remediation;
pub mod revisions;
pub mod rollout_hold;
pub mod target_config;
pub mod version_report;
pub mod voter_policy;

use crate::category::Category;
use crate::retry::ErrorKind;
use crate::status::ConditionType;

/// The controllers, by the one name each goes by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerName {
    CertSigner,
    EtcdObserver,
    Membership,
    LearnerPromotion,
    TargetConfig,
    Revision,
    Installer,
    Endpoints,
    Defrag,
    CorruptionCheck,
    Backup,
    QuorumGuard,
}

impl ControllerName {
    /// The order of a pass (see `docs/architecture.md`).
    pub const ORDER: [ControllerName; 12] = [
        ControllerName::CertSigner,
        ControllerName::EtcdObserver,
        ControllerName::Membership,
        ControllerName::LearnerPromotion,
        ControllerName::TargetConfig,
        ControllerName::Revision,
        ControllerName::Installer,
        ControllerName::Endpoints,
        ControllerName::Defrag,
        ControllerName::CorruptionCheck,
        ControllerName::Backup,
        ControllerName::QuorumGuard,
    ];

    /// Plan line, metric label and log field.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerName::CertSigner => "cert-signer",
            ControllerName::EtcdObserver => "etcd-observer",
            ControllerName::Membership => "membership",
            ControllerName::LearnerPromotion => "learner-promotion",
            ControllerName::TargetConfig => "target-config",
            ControllerName::Revision => "revision",
            ControllerName::Installer => "installer",
            ControllerName::Endpoints => "endpoints",
            ControllerName::Defrag => "defragmentation",
            ControllerName::CorruptionCheck => "corruption-check",
            ControllerName::Backup => "backup",
            ControllerName::QuorumGuard => "quorum-guard",
        }
    }

    /// The condition a failure of this controller sets. Learner promotion is carried out by
    /// the membership change of its pass, so its failures are membership's.
    pub fn degraded(self) -> ConditionType {
        match self {
            ControllerName::CertSigner => ConditionType::CertSignerDegraded,
            ControllerName::EtcdObserver => ConditionType::EtcdObserverDegraded,
            ControllerName::Membership | ControllerName::LearnerPromotion => {
                ConditionType::MembershipControllerDegraded
            }
            ControllerName::TargetConfig => ConditionType::TargetConfigControllerDegraded,
            ControllerName::Revision => ConditionType::RevisionControllerDegraded,
            ControllerName::Installer => ConditionType::InstallerControllerDegraded,
            ControllerName::Endpoints => ConditionType::EndpointsControllerDegraded,
            ControllerName::Defrag => ConditionType::DefragControllerDegraded,
            // It never fails as a step (an unanswered check is a result, `Inconclusive`); what
            // it finds is about etcd's members.
            ControllerName::CorruptionCheck => ConditionType::EtcdObserverDegraded,
            ControllerName::Backup => ConditionType::BackupControllerDegraded,
            ControllerName::QuorumGuard => ConditionType::QuorumGuardControllerDegraded,
        }
    }
}

/// A controller step that failed: the controller, whether it can pass by itself, a static
/// [`Category`] (metric label and condition reason) and a sentence naming the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", controller.as_str())]
pub struct ControllerError {
    pub controller: ControllerName,
    pub kind: ErrorKind,
    pub category: Category,
    pub message: String,
}

impl ControllerError {
    pub fn new(
        controller: ControllerName,
        kind: ErrorKind,
        category: Category,
        message: impl Into<String>,
    ) -> Self {
        Self {
            controller,
            kind,
            category,
            message: message.into(),
        }
    }

    /// A failed API write of `controller`.
    pub fn write(controller: ControllerName, e: &crate::writer::WriteError) -> Self {
        Self::new(controller, e.kind(), e.category(), e.to_string())
    }
}

/// What a controller's step means for the rest of the pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Later controllers run.
    Continue,
    /// The pass ends here (the next one decides from what this one changed).
    Stop,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_controller_has_its_own_name() {
        let names: std::collections::BTreeSet<&str> =
            ControllerName::ORDER.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ControllerName::ORDER.len());
    }
}
