//! The spec and status of the certificates the operator issues: how long a leaf certificate
//! lives and when in its life it is renewed; the status shows the CA's and every leaf's expiry
//! and when each will be renewed.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::reload::{ConsumerStatus, Reload};

mod defaults {
    pub fn leaf_validity_days() -> u32 {
        etcd_pki::DEFAULT_LEAF_VALIDITY_DAYS
    }
    pub fn renew_at_percent() -> u32 {
        etcd_pki::DEFAULT_RENEW_AT_PERCENT
    }
}

/// Leaf certificates (every node's peer, serving and metrics certificates, the operator's
/// client certificate). A renewed certificate reaches a node as a normal revision, rolled one
/// node at a time through the quorum gate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Certificates {
    /// Days a newly issued leaf certificate is valid (capped at the CA's expiry). Default 1095
    /// (three years), 1 to 3650. A change applies to certificates issued from then on.
    #[serde(default = "defaults::leaf_validity_days")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 3650").message("leafValidityDays must be between 1 and 3650"))]
    pub leaf_validity_days: u32,
    /// Percent: a certificate is renewed once this share of its lifetime has passed. Default 67,
    /// 50 to 90. A renewal reaches the nodes as a new revision.
    #[serde(default = "defaults::renew_at_percent")]
    #[x_kube(validation = Rule::new("self >= 50 && self <= 90").message("renewAtPercent must be between 50 and 90"))]
    pub renew_at_percent: u32,
    /// Setting this to a new value rotates the CA (it also rotates by itself once it lived
    /// `renewAtPercent` of its ten years): trust both, re-issue every leaf, drop the old CA, each
    /// phase rolled to every node before the next; `status.certificates.caRotation` shows it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ca_rotation_request: String,
}

impl Default for Certificates {
    fn default() -> Self {
        Self {
            leaf_validity_days: defaults::leaf_validity_days(),
            renew_at_percent: defaults::renew_at_percent(),
            ca_rotation_request: String::new(),
        }
    }
}

/// A consumer of etcd (e.g. the kube-apiserver) for which the operator maintains a client
/// certificate: a Secret (by default `etcd-consumer-<name>` in the operator's namespace) with
/// `tls.crt`, `tls.key` and `ca.crt` (the CA bundle to verify etcd with), issued by the etcd CA,
/// renewed and rotated like every leaf, labelled `etcd.static-operator.io/consumer=<name>`. A
/// consumer removed from the list loses its Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdConsumer {
    /// Names the Secret: a DNS label of at most 40 characters.
    #[schemars(length(max = 40))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("name must be a DNS label (lowercase letters, digits, '-')"))]
    pub name: String,
    /// The certificate's common name: the client's identity in etcd.
    #[schemars(length(min = 1, max = 64))]
    pub common_name: String,
    /// Publish the Secret in this namespace instead of the operator's (where the consumer, or
    /// whatever lays its files down, reads it). The operator needs write access to Secrets
    /// there: bind ClusterRole `etcd-static-operator-consumer-secrets` to its ServiceAccount with
    /// a RoleBinding in that namespace. Never the static-pod namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("namespace must be a DNS label"))]
    pub namespace: Option<String>,
    /// The Secret's name (default `etcd-consumer-<name>`). In the operator's namespace it must
    /// start with `etcd-consumer-`, so it never names one of the operator's own Secrets. An
    /// existing Secret without the consumer label is never overwritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("secretName must be a DNS subdomain"))]
    pub secret_name: Option<String>,
    /// How the consumer picks up a changed Secret: `Files` (default: it re-reads its files on
    /// each connection) or `Restart` with its pods (it reads them only at start, as
    /// kube-apiserver does its etcd CA file). A CA rotation waits for every `Restart` pod to
    /// have started since the Secret changed before each step that needs the new material.
    #[serde(default, skip_serializing_if = "Reload::is_default")]
    #[x_kube(validation = Rule::new("self.mode == 'Restart' ? has(self.pods) : !has(self.pods)").message("reload.pods is required with mode Restart and allowed only with it"))]
    pub reload: Reload,
}

/// The certificates as the signer last read them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificatesStatus {
    /// The etcd CA (Secret `etcd-signer` in the operator's namespace).
    pub ca: CertificateExpiry,
    /// Every leaf certificate, by its Secret key.
    #[serde(default)]
    pub leaves: Vec<CertificateExpiry>,
    /// The earliest `renewAfter` of a leaf (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_renewal: String,
    /// The CA rotation under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_rotation: Option<CaRotationStatus>,
    /// The `caRotationRequest` whose rotation completed last. A rotation the operator started
    /// itself (trigger `expiry` or `scraperRevocation`) leaves it as it was.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub handled_ca_rotation: String,
    /// When it completed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_ca_rotation: String,
    /// The consumer Secrets the operator maintains (`<namespace>/<name>`, sorted): the ones it
    /// deletes when their consumer leaves `spec.clients`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumer_secrets: Vec<String>,
    /// Whether each consumer has picked up its Secret's current material (sorted by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<ConsumerStatus>,
}

/// A CA rotation under way.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaRotationStatus {
    /// The `caRotationRequest` it serves, or `expiry`.
    pub trigger: String,
    /// `TrustBoth`, `ReissueLeaves` or `DropOld`.
    pub phase: String,
    /// RFC 3339.
    pub started_at: String,
    /// When the current phase began (RFC 3339).
    pub phase_started_at: String,
    /// The new CA's expiry.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub new_ca_not_after: String,
    /// What the phase waits for, or what stops it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The consumers (and their pods) the phase waits for to pick up its material, one line
    /// each (`consumer kube-apiserver: pods kube-system/kas-n1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
}

/// One certificate's validity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateExpiry {
    /// The Secret and key holding it (`etcd-all-certs/etcd-peer-n1.crt`).
    pub name: String,
    /// The node it belongs to, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// RFC 3339.
    pub not_after: String,
    /// When the operator renews it (RFC 3339); empty for the CA, which is not renewed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub renew_after: String,
}
