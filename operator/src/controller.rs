//! What a controller is, below every controller: the name each goes by ([`ControllerName`], in
//! the pass's order), the error a step fails with ([`ControllerError`]) and what a step means
//! for the rest of the pass ([`Flow`]). The controllers themselves are in [`crate::controllers`].

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
    /// Every controller (the order of a pass is [`crate::driver::steps::PASS`]).
    pub const ALL: [ControllerName; 12] = [
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
            ControllerName::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ControllerName::ALL.len());
    }
}
