//! # etcd-pki
//!
//! The etcd CA and the certificates a node's etcd serves and presents, as the operator issues
//! them and `etcd-recover` re-issues them for a node's new address: the CA ([`EtcdCa`], Secret
//! `etcd-signer`), what each per-node and client certificate must contain ([`CertKind`],
//! [`LeafSpec`], [`Sans`]), reading certificates back ([`inspect_certs`]), and the lifetimes and
//! renewal window ([`CertPolicy`]). Deciding *when* to issue is the operator's (its `certs`
//! module); this crate only makes and reads certificates.

mod ca;
mod inspect;
mod node;

use time::OffsetDateTime;

pub use ca::{
    CA_CERT_KEY, CA_COMMON_NAME, CA_KEY_KEY, CA_SECRET, CaOrigin, CaRole, EtcdCa, IssuedCert,
    METRICS_CA_SECRET,
};
pub use inspect::{
    CaInfo, CertInfo, ParsedCert, inspect_certs, inspect_pem, not_after_of_der, parse_cert_der,
    parse_cert_pem,
};
pub use node::{
    ALL_CERTS_SECRET, BUNDLE_KEYS, BUNDLES_CONFIGMAP, CertKind, ClientCertKind, LeafSpec,
    METRICS_CA_BUNDLE_KEY, PEER_CA_BUNDLE_KEY, SERVER_CA_BUNDLE_KEY, Sans, Signers, Usage,
    bundle_data, is_dns_name, is_key_safe, pem_line,
};

/// A leaf certificate's default lifetime, in days (`spec.certificates.leafValidityDays`).
pub const DEFAULT_LEAF_VALIDITY_DAYS: u32 = 3 * 365;
/// The default share of a leaf's lifetime after which it is renewed
/// (`spec.certificates.renewAtPercent`).
pub const DEFAULT_RENEW_AT_PERCENT: u32 = 67;

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
        Self::new(DEFAULT_LEAF_VALIDITY_DAYS, DEFAULT_RENEW_AT_PERCENT)
    }
}

impl CertPolicy {
    /// Leaves live `leaf_validity_days` and are renewed once `renew_at_percent` of their
    /// lifetime has passed (no minimum window: the admin's share holds for short lifetimes too).
    /// The CA lives ten years.
    pub fn new(leaf_validity_days: u32, renew_at_percent: u32) -> Self {
        Self {
            ca_validity: time::Duration::days(10 * 365),
            leaf_validity: time::Duration::days(i64::from(leaf_validity_days)),
            renew_percent: u8::try_from(100u32.saturating_sub(renew_at_percent)).unwrap_or(33),
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
