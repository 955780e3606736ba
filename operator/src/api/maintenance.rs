//! The spec and status of etcd's day-2 care: when members are defragmented (thresholds, an
//! explicit request) and what the last defragmentation of each member did; how often the members'
//! data is compared (`HashKV`) and what the last comparison found.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

mod defaults {
    pub fn automatic() -> bool {
        true
    }
    pub fn min_db_size_mib() -> u32 {
        100
    }
    pub fn min_fragmented_percent() -> u32 {
        45
    }
    pub fn timeout_seconds() -> u32 {
        300
    }
    pub fn retry_after_seconds() -> u32 {
        3600
    }
    pub fn check_interval_seconds() -> u32 {
        300
    }
}

/// When the operator defragments members. It always goes one voter at a time, followers first
/// and the leader last (after handing its leadership away), only while every voter is healthy
/// and no membership change or rollout is in flight; under a `NOSPACE` alarm it defragments
/// whatever frees space, thresholds aside, and then disarms the alarm.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Defragmentation {
    /// Defragment by the thresholds below (default); `false`: only on request and under
    /// `NOSPACE`.
    #[serde(default = "defaults::automatic")]
    pub automatic: bool,
    /// A member is defragmented by threshold only when its database file is at least this
    /// large, in MiB (default 100, 1 to 32768) ...
    #[serde(default = "defaults::min_db_size_mib")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 32768").message("minDbSizeMib must be between 1 and 32768"))]
    pub min_db_size_mib: u32,
    /// ... and at least this percentage of the file is free pages (default 45, 1 to 99).
    #[serde(default = "defaults::min_fragmented_percent")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 99").message("minFragmentedPercent must be between 1 and 99"))]
    pub min_fragmented_percent: u32,
    /// A defragmentation not done after this many seconds is reported as timed out (etcd may
    /// still finish it). Default 300, 10 to 3600.
    #[serde(default = "defaults::timeout_seconds")]
    #[x_kube(validation = Rule::new("self >= 10 && self <= 3600").message("timeoutSeconds must be between 10 and 3600"))]
    pub timeout_seconds: u32,
    /// Seconds: after a failed or timed-out defragmentation the member is not tried again for
    /// this long. Default 3600, 60 to 86400.
    #[serde(default = "defaults::retry_after_seconds")]
    #[x_kube(validation = Rule::new("self >= 60 && self <= 86400").message("retryAfterSeconds must be between 60 and 86400"))]
    pub retry_after_seconds: u32,
    /// Setting this to a new value defragments every voter once, thresholds aside (as
    /// `forceRedeploymentReason` does for rollouts); `status.defragmentation.handledRequest`
    /// says when it is done.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request: String,
}

impl Default for Defragmentation {
    fn default() -> Self {
        Self {
            automatic: defaults::automatic(),
            min_db_size_mib: defaults::min_db_size_mib(),
            min_fragmented_percent: defaults::min_fragmented_percent(),
            timeout_seconds: defaults::timeout_seconds(),
            retry_after_seconds: defaults::retry_after_seconds(),
            request: String::new(),
        }
    }
}

/// What the defragmentation controller did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragmentationStatus {
    /// The last `spec.defragmentation.request` every voter was defragmented for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub handled_request: String,
    /// The defragmentation running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<DefragRecord>,
    /// Each member's last defragmentation, by member name.
    #[serde(default)]
    pub members: Vec<DefragRecord>,
    /// The standby learner last renewed under `NOSPACE`, while its node waits to join again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_renewal: Option<StandbyRenewal>,
}

/// A standby learner removed under `NOSPACE` (etcd refuses to defragment a learner). Its node
/// joins again only once the leader's log has moved on past the entries that filled its file:
/// a learner added sooner replays them, fills its new file the same way and raises `NOSPACE`
/// again; one added later receives the leader's defragmented file as a snapshot.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StandbyRenewal {
    /// The node whose standby was removed.
    pub node: String,
    /// The removed member's id, lowercase hex.
    pub member_id: String,
    /// The leader's raft index when it was removed.
    pub raft_index: u64,
    /// When it was removed, RFC 3339.
    pub time: String,
}

/// One defragmentation of one member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragRecord {
    /// The member's name (its node's).
    pub member_name: String,
    /// etcd member id, lowercase hex.
    pub member_id: String,
    /// Why: `Threshold`, `Request` or `NoSpace`.
    pub trigger: String,
    /// The request it served (trigger `Request`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request: String,
    /// RFC 3339.
    pub start_time: String,
    /// RFC 3339; empty while it runs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub end_time: String,
    /// `Succeeded`, `Failed`, `TimedOut` or `Interrupted` (the operator restarted while it
    /// ran); empty while it runs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub result: String,
    /// What etcd answered, or why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The member's store revision when it started.
    #[serde(default)]
    pub revision: i64,
    /// The database file's size in bytes before ...
    pub db_size_before: i64,
    /// ... and after (0 while it runs).
    #[serde(default)]
    pub db_size_after: i64,
    /// How long it took, in milliseconds (0 while it runs).
    #[serde(default)]
    pub duration_ms: u64,
}

/// The operator's own consistency check: every voter's `HashKV` compared at one revision, on a
/// schedule (etcd 3.4 also checks a restarting member against its peers by itself,
/// `--experimental-initial-corrupt-check`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorruptionCheck {
    /// Seconds between two checks; 0 turns the check off. Default 300, else 10 to 86400.
    #[serde(default = "defaults::check_interval_seconds")]
    #[x_kube(validation = Rule::new("self == 0 || (self >= 10 && self <= 86400)").message("intervalSeconds must be 0 or between 10 and 86400"))]
    pub interval_seconds: u32,
    /// Replace a member whose data the majority outvotes: removed through the quorum gate, its
    /// data dir archived on its node, joined again as a learner that copies the majority's data.
    /// Off (default): the member is only reported (`EtcdMembersDegraded`, alert
    /// `EtcdMembersDivergent`).
    #[serde(default)]
    pub replace_minority: bool,
}

impl Default for CorruptionCheck {
    fn default() -> Self {
        Self {
            interval_seconds: defaults::check_interval_seconds(),
            replace_minority: false,
        }
    }
}

/// The last consistency check.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorruptionCheckStatus {
    /// RFC 3339: when the last check ended.
    pub last_check_time: String,
    /// The revision the hashes were compared at.
    #[serde(default)]
    pub revision: i64,
    /// `Consistent`, `Divergent` or `Inconclusive` (not every voter answered in time, or a
    /// compaction was being applied).
    pub result: String,
    /// The voters compared, by name (a voter that was not healthy then is compared as soon as
    /// it is).
    #[serde(default)]
    pub checked_members: Vec<String>,
    /// The members the majority outvoted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub divergent_members: Vec<DivergentMember>,
    /// What the check found, in words (what was inconclusive and why).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A member whose data differs from the majority's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DivergentMember {
    /// The member's name (its node's).
    pub name: String,
    /// etcd member id, lowercase hex.
    pub id: String,
}
