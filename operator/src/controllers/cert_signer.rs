//! Certificate signer: the etcd CA, every node's peer, serving and metrics certificates, the
//! trust bundle, and the operator's own etcd client certificate.
//!
//! Inputs: the CA Secret in the operator's namespace, `etcd-all-certs`, the control-plane nodes
//! and their addresses. Decision ([`crate::certs::plan_node_certs`],
//! [`crate::certs::plan_client_cert`], pure): which certificates are missing, expiring or no
//! longer match their node. Writes: the CA Secret (only when none exists and the cluster is
//! Managed), `etcd-all-certs`, `etcd-all-bundles`, the operator's client certificates, the
//! consumers' ([`consumers`]) and whether each consumer picked them up
//! (`status.certificates.consumers`, which a CA rotation waits on); Events
//! `CaGenerated`, `CertificatesUpdated`; the expiry metrics. It never issues anything for an
//! Unmanaged cluster and never replaces an existing CA.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Secret;
use membership::TlsPem;

use crate::category::Category;
use crate::certs::{self, CaOrigin, CaRole, CertPolicy, ClientCertKind, EtcdCa};
use crate::controller::{ControllerError, ControllerName};
use crate::events::EventReason;
use crate::metrics::{CertLabels, Metrics};
use crate::observed::find;
use crate::pass::Pass;
use crate::podspec::STATIC_POD_NAMESPACE as NS;
use crate::podspec::paths::{ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET};
use crate::retry::ErrorKind;
use crate::status::{ConditionType as C, Reason};
use crate::writer::NO_MARKS;
use consumers::reload;

pub mod ca_rotation;
pub mod consumers;
pub mod scrapers;

const NAME: ControllerName = ControllerName::CertSigner;
/// How soon a consumer Secret that could not be written is tried again.
const CONSUMER_RETRY: time::Duration = time::Duration::seconds(10);
/// The CA certificate's key in the metric client Secret.
pub const CA_KEY: &str = ClientCertKind::CA_KEY;

/// What the signer produced for the rest of the pass.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The operator's etcd client identity.
    pub tls: TlsPem,
    /// Nodes whose certificates all exist.
    pub with_certs: BTreeSet<String>,
    /// `etcd-all-certs` as it is (or will be) written.
    pub all_certs: BTreeMap<String, Vec<u8>>,
    /// `etcd-all-bundles`.
    pub bundles: BTreeMap<String, String>,
}

/// A Secret's data as bytes.
pub fn secret_bytes(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

fn cert_err(e: certs::CertError) -> ControllerError {
    ControllerError::new(
        NAME,
        ErrorKind::Permanent,
        certs::category_of(&e),
        e.to_string(),
    )
}

fn write_err(e: crate::writer::WriteError) -> ControllerError {
    ControllerError::write(NAME, &e)
}

/// What the cert signer carries from pass to pass.
#[derive(Debug, Default)]
pub struct State {
    /// A consumer Secret could not be written in the last pass: a CA rotation holds its phase
    /// until every consumer has the phase's material.
    pub consumers_behind: bool,
}

/// Runs the certificate signer.
pub async fn reconcile(p: &mut Pass<'_>, st: &mut State) -> Result<Issued, ControllerError> {
    let _t = p.ctx.metrics.time(NAME.as_str());
    let policy = crate::certs::policy_for(&p.o.spec.certificates);
    let adopted = ca(p, &policy, CaRole::Etcd).await?;
    let metrics_ca = ca(p, &policy, CaRole::Metrics).await?;
    // Before `etcd-metric-client` is re-issued from the metrics CA below.
    let revoke = scrapers::record(p, &adopted).await?;
    let decided = consumers::decided(p);
    let known: BTreeSet<String> = p.o.node_names().into_iter().collect();
    let pods = consumers::observe_pods(&p.ctx.client, &decided.maintain, &known).await;
    p.api_servers = reload::api_servers(&pods);
    let records = p
        .status
        .certificates
        .as_ref()
        .map(|c| c.consumers.clone())
        .unwrap_or_default();
    let waiting: Vec<String> = reload::before(&decided.maintain, &records, &pods, p.o.now)
        .iter()
        .filter_map(reload::Pickup::line)
        .collect();
    let trust =
        ca_rotation::run(p, adopted, &policy, (&waiting, st.consumers_behind), revoke).await?;
    let ca = std::sync::Arc::clone(&trust.signing);
    let signers = certs::Signers {
        etcd: &ca,
        metrics: &metrics_ca,
    };
    let bundle = trust.bundle_pem();
    let bundles = trust.bundles(&metrics_ca);
    let all_certs = node_certs(p, signers, &bundles, &policy).await?;
    let tls = client_cert(p, signers, &bundle, &policy).await?;
    let served = consumers::reconcile(p, &decided, &ca, &bundle, &policy).await;
    let after = reload::settle(&decided.maintain, &records, &served.digests, &pods, p.o.now);
    let rotating = trust.rotation.is_some();
    let consumer_status = consumers::report::report(p, &after, rotating, &records).await;
    let infos = inspect_all(p, signers, &all_certs, &served.certs, &tls);
    let mut status = expiry_status(&ca.info(), &infos, &policy);
    if !status.next_renewal.is_empty() {
        p.next(NAME, format!("next renewal at {}", status.next_renewal));
    }
    status.ca_rotation = trust.rotation;
    status.handled_ca_rotation = trust.handled;
    status.last_ca_rotation = trust.last;
    status.consumer_secrets = served.secrets;
    status.consumers = consumer_status;
    p.status.certificates = Some(status);
    let with_certs = nodes_with_certs(p, &all_certs);
    record_expiry(&p.ctx.metrics, signers, &all_certs);
    st.consumers_behind = !served.problems.is_empty();
    report_consumer_problems(p, &served.problems);
    Ok(Issued {
        tls,
        with_certs,
        all_certs,
        bundles,
    })
}

/// The certificates `status.certificates` lists: etcd's, the consumers' and the operator's.
fn inspect_all(
    p: &Pass<'_>,
    signers: certs::Signers<'_>,
    all_certs: &BTreeMap<String, Vec<u8>>,
    served: &[(String, Vec<u8>)],
    tls: &TlsPem,
) -> Vec<certs::CertInfo> {
    let ca = signers.etcd;
    let mut infos = certs::inspect_certs(signers, all_certs);
    for (secret, cert) in served {
        infos.push(certs::inspect_pem(ca, secret, cert));
    }
    let client_key = format!(
        "{}/{}/tls.crt",
        p.ctx.config.operator_namespace,
        ClientCertKind::Operator.secret_name()
    );
    infos.push(certs::inspect_pem(ca, &client_key, &tls.cert));
    infos
}

/// The nodes whose certificates all exist in `all_certs`.
fn nodes_with_certs(p: &Pass<'_>, all_certs: &BTreeMap<String, Vec<u8>>) -> BTreeSet<String> {
    p.o.nodes
        .iter()
        .filter(|n| {
            certs::CertKind::ALL
                .iter()
                .all(|k| all_certs.contains_key(&k.cert_key(&n.target.name)))
        })
        .map(|n| n.target.name.clone())
        .collect()
}

/// Succeeds, or reports the consumer Secrets that could not be served and comes back for them.
fn report_consumer_problems(p: &mut Pass<'_>, problems: &[String]) {
    if problems.is_empty() {
        p.succeeded(NAME);
    } else {
        // Etcd's own certificates are done: the pass goes on, the consumers are retried.
        let message = problems.join("; ");
        p.ctx.metrics.error(NAME.as_str(), Category::ConsumerSecret);
        p.note(message.clone());
        p.cond(
            C::CertSignerDegraded,
            true,
            Reason::Failed(Category::ConsumerSecret),
            message,
        );
        // Nothing watched changes when an admin creates the RoleBinding: a whole pass comes
        // back for the consumers (a settled cluster would otherwise wait for the resync).
        p.not_yet(
            NAME,
            p.o.now + CONSUMER_RETRY,
            "consumer Secrets tried again",
        );
    }
}

/// The CA of `role`: adopted from its Secret, or generated (Managed only) and stored. An
/// Unmanaged cluster without a metrics CA (one adopted before the metrics CA existed) is
/// planned against a CA that is never stored: nothing is written for it anyway.
async fn ca(
    p: &mut Pass<'_>,
    policy: &CertPolicy,
    role: CaRole,
) -> Result<EtcdCa, ControllerError> {
    let op_ns = p.ctx.config.operator_namespace.as_str();
    let name = role.secret_name();
    let signer_data = find(&p.inputs.operator_secrets, op_ns, name).map(secret_bytes);
    let (ca, origin) =
        EtcdCa::adopt_or_generate(role, signer_data.as_ref(), policy, p.o.now).map_err(cert_err)?;
    if origin == CaOrigin::Existing || (!p.o.managed && role == CaRole::Metrics) {
        return Ok(ca);
    }
    if !p.o.managed {
        return Err(ControllerError::new(
            NAME,
            ErrorKind::Permanent,
            Category::NoCa,
            "no etcd CA exists and the cluster is Unmanaged",
        ));
    }
    p.w.secret(op_ns, name, None, &ca.to_secret_data(), None, NO_MARKS)
        .await
        .map_err(write_err)?;
    let what = match role {
        CaRole::Etcd => "etcd CA",
        CaRole::Metrics => "metrics CA",
    };
    p.event(
        EventReason::CaGenerated,
        format!("generated the {what} ({})", ca.subject()),
    )
    .await;
    Ok(ca)
}

/// Every node's certificates and the bundle, written when they change (Managed only).
async fn node_certs(
    p: &mut Pass<'_>,
    signers: certs::Signers<'_>,
    bundles: &BTreeMap<String, String>,
    policy: &CertPolicy,
) -> Result<BTreeMap<String, Vec<u8>>, ControllerError> {
    let now = p.o.now;
    let desired: certs::DesiredNodes =
        p.o.nodes
            .iter()
            .map(|n| (n.target.name.clone(), [n.target.ip].into_iter().collect()))
            .collect();
    let current_secret = find(&p.inputs.secrets, NS, ALL_CERTS_SECRET);
    let current = current_secret.map(secret_bytes).unwrap_or_default();
    let plan = certs::plan_node_certs(signers, policy, &current, &desired, now);
    let all_certs = if plan.is_noop() {
        current.clone()
    } else {
        certs::apply_plan(signers, policy, &plan, &current, now).map_err(cert_err)?
    };
    let changes = plan.describe_changes();
    p.next(
        NAME,
        if changes.is_empty() {
            "every node certificate is valid".to_owned()
        } else {
            format!("would update etcd-all-certs: {}", changes.join("; "))
        },
    );
    if p.o.managed {
        let written =
            p.w.secret(
                NS,
                ALL_CERTS_SECRET,
                current_secret,
                &all_certs,
                None,
                NO_MARKS,
            )
            .await
            .map_err(write_err)?;
        if written {
            p.event(EventReason::CertificatesUpdated, changes.join("; "))
                .await;
        }
        let current = find(&p.inputs.configmaps, NS, ALL_BUNDLES_CONFIGMAP);
        p.w.configmap(NS, ALL_BUNDLES_CONFIGMAP, current, bundles, None)
            .await
            .map_err(write_err)?;
    }
    Ok(all_certs)
}

/// The client certificates (the operator's own, of the etcd CA with the trusted etcd CAs
/// (`bundle`) as `ca.crt`, and `etcd-metric-client` for scrapers of the metrics proxy, of the
/// metrics CA with it as `ca.crt`), each renewed when due (written when Managed); the
/// operator's identity.
async fn client_cert(
    p: &mut Pass<'_>,
    signers: certs::Signers<'_>,
    bundle: &str,
    policy: &CertPolicy,
) -> Result<TlsPem, ControllerError> {
    let mut operator = BTreeMap::new();
    let metrics_bundle = certs::pem_line(signers.metrics);
    for kind in ClientCertKind::ALL {
        let ca = signers.of(kind.role());
        let trusted = match kind.role() {
            CaRole::Etcd => bundle,
            CaRole::Metrics => metrics_bundle.as_str(),
        };
        let data = one_client_cert(p, ca, trusted, policy, kind).await?;
        if kind == ClientCertKind::Operator {
            operator = data;
        }
    }
    let get = |k: &str| operator.get(k).cloned().unwrap_or_default();
    Ok(TlsPem {
        ca: bundle.as_bytes().to_vec(),
        cert: get(ClientCertKind::CERT_KEY),
        key: get(ClientCertKind::KEY_KEY),
    })
}

async fn one_client_cert(
    p: &mut Pass<'_>,
    ca: &EtcdCa,
    bundle: &str,
    policy: &CertPolicy,
    kind: ClientCertKind,
) -> Result<BTreeMap<String, Vec<u8>>, ControllerError> {
    client_secret(p, ca, bundle, policy, kind.secret_name(), &kind.spec())
        .await
        .map(|(data, _)| data)
}

/// Client certificate Secret `name` (operator namespace) for `spec` ([`client_data`]), written
/// when it changed (Managed only). Returns its data, and why it changed.
async fn client_secret(
    p: &mut Pass<'_>,
    ca: &EtcdCa,
    bundle: &str,
    policy: &CertPolicy,
    name: &str,
    spec: &certs::LeafSpec,
) -> Result<certs::ClientData, ControllerError> {
    let op_ns = p.ctx.config.operator_namespace.clone();
    let secret = find(&p.inputs.operator_secrets, &op_ns, name);
    let current = secret.map(secret_bytes);
    let (data, changed) = client_data(ca, bundle, policy, spec, current.as_ref(), p.o.now)?;
    if changed.is_some() && p.o.managed {
        p.w.secret(&op_ns, name, secret, &data, None, NO_MARKS)
            .await
            .map_err(write_err)?;
    }
    Ok((data, changed))
}

/// What a client certificate Secret for `spec` should hold ([`certs::client_secret_data`]; the
/// trusted CAs as `ca.crt`, both during a CA rotation), and why it changed.
pub fn client_data(
    ca: &EtcdCa,
    bundle: &str,
    policy: &CertPolicy,
    spec: &certs::LeafSpec,
    current: Option<&BTreeMap<String, Vec<u8>>>,
    now: time::OffsetDateTime,
) -> Result<certs::ClientData, ControllerError> {
    certs::client_secret_data(ca, bundle, policy, spec, current, now).map_err(cert_err)
}

/// `status.certificates`: the CA's expiry, and every leaf's with the time the policy renews it
/// (`infos` of `etcd-all-certs` are named `etcd-all-certs/<key>`; others keep their name).
pub fn expiry_status(
    ca: &certs::CaInfo,
    infos: &[certs::CertInfo],
    policy: &CertPolicy,
) -> crate::api::CertificatesStatus {
    let mut leaves: Vec<crate::api::CertificateExpiry> = infos
        .iter()
        .filter_map(|i| {
            let (nb, na) = (i.not_before?, i.not_after?);
            let name = if i.secret_key.contains('/') {
                i.secret_key.clone()
            } else {
                format!("{ALL_CERTS_SECRET}/{}", i.secret_key)
            };
            Some(crate::api::CertificateExpiry {
                name,
                node: i.node.clone().unwrap_or_default(),
                not_after: certs::format_time(na),
                renew_after: certs::format_time(policy.renew_after(nb, na)),
            })
        })
        .collect();
    leaves.sort_by(|a, b| a.name.cmp(&b.name));
    let next_renewal = leaves
        .iter()
        .map(|l| l.renew_after.clone())
        .min()
        .unwrap_or_default();
    crate::api::CertificatesStatus {
        ca: crate::api::CertificateExpiry {
            name: certs::CA_SECRET.to_owned(),
            node: String::new(),
            not_after: certs::format_time(ca.not_after),
            renew_after: String::new(),
        },
        leaves,
        next_renewal,
        ..Default::default()
    }
}

fn record_expiry(
    metrics: &Metrics,
    signers: certs::Signers<'_>,
    all_certs: &BTreeMap<String, Vec<u8>>,
) {
    let ca = signers.etcd;
    metrics.certificate_expiry.clear();
    for info in certs::inspect_certs(signers, all_certs) {
        if let Some(t) = info.not_after_unix() {
            metrics
                .certificate_expiry
                .get_or_create(&CertLabels {
                    secret_key: info.secret_key.clone(),
                    node: info.node.clone().unwrap_or_default(),
                })
                .set(t);
        }
    }
    metrics.ca_expiry.set(ca.info().not_after_unix());
}

#[cfg(test)]
#[path = "cert_signer_tests.rs"]
mod tests;
