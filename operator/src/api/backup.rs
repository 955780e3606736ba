//! The spec and status of scheduled backups: when a snapshot is taken, where it goes (a
//! directory on the control-plane node the operator runs on, or an S3-compatible bucket), how
//! many are kept, and whether each is proven restorable; the status says what the last backup,
//! the last failure and the last verification were.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

mod defaults {
    pub fn schedule() -> String {
        "0 * * * *".into()
    }
    pub fn count() -> u32 {
        24
    }
    pub fn verify() -> bool {
        true
    }
    pub fn timeout_seconds() -> u32 {
        900
    }
    pub fn region() -> String {
        "us-east-1".into()
    }
}

/// Scheduled etcd backups. A snapshot is streamed from a healthy follower (the leader only in
/// a one-member cluster), checked, stored with its record and the static-pod resources of the
/// revision it was taken under, and (with `verify`) restored into a throwaway etcd that must
/// answer a key written just before the snapshot. Unset: no backups.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    /// When backups are taken: a cron schedule in UTC, five fields (minute hour day-of-month
    /// month day-of-week) or, as a CronJob takes them, `@hourly`, `@daily` (`@midnight`),
    /// `@weekly`, `@monthly`, `@yearly` (`@annually`). Default `0 * * * *` (hourly). A change
    /// applies from the next scheduled time; the `EtcdBackupTooOld` alert allows twice the
    /// schedule's longest gap.
    #[serde(default = "defaults::schedule")]
    #[x_kube(validation = Rule::new("self.size() > 0").message("schedule must not be empty"))]
    pub schedule: String,
    /// Which backups are kept (default: the newest 24, no age limit). Applied after every
    /// attempt.
    #[serde(default)]
    pub retention: BackupRetention,
    /// Where backups go. Unset: the directory the operator's `--backup-dir` names (a hostPath
    /// on the control-plane node it runs on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Destination>,
    /// Restore every backup into a throwaway etcd and read a known key back from it before it
    /// counts as good. Default true.
    #[serde(default = "defaults::verify")]
    pub verify: bool,
    /// Seconds: a backup (with its verification) not done after this long has failed (reason
    /// `Timeout`). Default 900, 30 to 86400.
    #[serde(default = "defaults::timeout_seconds")]
    #[x_kube(validation = Rule::new("self >= 30 && self <= 86400").message("timeoutSeconds must be between 30 and 86400"))]
    pub timeout_seconds: u32,
    /// Setting this to a new value takes a backup at once, schedule aside;
    /// `status.backup.handledRequest` says when it is done.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request: String,
}

impl Default for Backup {
    fn default() -> Self {
        Self {
            schedule: defaults::schedule(),
            retention: BackupRetention::default(),
            s3: None,
            verify: defaults::verify(),
            timeout_seconds: defaults::timeout_seconds(),
            request: String::new(),
        }
    }
}

/// Which backups are kept: the newest `count`, less those older than `maxAgeHours`. The
/// newest good backup (whole, recorded and, with `verify`, verified) is never deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRetention {
    /// How many backups to keep, newest first. Default 24, 1 to 1000.
    #[serde(default = "defaults::count")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 1000").message("count must be between 1 and 1000"))]
    pub count: u32,
    /// Hours: backups older than this are deleted. Default 0: no age limit.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 87600").message("maxAgeHours must be between 0 and 87600"))]
    pub max_age_hours: u32,
}

impl Default for BackupRetention {
    fn default() -> Self {
        Self {
            count: defaults::count(),
            max_age_hours: 0,
        }
    }
}

/// An S3-compatible bucket.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Destination {
    /// `https://host[:port]` (`http://` only for a server on the same host).
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('http://')").message("endpoint must start with https:// or http://"))]
    pub endpoint: String,
    /// The bucket's name (it must exist; the operator does not create it).
    #[x_kube(validation = Rule::new("self.size() >= 3 && self.size() <= 63").message("bucket must be 3 to 63 characters"))]
    pub bucket: String,
    /// Objects go below this prefix. Default empty: the bucket's top.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// The region requests are signed for. Default `us-east-1`.
    #[serde(default = "defaults::region")]
    pub region: String,
    /// A Secret in the operator's namespace with the keys `accessKeyId` and `secretAccessKey`.
    pub credentials_secret: String,
}

/// What the backup controller did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// The last good backup: taken, stored and (with `verify`) verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<BackupRecord>,
    /// The last failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<BackupFailure>,
    /// The last backup a restore proved readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified: Option<BackupVerification>,
    /// When the last attempt started (RFC 3339): the schedule counts from it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_attempt_time: String,
    /// Failed attempts since the last good backup.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// The last `spec.backup.request` a backup was taken for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub handled_request: String,
    /// The backup being taken now.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub in_progress: String,
    /// The names of the backups the destination holds, oldest first.
    #[serde(default)]
    pub stored: Vec<String>,
    /// Disruptive operations waiting for a backup taken for them, one per operation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_operation: Vec<PreOperationNeed>,
}

/// An operation (`EtcdUpgrade`, `CaRotation`, `PlannedShrink`, `Defrag`) that waits for a good
/// backup taken at or after `since`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreOperationNeed {
    /// `EtcdUpgrade`, `CaRotation`, `PlannedShrink` or `Defrag`.
    pub operation: String,
    /// RFC 3339: when the operation became due.
    pub since: String,
}

/// One good backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRecord {
    /// The backup's name, as `stored` lists it.
    pub name: String,
    /// Where it is: `directory …` or `s3://bucket/prefix at endpoint`.
    pub destination: String,
    /// RFC 3339.
    pub taken_at: String,
    /// The etcd revision the snapshot holds.
    pub revision: i64,
    /// The snapshot's size in bytes.
    pub size_bytes: u64,
    /// Milliseconds from the start of streaming to stored (and verified).
    pub duration_ms: u64,
    /// SHA-256 of the snapshot file, lowercase hex.
    pub sha256: String,
    /// `<id hex>=<name>` of the member it was streamed from.
    pub source_member: String,
}

/// One failed attempt.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupFailure {
    /// The name the attempt's backup would have had.
    pub name: String,
    /// RFC 3339.
    pub time: String,
    /// A category: `Credentials`, `Destination`, `Snapshot`, `NoSource`, `Verification`,
    /// `Timeout`, `Interrupted`.
    pub reason: String,
    /// What failed, in words.
    pub message: String,
}

/// A verification by restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupVerification {
    /// The backup that was restored.
    pub name: String,
    /// RFC 3339.
    pub time: String,
    /// What the restore read back.
    pub message: String,
}
