//! The I/O half of the CA rotation: reads the CAs and the last rollout, carries out the step
//! [`super::decide`] returns (the next CA generated and kept, the swap into `etcd-signer`, the
//! next CA's Secret deleted at the end), and says what the rotation waits for.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;

use super::*;
use crate::category::Category;
use crate::events::EventReason;
use crate::writer::NO_MARKS;
use time::OffsetDateTime;
fn failed(message: String) -> ControllerError {
    ControllerError::new(NAME, ErrorKind::Permanent, Category::CaRotation, message)
}

/// What the last pass's rollout shows about `old` and `next` (see [`RolloutView`]); `waiting`
/// names the consumers that have not picked up their Secret's material; `behind`: a consumer
/// Secret could not be written in the last pass.
fn rollout_view(
    p: &Pass<'_>,
    old: &EtcdCa,
    next: Option<&EtcdCa>,
    swapped: bool,
    (waiting, behind): (&[String], bool),
) -> RolloutView {
    let latest = p.status.latest;
    let settled = latest > 0
        && !p.status.node_statuses.is_empty()
        && p.status.node_statuses.iter().all(|n| n.runs(latest));
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
        .map(crate::controllers::cert_signer::secret_bytes)
        .is_some_and(|data| {
            // The metrics CA signs the metrics leaves: an etcd CA rotation leaves them be.
            let signers = certs::Signers {
                etcd: n,
                metrics: n,
            };
            let infos: Vec<_> = certs::inspect_certs(signers, &data)
                .into_iter()
                .filter(|i| i.kind.is_none_or(|k| k.role() == certs::CaRole::Etcd))
                .collect();
            !infos.is_empty() && infos.iter().all(|i| i.issued_by_ca)
        })
    });
    RolloutView {
        settled,
        bundle_has_old: has_old,
        bundle_has_new: has_new,
        leaves_new,
        consumers_current: !behind && waiting.is_empty(),
    }
}

/// Decides and carries out this pass's rotation step; `ca` is `etcd-signer` as adopted;
/// `waiting` names each consumer that has not picked up its Secret's material, one line each;
/// `behind`: a consumer Secret could not be written in the last pass (the cert signer's own
/// state), so the rotation holds its phase; `scrapers_signed`: `ca` signed a scraper's
/// certificate ([`super::super::scrapers::due`]).
pub async fn run(
    p: &mut Pass<'_>,
    ca: EtcdCa,
    policy: &CertPolicy,
    (waiting, behind): (&[String], bool),
    scrapers_signed: bool,
) -> Result<Trust, ControllerError> {
    let op_ns = p.ctx.config.operator_namespace.clone();
    let next = next_ca(p, &op_ns)?;
    let ca = Arc::new(ca);
    let swapped = next.as_ref().is_some_and(|n| n.cert_pem() == ca.cert_pem());
    let r = Rotation {
        now: p.o.now,
        previous: p.status.certificates.clone().unwrap_or_default(),
        op_ns,
        ca,
        next,
        swapped,
    };
    let cas = Cas {
        next_exists: r.next.is_some(),
        swapped,
        ca_due: r.now >= policy.renew_after(r.ca.not_before(), r.ca.not_after()),
        scrapers_signed,
    };
    let view = rollout_view(p, &r.ca, r.next.as_deref(), swapped, (waiting, behind));
    let step = decide(
        &p.o.spec.certificates.ca_rotation_request,
        &r.previous.handled_ca_rotation,
        r.previous.ca_rotation.as_ref(),
        cas,
        &view,
    );
    let mut trust = Trust {
        signing: Arc::clone(&r.ca),
        trusted: vec![Arc::clone(&r.ca)],
        rotation: None,
        handled: r.previous.handled_ca_rotation.clone(),
        last: r.previous.last_ca_rotation.clone(),
    };
    match step {
        Step::Idle => crate::controllers::backup::preop::done(
            p,
            crate::controllers::backup::preop::Operation::CaRotation,
        ),
        Step::Broken { reason } => return Err(failed(reason)),
        Step::Start { trigger } => r.start(p, policy, &trigger, &mut trust).await?,
        Step::Run { phase, trigger } => {
            let rolled = rolled_out(phase, &view);
            r.run_phase(p, phase, &trigger, waiting, rolled, &mut trust)
                .await?;
        }
        Step::Finish { trigger } => r.finish(p, trigger, &mut trust).await?,
    }
    Ok(trust)
}

/// The next CA (`etcd-signer-next`), when there is one.
fn next_ca(p: &Pass<'_>, op_ns: &str) -> Result<Option<Arc<EtcdCa>>, ControllerError> {
    find(&p.inputs.operator_secrets, op_ns, NEXT_SECRET)
        .map(crate::controllers::cert_signer::secret_bytes)
        .map(|d| EtcdCa::from_secret_data(&d))
        .transpose()
        .map_err(|e| failed(format!("Secret {op_ns}/{NEXT_SECRET}: {e}")))
        .map(|next| next.map(Arc::new))
}

/// What one pass of a rotation works with.
struct Rotation {
    now: OffsetDateTime,
    previous: CertificatesStatus,
    op_ns: String,
    /// `etcd-signer` as adopted.
    ca: Arc<EtcdCa>,
    /// `etcd-signer-next`, when it exists.
    next: Option<Arc<EtcdCa>>,
    /// `etcd-signer` already holds the next CA (the swap of `DropOld` was written).
    swapped: bool,
}

impl Rotation {
    /// The rotation's status on entering (or staying in) `phase` for `trigger`.
    fn entering(&self, phase: Phase, trigger: &str, new: &EtcdCa) -> CaRotationStatus {
        let now = format_time(self.now);
        let before = self.previous.ca_rotation.as_ref();
        let same = before.filter(|r| r.phase == phase.as_str() && r.trigger == trigger);
        CaRotationStatus {
            trigger: trigger.to_owned(),
            phase: phase.as_str().to_owned(),
            started_at: before.map_or_else(|| now.clone(), |r| r.started_at.clone()),
            phase_started_at: same.map_or_else(|| now.clone(), |r| r.phase_started_at.clone()),
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
    }

    /// Starts a rotation once its pre-operation backup allows: the next CA (made and stored
    /// when there is none yet), trusted beside the current one.
    async fn start(
        &self,
        p: &mut Pass<'_>,
        policy: &CertPolicy,
        trigger: &str,
        trust: &mut Trust,
    ) -> Result<(), ControllerError> {
        use crate::controllers::backup::preop::{Operation, gate};
        let rotating = self.previous.ca_rotation.is_some();
        if !gate(p, NAME, Operation::CaRotation, rotating).await {
            return Ok(());
        }
        let new = match &self.next {
            Some(n) => Arc::clone(n),
            None => self.make_next(p, policy).await?,
        };
        p.next(
            NAME,
            format!("CA rotation ({trigger}): trust both CAs on every node"),
        );
        let why = if trigger == super::super::scrapers::TRIGGER {
            " (the etcd CA signed etcd-metric-client, which etcd takes for every key: the rotation revokes it)"
        } else {
            ""
        };
        p.event(
            EventReason::CaRotationStarted,
            format!(
                "CA rotation ({trigger}) started{why}: phase TrustBoth, the new CA expires {}",
                format_time(new.not_after())
            ),
        )
        .await;
        trust.trusted = vec![Arc::clone(&self.ca), Arc::clone(&new)];
        trust.rotation = Some(self.entering(Phase::TrustBoth, trigger, &new));
        Ok(())
    }

    /// Generates the next CA and, when managed, stores it as `etcd-signer-next`.
    async fn make_next(
        &self,
        p: &mut Pass<'_>,
        policy: &CertPolicy,
    ) -> Result<Arc<EtcdCa>, ControllerError> {
        let n = EtcdCa::generate_with(policy, self.now)
            .map_err(|e| failed(format!("generating the next CA: {e}")))?;
        if p.o.managed {
            let data = n.to_secret_data();
            p.w.secret(&self.op_ns, NEXT_SECRET, None, &data, None, NO_MARKS)
                .await
                .map_err(|e| ControllerError::write(NAME, &e))?;
        }
        Ok(Arc::new(n))
    }

    /// One phase of a running rotation: its status (and the consumers it waits for), an Event
    /// when the phase changed, and what the nodes trust and are signed with.
    async fn run_phase(
        &self,
        p: &mut Pass<'_>,
        phase: Phase,
        trigger: &str,
        waiting: &[String],
        rolled: bool,
        trust: &mut Trust,
    ) -> Result<(), ControllerError> {
        let Some(new) = self.next.clone() else {
            let op_ns = &self.op_ns;
            return Err(failed(format!("Secret {op_ns}/{NEXT_SECRET} is missing")));
        };
        let mut status = self.entering(phase, trigger, &new);
        let before = self.previous.ca_rotation.as_ref();
        waits_for_consumers(p, &mut status, before, waiting, rolled).await;
        if before.is_none_or(|r| r.phase != status.phase) {
            p.event(
                EventReason::CaRotationPhase,
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
            Phase::TrustBoth => trust.trusted = vec![Arc::clone(&self.ca), Arc::clone(&new)],
            Phase::ReissueLeaves => {
                trust.signing = Arc::clone(&new);
                trust.trusted = vec![Arc::clone(&self.ca), Arc::clone(&new)];
            }
            Phase::DropOld => {
                self.swap(p, &new).await?;
                trust.signing = Arc::clone(&new);
                trust.trusted = vec![Arc::clone(&new)];
            }
        }
        trust.rotation = Some(status);
        Ok(())
    }

    /// `DropOld`: `etcd-signer` takes the new CA (once, when managed).
    async fn swap(&self, p: &mut Pass<'_>, new: &EtcdCa) -> Result<(), ControllerError> {
        if self.swapped || !p.o.managed {
            return Ok(());
        }
        let current = find(&p.inputs.operator_secrets, &self.op_ns, certs::CA_SECRET);
        let data = new.to_secret_data();
        p.w.secret(
            &self.op_ns,
            certs::CA_SECRET,
            current,
            &data,
            None,
            NO_MARKS,
        )
        .await
        .map_err(|e| ControllerError::write(NAME, &e))
        .map(|_| ())
    }

    /// The rotation is done: `etcd-signer-next` goes, and the trigger is handled.
    async fn finish(
        &self,
        p: &mut Pass<'_>,
        trigger: String,
        trust: &mut Trust,
    ) -> Result<(), ControllerError> {
        if p.o.managed {
            p.w.delete::<Secret>(&self.op_ns, NEXT_SECRET)
                .await
                .map_err(|e| ControllerError::write(NAME, &e))?;
        }
        p.event(
            EventReason::CaRotationCompleted,
            format!(
                "CA rotation ({trigger}) completed: every node trusts and runs leaves of the new CA alone"
            ),
        )
        .await;
        let request = &p.o.spec.certificates.ca_rotation_request;
        trust.handled = handled_after(request, &self.previous.handled_ca_rotation, &trigger);
        trust.last = format_time(self.now);
        Ok(())
    }
}

/// `status.certificates.handledCaRotation` once the rotation for `trigger` completed: the
/// request when it was the request's, else as it was. (Recording `expiry` or
/// `scraperRevocation` there would make a request handled before look new, and rotate again.)
pub fn handled_after(request: &str, handled: &str, trigger: &str) -> String {
    if trigger == request { trigger } else { handled }.to_owned()
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
        p.event(EventReason::CaRotationWaitingForConsumers, note)
            .await;
    }
}
