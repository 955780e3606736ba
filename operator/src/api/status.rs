//! The `EtcdCluster` status: what the operator observed and did, as an admin reads it — the
//! conditions, every node's place in the rollout, the members, remediation attempts and where
//! the etcd version stands. The maintenance, certificate, backup and platform parts it carries
//! live in their own modules.

use serde::{Deserialize, Serialize};

use super::{
    BackupStatus, CertificatesStatus, CorruptionCheckStatus, DefragmentationStatus, OperandVersion,
    QuorumGuardStatus, RelatedObject,
};

/// The remediation attempts on one node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStatus {
    /// The node whose member was replaced.
    pub node_name: String,
    /// Attempts since the node's member was last healthy for `minHealthySeconds`.
    pub attempts: u32,
    /// RFC 3339.
    pub last_attempt_time: String,
    /// The member the last attempt removed.
    pub last_member_id: String,
    /// Why the last attempt replaced it (how long it had been unhealthy, what etcd said).
    pub last_reason: String,
    /// Why the node's unhealthy member is not replaced now because of what an admin did to the
    /// node ("held by the admin": cordoned, NotReady, or annotated
    /// `etcd.static-operator.io/etcd-stopped` with its reason); empty when it is not held.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub held_by_admin: String,
    /// RFC 3339: when the node was last seen holding its unhealthy member; once the hold ends,
    /// the member's unhealthy time counts from here, not from when it went down.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_held_time: String,
}

/// What the operator observed and did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// The `metadata.generation` of the spec this status was computed from: lower than the
    /// object's generation while the operator has not acted on the newest spec yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Available`, `Progressing` and `Degraded` sum up the cluster; the others say what each
    /// part of the operator sees (`EtcdMembersAvailable`, `BackupReady`, `<Controller>Degraded`,
    /// ...). `Degraded` turns True only after a detail condition has been True for 60 s.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The newest revision; nodes move to it one at a time.
    #[serde(default)]
    pub latest_available_revision: i64,
    /// Every selected control-plane node's place in the rollout, by node name.
    #[serde(default)]
    pub node_statuses: Vec<NodeStatus>,
    /// Every etcd member as etcd lists it, with its role and health.
    #[serde(default)]
    pub members: Vec<MemberStatus>,
    /// Per node: replacements of a member that stayed unhealthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remediations: Vec<RemediationStatus>,
    /// What the defragmentation controller is doing and did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defragmentation: Option<DefragmentationStatus>,
    /// The last comparison of the members' data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corruption_check: Option<CorruptionCheckStatus>,
    /// The CA's and every leaf certificate's expiry, and when each is renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<CertificatesStatus>,
    /// Scheduled backups: the last good one, the last failure, the last verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupStatus>,
    /// Which etcd version the cluster runs and where a version change stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<EtcdVersionStatus>,
    /// The quorum guards and their PodDisruptionBudget: whether a drain may take a node now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_guard: Option<QuorumGuardStatus>,
    /// The versions this operator has rolled out, as a payload operator reports them: the
    /// operator's own, and the etcd version every member runs (moved only once all do).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<OperandVersion>,
    /// Objects debug tooling (must-gather, `etcd-operator gather`) should collect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_objects: Vec<RelatedObject>,
    /// The live etcd cluster's id and the initial-cluster token that made it, which every
    /// revision carries (`ETCD_INITIAL_CLUSTER_TOKEN`). Absent while the token is not known (a
    /// cluster bootstrapped before the operator carried tokens: revisions keep etcd's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_identity: Option<ClusterIdentity>,
}

/// Which etcd cluster the operator manages, and the token it was made with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterIdentity {
    /// etcd's cluster id, lowercase hex (as `etcdctl member list -w json` prints it in hex).
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// The `--initial-cluster-token` the cluster was made with (by `etcd-operator render`, or by
    /// `etcd-recover from-snapshot` for a restored cluster).
    pub initial_cluster_token: String,
    /// The etcd static pod the token was read from (`<namespace>/<name>`), whose peer URL and
    /// token give exactly this cluster id (etcd's own rule).
    pub learned_from: String,
}

/// Where the cluster's etcd version stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdVersionStatus {
    /// The cluster version etcd reports (`3.5.0`): the lowest minor any member runs. etcd
    /// moves it up only after every member runs the new minor, and never down.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_version: String,
    /// The cluster version before its last change.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub previous_cluster_version: String,
    /// RFC 3339: when the operator saw the cluster version change.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_version_changed_time: String,
    /// The raft index the log had reached when the operator first saw this cluster version:
    /// every entry an etcd of an older minor wrote lies at or below it. A move to the next minor
    /// starts once every member has snapshotted past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_version_raft_index: Option<u64>,
    /// The version the etcd image's tag names (empty: the tag names none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_version: String,
    /// `AtTarget`, `Rolling` (members run different versions), `WaitingForClusterVersion` (every
    /// member runs the target, etcd has not moved the cluster version yet), `Unknown` (the image
    /// names no version or no member answered).
    pub state: String,
    /// What that means, with the members' versions.
    #[serde(default)]
    pub message: String,
}

/// A status condition (the Kubernetes shape, with `lastTransitionTime` kept while the status
/// doesn't change).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// What the condition is about (`Available`, `EtcdMembersDegraded`, ...).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// One CamelCase word saying why (`AsExpected`, `UnhealthyMembers`, ...).
    pub reason: String,
    /// What is happening, and when waiting, what for.
    #[serde(default)]
    pub message: String,
    /// RFC 3339.
    pub last_transition_time: String,
}

/// Where one node stands in the rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node's name.
    pub node_name: String,
    /// The revision running Ready on the node (0: none yet).
    #[serde(default)]
    pub current_revision: i64,
    /// The latest revision, when `currentRevision` differs from it only in members added since:
    /// the node's started member restarts from its own data on either, so the node is not
    /// restarted for it (a learner add restarts no healthy voter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equivalent_to_revision: Option<i64>,
    /// The revision being installed, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<i64>,
    /// The last revision whose installer pod failed on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_revision: Option<i64>,
    /// What that installer pod reported.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_failed_reason: String,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_failed_time: String,
    /// Consecutive failures of the last failed revision.
    #[serde(default)]
    pub last_failed_count: u32,
    /// RFC 3339: since when the node, which ran `currentRevision`, shows no etcd static pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub etcd_pod_missing_since: String,
    /// Why an admin stopped etcd on this node (the Node's `etcd.static-operator.io/etcd-stopped`
    /// annotation): its revision is not installed again while it is set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub etcd_stopped_by_admin: String,
}

impl NodeStatus {
    /// The node runs `latest`, or a revision equivalent to it, and is not moving.
    pub fn runs(&self, latest: i64) -> bool {
        self.target_revision.is_none()
            && (self.current_revision == latest || self.equivalent_to_revision == Some(latest))
    }
}

/// One etcd member as the operator sees it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Member name (= node name); empty for a learner that has not started.
    pub name: String,
    /// etcd member id, lowercase hex.
    pub id: String,
    /// The URL its peers reach it on (`https://<node-ip>:2380`).
    pub peer_url: String,
    /// `Voter` or `Learner`.
    pub role: String,
    /// It has started: etcd lists it with a name (a learner added but not started has none).
    pub started: bool,
    /// It answered the operator's last look at etcd as healthy.
    pub healthy: bool,
    /// This member is the raft leader.
    #[serde(default)]
    pub leader: bool,
    /// The etcd version it runs (the last one it reported while it is down).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// RFC 3339: when `role`, `started` or `healthy` last changed, or the member appeared.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
    /// RFC 3339: `notAfter` of the client certificate the member serves, as the operator's TLS
    /// handshake saw it (the last one seen while it is down). A node that has not restarted
    /// into the latest revision still serves the certificate of the one it runs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub serving_certificate_expiry: String,
    /// For a learner: its raft index and the leader's, while it catches up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learner_raft_index: Option<u64>,
    /// ... and the leader's raft index at the same time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_raft_index: Option<u64>,
}
