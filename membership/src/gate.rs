//! The quorum gate: the one arbiter every disruptive action asks before it happens.
//!
//! [`gate`] is a pure function from an observed [`ClusterView`] and an [`Action`] to [`Verdict`].
//! The rules (learners never count as voters):
//!
//! 1. **No quorum, no change.** With fewer healthy voters than quorum, every membership change is
//!    denied (etcd could not commit it); only restarting a node whose member is not a healthy voter
//!    is allowed, since that can only help.
//! 2. **One change at a time.** A learner (started or not) is a membership change in flight: no
//!    second learner is added until it is promoted or removed (etcd 3.4 also allows only one).
//! 3. **Add only to a healthy cluster.** A learner is added only while every voter is healthy;
//!    replacing an unhealthy member means removing it first, then adding.
//! 4. **Promote only a healthy learner** that has started (etcd decides whether its log caught up).
//! 5. **Removals keep quorum.** Removing a voter must leave healthy voters >= quorum of the
//!    remaining voters. Removing a *healthy* voter is a planned loss of capacity and must also
//!    leave one failure of margin (so a healthy member is replaced add-first); the last voter is
//!    never removed.
//! 6. **Planned restarts keep quorum.** Restarting a node's etcd (rolling a revision) takes its
//!    member down: a healthy voter may be taken down only when the cluster tolerates one failure
//!    (healthy voters after >= quorum), and only one node is rolled at a time. So a cluster of one
//!    or two voters never has a healthy member restarted by the operator: it grows first (the
//!    bootstrap member is rolled once three voters exist).
//! 7. **Preflight.** No membership change while an alarm is raised (or the alarm list could not be
//!    read) or a voter reports another member list than the one acted on; no healthy voter is
//!    taken down while a `CORRUPT` alarm is raised or the voters disagree (see [`crate::Preflight`]).
//!    Removing a learner is the one change `NOSPACE` does not hold: a learner votes on nothing,
//!    and one whose own file stayed at the quota (etcd refuses to defragment a learner) raises
//!    `NOSPACE` again after every disarm, so its removal is how the alarm is cleared (#65).
//! 8. **Defragment one member of a healthy cluster.** A defragmentation holds the member's store
//!    (it applies nothing until done), so a voter is defragmented only while every voter is
//!    healthy, no node is being rolled, the cluster keeps quorum without the member, and the
//!    preflight allows taking a healthy voter down. A single voter is defragmented only while
//!    `NOSPACE` already refuses writes (a pause then loses nothing). A learner (a standby, or one
//!    not yet promoted) is no reason to wait: it votes on nothing, so it neither counts toward
//!    quorum nor is lost from it; waiting for it meant a control plane with a standby learner
//!    (an even node count) never defragmented and never cleared `NOSPACE` (#65). A learner is
//!    not defragmented itself: etcd refuses the call on a learner.
//!
//! 9. **Move a member to its node's new address** (`MemberUpdate`, after the node's address
//!    changed): a membership change, so rules 1 and 7 apply; the new URL must be no other member's
//!    and no other node may be mid-roll. A member that is down (its old address gone) is moved at
//!    once; a healthy voter still serving on its old address is cut off from its peers by the move
//!    until its node restarts on the new address, so it is moved only as rule 6 would restart it.
//! 10. **The Kubernetes API keeps its etcd** ([`crate::api_servers`]): a healthy voter is removed
//!     or restarted only while every kube-apiserver on another node is Ready and lists another
//!     healthy voter in `--etcd-servers`; a learner is added only where no kube-apiserver
//!     would send it requests (none lists its address, but one on its own node that lists nothing
//!     else).
//! 11. **A lone voter restarts only with an admin's approval**: with one or two voters, all
//!     healthy, restarting one always stops etcd until it is back; waiting cannot help unless
//!     voters join, so the restart waits for the outage to be approved (`outage_approved`), and
//!     then still needs the restart preflight of rule 7. A learner being added is a voter
//!     joining (the rule steps aside and rule 6 waits for it); the standby learner of an even
//!     node count is not (`standby`): a 2-node control plane (one voter, the standby) rolls
//!     its voter with the approval like a 1-node one.
//!
//! Every denial names the rule and the members involved, so it can go to status, a metric label
//! ([`DenyRule::category`]) and `etcd-operator plan`.

use crate::api_servers::{keeps_api, learner_unlisted};
pub use crate::gate_view::{Action, ClusterView, Denial, DenyRule, MemberHealth, Verdict};
use crate::gate_view::{deny, label};
use crate::{MemberId, MemberUrl, quorum};

/// Decides whether `action` may happen now.
pub fn gate(view: &ClusterView, action: &Action) -> Verdict {
    if !matches!(action, Action::RollNode { .. } | Action::Defragment { .. })
        && let Some(denied) = membership_change_denied(view, action)
    {
        return denied;
    }
    match action {
        Action::AddLearner { node, peer_url } => add_learner(view, action, node, peer_url),
        Action::Promote { id } => promote(view, action, *id),
        Action::Remove { id } => remove(view, action, *id),
        Action::RollNode { node, member } => roll_node(view, action, node, *member),
        Action::Defragment { id, nospace } => defragment(view, action, *id, *nospace),
        Action::MovePeerUrl {
            id, node, peer_url, ..
        } => move_peer_url(view, action, *id, node, peer_url),
    }
}

/// Rules 1 and 2, for every membership change: quorum now, and the preflight.
fn membership_change_denied(view: &ClusterView, action: &Action) -> Option<Verdict> {
    let voters = view.voter_count();
    if voters == 0 || view.healthy_voters() < quorum(voters) {
        return Some(deny(
            DenyRule::NoQuorum,
            format!("{action}: no quorum, {}", view.health_summary()),
        ));
    }
    let learner_removal = match action {
        Action::Remove { id } => view.find(*id).is_some_and(|m| m.member.is_learner),
        _ => false,
    };
    let problems = if learner_removal {
        view.preflight.learner_removal_problems()
    } else {
        view.preflight.membership_problems()
    };
    (!problems.is_empty()).then(|| {
        deny(
            DenyRule::Preflight,
            format!("{action}: preflight failed: {}", problems.join("; ")),
        )
    })
}

/// A learner for `node` at `peer_url`: a new URL, no other learner pending, the API's view of
/// it, and every voter healthy.
fn add_learner(view: &ClusterView, action: &Action, node: &str, peer_url: &MemberUrl) -> Verdict {
    if let Some(existing) = view
        .members
        .iter()
        .find(|m| m.member.has_peer_url(peer_url))
    {
        return deny(
            DenyRule::AlreadyMember,
            format!(
                "{action}: {peer_url} already belongs to member {}",
                label(&existing.member)
            ),
        );
    }
    if let Some(denied) = learner_pending(view, action) {
        return denied;
    }
    if let Some(denied) = learner_unlisted(view, action, node, peer_url) {
        return denied;
    }
    if view.healthy_voters() < view.voter_count() {
        return deny(
            DenyRule::VoterUnhealthy,
            format!(
                "{action}: voter(s) {} unhealthy; remove or repair them before adding {node}",
                view.unhealthy_voter_names()
            ),
        );
    }
    Verdict::Allow
}

/// A started, healthy learner becomes a voter when quorum holds with it counted.
fn promote(view: &ClusterView, action: &Action, id: MemberId) -> Verdict {
    let (voters, healthy) = (view.voter_count(), view.healthy_voters());
    match view.find(id) {
        None => deny(DenyRule::UnknownMember, format!("{action}: no such member")),
        Some(m) if !m.member.is_learner => deny(
            DenyRule::NotALearner,
            format!("{action}: {} is already a voter", label(&m.member)),
        ),
        Some(m) if !m.member.is_started() || !m.healthy => deny(
            DenyRule::LearnerNotReady,
            format!(
                "{action}: learner {} has not started or is not healthy",
                label(&m.member)
            ),
        ),
        // The new voter is healthy: healthy + 1 of voters + 1.
        Some(_) if healthy + 1 >= quorum(voters + 1) => Verdict::Allow,
        Some(_) => deny(
            DenyRule::QuorumAfterAction,
            format!(
                "{action}: would leave {} of {} voters healthy",
                healthy + 1,
                voters + 1
            ),
        ),
    }
}

/// A learner goes at once; a voter only if the API keeps an etcd and the voters left keep
/// quorum, with a failure margin when the voter removed was healthy.
fn remove(view: &ClusterView, action: &Action, id: MemberId) -> Verdict {
    let m = match view.find(id) {
        None => return deny(DenyRule::UnknownMember, format!("{action}: no such member")),
        Some(m) if m.member.is_learner => return Verdict::Allow,
        Some(m) => m,
    };
    if let Some(denied) = keeps_api(view, action, id) {
        return denied;
    }
    let after_voters = view.voter_count() - 1;
    let after_healthy = view.healthy_voters() - usize::from(m.healthy);
    if after_voters == 0 {
        return deny(
            DenyRule::LastVoter,
            format!("{action}: {} is the last voter", label(&m.member)),
        );
    }
    let need = quorum(after_voters) + usize::from(m.healthy);
    if after_healthy >= need {
        Verdict::Allow
    } else if after_healthy >= quorum(after_voters) {
        deny(
            DenyRule::NoMargin,
            format!(
                "{action}: {} is healthy; removing it would leave {after_healthy} of {after_voters} voters with no failure margin (add its replacement first)",
                label(&m.member)
            ),
        )
    } else {
        deny(
            DenyRule::QuorumAfterAction,
            format!(
                "{action}: would leave {after_healthy} of {after_voters} voters healthy (quorum {})",
                quorum(after_voters)
            ),
        )
    }
}

/// Restarting `node`: one node at a time; a healthy voter only with the API kept, a lone
/// voter's approval, and a spare voter.
fn roll_node(view: &ClusterView, action: &Action, node: &str, member: Option<MemberId>) -> Verdict {
    if let Some(denied) = other_node_rolling(view, action, node) {
        return denied;
    }
    let target = member.and_then(|id| view.find(id));
    let takes_down_voter = target.is_some_and(|m| !m.member.is_learner && m.healthy);
    if !takes_down_voter {
        return Verdict::Allow;
    }
    if let Some(denied) = member.and_then(|id| keeps_api(view, action, id)) {
        return denied;
    }
    if let Some(verdict) = lone_voter(view, action, node) {
        return verdict;
    }
    let short_of_voters = view.healthy_voters() < view.voter_count();
    with_spare_voter(view, action, |left| {
        format!(
            "restarting its healthy voter would leave {left}; waiting for {}",
            if short_of_voters {
                format!(
                    "unhealthy voter(s) {} to recover",
                    view.unhealthy_voter_names()
                )
            } else {
                "more voters to join".to_owned()
            }
        )
    })
}

/// Rule 9. Quorum and the preflight were checked as for every membership change.
fn move_peer_url(
    view: &ClusterView,
    action: &Action,
    id: MemberId,
    node: &str,
    peer_url: &MemberUrl,
) -> Verdict {
    let Some(m) = view.find(id) else {
        return deny(DenyRule::UnknownMember, format!("{action}: no such member"));
    };
    if let Some(other) = view
        .members
        .iter()
        .find(|o| o.member.id != id && o.member.has_peer_url(peer_url))
    {
        return deny(
            DenyRule::AlreadyMember,
            format!(
                "{action}: {peer_url} already belongs to member {}",
                label(&other.member)
            ),
        );
    }
    if let Some(denied) = other_node_rolling(view, action, node) {
        return denied;
    }
    if m.member.is_learner || !m.healthy {
        return Verdict::Allow;
    }
    // A healthy voter still serving on its old address: once moved, its peers dial the new
    // address, where nothing listens until its node restarts on the next revision.
    with_spare_voter(view, action, |left| {
        format!(
            "{} still serves on its old address; moving it cuts it off until its node restarts, which would leave {left}",
            label(&m.member)
        )
    })
}

/// Rules 6 and 9: one node at a time.
fn other_node_rolling(view: &ClusterView, action: &Action, node: &str) -> Option<Verdict> {
    let rolling = view.rolling_node.as_ref().filter(|r| *r != node)?;
    Some(deny(
        DenyRule::RolloutInProgress,
        format!("{action}: node {rolling} is still being rolled (one node at a time)"),
    ))
}

/// Rules 6 and 9: a healthy voter is taken out of service only while the cluster tolerates one
/// failure and the preflight allows it. `why` gets "N of M voters healthy (quorum Q)", what
/// would be left.
fn with_spare_voter(
    view: &ClusterView,
    action: &Action,
    why: impl FnOnce(String) -> String,
) -> Verdict {
    if let Some(denied) = takedown_preflight(view, action) {
        return denied;
    }
    let voters = view.voter_count();
    let healthy = view.healthy_voters();
    if healthy > quorum(voters) {
        return Verdict::Allow;
    }
    let left = format!(
        "{} of {voters} voters healthy (quorum {})",
        healthy.saturating_sub(1),
        quorum(voters)
    );
    deny(
        DenyRule::QuorumAfterAction,
        format!("{action}: {}", why(left)),
    )
}

/// Rule 11: on a control plane of one or two voters, all healthy, no voter can restart without
/// an outage, however long it waits: such a restart happens only when an admin approved it
/// (`outage_approved`), and then only past the restart preflight.
fn lone_voter(view: &ClusterView, action: &Action, node: &str) -> Option<Verdict> {
    let voters = view.voter_count();
    let joining = view.learners().any(|l| Some(l.member.id) != view.standby);
    if voters > 2 || view.healthy_voters() < voters || joining {
        return None;
    }
    if view.outage_approved {
        return Some(takedown_preflight(view, action).unwrap_or(Verdict::Allow));
    }
    Some(deny(
        DenyRule::LoneVoter,
        format!(
            "{action}: {node} runs one of {voters} voter(s), so restarting it stops etcd (and an API served from it) until it is back; waiting for more voters to join or for an admin to approve the outage"
        ),
    ))
}

/// Rule 2 (and 8): a learner is a membership change in flight.
fn learner_pending(view: &ClusterView, action: &Action) -> Option<Verdict> {
    let l = view.learners().next()?;
    Some(deny(
        DenyRule::ChangeInFlight,
        format!(
            "{action}: learner {} is still pending (one membership change at a time)",
            label(&l.member)
        ),
    ))
}

/// Rule 7 for an action that takes a healthy voter down (a restart, a defragmentation).
fn takedown_preflight(view: &ClusterView, action: &Action) -> Option<Verdict> {
    let problems = view.preflight.restart_problems();
    (!problems.is_empty()).then(|| {
        deny(
            DenyRule::Preflight,
            format!(
                "{action}: preflight failed, its healthy voter stays up: {}",
                problems.join("; ")
            ),
        )
    })
}

/// Rule 8.
fn defragment(view: &ClusterView, action: &Action, id: MemberId, nospace: bool) -> Verdict {
    let voters = view.voter_count();
    let healthy = view.healthy_voters();
    match view.find(id) {
        None => return deny(DenyRule::UnknownMember, format!("{action}: no such member")),
        Some(m) if m.member.is_learner => return defragment_learner(action, m),
        Some(_) => {}
    }
    if healthy < voters {
        return deny(
            DenyRule::VoterUnhealthy,
            format!(
                "{action}: voter(s) {} unhealthy",
                view.unhealthy_voter_names()
            ),
        );
    }
    if let Some(denied) = rolling(view, action) {
        return denied;
    }
    if let Some(denied) = takedown_preflight(view, action) {
        return denied;
    }
    // A single voter held under NOSPACE pauses nothing that was not already refused.
    let allowed = healthy > quorum(voters) || (voters == 1 && nospace);
    if allowed {
        return Verdict::Allow;
    }
    deny(
        DenyRule::QuorumAfterAction,
        format!(
            "{action}: with {voters} voter(s) the cluster would not keep quorum while it is held (writes would pause); only done while NOSPACE refuses writes anyway"
        ),
    )
}

/// Rule 8 for a learner: etcd refuses `Defragment` on a learner ("rpc not supported for
/// learner", seen on etcd 3.5.16), so none is asked of it.
fn defragment_learner(action: &Action, m: &MemberHealth) -> Verdict {
    deny(
        DenyRule::NotAVoter,
        format!(
            "{action}: {} is a learner, and etcd refuses to defragment a learner",
            label(&m.member)
        ),
    )
}

/// A node is being rolled: no defragmentation meanwhile.
fn rolling(view: &ClusterView, action: &Action) -> Option<Verdict> {
    let node = view.rolling_node.as_ref()?;
    Some(deny(
        DenyRule::RolloutInProgress,
        format!("{action}: node {node} is being rolled"),
    ))
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
