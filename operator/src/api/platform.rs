//! Status the operator reports to the platform around it: where drains stand (the quorum
//! guards), the versions it rolled out and the objects debug tooling should collect, as a
//! payload operator's ClusterOperator carries them.

use serde::{Deserialize, Serialize};

/// Where drains stand: the guards the budget counts and why no node may be drained now.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuorumGuardStatus {
    /// One guard per selected control-plane node.
    pub expected_guards: i64,
    /// Guards whose node's etcd answers `/health`.
    pub ready_guards: i64,
    /// The budget's `minAvailable`: `expectedGuards - 1` lets a drain take one node;
    /// `expectedGuards` lets none.
    pub min_available: i64,
    /// Why no node may be drained now (empty when one may).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_blocked_by: Vec<String>,
}

/// One reported version (ClusterOperator `status.versions[]`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub struct OperandVersion {
    /// `operator` or `etcd`.
    pub name: String,
    /// The version every instance of it runs.
    pub version: String,
}

/// An object related to the cluster (ClusterOperator `status.relatedObjects[]`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub struct RelatedObject {
    /// Its API group (empty: the core group).
    pub group: String,
    /// Its resource, plural (`namespaces`, `etcdclusters`).
    pub resource: String,
    /// Its namespace (empty: cluster-scoped).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Its name.
    pub name: String,
}
