//! Membership: adds, promotes and removes etcd members, one change per pass, each through the
//! quorum gate. [`decide`] is pure; the reconcile pass calls etcd for the step it returns.
//!
//! Priority (the first that applies wins):
//! 1. a learner that has not started within the learner start deadline is removed, so it can't
//!    wedge every later join (etcd 3.4 allows one learner, even an unstarted one);
//! 2. a member whose node is gone (no control-plane node has its peer address any more: the
//!    node was deleted or its address changed) is removed, before any replacement is added;
//! 3. a member whose node reports, through `etcd-verify`, that its data dir was lost is removed,
//!    so the node can join again as a new learner (verify archives what is left);
//! 4. a started learner is promoted (etcd refuses until its log caught up; the pass retries);
//! 5. a learner is added for the first eligible node (Ready, certificates issued, not being
//!    deleted) that has no member.

use std::collections::BTreeMap;
use std::time::Duration;

use membership::{Action, ClusterView, Denial, Member, MemberId, MemberUrl, Verdict, gate};
use time::OffsetDateTime;

use crate::podspec::NodeTarget;

/// A control-plane node as membership sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub target: NodeTarget,
    /// Ready, certificates issued, not being deleted.
    pub eligible: bool,
}

/// Why a member is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemovalKind {
    UnstartedLearner,
    NodeGone,
    DataDirLost,
}

impl RemovalKind {
    /// Event reason and metric label.
    pub fn reason(self) -> &'static str {
        match self {
            RemovalKind::UnstartedLearner => "UnstartedLearnerRemoved",
            RemovalKind::NodeGone => "MemberOfGoneNodeRemoved",
            RemovalKind::DataDirLost => "MemberWithLostDataRemoved",
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
    // 4. Promote a started learner.
    if let Some(l) = members.iter().find(|m| m.is_learner) {
        if !l.is_started() {
            return MembershipStep::Waiting {
                message: format!("waiting for learner {} to start", l.id),
            };
        }
        return gated(
            cluster,
            Action::Promote { id: l.id },
            MembershipStep::Promote {
                id: l.id,
                node: l.name.clone(),
            },
        );
    }
    // 5. Add a learner for the first eligible node without a member.
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
    MembershipStep::None
}

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
