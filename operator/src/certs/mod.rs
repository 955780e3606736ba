//! The etcd CA and the certificates etcd needs: one CA (`etcd-signer`), per-node peer, serving
//! and metrics certificates aggregated in the Secret `etcd-all-certs`, the CA bundles in the
//! ConfigMap `etcd-all-bundles`, and client certificates for the operator itself.
//!
//! Decisions are pure and separate from generation. [`plan_node_certs`] looks at the current
//! Secret, the desired nodes and `now` (time is an input, the clock is never read here) and says,
//! per node and kind, keep / issue / re-issue with a [`Reason`] an admin can read, plus which keys
//! belong to nodes that are gone. [`apply_plan`] then generates only what the plan asks for:
//! untouched entries stay byte-identical, so a pass with nothing to do produces the same Secret
//! and no new static-pod revision. Key generation is random by nature; the plan never re-issues a
//! valid certificate.
//!
//! ```text
//!   Secret etcd-signer (tls.crt, tls.key) ──► EtcdCa ──► bundle_data ──► ConfigMap etcd-all-bundles
//!                                                │
//!   Secret etcd-all-certs, desired nodes, now ───┴──► plan_node_certs ──► CertPlan
//!                                                      (pure)              keep / issue / re-issue
//!                                                                          / remove, with reasons
//!                                                                             │
//!   Secret etcd-all-certs (new data) ◄── apply_plan (keys are made only here) ┘
//! ```
//!
//! **Renewal rule.** A certificate whose lifetime (`notAfter - notBefore`) is `L` is renewed once
//! less than `max(20% of L, 30 days)` is left, with that window capped at `L / 2` so a
//! short-lived certificate is not re-issued on every pass. For the default 3-year leaf that is
//! about 219 days before expiry. Leaf certificates never outlive the CA; when a renewal would not
//! give a later `notAfter` (the CA itself expires first) the certificate is kept and the reason
//! says the CA must be rotated.
//!
//! Invariants: the CA is created once ([`EtcdCa::adopt_or_generate`]) and never regenerated while
//! a valid one exists (an unreadable CA Secret is an error, not a reason to replace it); every
//! map is a `BTreeMap`, so output is deterministic.

mod ca;
mod inspect;
mod node;
mod plan;

use time::OffsetDateTime;

pub use ca::{CA_CERT_KEY, CA_COMMON_NAME, CA_KEY_KEY, CA_SECRET, CaOrigin, EtcdCa, IssuedCert};
pub use inspect::{CaInfo, CertInfo, inspect_certs, inspect_pem, not_after_of_der};
pub use node::{
    ALL_CERTS_SECRET, BUNDLE_KEYS, BUNDLES_CONFIGMAP, CertKind, ClientCertKind, LeafSpec,
    METRICS_CA_BUNDLE_KEY, PEER_CA_BUNDLE_KEY, SERVER_CA_BUNDLE_KEY, Sans, Usage, bundle_data,
    is_dns_name,
};
pub use plan::{
    Action, CertDecision, CertPlan, ClientData, DesiredNodes, Reason, Removal, apply_client_cert,
    apply_plan, client_secret_data, evaluate, plan_client_cert, plan_node_certs,
};

/// Lifetimes and the renewal window. [`CertPolicy::default`] is what the operator uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPolicy {
    /// Lifetime of a newly generated CA.
    pub ca_validity: time::Duration,
    /// Lifetime of a leaf certificate (capped at the CA's `notAfter`).
    pub leaf_validity: time::Duration,
    /// Renew when less than this percentage of the lifetime is left...
    pub renew_percent: u8,
    /// ...or less than this, whichever is larger (capped at half the lifetime).
    pub min_renew_window: time::Duration,
    /// `notBefore` is set this far before `now`, for clock skew between nodes.
    pub backdate: time::Duration,
}

impl Default for CertPolicy {
    /// The policy of the default `spec.certificates`.
    fn default() -> Self {
        Self::from_spec(&crate::api::Certificates::default())
    }
}

impl CertPolicy {
    /// The policy `spec.certificates` asks for: leaves live `leafValidityDays` and are renewed
    /// once `renewAtPercent` of their lifetime has passed (no minimum window: the admin's share
    /// holds for short lifetimes too). The CA lives ten years.
    pub fn from_spec(spec: &crate::api::Certificates) -> Self {
        Self {
            ca_validity: time::Duration::days(10 * 365),
            leaf_validity: time::Duration::days(i64::from(spec.leaf_validity_days)),
            renew_percent: u8::try_from(100u32.saturating_sub(spec.renew_at_percent)).unwrap_or(33),
            min_renew_window: time::Duration::ZERO,
            backdate: time::Duration::minutes(5),
        }
    }

    /// How long before `not_after` a certificate valid from `not_before` is renewed.
    pub fn renew_window(
        &self,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> time::Duration {
        let lifetime = (not_after - not_before).whole_seconds().max(0);
        let by_fraction = lifetime.saturating_mul(i64::from(self.renew_percent)) / 100;
        let window = by_fraction
            .max(self.min_renew_window.whole_seconds())
            .min(lifetime / 2);
        time::Duration::seconds(window)
    }

    /// The instant from which a certificate is due for renewal.
    pub fn renew_after(
        &self,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> OffsetDateTime {
        not_after - self.renew_window(not_before, not_after)
    }
}

/// What went wrong with certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating a certificate or key: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the etcd CA is unusable: {0}")]
    InvalidCa(String),
    #[error(
        "the etcd CA expired at {not_after}: no certificate can be issued; rotate the CA (Secret {secret})",
        secret = CA_SECRET
    )]
    CaExpired { not_after: String },
}

impl CertError {
    /// Its category for metrics and the condition reason.
    pub fn category(&self) -> crate::category::Category {
        use crate::category::Category;
        match self {
            Self::Generate(_) => Category::Generate,
            Self::InvalidCa(_) => Category::InvalidCa,
            Self::CaExpired { .. } => Category::CaExpired,
        }
    }
}

/// An RFC 3339 time as status holds it (`None` when empty or not RFC 3339).
pub fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

/// RFC 3339 in UTC with second precision (`2026-11-21T09:04:27Z`), for reasons and status.
pub fn format_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests;
#[cfg(test)]
#[path = "tests_plan.rs"]
mod tests_plan;
