//! The pure part of membership: the priorities of the module doc of [`super`], one function
//! each, in order; the first that applies is the pass's one step.

use membership::{Action, ClusterView, Member, MemberId};

use super::{
    MembershipInput, MembershipStep, RemovalKind, desired_voters, gated, learner_promotion,
    node_for, pending_moves, voter_to_shrink,
};
use crate::controllers::membership::remediation::Assessment;

/// A removal through the gate.
fn remove(
    cluster: &ClusterView,
    id: MemberId,
    kind: RemovalKind,
    message: String,
) -> MembershipStep {
    gated(
        cluster,
        Action::Remove { id },
        MembershipStep::Remove { id, kind, message },
    )
}

/// Decides the next membership step: the first of the priorities (module doc) that applies.
pub fn decide(input: &MembershipInput<'_>) -> MembershipStep {
    let members: Vec<&Member> = input.cluster.members.iter().map(|m| &m.member).collect();
    let removal = unstarted_learner(input, &members)
        .or_else(|| moved_member(input, &members))
        .or_else(|| member_of_gone_node(input, &members))
        .or_else(|| member_with_lost_data(input, &members))
        .or_else(|| unhealthy_member(input, &members))
        .or_else(|| divergent_member(input, &members))
        .or_else(|| learner_of_leaving_node(input, &members))
        .or_else(|| standby_to_renew(input, &members));
    if let Some(step) = removal {
        return step;
    }
    let voters = members.iter().filter(|m| !m.is_learner).count();
    let eligible = input.nodes.iter().filter(|n| n.eligible).count();
    let remaining = input.nodes.iter().filter(|n| n.leaving.is_none()).count();
    let target = desired_voters(voters, eligible, remaining);
    learner_promotion::decide(&members, voters, target, input.cluster)
        .or_else(|| voter_above_target(input, &members, voters, target, remaining))
        .or_else(|| learner_for_new_node(input, &members))
        .unwrap_or_else(|| standby_or_none(&members, voters, eligible))
}

/// 1. An unstarted learner past its start deadline.
fn unstarted_learner(input: &MembershipInput<'_>, members: &[&Member]) -> Option<MembershipStep> {
    members
        .iter()
        .filter(|m| m.is_learner && !m.is_started())
        .find_map(|m| {
            let added = input.learner_added.get(&m.id).copied().unwrap_or(input.now);
            let age = input.now - added;
            (age >= input.start_deadline).then(|| {
                let message = format!(
                    "learner {} was added {}s ago and never started (deadline {}s)",
                    m.id,
                    age.whole_seconds(),
                    input.start_deadline.as_secs()
                );
                remove(input.cluster, m.id, RemovalKind::UnstartedLearner, message)
            })
        })
}

/// 2. A started member whose node's address changed moves there (same member, same data).
fn moved_member(input: &MembershipInput<'_>, members: &[&Member]) -> Option<MembershipStep> {
    let nodes = input
        .nodes
        .iter()
        .filter(|n| n.leaving.is_none())
        .map(|n| &n.target);
    let mv = pending_moves(nodes, members).into_iter().next()?;
    let action = Action::MovePeerUrl {
        id: mv.id,
        node: mv.node.clone(),
        peer_url: mv.to.clone(),
    };
    Some(gated(input.cluster, action, MembershipStep::Move(mv)))
}

/// 3. A member whose node is gone.
fn member_of_gone_node(input: &MembershipInput<'_>, members: &[&Member]) -> Option<MembershipStep> {
    let m = members
        .iter()
        .find(|m| node_for(input.nodes, m).is_none())?;
    let who = if m.is_started() {
        m.name.clone()
    } else {
        format!("unstarted {}", m.id)
    };
    let urls: Vec<String> = m.peer_urls.iter().map(ToString::to_string).collect();
    let message = format!(
        "member {who} ({}) has peer URL {} and no control-plane node has that address",
        m.id,
        urls.join(",")
    );
    Some(remove(input.cluster, m.id, RemovalKind::NodeGone, message))
}

/// 4. A started member whose node lost its data dir.
fn member_with_lost_data(
    input: &MembershipInput<'_>,
    members: &[&Member],
) -> Option<MembershipStep> {
    let (node, id) = input
        .data_lost
        .iter()
        .find(|(_, id)| members.iter().any(|m| m.id == **id && m.is_started()))?;
    let message =
        format!("node {node} lost the data dir of member {id}; it joins again as a new learner");
    Some(remove(
        input.cluster,
        *id,
        RemovalKind::DataDirLost,
        message,
    ))
}

/// 5. A member unhealthy past `spec.memberRemediation`.
fn unhealthy_member(input: &MembershipInput<'_>, members: &[&Member]) -> Option<MembershipStep> {
    input.remediation.iter().find_map(|c| {
        let Assessment::Due {
            attempt,
            unhealthy_for,
        } = c.assessment
        else {
            return None;
        };
        members.iter().any(|m| m.id == c.member).then(|| {
            let message = format!(
                "member {} of node {} has been unhealthy for {}s; replacing it (remove, then join again as a learner), attempt {attempt}",
                c.member,
                c.node,
                unhealthy_for.whole_seconds()
            );
            remove(input.cluster, c.member, RemovalKind::Unhealthy, message)
        })
    })
}

/// Also 5: a voter whose data diverged from the majority's, with `replaceMinority`, is removed as
/// an unhealthy voter would be (the gate counts it as unhealthy, since its copy of the data is
/// not one), so its node's `etcd-verify` archives the data dir and it joins again as a learner.
fn divergent_member(input: &MembershipInput<'_>, members: &[&Member]) -> Option<MembershipStep> {
    let id = *input
        .divergent
        .iter()
        .find(|id| members.iter().any(|m| m.id == **id && !m.is_learner))?;
    let mut view = input.cluster.clone();
    for m in view.members.iter_mut().filter(|m| m.member.id == id) {
        m.healthy = false;
    }
    let message = format!(
        "member {id} holds data that diverged from the majority's (HashKV); replacing it: remove, archive its data dir, join again as a learner"
    );
    Some(remove(&view, id, RemovalKind::Divergent, message))
}

/// Also 5: a learner (a standby, or one still joining) whose node is leaving; its voters go by
/// the voter policy (7).
fn learner_of_leaving_node(
    input: &MembershipInput<'_>,
    members: &[&Member],
) -> Option<MembershipStep> {
    members.iter().filter(|m| m.is_learner).find_map(|m| {
        let leaving = node_for(input.nodes, m)?.leaving.as_ref()?;
        let message = format!(
            "learner {} ({}) is removed: {}",
            m.name,
            m.id,
            leaving.describe()
        );
        Some(remove(
            input.cluster,
            m.id,
            RemovalKind::LeavingNode,
            message,
        ))
    })
}

/// Also 5: the standby learner whose database file must be renewed
/// ([`crate::controllers::defragmentation::standby_due`]); its node joins again as a new learner.
fn standby_to_renew(input: &MembershipInput<'_>, members: &[&Member]) -> Option<MembershipStep> {
    let due = input.standby_due?;
    members
        .iter()
        .any(|m| m.id == due.id && m.is_learner)
        .then(|| {
            remove(
                input.cluster,
                due.id,
                RemovalKind::StandbyRenewal,
                due.describe(),
            )
        })
}

/// 7. One voter too many for the nodes that remain.
fn voter_above_target(
    input: &MembershipInput<'_>,
    members: &[&Member],
    voters: usize,
    target: usize,
    remaining: usize,
) -> Option<MembershipStep> {
    if voters <= target {
        return None;
    }
    let (m, why) = voter_to_shrink(input.nodes, input.cluster, input.leader, members)?;
    let message = format!(
        "{voters} voters for {remaining} control-plane node(s): removing {} ({}, {why}) keeps the voter count odd{}",
        m.name,
        m.id,
        if node_for(input.nodes, m).is_some_and(|n| n.leaving.is_some()) {
            ""
        } else {
            "; its node joins again as the standby learner"
        }
    );
    Some(remove(
        input.cluster,
        m.id,
        RemovalKind::OddVoterCount,
        message,
    ))
}

/// Priority 8: a learner for the first eligible node without a member; a node whose etcd pod
/// still lists its removed member waits ([`MembershipStep::AddHeld`]) while another goes first,
/// and so does a renewed standby's node until the leader's log moved on (`add_wait`).
fn learner_for_new_node(
    input: &MembershipInput<'_>,
    members: &[&Member],
) -> Option<MembershipStep> {
    let mut held = None;
    for n in input.nodes.iter().filter(|n| n.eligible) {
        let Ok(peer_url) = n.target.peer_url() else {
            continue;
        };
        if members.iter().any(|m| m.has_peer_url(&peer_url)) {
            continue;
        }
        let node = n.target.name.clone();
        if let Some((_, why)) = input.add_wait.filter(|(w, _)| *w == node) {
            held.get_or_insert(MembershipStep::Waiting {
                message: why.to_owned(),
            });
            continue;
        }
        if let Some(listed) = input.removed_listed.get(&node) {
            held.get_or_insert(MembershipStep::AddHeld {
                node,
                listed: listed.clone(),
            });
            continue;
        }
        let action = Action::AddLearner {
            node: node.clone(),
            peer_url: peer_url.clone(),
        };
        return Some(gated(
            input.cluster,
            action,
            MembershipStep::AddLearner { node, peer_url },
        ));
    }
    held
}

/// Nothing to change: a started learner left is a standby.
fn standby_or_none(members: &[&Member], voters: usize, eligible: usize) -> MembershipStep {
    match members.iter().find(|m| m.is_learner) {
        Some(l) => MembershipStep::Standby {
            id: l.id,
            message: format!(
                "learner {} ({}) is a standby: {voters} voter(s) for {eligible} eligible node(s) keep the voter count odd; it is promoted when a voter is lost or another node joins",
                l.name, l.id
            ),
        },
        None => MembershipStep::None,
    }
}
