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
//! A rotation starts on a new `caRotationRequest`, or by itself once the CA has lived
//! `renewAtPercent` of its lifetime. The next CA is generated once and kept in its own Secret;
//! entering `DropOld` makes it `etcd-signer` (the old one is then trusted nowhere), and the next
//! CA's Secret is deleted when the rotation ends. Every step can be repeated: a status that lags
//! (its writes are not awaited) only makes a pass redo what the last one did. Client
//! certificates (the operator's, `etcd-metric-client`, every consumer's) follow the same phases
//! and carry the trusted bundle as `ca.crt`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;

use super::{ControllerError, ControllerName};
use crate::api::{CaRotationStatus, CertificatesStatus};
use crate::certs::{self, CertPolicy, EtcdCa, format_time};
use crate::observed::find;
use crate::pass::Pass;
use crate::podspec::STATIC_POD_NAMESPACE as NS;
use crate::podspec::paths::{ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET};
use crate::retry::ErrorKind;

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

    /// The bundle ConfigMap's data.
    pub fn bundles(&self) -> BTreeMap<String, String> {
        let pem = self.bundle_pem();
        certs::bundle_data(&self.signing)
            .into_keys()
            .map(|k| (k, pem.clone()))
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

fn failed(message: String) -> ControllerError {
    ControllerError::new(NAME, ErrorKind::Permanent, "ca-rotation", message)
}

/// What the last pass's rollout shows about `old` and `next` (see [`RolloutView`]); `waiting`
/// names the consumers that have not picked up their Secret's material.
fn rollout_view(
    p: &Pass<'_>,
    old: &EtcdCa,
    next: Option<&EtcdCa>,
    swapped: bool,
    waiting: &[String],
) -> RolloutView {
    let latest = p.latest;
    let settled = latest > 0
        && !p.node_statuses.is_empty()
        && p.node_statuses.iter().all(|n| n.current_revision == latest);
    let bundle = find(
        &p.inputs.configmaps,
        NS,
        &format!("{ALL_BUNDLES_CONFIGMAP}-{latest}"),
    )
    .and_then(|c| c.data.as_ref())
    .and_then(|d| d.get(certs::SERVER_CA_BUNDLE_KEY))
    .map(|b| pem_blocks(b))
    .unwrap_or_default();
    let next_pem = next.map(|n| n.cert_pem().trim().to_owned());
    let has_new = next_pem.as_ref().is_some_and(|n| bundle.contains(n));
    let has_old = if swapped {
        bundle.iter().any(|b| Some(b) != next_pem.as_ref())
    } else {
        bundle.contains(&old.cert_pem().trim().to_owned())
    };
    let leaves_new = next.is_some_and(|n| {
        find(
            &p.inputs.secrets,
            NS,
            &format!("{ALL_CERTS_SECRET}-{latest}"),
        )
        .map(super::cert_signer::secret_bytes)
        .is_some_and(|data| {
            let infos = certs::inspect_certs(n, &data);
            !infos.is_empty() && infos.iter().all(|i| i.issued_by_ca)
        })
    });
    RolloutView {
        settled,
        bundle_has_old: has_old,
        bundle_has_new: has_new,
        leaves_new,
        consumers_current: !p.st.consumers_behind && waiting.is_empty(),
    }
}

/// Decides and carries out this pass's rotation step; `ca` is `etcd-signer` as adopted;
/// `waiting` names each consumer that has not picked up its Secret's material, one line each.
pub async fn run(
    p: &mut Pass<'_>,
    ca: EtcdCa,
    policy: &CertPolicy,
    waiting: &[String],
) -> Result<Trust, ControllerError> {
    let op_ns = p.ctx.config.operator_namespace.clone();
    let now = p.o.now;
    let next_secret = find(&p.inputs.operator_secrets, &op_ns, NEXT_SECRET);
    let next = next_secret
        .map(super::cert_signer::secret_bytes)
        .map(|d| EtcdCa::from_secret_data(&d))
        .transpose()
        .map_err(|e| failed(format!("Secret {op_ns}/{NEXT_SECRET}: {e}")))?
        .map(Arc::new);
    let ca = Arc::new(ca);
    let swapped = next.as_ref().is_some_and(|n| n.cert_pem() == ca.cert_pem());
    let previous: CertificatesStatus = p.certificates.clone().unwrap_or_default();
    let cas = Cas {
        next_exists: next.is_some(),
        swapped,
        ca_due: now >= policy.renew_after(ca.not_before(), ca.not_after()),
    };
    let view = rollout_view(p, &ca, next.as_deref(), swapped, waiting);
    let step = decide(
        &p.o.spec.certificates.ca_rotation_request,
        &previous.handled_ca_rotation,
        previous.ca_rotation.as_ref(),
        cas,
        &view,
    );
    let mut trust = Trust {
        signing: Arc::clone(&ca),
        trusted: vec![Arc::clone(&ca)],
        rotation: None,
        handled: previous.handled_ca_rotation.clone(),
        last: previous.last_ca_rotation.clone(),
    };
    let entering = |phase: Phase, trigger: &str, new: &EtcdCa| {
        let same = previous
            .ca_rotation
            .as_ref()
            .filter(|r| r.phase == phase.as_str() && r.trigger == trigger);
        CaRotationStatus {
            trigger: trigger.to_owned(),
            phase: phase.as_str().to_owned(),
            started_at: previous
                .ca_rotation
                .as_ref()
                .map_or_else(|| format_time(now), |r| r.started_at.clone()),
            phase_started_at: same.map_or_else(|| format_time(now), |r| r.phase_started_at.clone()),
            new_ca_not_after: format_time(new.not_after()),
            message: match phase {
                Phase::TrustBoth => {
                    "waiting for every node to run the bundle that trusts both CAs".into()
                }
                Phase::ReissueLeaves => "waiting for every node to run leaves of the new CA".into(),
                Phase::DropOld => {
                    "waiting for every node to run the bundle of the new CA alone".into()
                }
            },
            waiting_for: Vec::new(),
        }
    };
    match step {
        Step::Idle => super::backup::preop::done(p, super::backup::preop::Operation::CaRotation),
        Step::Broken { reason } => return Err(failed(reason)),
        Step::Start { trigger } => {
            use super::backup::preop::{Operation, gate};
            if !gate(
                p,
                NAME,
                Operation::CaRotation,
                previous.ca_rotation.is_some(),
            )
            .await
            {
                return Ok(trust);
            }
            let new = match next {
                Some(n) => n,
                None => {
                    let n = EtcdCa::generate_with(policy, now)
                        .map_err(|e| failed(format!("generating the next CA: {e}")))?;
                    let n = Arc::new(n);
                    if p.o.managed {
                        p.w.secret(
                            &op_ns,
                            NEXT_SECRET,
                            None,
                            &n.to_secret_data(),
                            None,
                            crate::writer::NO_LABELS,
                        )
                        .await
                        .map_err(|e| ControllerError::write(NAME, &e))?;
                    }
                    n
                }
            };
            p.next(
                NAME,
                format!("CA rotation ({trigger}): trust both CAs on every node"),
            );
            p.event(
                false,
                "CaRotationStarted",
                format!(
                    "CA rotation ({trigger}) started: phase TrustBoth, the new CA expires {}",
                    format_time(new.not_after())
                ),
            )
            .await;
            trust.trusted = vec![Arc::clone(&ca), Arc::clone(&new)];
            trust.rotation = Some(entering(Phase::TrustBoth, &trigger, &new));
        }
        Step::Run { phase, trigger } => {
            let Some(new) = next else {
                return Err(failed(format!("Secret {op_ns}/{NEXT_SECRET} is missing")));
            };
            let mut status = entering(phase, &trigger, &new);
            let rolled = rolled_out(phase, &view);
            let before = previous.ca_rotation.as_ref();
            waits_for_consumers(p, &mut status, before, waiting, rolled).await;
            if previous
                .ca_rotation
                .as_ref()
                .is_none_or(|r| r.phase != status.phase)
            {
                p.event(
                    false,
                    "CaRotationPhase",
                    format!("CA rotation ({trigger}): phase {}", phase.as_str()),
                )
                .await;
            }
            p.next(
                NAME,
                format!(
                    "CA rotation ({trigger}), phase {}: {}",
                    phase.as_str(),
                    status.message
                ),
            );
            match phase {
                Phase::TrustBoth => trust.trusted = vec![Arc::clone(&ca), Arc::clone(&new)],
                Phase::ReissueLeaves => {
                    trust.signing = Arc::clone(&new);
                    trust.trusted = vec![Arc::clone(&ca), Arc::clone(&new)];
                }
                Phase::DropOld => {
                    if !swapped && p.o.managed {
                        let current = find(&p.inputs.operator_secrets, &op_ns, certs::CA_SECRET);
                        p.w.secret(
                            &op_ns,
                            certs::CA_SECRET,
                            current,
                            &new.to_secret_data(),
                            None,
                            crate::writer::NO_LABELS,
                        )
                        .await
                        .map_err(|e| ControllerError::write(NAME, &e))?;
                    }
                    trust.signing = Arc::clone(&new);
                    trust.trusted = vec![Arc::clone(&new)];
                }
            }
            trust.rotation = Some(status);
        }
        Step::Finish { trigger } => {
            if p.o.managed {
                p.w.delete::<Secret>(&op_ns, NEXT_SECRET)
                    .await
                    .map_err(|e| ControllerError::write(NAME, &e))?;
            }
            p.event(false, "CaRotationCompleted", format!("CA rotation ({trigger}) completed: every node trusts and runs leaves of the new CA alone")).await;
            trust.handled = trigger;
            trust.last = format_time(now);
        }
    }
    Ok(trust)
}

/// A phase whose consumers have not picked up its material says so (`rolled`: only they are
/// waited for): in the status message and
/// `waitingFor` (so the plan names them), and in Event `CaRotationWaitingForConsumers` whenever
/// the list changes.
async fn waits_for_consumers(
    p: &mut Pass<'_>,
    status: &mut CaRotationStatus,
    previous: Option<&CaRotationStatus>,
    waiting: &[String],
    rolled: bool,
) {
    if waiting.is_empty() {
        return;
    }
    if rolled {
        status.message = "every node runs the phase's material".to_owned();
    }
    status.message = format!(
        "{}; waiting for {} consumer(s) to pick up the phase's material: {}",
        status.message,
        waiting.len(),
        waiting.join("; ")
    );
    status.waiting_for = waiting.to_vec();
    if previous.is_none_or(|r| r.phase != status.phase || r.waiting_for != status.waiting_for) {
        let note = format!(
            "CA rotation ({}), phase {}: waiting for {}",
            status.trigger,
            status.phase,
            waiting.join("; ")
        );
        p.event(false, "CaRotationWaitingForConsumers", note).await;
    }
}

#[cfg(test)]
#[path = "ca_rotation_tests.rs"]
mod tests;
