//! How a consumer of etcd (`spec.clients[].reload`) picks up a changed client certificate
//! Secret, and what `status.certificates.consumers` says about whether it has.
//!
//! A consumer that re-reads its files on each new connection (`Files`, the default) has the
//! new material once its Secret is written. One that reads them only at start (`Restart`:
//! kube-apiserver reads its etcd CA file only at start) has it only once every pod its
//! selector picks runs with it: the pod carries the Secret's annotation
//! `etcd.static-operator.io/material-digest` with the current digest, or, without it, started
//! since the Secret last changed; a CA rotation waits for that before each step that would cut
//! an unrestarted pod off.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

mod defaults {
    pub fn deadline_seconds() -> u32 {
        600
    }
}

/// How the consumer picks up a new `ca.crt`, certificate or key.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum ReloadMode {
    /// It re-reads its files on each new connection: the Secret written is enough.
    #[default]
    Files,
    /// It reads its files only at start: every pod `pods` selects (mirror pods included) must
    /// run with the Secret's material: annotated `etcd.static-operator.io/material-digest` with
    /// the Secret's own value of it (copied by the platform that lays the pods down), or,
    /// without that annotation, started since the Secret last changed.
    Restart,
}

/// `spec.clients[].reload`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reload {
    /// `Files` (default) or `Restart`.
    #[serde(default)]
    pub mode: ReloadMode,
    /// The consumer's pods (`Restart` only, where it is required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<ConsumerPods>,
    /// A CA rotation that waited this long for the pods to restart is reported: Degraded
    /// (`ConsumerNotReloaded`) and alert `EtcdConsumerReloadPending`. It still waits: the
    /// rotation never goes on without the consumer.
    #[serde(default = "defaults::deadline_seconds")]
    #[x_kube(validation = Rule::new("self >= 5 && self <= 86400").message("deadlineSeconds must be between 5 and 86400"))]
    pub deadline_seconds: u32,
}

impl Default for Reload {
    fn default() -> Self {
        Self {
            mode: ReloadMode::Files,
            pods: None,
            deadline_seconds: defaults::deadline_seconds(),
        }
    }
}

impl Reload {
    /// The default (`Files`, nothing else set): left out when serialised.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The pods of a consumer that restarts to pick up its Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerPods {
    /// Their namespace (default: the namespace of the consumer's Secret). The operator lists
    /// pods there once per pass: bind ClusterRole `etcd-static-operator-consumer-secrets` to its
    /// ServiceAccount with a RoleBinding in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("namespace must be a DNS label"))]
    pub namespace: Option<String>,
    /// Labels every selected pod carries (at least one).
    #[x_kube(validation = Rule::new("self.size() > 0").message("matchLabels must name at least one label"))]
    pub match_labels: BTreeMap<String, String>,
}

/// Whether one consumer has picked up the material of its Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerStatus {
    /// The consumer (`spec.clients[].name`).
    pub name: String,
    /// Its Secret, `<namespace>/<name>`.
    pub secret: String,
    /// How it picks up changes.
    pub reload: ReloadMode,
    /// When the operator wrote the Secret's current material (RFC 3339, the whole second at or
    /// after the write: a pod started within that second is not taken to have its files).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub material_written_time: String,
    /// A digest of the Secret's data (also its annotation
    /// `etcd.static-operator.io/material-digest`): material that differs from it was written
    /// since, and a pod carrying it in the same annotation has this material.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub material_digest: String,
    /// The consumer has picked up the current material.
    pub current: bool,
    /// Every pod the selector picks (`<namespace>/<name>`, sorted; `Restart` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// Those that do not have the material (not running, another digest, or not started since
    /// the write); `message` says which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// It has not picked up its Secret's material for longer than `reload.deadlineSeconds`
    /// (a CA rotation waits for it meanwhile; after a renewal its pods still present the
    /// certificate of before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overdue: bool,
    /// What it waits for, or why the operator cannot tell.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
