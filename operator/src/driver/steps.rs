//! The pass as one ordered list: [`PASS`] names each step, what holds it, and whether it runs in
//! every pass or only while the pipeline goes on. The driver walks the list
//! ([`super::controllers`]); [`run_step`] calls the controller of a step with the state it owns
//! and the facts earlier steps handed on ([`HandOffs`]). The order lives here and only here:
//! `docs/architecture.md`'s pass table is checked against it, and `plan` prints the lines the
//! steps wrote in this order.

use std::collections::{BTreeMap, BTreeSet};

use super::Controllers;
use crate::category::Category;
use crate::controller::{ControllerError, ControllerName as N, Flow};
use crate::controllers::cert_signer::Issued;
use crate::controllers::etcd_observer::{cluster_token, version_report};
use crate::controllers::{
    backup, cert_signer, corruption_check, defragmentation, etcd_observer, host_endpoints,
    installer, learner_promotion, membership, quorum_guard, revision, target_config,
};
use crate::observed::address_move;
use crate::pass::Pass;
use crate::retry::ErrorKind;

/// What holds a step (and with it the rest of the pass).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The controller backs off from a transient error: its Degraded condition stays as the
    /// error set it, the plan says when it runs again.
    BackingOff(N),
    /// A defragmentation runs off the pass: it holds a member's store, so membership changes
    /// and restarts wait.
    Defragmenting,
}

/// When a step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// While no earlier step ended the pass.
    Pipeline,
    /// In every pass that read etcd of a Managed cluster, also one an earlier step ended.
    EveryPass,
}

/// One step of the pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub controller: N,
    /// Checked in order before the step runs; the first that holds ends the pass.
    pub held_by: &'static [Hold],
    pub runs: Runs,
}

/// A step of the pipeline.
const fn step(controller: N, held_by: &'static [Hold]) -> Step {
    Step {
        controller,
        held_by,
        runs: Runs::Pipeline,
    }
}

/// The pass, in order. Learner promotion is a priority of membership's one change per pass
/// (one gate question per pass), so it is no step of its own; its back-off holds membership.
pub const PASS: [Step; 11] = [
    step(N::CertSigner, &[Hold::BackingOff(N::CertSigner)]),
    step(N::EtcdObserver, &[]),
    step(
        N::Membership,
        &[
            Hold::Defragmenting,
            Hold::BackingOff(N::Membership),
            Hold::BackingOff(N::LearnerPromotion),
        ],
    ),
    step(N::TargetConfig, &[Hold::BackingOff(N::TargetConfig)]),
    step(N::Revision, &[Hold::BackingOff(N::Revision)]),
    step(N::Installer, &[Hold::BackingOff(N::Installer)]),
    step(N::Endpoints, &[Hold::BackingOff(N::Endpoints)]),
    step(N::Defrag, &[Hold::BackingOff(N::Defrag)]),
    step(N::CorruptionCheck, &[]),
    step(N::Backup, &[]),
    Step {
        controller: N::QuorumGuard,
        held_by: &[Hold::BackingOff(N::QuorumGuard)],
        runs: Runs::EveryPass,
    },
];

/// What a step hands the steps after it.
#[derive(Default)]
pub(super) struct HandOffs {
    /// The cert signer's output: the operator's client identity, the nodes with certificates,
    /// the revision's certificate sources.
    issued: Option<Issued>,
    /// The manifests target-config rendered, per node; `None` while it holds (an address
    /// move, an upgrade waiting for its backup) or has not run: then no revision is made.
    rendered: Option<BTreeMap<String, String>>,
    /// `BackupReady`'s risk when it is False: the quorum guard allows no eviction then.
    pub(super) backup_risk: Option<quorum_guard::Risk>,
}

/// Whether `hold` holds now (each says so in the plan and conditions when it does).
pub(super) fn holds(hold: Hold, p: &mut Pass<'_>, cs: &Controllers) -> bool {
    match hold {
        Hold::BackingOff(c) => p.waits(c),
        Hold::Defragmenting => defragmentation::holds(p, cs.defrag.as_ref()),
    }
}

#[cfg(test)]
impl HandOffs {
    /// Whether target-config handed manifests on.
    pub(super) fn has_rendered(&self) -> bool {
        self.rendered.is_some()
    }
}

/// Whether the step has what it works on: a revision is made only from manifests rendered in
/// this pass (the step is skipped, not held, otherwise).
pub(super) fn has_input(controller: N, h: &HandOffs) -> bool {
    controller != N::Revision || h.rendered.is_some()
}

/// Runs the controller of one step with its own state and the earlier steps' hand-offs.
pub(super) async fn run_step(
    controller: N,
    p: &mut Pass<'_>,
    cs: &mut Controllers,
    h: &mut HandOffs,
) -> Result<Flow, ControllerError> {
    match controller {
        N::CertSigner => {
            h.issued = Some(cert_signer::reconcile(p, &mut cs.cert_signer).await?);
            let known: BTreeSet<String> = p.o.node_names().into_iter().collect();
            let pods = &p.o.spec.control_plane_pods;
            p.control_plane = membership::control_plane::observe(&p.ctx.client, pods, &known).await;
            Ok(Flow::Continue)
        }
        N::EtcdObserver => {
            cs.membership.observer.observe(p.o.now);
            observe(p, cs, issued(h, controller)?).await
        }
        N::Membership => {
            let with_certs = &issued(h, controller)?.with_certs;
            membership::reconcile(p, &mut cs.membership, with_certs).await
        }
        N::TargetConfig => render(p, h).await,
        N::Revision => match h.rendered.take() {
            Some(pods) => revision::reconcile(p, issued(h, controller)?, pods).await,
            None => Ok(Flow::Continue),
        },
        N::Installer => {
            let refused = cs.membership.add_refused.as_ref();
            installer::reconcile(p, refused, cs.membership.standby)
                .await
                .map(|()| Flow::Continue)
        }
        N::Endpoints => host_endpoints::reconcile(p).await.map(|()| Flow::Continue),
        N::Defrag => {
            let check_running = cs.corruption.is_some();
            defragmentation::reconcile(p, &mut cs.defrag, check_running).await?;
            Ok(Flow::Continue)
        }
        N::CorruptionCheck => {
            corruption_check::reconcile(p, &mut cs.corruption, cs.defrag.is_some());
            Ok(Flow::Continue)
        }
        N::Backup => {
            backup::reconcile(p, &mut cs.backup);
            Ok(Flow::Continue)
        }
        N::QuorumGuard => {
            let risk = h.backup_risk.as_ref();
            quorum_guard::reconcile(p, risk)
                .await
                .map(|()| Flow::Continue)
        }
        N::LearnerPromotion => Ok(Flow::Continue),
    }
}

/// The cert signer's hand-off, which every step after it has (it is the first step).
fn issued(h: &HandOffs, controller: N) -> Result<&Issued, ControllerError> {
    h.issued.as_ref().ok_or_else(|| {
        ControllerError::new(
            controller,
            ErrorKind::Permanent,
            Category::Unknown,
            "the cert signer has not run before this step: the pass's order is wrong",
        )
    })
}

/// etcd as it answers, then what follows from it before anything is decided: the learners'
/// first-seen times, the cluster's token and version, and every off-pass run that finished.
async fn observe(
    p: &mut Pass<'_>,
    cs: &mut Controllers,
    issued: &Issued,
) -> Result<Flow, ControllerError> {
    let flow = etcd_observer::reconcile(p, issued, &mut cs.etcd_observer).await;
    learner_promotion::track(p, &mut cs.membership.learner_added);
    if flow == Flow::Stop {
        return Ok(Flow::Stop);
    }
    cluster_token::track(p);
    version_report::reconcile(p).await;
    defragmentation::collect(p, &mut cs.defrag).await;
    corruption_check::collect(p, &mut cs.corruption).await;
    backup::collect(p, &mut cs.backup.running).await;
    Ok(Flow::Continue)
}

/// Target-config's step: held while a member's address moves, waiting while an upgrade waits
/// for its backup (the pass goes on so the backup controller can take it), else the manifests
/// for the revision step; the pass ends when no node has a member.
pub(super) async fn render(p: &mut Pass<'_>, h: &mut HandOffs) -> Result<Flow, ControllerError> {
    if let Some(line) = address_move::hold_line(&p.o.address_moves()) {
        p.next(N::TargetConfig, line.clone());
        p.next(N::Revision, line);
        return Ok(Flow::Continue);
    }
    if let Some(why) = &p.o.etcd.unconfirmed_list {
        // #65: a voter cut off from the quorum answers the list it was left with; a revision
        // rendered from it could drop a member added since. Status still shows that list.
        let line = format!(
            "holding: the member list is not confirmed by a quorum ({why}); nothing is rendered from it"
        );
        p.next(N::TargetConfig, line.clone());
        p.next(N::Revision, line);
        return Ok(Flow::Continue);
    }
    if !target_config::upgrade_may_start(p).await {
        return Ok(Flow::Continue);
    }
    match target_config::reconcile(p).await? {
        Some(pods) => {
            h.rendered = Some(pods);
            Ok(Flow::Continue)
        }
        None => Ok(Flow::Stop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ControllerName;

    #[test]
    fn every_controller_is_one_step_but_learner_promotion_which_membership_carries() {
        let in_pass: Vec<ControllerName> = PASS.iter().map(|s| s.controller).collect();
        for c in ControllerName::ALL {
            let count = in_pass.iter().filter(|s| **s == c).count();
            let expected = usize::from(c != N::LearnerPromotion);
            assert_eq!(count, expected, "{c:?} in {in_pass:?}");
        }
        let membership = PASS.iter().find(|s| s.controller == N::Membership);
        assert!(
            membership.is_some_and(|s| s.held_by.contains(&Hold::BackingOff(N::LearnerPromotion))),
            "learner promotion's back-off holds membership"
        );
    }

    #[test]
    fn the_cert_signer_comes_first_and_every_pass_steps_last() {
        assert_eq!(PASS[0].controller, N::CertSigner);
        let first_every = PASS.iter().position(|s| s.runs == Runs::EveryPass);
        assert!(
            first_every.is_some_and(|i| PASS[i..].iter().all(|s| s.runs == Runs::EveryPass)),
            "{PASS:?}"
        );
    }
}
