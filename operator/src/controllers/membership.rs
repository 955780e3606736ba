//! Membership: adds, promotes and removes etcd members, one change per pass, each through the
//! quorum gate. [`decide`] is pure; the reconcile pass calls etcd for the step it returns.
//!
//! **Odd voter counts.** Like kubeadm, etcdadm and Cluster API's control plane, the cluster only
//! ever grows to an odd number of voters: with `n` eligible nodes the voter target is the largest
//! odd number `<= n` ([`voter_target`]). An even node still gets a member, as a *standby
//! learner*: it replicates the log, is never counted in quorum, and is promoted the moment a
//! voter is lost or a further node makes the count odd again. (4 voters would need 3 for quorum
//! and tolerate one failure, like 3, while adding one more member that can fail.) When nodes
//! leave and the voters outnumber the largest odd number `<=` the nodes that remain, one voter is
//! removed (its node joins again as the standby learner), but never below three voters.
//!
//! Priority (the first that applies wins):
//! 1. a learner that has not started within the learner start deadline is removed, so it can't
//!    wedge every later join (etcd 3.4 allows one learner, even an unstarted one);
//! 2. a member whose node is gone (no control-plane node has its peer address any more: the
//!    node was deleted or its address changed) is removed, before any replacement is added;
//! 3. a member whose node reports, through `etcd-verify`, that its data dir was lost is removed,
//!    so the node can join again as a new learner (verify archives what is left);
//! 4. a member that stayed unhealthy past `spec.memberRemediation` is removed, so its node joins
//!    again as a learner (see [`crate::controllers::remediation`] for timing and retries);
//! 5. a started learner is promoted while the voters are below the target (etcd refuses until
//!    its log caught up; the pass retries); otherwise it stays a standby;
//! 6. a voter is removed while the voters exceed the odd count of the remaining nodes;
//! 7. a learner is added for the first eligible node (Ready, certificates issued, not being
//!    deleted) that has no member.

use std::collections::BTreeMap;
use std::time::Duration;

use membership::{Action, ClusterView, Denial, Member, MemberId, MemberUrl, Verdict, gate};
use time::OffsetDateTime;

use crate::controllers::remediation::{Assessment, Candidate};
use crate::podspec::NodeTarget;

/// A control-plane node as membership sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub target: NodeTarget,
    /// Ready, certificates issued, not being deleted.
    pub eligible: bool,
    /// Has a deletion timestamp.
    pub deleting: bool,
}

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

/// Why a member is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemovalKind {
    UnstartedLearner,
    NodeGone,
    DataDirLost,
    Unhealthy,
    OddVoterCount,
}

impl RemovalKind {
    /// Event reason and metric label.
    pub fn reason(self) -> &'static str {
        match self {
            RemovalKind::UnstartedLearner => "UnstartedLearnerRemoved",
            RemovalKind::NodeGone => "MemberOfGoneNodeRemoved",
            RemovalKind::DataDirLost => "MemberWithLostDataRemoved",
            RemovalKind::Unhealthy => "UnhealthyMemberReplaced",
            RemovalKind::OddVoterCount => "VoterRemovedForOddCount",
        }
    }
}

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
    /// Something should happen but the gate refused it now.
    Denied {
        step: String,
        denial: Denial,
    },
    /// A learner is pending and nothing else can happen until it starts.
    Waiting {
        message: String,
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
    pub now: OffsetDateTime,
}

fn node_for<'a>(nodes: &'a [NodeInfo], member: &Member) -> Option<&'a NodeInfo> {
    nodes
        .iter()
        .find(|n| n.target.peer_url().is_ok_and(|u| member.has_peer_url(&u)))
}

fn gated(cluster: &ClusterView, action: Action, step: MembershipStep) -> MembershipStep {
    match gate(cluster, &action) {
        Verdict::Allow => step,
        Verdict::Deny(denial) => MembershipStep::Denied {
            step: action.to_string(),
            denial,
        },
    }
}

/// Decides the next membership step.
pub fn decide(input: &MembershipInput<'_>) -> MembershipStep {
    let members: Vec<&Member> = input.cluster.members.iter().map(|m| &m.member).collect();
    let cluster = input.cluster;
    // 1. Unstarted learners past their deadline.
    for m in members.iter().filter(|m| m.is_learner && !m.is_started()) {
        let added = input.learner_added.get(&m.id).copied().unwrap_or(input.now);
        let age = input.now - added;
        if age >= input.start_deadline {
            return gated(
                cluster,
                Action::Remove { id: m.id },
                MembershipStep::Remove {
                    id: m.id,
                    kind: RemovalKind::UnstartedLearner,
                    message: format!(
                        "learner {} was added {}s ago and never started (deadline {}s)",
                        m.id,
                        age.whole_seconds(),
                        input.start_deadline.as_secs()
                    ),
                },
            );
        }
    }
    // 2. Members of nodes that are gone.
    for m in &members {
        if node_for(input.nodes, m).is_none() {
            let who = if m.is_started() {
                m.name.clone()
            } else {
                format!("unstarted {}", m.id)
            };
            let urls: Vec<String> = m.peer_urls.iter().map(ToString::to_string).collect();
            return gated(
                cluster,
                Action::Remove { id: m.id },
                MembershipStep::Remove {
                    id: m.id,
                    kind: RemovalKind::NodeGone,
                    message: format!(
                        "member {who} ({}) has peer URL {} and no control-plane node has that address",
                        m.id,
                        urls.join(",")
                    ),
                },
            );
        }
    }
    // 3. Members whose node lost its data dir.
    for (node, id) in input.data_lost {
        if members.iter().any(|m| m.id == *id && m.is_started()) {
            return gated(
                cluster,
                Action::Remove { id: *id },
                MembershipStep::Remove {
                    id: *id,
                    kind: RemovalKind::DataDirLost,
                    message: format!(
                        "node {node} lost the data dir of member {id}; it joins again as a new learner"
                    ),
                },
            );
        }
    }
    // 4. Members that stayed unhealthy.
    for c in input.remediation {
        if let Assessment::Due {
            attempt,
            unhealthy_for,
        } = c.assessment
            && members.iter().any(|m| m.id == c.member)
        {
            return gated(
                cluster,
                Action::Remove { id: c.member },
                MembershipStep::Remove {
                    id: c.member,
                    kind: RemovalKind::Unhealthy,
                    message: format!(
                        "member {} of node {} has been unhealthy for {}s; replacing it (remove, then join again as a learner), attempt {attempt}",
                        c.member,
                        c.node,
                        unhealthy_for.whole_seconds()
                    ),
                },
            );
        }
    }
    let voters = members.iter().filter(|m| !m.is_learner).count();
    let eligible = input.nodes.iter().filter(|n| n.eligible).count();
    let remaining = input.nodes.iter().filter(|n| !n.deleting).count();
    let target = desired_voters(voters, eligible, remaining);
    // 5. Promote a started learner while below the target; otherwise it is a standby.
    if let Some(l) = members.iter().find(|m| m.is_learner) {
        if !l.is_started() {
            return MembershipStep::Waiting {
                message: format!("waiting for learner {} to start", l.id),
            };
        }
        if voters < target {
            return gated(
                cluster,
                Action::Promote { id: l.id },
                MembershipStep::Promote {
                    id: l.id,
                    node: l.name.clone(),
                },
            );
        }
    }
    // 6. Too many voters for the nodes that remain.
    if voters > target
        && let Some((m, why)) = voter_to_shrink(input, &members)
    {
        return gated(
            cluster,
            Action::Remove { id: m.id },
            MembershipStep::Remove {
                id: m.id,
                kind: RemovalKind::OddVoterCount,
                message: format!(
                    "{voters} voters for {remaining} control-plane node(s): removing {} ({}, {why}) keeps the voter count odd; its node joins again as the standby learner",
                    m.name, m.id
                ),
            },
        );
    }

    // 7. Add a learner for the first eligible node without a member.
    for n in input.nodes.iter().filter(|n| n.eligible) {
        let Ok(peer_url) = n.target.peer_url() else {
            continue;
        };
        if members.iter().any(|m| m.has_peer_url(&peer_url)) {
            continue;
        }
        return gated(
            cluster,
            Action::AddLearner {
                node: n.target.name.clone(),
                peer_url: peer_url.clone(),
            },
            MembershipStep::AddLearner {
                node: n.target.name.clone(),
                peer_url,
            },
        );
    }
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

/// The voter to remove when there are too many: a voter of a node being deleted, else an
/// unhealthy one, else the healthy one on the last node by name; never the leader.
fn voter_to_shrink<'a>(
    input: &MembershipInput<'_>,
    members: &[&'a Member],
) -> Option<(&'a Member, &'static str)> {
    let health = |m: &Member| {
        input
            .cluster
            .members
            .iter()
            .any(|h| h.member.id == m.id && h.healthy)
    };
    let voters: Vec<&Member> = members
        .iter()
        .copied()
        .filter(|m| !m.is_learner && Some(m.id) != input.leader)
        .collect();
    let deleting = |m: &Member| node_for(input.nodes, m).is_some_and(|n| n.deleting);
    if let Some(m) = voters.iter().find(|m| deleting(m)) {
        return Some((m, "its node is being deleted"));
    }
    if let Some(m) = voters.iter().find(|m| !health(m)) {
        return Some((m, "unhealthy"));
    }
    voters
        .iter()
        .max_by(|a, b| a.name.cmp(&b.name))
        .map(|m| (*m, "the last node by name that is not the leader"))
}

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
