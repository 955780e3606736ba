//! The odd-voter policy (pure), which membership follows.
//!
//! Like kubeadm, etcdadm and Cluster API's control plane, the cluster only ever grows to an odd
//! number of voters: with `n` eligible nodes the voter target is the largest odd number `<= n`
//! ([`voter_target`]). An even node still gets a member, as a *standby learner*: it replicates
//! the log, is never counted in quorum, and is promoted the moment a voter is lost or a further
//! node makes the count odd again. (4 voters would need 3 for quorum and tolerate one failure,
//! like 3, while adding one more member that can fail.) When nodes leave and the voters
//! outnumber the largest odd number `<=` the nodes that remain, one voter is removed (its node
//! joins again as the standby learner), but never below three voters.

use membership::{ClusterView, Member, MemberId};

use super::NodeInfo;

/// The voter count the policy grows to with `nodes` eligible nodes: the largest odd number
/// `<= nodes` (0 for none).
pub fn voter_target(nodes: usize) -> usize {
    if nodes % 2 == 1 {
        nodes
    } else {
        nodes.saturating_sub(1)
    }
}

/// Below this many voters the operator never removes a voter to make the count odd.
pub const MIN_VOTERS_TO_SHRINK: usize = 3;

/// The voter count the policy moves `voters` to: up to [`voter_target`] of the `eligible`
/// nodes, down to the odd count of the `remaining` nodes (those not being deleted) but never
/// below [`MIN_VOTERS_TO_SHRINK`]; a count in between stays (a NotReady node removes nothing).
pub fn desired_voters(voters: usize, eligible: usize, remaining: usize) -> usize {
    let upper = voter_target(remaining).max(MIN_VOTERS_TO_SHRINK);
    voters.max(voter_target(eligible)).min(upper)
}

/// The node whose peer URL a member has.
pub fn node_for<'a>(nodes: &'a [NodeInfo], member: &Member) -> Option<&'a NodeInfo> {
    nodes
        .iter()
        .find(|n| n.target.peer_url().is_ok_and(|u| member.has_peer_url(&u)))
}

/// The voter to remove when there are too many: a voter of a node being deleted, else an
/// unhealthy one, else the healthy one on the last node by name; never the leader.
pub fn voter_to_shrink<'a>(
    nodes: &[NodeInfo],
    cluster: &ClusterView,
    leader: Option<MemberId>,
    members: &[&'a Member],
) -> Option<(&'a Member, String)> {
    let health = |m: &Member| {
        cluster
            .members
            .iter()
            .any(|h| h.member.id == m.id && h.healthy)
    };
    let leaving = |m: &Member| node_for(nodes, m).and_then(|n| n.leaving.as_ref());
    // A leaving node's voter goes first, the leader among them last (membership hands its
    // leadership off before removing it): the admin chose which members go.
    let mut going: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| !m.is_learner && leaving(m).is_some())
        .collect();
    going.sort_by_key(|m| Some(m.id) == leader);
    if let Some(m) = going.first() {
        return leaving(m).map(|why| (*m, why.describe()));
    }
    let voters: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| !m.is_learner && Some(m.id) != leader)
        .collect();
    if let Some(m) = voters.iter().find(|m| !health(m)) {
        return Some((m, "unhealthy".to_owned()));
    }
    voters.iter().max_by(|a, b| a.name.cmp(&b.name)).map(|m| {
        (
            *m,
            "the last node by name that is not the leader".to_owned(),
        )
    })
}

#[cfg(test)]
#[path = "voter_policy_tests.rs"]
mod tests;
