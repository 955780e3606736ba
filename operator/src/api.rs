//! The `EtcdCluster` custom resource: a cluster-scoped singleton named `cluster` whose spec says
//! how etcd should run and whose status is what an admin reads first (conditions, members, the
//! revision of every node).
//!
//! Validation lives in the schema so that what must never be accepted is refused by the API
//! server itself: the name, timing that etcd would reject, a quota outside what etcd supports.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

mod backup;
mod certificates;
mod control_plane;
mod maintenance;
mod platform;
mod reload;
mod selector;
mod status;
mod stored;
pub use backup::{
    Backup, BackupFailure, BackupRecord, BackupRetention, BackupStatus, BackupVerification,
    PreOperationNeed, S3Destination,
};
pub use certificates::{
    CaRotationStatus, CertificateExpiry, Certificates, CertificatesStatus, EtcdConsumer,
};
pub use control_plane::{ControlPlanePodSelector, LoneVoterRestart};
pub use maintenance::{
    CorruptionCheck, CorruptionCheckStatus, DefragRecord, Defragmentation, DefragmentationStatus,
    DivergentMember, StandbyRenewal,
};
pub use platform::{OperandVersion, QuorumGuardStatus, RelatedObject};
pub use reload::{ConsumerPods, ConsumerStatus, Reload, ReloadMode};
pub use selector::SelectorError;
pub use status::{
    ClusterIdentity, Condition, EtcdClusterStatus, EtcdVersionStatus, MemberStatus, NodeStatus,
    RemediationStatus,
};
pub use stored::{StoredCluster, Unreadable};

/// API group of the operator's resources.
pub const GROUP: &str = "etcd.static-operator.io";
/// The one `EtcdCluster` the operator manages.
pub const SINGLETON: &str = "cluster";
/// Label that selects control-plane nodes unless the spec says otherwise.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// How etcd should run on the control-plane nodes.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.static-operator.io",
    version = "v1alpha1",
    kind = "EtcdCluster",
    plural = "etcdclusters",
    shortname = "etcdc",
    status = "EtcdClusterStatus",
    validation = Rule::new("self.metadata.name == 'cluster'").message("the EtcdCluster must be named 'cluster'"),
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Progressing","type":"string","jsonPath":".status.conditions[?(@.type==\"Progressing\")].status"}"#,
    printcolumn = r#"{"name":"Degraded","type":"string","jsonPath":".status.conditions[?(@.type==\"Degraded\")].status"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.latestAvailableRevision"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "The etcd cluster of the control plane, run as static pods on the control-plane nodes by etcd-static-operator. One exists, named `cluster` (the operator creates it with the defaults). The spec says how etcd runs: a change to its image, log level, timing, quota, client listener or forceRedeploymentReason becomes a new static-pod revision, rolled to one node at a time through the quorum gate. The status says what the operator sees and does: conditions (Available, Progressing, Degraded), the members, every node's revision, backups, certificates."
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterSpec {
    /// `Managed` (default): the operator acts. `Unmanaged`: it only observes and reports (no
    /// membership change, no new revision, no rollout) until set back.
    #[serde(default)]
    pub management_state: ManagementState,
    /// Log verbosity of etcd and the operator's node-side tools: `Normal` (default, etcd `info`),
    /// `Debug` or `Trace` (etcd `debug`). A change rolls a new revision to every node.
    #[serde(default)]
    pub log_level: LogLevel,
    /// etcd image. Unset (default): the operator's `ETCD_IMAGE`. A change rolls a new revision to
    /// every node, one at a time, after the version policy allowed it (one minor version up at a
    /// time, never down; with `backup` set, a backup taken for the upgrade first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.size() > 0").message("etcdImage must not be empty when set"))]
    pub etcd_image: Option<String>,
    /// The etcd version the image runs (e.g. `3.5.16`), for an image whose tag names none (a
    /// digest only, `latest`). Default empty: the version comes from the tag; an image without
    /// one is then refused, since the version policy could not check it. When both are given
    /// they must agree.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub etcd_image_version: String,
    /// A known-bad etcd release (see the version policy) to run anyway, by its exact number,
    /// e.g. `3.5.1`: it applies to that release only.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub accept_known_bad_etcd_release: String,
    /// Changing this string rolls a new revision to every node, one at a time, without any other
    /// change (each node's etcd restarts once). Default empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub force_redeployment_reason: String,
    /// Raft timing (default: heartbeat 100 ms, election timeout 1000 ms). A change rolls a new
    /// revision to every node.
    #[serde(default)]
    pub timing: Timing,
    /// etcd's backend quota (`--quota-backend-bytes`) in GiB: default 8, 1 to 32. Above it etcd
    /// raises `NOSPACE` and refuses writes. A change rolls a new revision to every node.
    #[serde(default = "default_quota_gib")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 32").message("backendQuotaGib must be between 1 and 32"))]
    pub backend_quota_gib: u32,
    /// The quota in MiB instead (16 to 32768), for small (test) clusters: takes precedence over
    /// `backendQuotaGib` when set. Unset by default. A change rolls a new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 16 && self <= 32768").message("backendQuotaMib must be between 16 and 32768"))]
    pub backend_quota_mib: Option<u32>,
    /// When members are defragmented (default: automatically, by the thresholds below).
    #[serde(default)]
    pub defragmentation: Defragmentation,
    /// How often the members' data is compared (default every 300 s), and what happens to a
    /// diverged member (default: only reported).
    #[serde(default)]
    pub corruption_check: CorruptionCheck,
    /// Lifetime and renewal of the leaf certificates the operator issues, and CA rotation on
    /// request. A renewed certificate reaches the nodes as a new revision.
    #[serde(default)]
    pub certificates: Certificates,
    /// Consumers of etcd that get a client certificate maintained by the operator (Secret
    /// `etcd-consumer-<name>` in the operator's namespace). Names are unique; at most 20.
    /// Default none. Adding one writes its Secret; removing one deletes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    #[x_kube(validation = Rule::new("self.all(c, self.filter(d, d.name == c.name).size() == 1)").message("clients: each name at most once"))]
    pub clients: Vec<EtcdConsumer>,
    /// Scheduled, verified backups. Unset (default): none, and disruptive operations do not wait
    /// for a backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<Backup>,
    /// How many old revisions to keep (default 5 succeeded, 5 failed).
    #[serde(default)]
    pub revision_history: RevisionHistory,
    /// A node whose etcd static pod vanished (its manifest moved out of the manifests directory,
    /// the usual first step of a manual recovery) gets its revision installed again after this
    /// many seconds, unless the Node carries the annotation `etcd.static-operator.io/etcd-stopped`
    /// (an admin stopped etcd there on purpose; its value says why). Default 300, 30 to 86400.
    #[serde(default = "default_missing_pod_grace")]
    #[x_kube(validation = Rule::new("self >= 30 && self <= 86400").message("missingPodGraceSeconds must be between 30 and 86400"))]
    pub missing_pod_grace_seconds: u32,
    /// Seconds: a learner added for a node but not started within this long is removed again
    /// (and added anew later). Default 300, 30 to 3600.
    #[serde(default = "default_learner_start_deadline")]
    #[x_kube(validation = Rule::new("self >= 30 && self <= 3600").message("learnerStartDeadlineSeconds must be between 30 and 3600"))]
    pub learner_start_deadline_seconds: u32,
    /// etcd also serves clients on `https://127.0.0.1:2379` and `https://[::1]:2379`, for the
    /// kube-apiserver on the same node. Default true. Turn off only where nodes share one network
    /// namespace (the local control plane). A change rolls a new revision to every node.
    #[serde(default = "default_true")]
    pub local_client_listener: bool,
    /// Replacing a member that stays unhealthy on a node that still exists, unless an admin holds
    /// the node (cordoned, NotReady, `etcd.static-operator.io/etcd-stopped`); one at a time.
    /// Default: after 600 s unhealthy, at most 3 attempts per node.
    #[serde(default)]
    pub member_remediation: MemberRemediation,
    /// Labels that select the control-plane nodes etcd runs on. Empty (default): the
    /// `node-role.kubernetes.io/control-plane` label. A change moves membership to the newly
    /// selected nodes, one member at a time through the quorum gate.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub control_plane_node_selector: BTreeMap<String, String>,
    /// The control-plane pods (kube-apiserver, kube-controller-manager, kube-scheduler) that
    /// must be Ready on every other node before the operator takes a healthy voter down
    /// (removing it, or restarting its node's etcd): the preflight of Cluster API's
    /// control-plane provider. Listed once per pass.
    #[serde(default)]
    pub control_plane_pods: ControlPlanePodSelector,
    /// On a control plane of one or two voters, restarting a voter stops etcd (and the API
    /// served from it) until it is back, so the operator never does it on its own: leaf
    /// renewals, CA rotation phases, etcd upgrades and spec changes wait. This approves it.
    #[serde(default, skip_serializing_if = "LoneVoterRestart::is_unset")]
    pub lone_voter_restart: LoneVoterRestart,
}

fn default_true() -> bool {
    true
}

fn default_quota_gib() -> u32 {
    8
}

fn default_learner_start_deadline() -> u32 {
    300
}

fn default_missing_pod_grace() -> u32 {
    300
}

impl Default for EtcdClusterSpec {
    fn default() -> Self {
        Self {
            management_state: ManagementState::default(),
            log_level: LogLevel::default(),
            etcd_image: None,
            etcd_image_version: String::new(),
            accept_known_bad_etcd_release: String::new(),
            force_redeployment_reason: String::new(),
            timing: Timing::default(),
            backend_quota_gib: default_quota_gib(),
            backend_quota_mib: None,
            defragmentation: Defragmentation::default(),
            corruption_check: CorruptionCheck::default(),
            certificates: Certificates::default(),
            clients: Vec::new(),
            backup: None,
            revision_history: RevisionHistory::default(),
            missing_pod_grace_seconds: default_missing_pod_grace(),
            learner_start_deadline_seconds: default_learner_start_deadline(),
            local_client_listener: true,
            member_remediation: MemberRemediation::default(),
            control_plane_node_selector: BTreeMap::new(),
            control_plane_pods: ControlPlanePodSelector::default(),
            lone_voter_restart: LoneVoterRestart::default(),
        }
    }
}

impl EtcdClusterSpec {
    /// etcd's `--quota-backend-bytes`.
    pub fn quota_bytes(&self) -> u64 {
        match self.backend_quota_mib {
            Some(mib) => u64::from(mib) << 20,
            None => u64::from(self.backend_quota_gib) << 30,
        }
    }

    /// The node selector in effect.
    pub fn node_selector(&self) -> BTreeMap<String, String> {
        if self.control_plane_node_selector.is_empty() {
            BTreeMap::from([(CONTROL_PLANE_LABEL.to_owned(), String::new())])
        } else {
            self.control_plane_node_selector.clone()
        }
    }

    /// The node selector as the label selector of the operator's Node watch.
    pub fn node_label_selector(&self) -> Result<String, SelectorError> {
        selector::label_selector(&self.node_selector())
    }
}

/// Whether the operator acts.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum ManagementState {
    #[default]
    Managed,
    Unmanaged,
}

/// Log verbosity.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum LogLevel {
    #[default]
    Normal,
    Debug,
    Trace,
}

impl LogLevel {
    /// etcd's `--log-level` for this verbosity.
    pub fn etcd_level(self) -> &'static str {
        match self {
            LogLevel::Normal => "info",
            LogLevel::Debug | LogLevel::Trace => "debug",
        }
    }
}

/// Per-field defaults of the spec's small structs: each field defaults on its own, so setting one
/// field keeps the others' defaults (without them the API refused a partial object).
mod defaults {
    pub fn heartbeat_interval_ms() -> u32 {
        100
    }
    pub fn election_timeout_ms() -> u32 {
        1000
    }
    pub fn succeeded_limit() -> u32 {
        5
    }
    pub fn failed_limit() -> u32 {
        5
    }
    pub fn unhealthy_seconds() -> u32 {
        600
    }
    pub fn max_retries() -> u32 {
        3
    }
    pub fn retry_period_seconds() -> u32 {
        600
    }
    pub fn min_healthy_seconds() -> u32 {
        3600
    }
}

/// Raft heartbeat and election timing (milliseconds).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
// `validate_cel` (kube's `cel` feature, a CEL interpreter) is for the unit tests only: the
// operator never evaluates these rules itself, the API server does.
#[cfg_attr(test, x_kube(cel))]
#[x_kube(
    validation = Rule::new("self.electionTimeoutMs >= 5 * self.heartbeatIntervalMs").message("electionTimeoutMs must be at least 5 times heartbeatIntervalMs")
)]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    /// etcd's `--heartbeat-interval` in milliseconds: default 100, 10 to 5000.
    #[x_kube(validation = Rule::new("self >= 10 && self <= 5000").message("heartbeatIntervalMs must be between 10 and 5000"))]
    #[serde(default = "defaults::heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u32,
    /// etcd's `--election-timeout` in milliseconds, at least 5 heartbeats: default 1000, 50 to
    /// 50000. A follower that hears no leader this long starts an election.
    #[x_kube(validation = Rule::new("self >= 50 && self <= 50000").message("electionTimeoutMs must be between 50 and 50000"))]
    #[serde(default = "defaults::election_timeout_ms")]
    pub election_timeout_ms: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: defaults::heartbeat_interval_ms(),
            election_timeout_ms: defaults::election_timeout_ms(),
        }
    }
}

/// How many old revisions to keep (a revision a node is on or moving to is always kept).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionHistory {
    /// Old revisions that rolled out, kept newest first: default 5, 1 to 100.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("succeededLimit must be between 1 and 100"))]
    #[serde(default = "defaults::succeeded_limit")]
    pub succeeded_limit: u32,
    /// Revisions that failed on a node, kept newest first: default 5, 1 to 100.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("failedLimit must be between 1 and 100"))]
    #[serde(default = "defaults::failed_limit")]
    pub failed_limit: u32,
}

impl Default for RevisionHistory {
    fn default() -> Self {
        Self {
            succeeded_limit: defaults::succeeded_limit(),
            failed_limit: defaults::failed_limit(),
        }
    }
}

/// When a member that stays unhealthy on an existing node is replaced (removed, then joined
/// again as a learner through the quorum gate), and how often that is retried per node. Never
/// while its node is cordoned, NotReady or annotated `etcd.static-operator.io/etcd-stopped`
/// (held by the admin; the unhealthy time counts again from when the hold ends), and never while
/// another node's replacement is still in flight (a learner not started or not yet promoted).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberRemediation {
    /// Seconds a started member must stay unhealthy before it is replaced; 0 turns remediation
    /// off (the member is then only reported). Default 600, else 10 to 86400.
    #[x_kube(validation = Rule::new("self == 0 || (self >= 10 && self <= 86400)").message("unhealthySeconds must be 0 or between 10 and 86400"))]
    #[serde(default = "defaults::unhealthy_seconds")]
    pub unhealthy_seconds: u32,
    /// Attempts per node before the operator stops and asks for an admin (Degraded). Default 3,
    /// 1 to 100.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("maxRetries must be between 1 and 100"))]
    #[serde(default = "defaults::max_retries")]
    pub max_retries: u32,
    /// Seconds between two attempts on one node, doubled for each earlier attempt (at most a
    /// day). Default 600, 10 to 86400.
    #[x_kube(validation = Rule::new("self >= 10 && self <= 86400").message("retryPeriodSeconds must be between 10 and 86400"))]
    #[serde(default = "defaults::retry_period_seconds")]
    pub retry_period_seconds: u32,
    /// Seconds: a node's attempt count starts again after its member has been healthy this
    /// long. Default 3600, 60 to 604800.
    #[x_kube(validation = Rule::new("self >= 60 && self <= 604800").message("minHealthySeconds must be between 60 and 604800"))]
    #[serde(default = "defaults::min_healthy_seconds")]
    pub min_healthy_seconds: u32,
}

impl Default for MemberRemediation {
    fn default() -> Self {
        Self {
            unhealthy_seconds: defaults::unhealthy_seconds(),
            max_retries: defaults::max_retries(),
            retry_period_seconds: defaults::retry_period_seconds(),
            min_healthy_seconds: defaults::min_healthy_seconds(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn a_partly_given_struct_keeps_the_other_fields_defaults() {
        let r: MemberRemediation =
            serde_json::from_value(serde_json::json!({"unhealthySeconds": 30})).unwrap();
        assert_eq!(
            r,
            MemberRemediation {
                unhealthy_seconds: 30,
                ..MemberRemediation::default()
            }
        );
        let t: Timing =
            serde_json::from_value(serde_json::json!({"electionTimeoutMs": 2000})).unwrap();
        assert_eq!(t.heartbeat_interval_ms, 100);
        let h: RevisionHistory = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(h, RevisionHistory::default());
        let crd = serde_json::to_value(EtcdCluster::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for field in ["memberRemediation", "timing", "revisionHistory"] {
            assert!(
                spec[field].get("required").is_none(),
                "{field}: {}",
                spec[field]
            );
        }
    }

    #[test]
    fn crd_carries_the_validation_rules() {
        let crd = serde_json::to_string(&EtcdCluster::crd()).unwrap();
        for rule in [
            "self.metadata.name == 'cluster'",
            "self.electionTimeoutMs >= 5 * self.heartbeatIntervalMs",
            "self >= 1 && self <= 32",
            "self >= 30 && self <= 3600",
        ] {
            assert!(crd.contains(rule), "CRD lacks rule {rule}");
        }
        assert_eq!(EtcdCluster::crd().spec.scope, "Cluster");
    }

    #[test]
    fn timing_rules_evaluate() {
        let ok = serde_json::json!({"heartbeatIntervalMs": 100, "electionTimeoutMs": 1000});
        assert!(Timing::validate_cel(&ok, None).is_ok());
        let bad = serde_json::json!({"heartbeatIntervalMs": 500, "electionTimeoutMs": 1000});
        let err = format!("{:?}", Timing::validate_cel(&bad, None).unwrap_err());
        assert!(err.contains("at least 5 times"), "{err}");
    }

    #[test]
    fn defaults_fill_an_empty_spec() {
        let spec: EtcdClusterSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(spec, EtcdClusterSpec::default());
        assert_eq!(spec.backend_quota_gib, 8);
        assert_eq!(
            spec.node_selector(),
            BTreeMap::from([(CONTROL_PLANE_LABEL.to_owned(), String::new())])
        );
    }
}
