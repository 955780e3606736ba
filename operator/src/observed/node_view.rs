//! What the controllers see of one control-plane node. For the installer: its etcd static pod
//! as the mirror pod shows it, its newest installer pod, its status, and whether etcd itself
//! reports its member healthy; and the two questions the rollout asks of that view (does etcd on
//! it serve a revision, is it still starting on its target). For membership: whether the node
//! may hold a member and whether it is leaving ([`NodeInfo`]). Pure types, built by `observed/`
//! and read by `controllers::installer` (and its `rollout_hold`) and `controllers::membership`.

use std::time::Duration;

use membership::MemberId;
use time::OffsetDateTime;

use crate::api::NodeStatus;
use crate::podspec::NodeTarget;

/// The node's etcd static pod as its mirror pod shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    pub revision: i64,
    pub ready: bool,
    /// The etcd container is running (it may not have passed its probes yet).
    pub running: bool,
    /// When the running etcd container started.
    pub started_at: Option<OffsetDateTime>,
    /// `etcd-verify membership` refused to start etcd (its termination message).
    pub blocked: Option<String>,
}

/// Phase of an installer pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallerPhase {
    Running,
    Succeeded,
    Failed(String),
}

/// A running installer's restart approval (`etcd_installer::approval`): the operator asks the
/// quorum gate again only once it has seen the installer's container run, so its verdict is
/// younger than the installer that acts on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RestartApproval {
    /// The container is not running yet (or no longer): nothing to approve.
    #[default]
    NotRunning,
    /// The container runs and the pod carries no approval.
    Awaited,
    /// The pod carries the approval.
    Given,
}

/// The newest installer pod of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallerState {
    pub revision: i64,
    pub attempt: u32,
    pub phase: InstallerPhase,
    pub approval: RestartApproval,
}

/// Everything the rollout knows about one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    pub name: String,
    pub member: Option<MemberId>,
    pub is_leader: bool,
    pub pod: Option<PodState>,
    pub installer: Option<InstallerState>,
    pub status: NodeStatus,
    /// etcd itself reported this node's member healthy in this pass (observed after the pods).
    pub member_healthy: bool,
    /// The Node's `Ready` condition.
    pub node_ready: bool,
    /// An admin stopped etcd here on purpose (the Node annotation's reason).
    pub etcd_stopped: Option<String>,
    /// The member last advertised another address than the node's: the node's address changed
    /// and its etcd has not restarted there yet ([`super::address_move::serves_elsewhere`]).
    pub serves_elsewhere: bool,
    /// The revision its etcd serves on is equivalent to the latest
    /// ([`crate::controllers::installer::equivalence`]): filled by the installer controller.
    pub equivalent_to_latest: bool,
}

impl NodeView {
    /// The revision this node's etcd serves on: its pod is Ready, or its etcd container runs and
    /// etcd reports the member healthy. The second needs no probe period: a probe's first try
    /// comes as the container starts, before etcd listens, and the next one a whole period
    /// later (1 s at the least), while the operator asks etcd every pass. The pods are read
    /// before etcd is asked, so a healthy answer comes from the container the pod shows.
    pub fn serving_revision(&self) -> Option<i64> {
        let pod = self.pod.as_ref()?;
        (pod.ready || (pod.running && self.member_healthy)).then_some(pod.revision)
    }

    /// etcd was started on the node's target revision less than [`STARTING_WINDOW`] ago and does
    /// not serve yet. Nothing the operator watches changes when etcd becomes healthy, so the pass
    /// polls etcd more often meanwhile ([`STARTING_REQUEUE`]); an etcd that stays unhealthy
    /// longer is left to the ordinary busy pace.
    pub fn etcd_starting(&self, now: OffsetDateTime) -> bool {
        let Some(pod) = self.pod.as_ref() else {
            return false;
        };
        let on_target = self.status.target_revision == Some(pod.revision);
        let recent = pod
            .started_at
            .is_some_and(|t| now - t < STARTING_WINDOW && t <= now + time::Duration::SECOND);
        on_target && pod.running && recent && self.serving_revision().is_none()
    }
}

/// How long after etcd's start the pass polls it at [`STARTING_REQUEUE`].
pub const STARTING_WINDOW: time::Duration = time::Duration::seconds(10);
/// The pause between passes while a node's etcd is starting.
pub const STARTING_REQUEUE: Duration = Duration::from_millis(100);

/// A control-plane node as membership sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub target: NodeTarget,
    /// Ready, certificates issued, not leaving.
    pub eligible: bool,
    /// The node is leaving the control plane: its member is removed and none is added.
    pub leaving: Option<Leaving>,
}

/// Why a node leaves the control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leaving {
    /// The Node has a deletion timestamp.
    Deleted,
    /// An admin set [`crate::observed::objects::REMOVE_MEMBER_ANNOTATION`] (its value: why).
    RemovalRequested(String),
}

impl Leaving {
    /// "its node is being deleted", "an admin asked for its removal (…)".
    pub fn describe(&self) -> String {
        match self {
            Leaving::Deleted => "its node is being deleted".to_owned(),
            Leaving::RemovalRequested(why) => format!(
                "an admin asked for its removal ({}: {why})",
                crate::observed::objects::REMOVE_MEMBER_ANNOTATION
            ),
        }
    }
}
