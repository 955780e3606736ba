//! CA rotation: replacing the etcd CA without a moment where two members, or a member and a
//! client, do not trust each other. Part of the certificate signer (it decides which CA signs
//! and which CAs are trusted in this pass).
//!
//! Inputs: `spec.certificates.caRotationRequest`, the rotation in status, the CA (`etcd-signer`)
//! and the next CA (`etcd-signer-next`), the latest revision, every node's current revision and
//! that revision's bundles and certificates. Decision ([`decide`], pure), in phases that each
//! complete on every node (the latest revision carries the phase's material and every node runs
//! it) before the next starts:
//!
//! | phase | signs | trusted | done when the revision every node runs |
//! |---|---|---|---|
//! | `TrustBoth` | old CA | old + new | carries the two-CA bundle |
//! | `ReissueLeaves` | new CA | old + new | carries only leaves of the new CA (and the bundle) |
//! | `DropOld` | new CA (now `etcd-signer`) | new | carries the new CA alone |
//!
//! Every phase, and the end of `DropOld`, also waits until every consumer has picked up the
//! phase's material: its Secret written (a consumer whose namespace the operator may not write
//! keeps the rotation from dropping the CA its certificate is still issued by) and, for a
//! `reload: Restart` consumer, every selected pod started since that write
//! ([`super::consumers::reload`]). Otherwise `ReissueLeaves` would make etcd serve
//! certificates of a CA an unrestarted kube-apiserver does not trust (it reads its etcd CA
//! file only at start), and `DropOld` would refuse a client certificate it still presents.
//! Status (`caRotation.waitingFor`), the plan and Event `CaRotationWaitingForConsumers` name
//! the consumers and pods; a wait past a consumer's deadline is reported by
//! [`super::consumers::report`], and the rotation keeps waiting.
//!
//! A rotation starts on a new `caRotationRequest`, by itself once the CA has lived
//! `renewAtPercent` of its lifetime, or once the CA is found to have signed a scraper's
//! certificate (trigger `scraperRevocation`, [`super::scrapers`]: the old CA is then trusted
//! nowhere, so that certificate stops working). The next CA is generated once and kept in its own Secret;
//! entering `DropOld` makes it `etcd-signer` (the old one is then trusted nowhere), and the next
//! CA's Secret is deleted when the rotation ends. Every step can be repeated: a status that lags
//! (its writes are not awaited) only makes a pass redo what the last one did. Client
//! certificates (the operator's, `etcd-metric-client`, every consumer's) follow the same phases
//! and carry the trusted bundle as `ca.crt`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::{CaRotationStatus, CertificatesStatus};
use crate::certs::{self, CertPolicy, EtcdCa, format_time};
use crate::controller::{ControllerError, ControllerName};
use crate::observed::find;
use crate::pass::Pass;
use crate::podspec::STATIC_POD_NAMESPACE as NS;
use crate::podspec::paths::{ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET};
use crate::retry::ErrorKind;

mod run;
pub use run::{handled_after, run};

const NAME: ControllerName = ControllerName::CertSigner;
/// The next CA during a rotation (operator namespace).
pub const NEXT_SECRET: &str = "etcd-signer-next";

/// The rotation's phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    TrustBoth,
    ReissueLeaves,
    DropOld,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::TrustBoth => "TrustBoth",
            Phase::ReissueLeaves => "ReissueLeaves",
            Phase::DropOld => "DropOld",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Phase::TrustBoth, Phase::ReissueLeaves, Phase::DropOld]
            .into_iter()
            .find(|p| p.as_str() == s)
    }
}

/// The rollout as the last pass left it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutView {
    /// Every node runs the latest revision, and nothing newer is pending.
    pub settled: bool,
    /// The latest revision's bundle trusts the old CA.
    pub bundle_has_old: bool,
    /// ... and the new one.
    pub bundle_has_new: bool,
    /// Every leaf of the latest revision was issued by the new CA.
    pub leaves_new: bool,
    /// Every consumer Secret was written in the last pass (so it carries the phase's bundle and,
    /// from `ReissueLeaves` on, a certificate of the new CA) and every consumer has picked it
    /// up (a `Restart` consumer's pods started since).
    pub consumers_current: bool,
}

/// What the CAs look like now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cas {
    /// `etcd-signer-next` exists.
    pub next_exists: bool,
    /// `etcd-signer` already holds the next CA (the swap of `DropOld` happened).
    pub swapped: bool,
    /// The CA has lived past its renewal point.
    pub ca_due: bool,
    /// The CA signed a scraper's certificate ([`super::scrapers`]).
    pub scrapers_signed: bool,
}

/// What this pass does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No rotation.
    Idle,
    /// Start one (generate the next CA, enter `TrustBoth`), for this trigger.
    Start { trigger: String },
    /// Run `phase` (entering it if it is not the current one).
    Run { phase: Phase, trigger: String },
    /// The last phase is done everywhere: delete the next CA's Secret, record the end.
    Finish { trigger: String },
    /// The next CA's Secret vanished after leaves were signed with it: nothing is changed (a
    /// new CA would not be trusted by members holding those leaves); an admin restores it.
    Broken { reason: String },
}

/// Decides the step (see the module docs).
pub fn decide(
    request: &str,
    handled: &str,
    current: Option<&CaRotationStatus>,
    cas: Cas,
    rollout: &RolloutView,
) -> Step {
    let Some(current) = current else {
        if !request.is_empty() && request != handled {
            return Step::Start {
                trigger: request.to_owned(),
            };
        }
        if cas.scrapers_signed {
            return Step::Start {
                trigger: super::scrapers::TRIGGER.to_owned(),
            };
        }
        if cas.ca_due {
            return Step::Start {
                trigger: "expiry".to_owned(),
            };
        }
        return Step::Idle;
    };
    let trigger = current.trigger.clone();
    // The swap is the one step status may not have recorded yet.
    let phase = if cas.swapped {
        Phase::DropOld
    } else {
        Phase::parse(&current.phase).unwrap_or(Phase::TrustBoth)
    };
    match (cas.next_exists, phase) {
        // Nothing was signed with it yet: start over with a new one.
        (false, Phase::TrustBoth) => return Step::Start { trigger },
        (false, Phase::ReissueLeaves) => {
            return Step::Broken {
                reason: "Secret etcd-signer-next vanished while leaves are re-issued from it: restore it from a backup of the operator namespace; nothing is changed meanwhile".into(),
            };
        }
        _ => {}
    }
    let done = rolled_out(phase, rollout) && rollout.consumers_current;
    match (phase, done) {
        (p, false) => Step::Run { phase: p, trigger },
        (Phase::TrustBoth, true) => Step::Run {
            phase: Phase::ReissueLeaves,
            trigger,
        },
        (Phase::ReissueLeaves, true) => Step::Run {
            phase: Phase::DropOld,
            trigger,
        },
        (Phase::DropOld, true) => Step::Finish { trigger },
    }
}

/// Every node runs the latest revision and it carries `phase`'s material (consumers aside).
pub fn rolled_out(phase: Phase, rollout: &RolloutView) -> bool {
    rollout.settled
        && match phase {
            Phase::TrustBoth => rollout.bundle_has_old && rollout.bundle_has_new,
            Phase::ReissueLeaves => {
                rollout.bundle_has_old && rollout.bundle_has_new && rollout.leaves_new
            }
            Phase::DropOld => !rollout.bundle_has_old && rollout.bundle_has_new,
        }
}

/// Which CA signs this pass and which CAs are trusted, and the rotation's status fields.
#[derive(Debug)]
pub struct Trust {
    pub signing: Arc<EtcdCa>,
    /// In a stable order: old, new.
    pub trusted: Vec<Arc<EtcdCa>>,
    pub rotation: Option<CaRotationStatus>,
    pub handled: String,
    pub last: String,
}

impl Trust {
    /// The trusted CAs as one PEM bundle.
    pub fn bundle_pem(&self) -> String {
        self.trusted
            .iter()
            .map(|c| {
                let pem = c.cert_pem();
                if pem.ends_with('\n') {
                    pem.to_owned()
                } else {
                    format!("{pem}\n")
                }
            })
            .collect()
    }

    /// The bundle ConfigMap's data: the trusted etcd CAs in the server and peer bundles, the
    /// metrics CA (which no etcd CA rotation touches) in the metrics bundle.
    pub fn bundles(&self, metrics: &EtcdCa) -> BTreeMap<String, String> {
        let pem = self.bundle_pem();
        let signers = certs::Signers {
            etcd: &self.signing,
            metrics,
        };
        certs::bundle_data(signers)
            .into_iter()
            .map(|(k, v)| {
                let v = if k == certs::METRICS_CA_BUNDLE_KEY {
                    v
                } else {
                    pem.clone()
                };
                (k, v)
            })
            .collect()
    }
}

/// The certificates of a PEM bundle, trimmed.
fn pem_blocks(bundle: &str) -> Vec<String> {
    bundle
        .split_inclusive("-----END CERTIFICATE-----")
        .map(|b| b.trim().to_owned())
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .collect()
}

#[cfg(test)]
#[path = "ca_rotation_tests.rs"]
mod tests;
