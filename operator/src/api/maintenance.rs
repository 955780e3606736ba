//! The spec and status of etcd's day-2 care: when members are defragmented (thresholds, an
//! explicit request) and what the last defragmentation of each member did.

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
}

/// When the operator defragments members. It always goes one voter at a time, followers first
/// and the leader last (after handing its leadership away), only while every voter is healthy
/// and no membership change or rollout is in flight; under a `NOSPACE` alarm it defragments
/// whatever frees space, thresholds aside, and then disarms the alarm.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Defragmentation {
    /// Defragment by the thresholds below; `false`: only on request and under `NOSPACE`.
    #[serde(default = "defaults::automatic")]
    pub automatic: bool,
    /// A member is defragmented by threshold only when its database file is at least this
    /// large (MiB) ...
    #[serde(default = "defaults::min_db_size_mib")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 32768").message("minDbSizeMib must be between 1 and 32768"))]
    pub min_db_size_mib: u32,
    /// ... and at least this percentage of the file is free pages.
    #[serde(default = "defaults::min_fragmented_percent")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 99").message("minFragmentedPercent must be between 1 and 99"))]
    pub min_fragmented_percent: u32,
    /// A defragmentation not done after this many seconds is reported as timed out (etcd may
    /// still finish it).
    #[serde(default = "defaults::timeout_seconds")]
    #[x_kube(validation = Rule::new("self >= 10 && self <= 3600").message("timeoutSeconds must be between 10 and 3600"))]
    pub timeout_seconds: u32,
    /// After a failed or timed-out defragmentation the member is not tried again for this long.
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
}

/// One defragmentation of one member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragRecord {
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
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The member's store revision when it started.
    #[serde(default)]
    pub revision: i64,
    /// The database file's size before and after.
    pub db_size_before: i64,
    #[serde(default)]
    pub db_size_after: i64,
    #[serde(default)]
    pub duration_ms: u64,
}
