//! The certificate plan (pure): for each desired node and kind, keep, issue or re-issue, with a
//! reason; which keys of `etcd-all-certs` belong to nodes no longer desired. Then
//! [`apply_plan`], the only step that generates keys, producing the Secret's new data.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use time::OffsetDateTime;

use super::{CertError, CertPolicy, EtcdCa, format_time};
use super::{CertKind, ClientCertKind, LeafSpec, Signers, Usage, is_key_safe};

#[path = "plan_evaluate.rs"]
mod evaluate;
pub use evaluate::evaluate;

/// The desired control-plane nodes: name → IPs.
pub type DesiredNodes = BTreeMap<String, BTreeSet<IpAddr>>;

/// What to do with one certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Leave the Secret's entries byte-identical.
    Keep,
    /// Generate: there is none yet.
    Issue,
    /// Generate a replacement.
    Reissue,
    /// Can't be handled (invalid node name); reported, nothing written.
    Skip,
}

impl Action {
    /// Whether the action generates a certificate.
    pub fn generates(self) -> bool {
        matches!(self, Action::Issue | Action::Reissue)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Keep => "keep",
            Action::Issue => "issue",
            Action::Reissue => "re-issue",
            Action::Skip => "skip",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a certificate is kept, issued or re-issued. `Display` is the admin-readable sentence;
/// [`Reason::category`] a static label for metrics and events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    Valid {
        not_after: OffsetDateTime,
        renew_after: OffsetDateTime,
    },
    /// Due for renewal, but a new certificate would expire no later (it can't outlive the CA).
    RenewalLimitedByCa {
        not_after: OffsetDateTime,
        ca_not_after: OffsetDateTime,
    },
    Missing,
    KeyMissing,
    KeyUnreadable(String),
    KeyMismatch,
    Unreadable(String),
    WrongIssuer,
    UsageChanged {
        have: String,
        want: Usage,
    },
    SubjectChanged {
        have: Option<String>,
        want: String,
    },
    SansChanged {
        missing: Vec<String>,
        unexpected: Vec<String>,
    },
    NotYetValid {
        not_before: OffsetDateTime,
    },
    Expired {
        not_after: OffsetDateTime,
    },
    ExpiresSoon {
        not_after: OffsetDateTime,
        renew_after: OffsetDateTime,
    },
    InvalidNodeName,
}

impl Reason {
    /// The action this reason calls for.
    pub fn action(&self) -> Action {
        match self {
            Reason::Valid { .. } | Reason::RenewalLimitedByCa { .. } => Action::Keep,
            Reason::Missing => Action::Issue,
            Reason::InvalidNodeName => Action::Skip,
            _ => Action::Reissue,
        }
    }

    /// A short static label for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Reason::Valid { .. } => "valid",
            Reason::RenewalLimitedByCa { .. } => "limited-by-ca-expiry",
            Reason::Missing => "missing",
            Reason::KeyMissing => "key-missing",
            Reason::KeyUnreadable(_) => "key-unreadable",
            Reason::KeyMismatch => "key-mismatch",
            Reason::Unreadable(_) => "unreadable",
            Reason::WrongIssuer => "wrong-issuer",
            Reason::UsageChanged { .. } => "usage-changed",
            Reason::SubjectChanged { .. } => "subject-changed",
            Reason::SansChanged { .. } => "sans-changed",
            Reason::NotYetValid { .. } => "not-yet-valid",
            Reason::Expired { .. } => "expired",
            Reason::ExpiresSoon { .. } => "expires-soon",
            Reason::InvalidNodeName => "invalid-node-name",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Valid {
                not_after,
                renew_after,
            } => write!(
                f,
                "valid until {}, renewal due from {}",
                format_time(*not_after),
                format_time(*renew_after)
            ),
            Reason::RenewalLimitedByCa {
                not_after,
                ca_not_after,
            } => write!(
                f,
                "due for renewal (expires {}) but a new certificate can't outlive the CA \
                 (expires {}): rotate the CA",
                format_time(*not_after),
                format_time(*ca_not_after)
            ),
            Reason::Missing => f.write_str("not in the Secret yet"),
            Reason::KeyMissing => f.write_str("the certificate's private key is missing"),
            Reason::KeyUnreadable(e) => write!(f, "the private key can't be read: {e}"),
            Reason::KeyMismatch => f.write_str("the private key doesn't match the certificate"),
            Reason::Unreadable(e) => write!(f, "the certificate can't be read: {e}"),
            Reason::WrongIssuer => f.write_str("not signed by the current etcd CA"),
            Reason::UsageChanged { have, want } => {
                write!(f, "extended key usage is {have}, want {want}")
            }
            Reason::SubjectChanged { have, want } => write!(
                f,
                "common name is {}, want {want}",
                have.as_deref().unwrap_or("(none)")
            ),
            Reason::SansChanged {
                missing,
                unexpected,
            } => {
                f.write_str("SANs changed:")?;
                if !missing.is_empty() {
                    write!(f, " missing {}", missing.join(", "))?;
                }
                if !unexpected.is_empty() {
                    if !missing.is_empty() {
                        f.write_str(";")?;
                    }
                    write!(f, " no longer wanted {}", unexpected.join(", "))?;
                }
                Ok(())
            }
            Reason::NotYetValid { not_before } => write!(
                f,
                "not valid before {} (did the clock move backwards?)",
                format_time(*not_before)
            ),
            Reason::Expired { not_after } => write!(f, "expired at {}", format_time(*not_after)),
            Reason::ExpiresSoon {
                not_after,
                renew_after,
            } => write!(
                f,
                "expires at {}, renewal due since {}",
                format_time(*not_after),
                format_time(*renew_after)
            ),
            Reason::InvalidNodeName => {
                f.write_str("the node name can't be part of a Secret key; skipped")
            }
        }
    }
}

/// The decision for one node's certificate of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertDecision {
    pub node: String,
    pub kind: CertKind,
    /// The node's desired IPs (the SANs a new certificate gets, besides loopback).
    pub ips: BTreeSet<IpAddr>,
    pub reason: Reason,
}

impl CertDecision {
    pub fn action(&self) -> Action {
        self.reason.action()
    }

    /// The certificate's name (`etcd-peer-n1`).
    pub fn name(&self) -> String {
        self.kind.name(&self.node)
    }
}

impl fmt::Display for CertDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.name(), self.action(), self.reason)
    }
}

/// A key of `etcd-all-certs` to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    pub key: String,
    pub reason: String,
}

impl fmt::Display for Removal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: remove: {}", self.key, self.reason)
    }
}

/// Everything to do to `etcd-all-certs`: decisions sorted by node then kind, removals by key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertPlan {
    pub decisions: Vec<CertDecision>,
    pub removals: Vec<Removal>,
}

impl CertPlan {
    /// Nothing to generate or remove: [`apply_plan`] would return the Secret unchanged.
    pub fn is_noop(&self) -> bool {
        self.removals.is_empty() && !self.decisions.iter().any(|d| d.action().generates())
    }

    /// The decisions that generate a certificate.
    pub fn changes(&self) -> impl Iterator<Item = &CertDecision> {
        self.decisions.iter().filter(|d| d.action().generates())
    }

    /// One line per change and removal (for logs, events and `etcd-operator plan`).
    pub fn describe_changes(&self) -> Vec<String> {
        self.changes()
            .map(ToString::to_string)
            .chain(self.removals.iter().map(ToString::to_string))
            .collect()
    }
}

/// Plans `etcd-all-certs` (its `current` data) for the `desired` nodes at `now`.
///
/// Keys that look like node certificates (`etcd-peer-*`, `etcd-serving-*`,
/// `etcd-serving-metrics-*`, `.crt`/`.key`) but belong to no desired node are removed; other keys
/// are left alone.
pub fn plan_node_certs(
    signers: Signers<'_>,
    policy: &CertPolicy,
    current: &BTreeMap<String, Vec<u8>>,
    desired: &DesiredNodes,
    now: OffsetDateTime,
) -> CertPlan {
    let mut plan = CertPlan::default();
    let mut expected = BTreeSet::new();
    for (node, ips) in desired {
        for kind in CertKind::ALL {
            let reason = if is_key_safe(node) {
                let (cert_key, key_key) = (kind.cert_key(node), kind.key_key(node));
                let reason = evaluate(
                    signers.of(kind.role()),
                    policy,
                    &kind.spec(node, ips),
                    current.get(&cert_key).map(Vec::as_slice),
                    current.get(&key_key).map(Vec::as_slice),
                    now,
                );
                expected.insert(cert_key);
                expected.insert(key_key);
                reason
            } else {
                Reason::InvalidNodeName
            };
            plan.decisions.push(CertDecision {
                node: node.clone(),
                kind,
                ips: ips.clone(),
                reason,
            });
        }
    }
    for key in current.keys() {
        let Some((_, node)) = CertKind::parse_key(key) else {
            continue;
        };
        if expected.contains(key) {
            continue;
        }
        let reason = if desired.contains_key(node) {
            "not a certificate or key of a desired node".to_owned()
        } else {
            format!("node {node} is no longer a desired control-plane node")
        };
        plan.removals.push(Removal {
            key: key.clone(),
            reason,
        });
    }
    plan
}

/// The new data of `etcd-all-certs`: `current` minus the removals, plus a fresh certificate and
/// key for every issue / re-issue. Kept entries (and unrelated keys) stay byte-identical.
pub fn apply_plan(
    signers: Signers<'_>,
    policy: &CertPolicy,
    plan: &CertPlan,
    current: &BTreeMap<String, Vec<u8>>,
    now: OffsetDateTime,
) -> Result<BTreeMap<String, Vec<u8>>, CertError> {
    let mut data = current.clone();
    for removal in &plan.removals {
        data.remove(&removal.key);
    }
    for decision in plan.changes() {
        let issued = signers.of(decision.kind.role()).issue(
            &decision.kind.spec(&decision.node, &decision.ips),
            policy,
            now,
        )?;
        data.insert(
            decision.kind.cert_key(&decision.node),
            issued.cert_pem.into_bytes(),
        );
        data.insert(
            decision.kind.key_key(&decision.node),
            issued.key_pem.into_bytes(),
        );
    }
    Ok(data)
}

/// Judges a client certificate Secret (`tls.crt` / `tls.key`; `None` if the Secret is absent).
pub fn plan_client_cert(
    ca: &EtcdCa,
    policy: &CertPolicy,
    spec: &LeafSpec,
    current: Option<&BTreeMap<String, Vec<u8>>>,
    now: OffsetDateTime,
) -> Reason {
    let get = |key: &str| current.and_then(|d| d.get(key)).map(Vec::as_slice);
    evaluate(
        ca,
        policy,
        spec,
        get(ClientCertKind::CERT_KEY),
        get(ClientCertKind::KEY_KEY),
        now,
    )
}

/// A client certificate Secret's data, and why it changed (`None`: it did not).
pub type ClientData = (BTreeMap<String, Vec<u8>>, Option<Reason>);

/// What a client certificate Secret for `spec` should hold: `current` judged
/// ([`plan_client_cert`]) and re-issued when due, with the trusted CAs (`bundle`) as `ca.crt`.
/// Returns it, and why it differs from `current` (`None`: it does not). The operator's client
/// Secrets, the consumers' and `render`'s kube-apiserver material all come from here.
pub fn client_secret_data(
    ca: &EtcdCa,
    bundle: &str,
    policy: &CertPolicy,
    spec: &LeafSpec,
    current: Option<&BTreeMap<String, Vec<u8>>>,
    now: OffsetDateTime,
) -> Result<ClientData, CertError> {
    let reason = plan_client_cert(ca, policy, spec, current, now);
    let mut data = if reason.action() == Action::Keep {
        current.cloned().unwrap_or_default()
    } else {
        apply_client_cert(ca, policy, spec, &reason, current, now)?
    };
    data.insert(
        ClientCertKind::CA_KEY.to_owned(),
        bundle.as_bytes().to_vec(),
    );
    let changed = (current != Some(&data)).then_some(reason);
    Ok((data, changed))
}

/// The client Secret's new data: unchanged when `reason` says keep, else a fresh certificate.
pub fn apply_client_cert(
    ca: &EtcdCa,
    policy: &CertPolicy,
    spec: &LeafSpec,
    reason: &Reason,
    current: Option<&BTreeMap<String, Vec<u8>>>,
    now: OffsetDateTime,
) -> Result<BTreeMap<String, Vec<u8>>, CertError> {
    let mut data = current.cloned().unwrap_or_default();
    if reason.action().generates() {
        let issued = ca.issue(spec, policy, now)?;
        data.insert(
            ClientCertKind::CERT_KEY.to_owned(),
            issued.cert_pem.into_bytes(),
        );
        data.insert(
            ClientCertKind::KEY_KEY.to_owned(),
            issued.key_pem.into_bytes(),
        );
    }
    Ok(data)
}
