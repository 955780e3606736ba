//! What the quorum gate ([`crate::gate()`]) decides from and what it answers: the observed
//! [`ClusterView`], the disruptive [`Action`]s, and the [`Verdict`] with its [`Denial`] and
//! [`DenyRule`]; plus the counting the rules share (voters, healthy voters, labels).

use std::fmt;

use crate::{ApiServer, ControlPlanePods, Member, MemberId, MemberUrl, Preflight, quorum};

/// One member and whether it is healthy (its etcd answers and is part of the raft group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberHealth {
    pub member: Member,
    pub healthy: bool,
}

/// What the gate decides from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub members: Vec<MemberHealth>,
    /// A node whose etcd is down for a planned step not finished yet (a rollout in progress).
    pub rolling_node: Option<String>,
    /// Alarms and the voters' own member lists.
    pub preflight: Preflight,
    /// The kube-apiservers known to serve from this etcd (rule 10).
    pub api_servers: Vec<ApiServer>,
    /// The other control-plane pods (rule 10's preflight).
    pub control_plane: ControlPlanePods,
    /// An admin approved the outage of restarting a lone voter into the revision being
    /// installed (rule 11).
    pub outage_approved: bool,
    /// The learner membership keeps as a standby (an even node count: it is promoted only when
    /// a voter is lost or a node joins). No voter is joining through it, so rule 11 does not
    /// wait for it (#65: a 2-node control plane never rolled its voter).
    pub standby: Option<MemberId>,
}

/// A disruptive action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `MemberAddAsLearner(peer_url)` for `node`.
    AddLearner { node: String, peer_url: MemberUrl },
    /// `MemberPromote(id)`.
    Promote { id: MemberId },
    /// `MemberRemove(id)`.
    Remove { id: MemberId },
    /// Install a new revision on `node`, restarting its etcd (`member` = its member, if any).
    RollNode {
        node: String,
        member: Option<MemberId>,
    },
    /// Defragment voter `id`'s database; `nospace`: the `NOSPACE` alarm is raised.
    Defragment { id: MemberId, nospace: bool },
    /// `MemberUpdate(id, peer_url)`: member `id` of `node` moves to its node's new address.
    MovePeerUrl {
        id: MemberId,
        node: String,
        peer_url: MemberUrl,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::AddLearner { node, peer_url } => {
                write!(f, "add learner for {node} ({peer_url})")
            }
            Action::Promote { id } => write!(f, "promote learner {id}"),
            Action::Remove { id } => write!(f, "remove member {id}"),
            Action::RollNode { node, .. } => write!(f, "roll node {node}"),
            Action::Defragment { id, .. } => write!(f, "defragment member {id}"),
            Action::MovePeerUrl { id, node, peer_url } => {
                write!(f, "move member {id} of {node} to {peer_url}")
            }
        }
    }
}

/// Which rule denied an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DenyRule {
    NoQuorum,
    ChangeInFlight,
    VoterUnhealthy,
    LearnerNotReady,
    NotALearner,
    NotAVoter,
    UnknownMember,
    QuorumAfterAction,
    NoMargin,
    LastVoter,
    RolloutInProgress,
    AlreadyMember,
    Preflight,
    ControlPlaneNotReady,
    ApiServerCutOff,
    LearnerAddressListed,
    LoneVoter,
}

impl DenyRule {
    /// A short, static label for metrics and events.
    pub fn category(self) -> &'static str {
        match self {
            DenyRule::NoQuorum => "no_quorum",
            DenyRule::ChangeInFlight => "change_in_flight",
            DenyRule::VoterUnhealthy => "voter_unhealthy",
            DenyRule::LearnerNotReady => "learner_not_ready",
            DenyRule::NotALearner => "not_a_learner",
            DenyRule::NotAVoter => "not_a_voter",
            DenyRule::UnknownMember => "unknown_member",
            DenyRule::QuorumAfterAction => "quorum_after_action",
            DenyRule::NoMargin => "no_margin",
            DenyRule::LastVoter => "last_voter",
            DenyRule::RolloutInProgress => "rollout_in_progress",
            DenyRule::AlreadyMember => "already_member",
            DenyRule::Preflight => "preflight",
            DenyRule::ControlPlaneNotReady => "control_plane_not_ready",
            DenyRule::ApiServerCutOff => "api_server_cut_off",
            DenyRule::LearnerAddressListed => "learner_address_listed",
            DenyRule::LoneVoter => "lone_voter",
        }
    }
}

/// Why an action is denied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub rule: DenyRule,
    pub message: String,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The gate's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(Denial),
}

impl Verdict {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Verdict::Allow)
    }
}

pub(crate) fn deny(rule: DenyRule, message: String) -> Verdict {
    Verdict::Deny(Denial { rule, message })
}

/// A member's display name: its name, or its id when it has not started.
pub(crate) fn label(m: &Member) -> String {
    if m.is_started() {
        format!("{} ({})", m.name, m.id)
    } else {
        format!("unstarted {}", m.id)
    }
}

impl ClusterView {
    pub(crate) fn voters(&self) -> impl Iterator<Item = &MemberHealth> {
        self.members.iter().filter(|m| !m.member.is_learner)
    }

    pub(crate) fn voter_count(&self) -> usize {
        self.voters().count()
    }

    pub(crate) fn healthy_voters(&self) -> usize {
        self.voters().filter(|m| m.healthy).count()
    }

    pub(crate) fn learners(&self) -> impl Iterator<Item = &MemberHealth> {
        self.members.iter().filter(|m| m.member.is_learner)
    }

    pub(crate) fn find(&self, id: MemberId) -> Option<&MemberHealth> {
        self.members.iter().find(|m| m.member.id == id)
    }

    /// "2 of 3 voters healthy (quorum 2)".
    pub fn health_summary(&self) -> String {
        let v = self.voter_count();
        format!(
            "{} of {v} voters healthy (quorum {})",
            self.healthy_voters(),
            quorum(v)
        )
    }

    pub(crate) fn unhealthy_voter_names(&self) -> String {
        self.voters()
            .filter(|m| !m.healthy)
            .map(|m| label(&m.member))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
