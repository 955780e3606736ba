//! Membership: adds, promotes and removes etcd members, one change per pass, each through the
//! quorum gate. [`fn@decide`] is pure; [`reconcile`] carries out the step it returns.
//!
//! The voter count follows the odd-voter policy ([`voter_policy`]).
//!
//! Inputs: the control-plane nodes (eligible: Ready, certificates issued, not being deleted),
//! etcd's members and their health, `etcd-verify`'s data-lost reports, the remediation records.
//! Writes: one etcd membership change per pass (`MemberAddAsLearner`, `MemberPromote` through
//! [`super::learner_promotion`], `MemberRemove`, `MemberUpdate`), its Event, `EtcdMembersProgressing`; after a
//! change the pass ends, so everything after it decides from the new member list. It never
//! changes membership without the quorum gate's yes, and never for an Unmanaged cluster.
//!
//! Priority (the first that applies wins):
//! 1. a learner that has not started within the learner start deadline is removed, so it can't
//!    wedge every later join (etcd 3.4 allows one learner, even an unstarted one);
//! 2. a started member whose node's address changed (a node of its name has a peer URL no
//!    member has) moves there with `MemberUpdate`: same member id, same data dir, nothing copied
//!    (see [`crate::observed::address_move`]; the gate's rule 9);
//! 3. a member whose node is gone (no control-plane node has its peer address or its name any
//!    more) is removed, before any replacement is added;
//! 4. a member whose node reports, through `etcd-verify`, that its data dir was lost is removed,
//!    so the node can join again as a new learner (verify archives what is left);
//! 5. a member that stayed unhealthy past `spec.memberRemediation` is removed, so its node joins
//!    again as a learner (see [`crate::controllers::membership::remediation`] for timing, retries, a node
//!    held by the admin and the wait for a replacement in flight); with
//!    `spec.corruptionCheck.replaceMinority`, so is a voter whose data the last corruption check
//!    found diverged from the majority's (the gate counts it as unhealthy: its copy is no copy);
//!    so is a learner whose node is leaving, and the standby learner whose database file must be
//!    renewed ([`super::defragmentation::standby_due`]: etcd refuses to defragment a learner,
//!    and one left at the quota raises `NOSPACE` again after every disarm);
//! 6. a started learner is promoted while the voters are below the target (etcd refuses until
//!    its log caught up; the pass retries); otherwise it stays a standby;
//! 7. a voter is removed while the voters exceed the odd count of the remaining nodes;
//! 8. a learner is added for the first eligible node (Ready, certificates issued, not being
//!    deleted) that has no member, unless that node's etcd pod still runs a revision listing
//!    its removed member for its address: then the add waits until the installer has moved the
//!    node to a revision without it (on which `etcd-verify` archives that member's data), so a
//!    power loss in between cannot start the removed member next to its replacement.

use super::installer::rollout_hold::AddRefused;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use membership::{Action, ClusterView, Denial, Member, MemberId, MemberUrl, Verdict, gate};
use time::OffsetDateTime;

use super::etcd_observer::member_status::member_statuses;
use crate::certs::format_time;
use crate::controller::{ControllerError, ControllerName, Flow};
use crate::pass::Pass;
use crate::status::{ConditionType as C, Reason};

const NAME: ControllerName = ControllerName::Membership;

mod change;
pub mod control_plane;
mod decide;
pub use change::intent;
pub mod remediation;
pub mod voter_policy;

use super::defragmentation::StandbyDue;
use super::learner_promotion;
pub use crate::observed::RemovedListed;
pub use crate::observed::address_move::{AddressMove, pending_moves};
pub use crate::observed::node_view::{Leaving, NodeInfo};
pub use crate::status::RemovalKind;
pub use decide::decide;
use remediation::Candidate;
pub use voter_policy::{desired_voters, node_for, voter_target, voter_to_shrink};

/// The one membership step of this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipStep {
    Remove {
        id: MemberId,
        kind: RemovalKind,
        message: String,
    },
    Promote {
        id: MemberId,
        node: String,
    },
    AddLearner {
        node: String,
        peer_url: MemberUrl,
    },
    /// `MemberUpdate`: the member follows its node to a new address.
    Move(AddressMove),
    /// Something should happen but the gate refused it now.
    Denied {
        step: String,
        denial: Denial,
    },
    /// A learner is pending and nothing else can happen until it starts.
    Waiting {
        message: String,
    },
    /// The learner add for `node` waits: its etcd pod still runs a revision listing its removed
    /// member for its peer URL (the installer moves it to one that does not first).
    AddHeld {
        node: String,
        listed: RemovedListed,
    },
    /// Membership is as desired, with a started learner kept as a standby (even node count).
    Standby {
        id: MemberId,
        message: String,
    },
    None,
}

/// What the decision is made from.
#[derive(Clone, Debug)]
pub struct MembershipInput<'a> {
    pub nodes: &'a [NodeInfo],
    pub cluster: &'a ClusterView,
    /// Per node: the member id `etcd-verify` reported "data dir lost" for.
    pub data_lost: &'a BTreeMap<String, MemberId>,
    /// When each pending learner was added (first seen, if the add happened before a restart).
    pub learner_added: &'a BTreeMap<MemberId, OffsetDateTime>,
    pub start_deadline: Duration,
    /// The raft leader, if known (never the voter removed for an odd count).
    pub leader: Option<MemberId>,
    /// Unhealthy started members and where their remediation stands.
    pub remediation: &'a [Candidate],
    /// Voters to replace because their data diverged (empty unless `replaceMinority`).
    pub divergent: &'a [MemberId],
    /// Per node: the removed member its etcd pod still lists
    /// ([`crate::observed::Observed::removed_listed`]).
    pub removed_listed: &'a BTreeMap<String, RemovedListed>,
    /// The standby learner whose database file must be renewed
    /// ([`super::defragmentation::standby_due`]).
    pub standby_due: Option<&'a StandbyDue>,
    /// A node whose learner add waits, and why (a renewed standby's:
    /// [`super::defragmentation::rejoin_wait`]).
    pub add_wait: Option<(&'a str, &'a str)>,
    pub now: OffsetDateTime,
}

/// `step` if the quorum gate allows `action`, else why not.
pub fn gated(cluster: &ClusterView, action: Action, step: MembershipStep) -> MembershipStep {
    match gate(cluster, &action) {
        Verdict::Allow => step,
        Verdict::Deny(denial) => MembershipStep::Denied {
            step: action.to_string(),
            denial,
        },
    }
}

/// What membership carries from pass to pass (all of it rebuilt from observation after a
/// restart: a learner's first-seen time restarts its deadline, a refused add is asked again).
#[derive(Debug, Default)]
pub struct State {
    /// When each pending learner was first seen ([`learner_promotion::track`]).
    pub learner_added: BTreeMap<MemberId, OffsetDateTime>,
    /// The learner add etcd refuses for its health window: the installer holds serving nodes'
    /// restarts meanwhile (`installer::rollout_hold`).
    pub add_refused: Option<AddRefused>,
    /// The learner this pass keeps as a standby: the quorum gate's rule 11 does not wait for it
    /// to become a voter (the installer's hand-off).
    pub standby: Option<MemberId>,
    /// Whether this operator has watched etcd without a gap (remediation's clock; recorded by
    /// the etcd-observer step, which every pass runs).
    pub observer: remediation::Observer,
}

/// Runs membership: at most one change, then [`Flow::Stop`] so the next pass sees it. Also
/// stops for an Unmanaged cluster (observing only).
pub async fn reconcile(
    p: &mut Pass<'_>,
    st: &mut State,
    with_certs: &BTreeSet<String>,
) -> Result<Flow, ControllerError> {
    let now = p.o.now;
    let observing_since = st.observer.since.unwrap_or(now);
    let (step, remediation_lines) = step_of(p, st, with_certs, observing_since);
    if !matches!(step, MembershipStep::AddLearner { .. }) {
        st.add_refused = None;
    }
    st.standby = match &step {
        MembershipStep::Standby { id, .. } => Some(*id),
        _ => None,
    };
    let changed = {
        let _t = p.ctx.metrics.time(NAME.as_str());
        act(p, st, &step).await?
    };
    // After the step's own line: remediation's timing is the detail.
    for line in remediation_lines {
        p.next(NAME, line);
    }
    if !matches!(step, MembershipStep::None | MembershipStep::Standby { .. }) {
        p.busy = true;
    }
    let promoting = match &step {
        MembershipStep::Promote { id, .. } => Some(*id),
        _ => None,
    };
    let deadline = time::Duration::seconds(i64::from(p.o.spec.learner_start_deadline_seconds));
    let learners = &st.learner_added;
    if let Some(c) =
        learner_promotion::not_catching_up(&p.o.etcd, learners, promoting, deadline, now)
    {
        p.conds.push(c);
    }
    if changed {
        p.report.requeue_after = std::time::Duration::ZERO;
        return Ok(Flow::Stop);
    }
    if !p.o.managed {
        p.note("Unmanaged: observing only");
        return Ok(Flow::Stop);
    }
    Ok(Flow::Continue)
}

/// Gathers the decision's input from the pass, decides, and records the remediation condition
/// and the policy metrics; returns the step and remediation's plan lines.
fn step_of(
    p: &mut Pass<'_>,
    st: &State,
    with_certs: &BTreeSet<String>,
    observing_since: OffsetDateTime,
) -> (MembershipStep, Vec<String>) {
    let now = p.o.now;
    let infos = crate::observed::objects::node_infos(&p.o.nodes, with_certs);
    let data_lost: BTreeMap<String, MemberId> =
        p.o.pods
            .iter()
            .filter_map(|(node, (_, verify))| {
                Some((node.clone(), verify.as_ref()?.data_lost_member()?))
            })
            .collect();
    let planned: Vec<MemberId> = p.o.restarting().keys().copied().collect();
    let statuses = member_statuses(&p.o.etcd, &p.o.prev.members, &format_time(now));
    let eligible = infos.iter().filter(|n| n.eligible).count();
    let remaining = infos.iter().filter(|n| n.leaving.is_none()).count();
    let desired = desired_voters(membership::voters(&p.o.etcd.members), eligible, remaining);
    let candidates = remediation::candidates(&remediation::RemediationInput {
        policy: &p.o.spec.member_remediation,
        members: &statuses,
        nodes: &p.o.nodes,
        by_node: &p.o.by_node,
        records: &p.status.remediations,
        skip: &planned,
        voter_target: desired,
        observing_since,
        guards: &guard_signals(&p.inputs.pods),
        now,
    });
    remediation::record_holds(&mut p.status.remediations, &candidates, &format_time(now));
    let (exhausted, lines) = remediation::conditions(&candidates);
    p.conds.push(exhausted);
    let cluster = p.cluster_view();
    let divergent = if p.o.spec.corruption_check.replace_minority {
        super::corruption_check::divergent(p.status.corruption.as_ref(), &p.o.etcd)
    } else {
        Vec::new()
    };
    let standby_due = super::defragmentation::standby_due_in(p);
    let add_wait = renewed_standby_waits(p);
    let step = decide(&MembershipInput {
        nodes: &infos,
        cluster: &cluster,
        data_lost: &data_lost,
        learner_added: &st.learner_added,
        start_deadline: Duration::from_secs(u64::from(p.o.spec.learner_start_deadline_seconds)),
        leader: p.o.etcd.leader,
        remediation: &candidates,
        divergent: &divergent,
        removed_listed: &p.o.removed_listed(&p.inputs.pods),
        standby_due: standby_due.as_ref(),
        add_wait: add_wait.as_ref().map(|(n, w)| (n.as_str(), w.as_str())),
        now,
    });
    let desired = i64::try_from(desired).unwrap_or(i64::MAX);
    p.ctx.metrics.desired_voters.set(desired);
    let strays = without_node(&infos, &p.o.etcd.members);
    p.ctx
        .metrics
        .members_without_node
        .set(i64::try_from(strays).unwrap_or(i64::MAX));
    learner_promotion::record_standby(p, &step);
    (step, lines)
}

/// Each node's quorum guard, as remediation's second signal (a guard being deleted says nothing).
fn guard_signals(
    pods: &[k8s_openapi::api::core::v1::Pod],
) -> BTreeMap<String, remediation::GuardSignal> {
    super::quorum_guard::guard_pods(pods)
        .into_iter()
        .filter(|g| !g.deleting && g.name == crate::podspec::guard_pod_name(&g.node))
        .map(|g| {
            let signal = if g.ready {
                remediation::GuardSignal::Healthy
            } else {
                remediation::GuardSignal::Unhealthy
            };
            (g.node, signal)
        })
        .collect()
}

/// The renewed standby's node and why it does not join again yet; the record is dropped once
/// it may (`status.defragmentation.standbyRenewal`).
fn renewed_standby_waits(p: &mut Pass<'_>) -> Option<(String, String)> {
    let renewal = p.status.defrag.standby_renewal.as_ref()?;
    let leader_index = p.o.etcd.leader_raft_index();
    match super::defragmentation::rejoin_wait(renewal, leader_index) {
        Some(why) => Some((renewal.node.clone(), why)),
        None => {
            p.status.defrag.standby_renewal = None;
            None
        }
    }
}

/// How many members have the peer URL of no node (`nodes`: every selected one, leaving or not).
pub fn without_node(nodes: &[NodeInfo], members: &[Member]) -> usize {
    members
        .iter()
        .filter(|m| node_for(nodes, m).is_none())
        .count()
}

/// The plan line of a step.
pub fn describe(step: &MembershipStep) -> String {
    match step {
        MembershipStep::None => "nothing to do: every eligible node has a member".to_owned(),
        MembershipStep::Waiting { message } => format!("waiting: {message}"),
        MembershipStep::AddHeld { node, listed } => format!(
            "waiting: the learner add for {node} waits until the installer has moved {node} off revision {}, which still lists its removed member {} (with no endpoint answering, etcd-verify would start that member on its old data)",
            listed.revision, listed.id
        ),
        MembershipStep::Standby { message, .. } => format!("nothing to do: {message}"),
        MembershipStep::Denied { denial, .. } => crate::pass::denied_line(denial),
        MembershipStep::AddLearner { node, peer_url } => {
            format!("add learner for {node} ({peer_url})")
        }
        MembershipStep::Promote { id, node } => format!("promote learner {id} ({node})"),
        MembershipStep::Remove { id, message, .. } => format!("remove member {id}: {message}"),
        MembershipStep::Move(mv) => format!(
            "move {}: its node's address changed; the same member restarts there on its own data",
            mv.describe()
        ),
    }
}

/// Carries out `step`; `Ok(true)` when etcd's membership changed.
async fn act(
    p: &mut Pass<'_>,
    st: &mut State,
    step: &MembershipStep,
) -> Result<bool, ControllerError> {
    if !due(p, step).await {
        return Ok(false);
    }
    change::change(p, st, step).await
}

/// Whether `step` is carried out now: its pre-operation backup allows it, it is a change at
/// all, and the cluster is not Unmanaged (each says so in conditions).
async fn due(p: &mut Pass<'_>, step: &MembershipStep) -> bool {
    use super::backup::preop::{self, Operation};
    match step {
        MembershipStep::Remove {
            kind: RemovalKind::OddVoterCount,
            ..
        } if !preop::gate(p, NAME, Operation::PlannedShrink, false).await => return false,
        MembershipStep::None | MembershipStep::Standby { .. } => {
            preop::done(p, Operation::PlannedShrink)
        }
        _ => {}
    }
    p.next(NAME, describe(step));
    let progressing = C::EtcdMembersProgressing;
    match step {
        MembershipStep::None | MembershipStep::Standby { .. } => {
            let message = match step {
                MembershipStep::Standby { message, .. } => {
                    format!("membership is as desired; {message}")
                }
                _ => "membership is as desired".to_owned(),
            };
            p.cond(progressing, false, Reason::AsExpected, message);
            p.succeeded(NAME);
            return false;
        }
        MembershipStep::Waiting { message } => {
            p.cond(progressing, true, Reason::LearnerPending, message.clone());
            p.note(message.clone());
            return false;
        }
        MembershipStep::AddHeld { .. } => {
            let line = describe(step);
            p.cond(progressing, true, Reason::RemovedMemberListed, line.clone());
            p.note(line);
            return false;
        }
        MembershipStep::Denied { step, denial } => {
            p.denied(progressing, format!("{step} is waiting"), denial);
            return false;
        }
        _ if !p.o.managed => {
            p.cond(
                progressing,
                true,
                Reason::Unmanaged,
                format!("would {step:?} but the cluster is Unmanaged"),
            );
            return false;
        }
        _ => {}
    }
    true
}

#[cfg(test)]
mod tests;
