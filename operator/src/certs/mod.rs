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

mod plan;

pub use etcd_pki::*;
pub use plan::{
    Action, CertDecision, CertPlan, ClientData, DesiredNodes, Reason, Removal, apply_client_cert,
    apply_plan, client_secret_data, evaluate, plan_client_cert, plan_node_certs,
};

/// The policy `spec.certificates` asks for ([`CertPolicy::new`]).
pub fn policy_for(spec: &crate::api::Certificates) -> CertPolicy {
    CertPolicy::new(spec.leaf_validity_days, spec.renew_at_percent)
}

/// The category of a certificate error, for metrics and the condition reason.
pub fn category_of(e: &CertError) -> crate::category::Category {
    use crate::category::Category;
    match e {
        CertError::Generate(_) => Category::Generate,
        CertError::InvalidCa(_) => Category::InvalidCa,
        CertError::CaExpired { .. } => Category::CaExpired,
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
#[path = "tests_plan.rs"]
mod tests_plan;
