//! Learner promotion: when a learner becomes a voter, and what it means while it can't.
//!
//! Inputs: the member list (learners, started or not), the voter target of the odd-voter policy,
//! when each learner was first seen, the learners' and the leader's raft indexes. Decision
//! ([`decide`], pure; step 5 of membership's priorities, because a pass makes one membership
//! change through one gate question): an unstarted learner is waited for; a started one is
//! promoted through the quorum gate while the voters are below the target, else it stays a
//! standby. Writes: the promotion (etcd `MemberPromote`), Event `MemberPromoted`; etcd refusing
//! because the log has not caught up yet is progress (`LearnerCatchingUp`), and a learner that
//! still is not promotable after the start deadline sets `EtcdMembersDegraded`
//! (`LearnerNotCatchingUp`). Metrics: each learner's age and raft index, which one is a standby.
//! It never promotes past the voter target and never promotes an unstarted learner.

use std::collections::{BTreeMap, BTreeSet};

use membership::{Action, ClientError, ClusterView, EtcdRefusal, Member, MemberId};
use time::OffsetDateTime;

use super::membership::{MembershipStep, gated};
use crate::category::Category;
use crate::controller::{ControllerError, ControllerName};
use crate::etcd::EtcdObservation;
use crate::events::EventReason;
use crate::metrics::MemberLabel;
use crate::pass::Pass;
use crate::retry::ErrorKind;
use crate::status::{Computed, ConditionType as C, Reason};

const NAME: ControllerName = ControllerName::LearnerPromotion;

/// Step 5 of membership: `None` when there is no learner, or a started one stays (it may still
/// become a standby once nothing else is to do).
pub fn decide(
    members: &[&Member],
    voters: usize,
    target: usize,
    cluster: &ClusterView,
) -> Option<MembershipStep> {
    let l = members.iter().find(|m| m.is_learner)?;
    if !l.is_started() {
        return Some(MembershipStep::Waiting {
            message: format!("waiting for learner {} to start", l.id),
        });
    }
    (voters < target).then(|| {
        gated(
            cluster,
            Action::Promote { id: l.id },
            MembershipStep::Promote {
                id: l.id,
                node: l.name.clone(),
            },
        )
    })
}

/// The learner that is being promoted and still is not promotable after `deadline`.
pub fn not_catching_up(
    obs: &EtcdObservation,
    learner_added: &BTreeMap<MemberId, OffsetDateTime>,
    promoting: Option<MemberId>,
    deadline: time::Duration,
    now: OffsetDateTime,
) -> Option<Computed> {
    let m = obs
        .members
        .iter()
        .find(|m| m.is_learner && m.is_started() && Some(m.id) == promoting)?;
    let added = learner_added.get(&m.id).copied().unwrap_or(now);
    if now - added <= deadline {
        return None;
    }
    let index = obs.health.get(&m.id).and_then(|h| h.raft_index);
    let or_unknown = |i: Option<u64>| i.map_or("?".into(), |i| i.to_string());
    Some(Computed::new(
        C::EtcdMembersDegraded,
        true,
        Reason::LearnerNotCatchingUp,
        format!(
            "learner {} ({}) was added {}s ago and etcd still refuses to promote it (learner raft index {}, leader {})",
            m.id,
            m.name,
            (now - added).whole_seconds(),
            or_unknown(index),
            or_unknown(obs.leader_raft_index()),
        ),
    ))
}

/// Keeps when each learner was first seen (for the start deadline: membership's
/// [`super::membership::State::learner_added`]) and the learner metrics.
pub fn track(p: &Pass<'_>, added: &mut BTreeMap<MemberId, OffsetDateTime>) {
    let now = p.o.now;
    let learners: BTreeSet<MemberId> =
        p.o.etcd
            .members
            .iter()
            .filter(|m| m.is_learner)
            .map(|m| m.id)
            .collect();
    added.retain(|id, _| learners.contains(id));
    for id in &learners {
        added.entry(*id).or_insert(now);
    }
    let metrics = &p.ctx.metrics;
    metrics.learner_age_seconds.clear();
    metrics.learner_raft_index.clear();
    for (id, since) in added.iter() {
        let label = MemberLabel {
            member: id.to_string(),
        };
        metrics
            .learner_age_seconds
            .get_or_create(&label)
            .set((now - *since).whole_seconds());
        if let Some(idx) = p.o.etcd.health.get(id).and_then(|h| h.raft_index) {
            metrics
                .learner_raft_index
                .get_or_create(&label)
                .set(i64::try_from(idx).unwrap_or(i64::MAX));
        }
    }
}

/// Marks which learner is a standby in the metrics.
pub fn record_standby(p: &Pass<'_>, step: &MembershipStep) {
    let metrics = &p.ctx.metrics;
    metrics.learner_standby.clear();
    for m in p.o.etcd.members.iter().filter(|m| m.is_learner) {
        let standby = matches!(step, MembershipStep::Standby { id, .. } if *id == m.id);
        metrics
            .learner_standby
            .get_or_create(&MemberLabel {
                member: m.id.to_string(),
            })
            .set(i64::from(standby));
    }
}

/// Reports learner `id` (of `node`) promoted.
pub async fn promoted(p: &mut Pass<'_>, id: MemberId, node: &str) {
    p.count_change("promote");
    p.note(format!("promoted {node} ({id})"));
    p.event(
        EventReason::MemberPromoted,
        format!("promoted learner {id} ({node}) to voter"),
    )
    .await;
    p.cond(
        C::EtcdMembersProgressing,
        true,
        Reason::LearnerPromoted,
        format!("promoted {node}"),
    );
}

/// etcd refused to promote learner `id`. Because its log is behind is progress, not an error:
/// the next pass asks again.
pub fn not_promoted(
    p: &mut Pass<'_>,
    id: MemberId,
    node: &str,
    e: ClientError,
) -> Result<bool, ControllerError> {
    if !e.refused(EtcdRefusal::LearnerNotInSync) {
        return Err(ControllerError::new(
            NAME,
            ErrorKind::Transient,
            Category::Etcd,
            e.to_string(),
        ));
    }
    p.cond(
        C::EtcdMembersProgressing,
        true,
        Reason::LearnerCatchingUp,
        format!("learner {id} ({node}) is catching up with the leader"),
    );
    Ok(false)
}

#[cfg(test)]
#[path = "learner_promotion_tests.rs"]
mod tests;
