//! Consumer client certificates (`spec.clients`): one Secret per consumer of etcd (e.g. the
//! kube-apiserver) with `tls.crt`, `tls.key` and `ca.crt`, issued by the etcd CA, renewed and
//! rotated with it. Part of the certificate signer.
//!
//! Inputs: `spec.clients`, the operator namespace's Secrets (cached), each Secret in another
//! namespace (read once per pass: the operator watches only its own namespaces), the consumer
//! Secrets it recorded in `status.certificates.consumerSecrets`. Decision ([`plan`], pure):
//! where each consumer's Secret goes, which consumers are refused (a Secret in the static-pod
//! namespace, an operator-namespace name outside `etcd-consumer-*`, a Secret named twice), and
//! which Secrets to delete (their consumer left). Writes: the Secrets, labelled
//! [`CONSUMER_LABEL`]; deletions. It never overwrites a Secret it did not make (no label), never
//! deletes one whose label is gone, and a consumer it cannot serve (refused, or the API forbids
//! the namespace) degrades `CertSignerDegraded` without stopping the pass: etcd's own
//! certificates do not wait for a consumer's RoleBinding. While a consumer Secret is behind, or
//! a consumer has not picked up its Secret's material ([`reload`]: a `Restart` consumer's pods
//! must have started since the write, [`mod@pods`] lists them), a CA rotation does not leave its
//! phase ([`super::ca_rotation`]); [`report`] says so in status, conditions, metrics and Events.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

mod gate_pods;
mod pods;
pub mod reload;
pub mod report;

pub use gate_pods::control_plane_pod;
pub use pods::{Refused, list_selected, observe as observe_pods};
use reload::ReloadPolicy;

use super::{client_data, secret_bytes};
use crate::api::EtcdConsumer;
use crate::certs::{self, CertPolicy, EtcdCa};
use crate::events::EventReason;
use crate::observed::find;
use crate::pass::Pass;
use crate::podspec::STATIC_POD_NAMESPACE;
use crate::writer::Marks;

/// The default Secret name's prefix; in the operator's namespace, the only one allowed.
pub const CONSUMER_PREFIX: &str = "etcd-consumer-";
/// The label on every consumer Secret: the consumer's name.
pub const CONSUMER_LABEL: &str = "etcd.static-operator.io/consumer";
/// The annotation on every consumer Secret: the digest of its data ([`reload::digest`], also
/// `status.certificates.consumers[].materialDigest`). A platform that lays a consumer's pods down
/// from the Secret copies it onto them; a pod carrying it is judged by it, not by its start time.
pub const MATERIAL_DIGEST_ANNOTATION: &str = "etcd.static-operator.io/material-digest";
/// The ClusterRole to bind in a consumer's namespace.
pub const CONSUMER_ROLE: &str = "etcd-static-operator-consumer-secrets";

/// One consumer Secret to maintain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub consumer: String,
    pub namespace: String,
    pub name: String,
    pub spec: certs::LeafSpec,
    /// How the consumer picks up a changed Secret.
    pub reload: ReloadPolicy,
}

impl Target {
    /// `<namespace>/<name>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What to do with consumer Secrets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerPlan {
    pub maintain: Vec<Target>,
    /// Consumers that get no Secret, and why.
    pub refused: Vec<String>,
    /// `(namespace, name)` of Secrets whose consumer left `spec.clients`.
    pub delete: Vec<(String, String)>,
}

/// What a consumer's certificate must contain: its common name, client usage, no SANs.
pub fn leaf_spec(c: &EtcdConsumer) -> certs::LeafSpec {
    certs::LeafSpec {
        common_name: c.common_name.clone(),
        sans: certs::Sans::default(),
        usage: certs::Usage::CLIENT,
    }
}

/// The labels of consumer `name`'s Secret.
pub fn labels(consumer: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(CONSUMER_LABEL.to_owned(), consumer.to_owned())])
}

/// The annotations of a consumer Secret holding `data`.
pub fn annotations(data: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, String> {
    BTreeMap::from([(MATERIAL_DIGEST_ANNOTATION.to_owned(), reload::digest(data))])
}

/// Decides where each consumer's Secret goes and what to delete. `recorded` is
/// `status.certificates.consumerSecrets`: only a Secret the operator served and recorded is
/// deleted once its consumer leaves. One it never served (e.g. the Secret `etcd-operator render`
/// wrote for kube-apiserver, applied before the EtcdCluster names its consumer) is left alone, so
/// it can still be adopted whatever order a platform applies the two in.
pub fn plan(consumers: &[EtcdConsumer], operator_ns: &str, recorded: &[String]) -> ConsumerPlan {
    let mut out = ConsumerPlan::default();
    for c in consumers {
        let namespace = c
            .namespace
            .clone()
            .unwrap_or_else(|| operator_ns.to_owned());
        let name = c
            .secret_name
            .clone()
            .unwrap_or_else(|| format!("{CONSUMER_PREFIX}{}", c.name));
        let at = format!("{namespace}/{name}");
        let refusal = if namespace == STATIC_POD_NAMESPACE {
            Some("the static-pod namespace holds only the operator's own Secrets".to_owned())
        } else if namespace == operator_ns && !name.starts_with(CONSUMER_PREFIX) {
            Some(format!(
                "in the operator's namespace a consumer Secret's name starts with {CONSUMER_PREFIX}, so it never names one of the operator's own"
            ))
        } else {
            out.maintain
                .iter()
                .find(|t| t.key() == at)
                .map(|first| format!("consumer {} already has it", first.consumer))
        };
        if let Some(why) = refusal {
            out.refused
                .push(format!("consumer {}: Secret {at} refused: {why}", c.name));
            continue;
        }
        out.maintain.push(Target {
            consumer: c.name.clone(),
            name,
            spec: leaf_spec(c),
            reload: ReloadPolicy::of(c, &namespace),
            namespace,
        });
    }
    let kept = |ns: &str, name: &str| {
        out.maintain
            .iter()
            .any(|t| t.namespace == ns && t.name == name)
    };
    let mut delete: Vec<(String, String)> = Vec::new();
    for r in recorded {
        if let Some((ns, name)) = r.split_once('/')
            && !kept(ns, name)
            && !delete.iter().any(|(a, b)| a == ns && b == name)
        {
            delete.push((ns.to_owned(), name.to_owned()));
        }
    }
    delete.sort();
    out.delete = delete;
    out
}

/// The consumer's label on a Secret, if any.
fn label_of(s: &Secret) -> Option<&str> {
    s.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CONSUMER_LABEL))
        .map(String::as_str)
}

/// A Secret that could not be read: the sentence, and whether the API forbade it.
struct ReadError {
    message: String,
    forbidden: bool,
}

/// Reads Secret `ns/name`: from the cache in the operator's namespace, else from the API.
async fn current(p: &Pass<'_>, ns: &str, name: &str) -> Result<Option<Secret>, ReadError> {
    if ns == p.ctx.config.operator_namespace {
        return Ok(find(&p.inputs.operator_secrets, ns, name).cloned());
    }
    Api::<Secret>::namespaced(p.ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| {
            let forbidden = matches!(&e, kube::Error::Api(s) if s.code == 403);
            ReadError {
                message: with_hint(crate::writer::describe(&e), forbidden, ns),
                forbidden,
            }
        })
}

/// An API refusal names what the admin has to do.
fn with_hint(message: String, forbidden: bool, ns: &str) -> String {
    if forbidden {
        format!(
            "{message} (bind ClusterRole {CONSUMER_ROLE} to the operator's ServiceAccount with a RoleBinding in namespace {ns})"
        )
    } else {
        message
    }
}

/// What consumers got this pass: `<ns>/<name>/tls.crt` → certificate (for status), the Secrets
/// maintained, the digest of each served consumer's Secret data, and the problems (empty when
/// every consumer is served).
#[derive(Debug, Default)]
pub struct Served {
    pub certs: Vec<(String, Vec<u8>)>,
    pub secrets: Vec<String>,
    pub digests: BTreeMap<String, String>,
    pub problems: Vec<String>,
}

/// [`plan`] for this pass: the spec and the record.
pub fn decided(p: &Pass<'_>) -> ConsumerPlan {
    plan(
        &p.o.spec.clients,
        &p.ctx.config.operator_namespace,
        &recorded(p),
    )
}

fn recorded(p: &Pass<'_>) -> Vec<String> {
    p.status
        .certificates
        .as_ref()
        .map(|c| c.consumer_secrets.clone())
        .unwrap_or_default()
}

/// Maintains every consumer's Secret as `decided` (writes when Managed) and deletes those of
/// consumers that left.
pub async fn reconcile(
    p: &mut Pass<'_>,
    decided: &ConsumerPlan,
    ca: &EtcdCa,
    bundle: &str,
    policy: &CertPolicy,
) -> Served {
    let recorded = recorded(p);
    let mut served = Served {
        problems: decided.refused.clone(),
        ..Served::default()
    };
    for t in &decided.maintain {
        match one(p, t, ca, bundle, policy).await {
            Ok(data) => {
                let cert = data
                    .get(certs::ClientCertKind::CERT_KEY)
                    .cloned()
                    .unwrap_or_default();
                served.certs.push((format!("{}/tls.crt", t.key()), cert));
                served.secrets.push(t.key());
                served
                    .digests
                    .insert(t.consumer.clone(), reload::digest(&data));
            }
            Err(problem) => {
                served.problems.push(problem);
                // A Secret written before stays ours to delete; one never written is not.
                if recorded.contains(&t.key()) {
                    served.secrets.push(t.key());
                }
            }
        }
    }
    for (ns, name) in &decided.delete {
        match remove(p, ns, name).await {
            Ok(false) => {}
            Ok(true) => served.secrets.push(format!("{ns}/{name}")),
            Err(problem) => {
                served.problems.push(problem);
                served.secrets.push(format!("{ns}/{name}"));
            }
        }
    }
    served.secrets.sort();
    served.secrets.dedup();
    served
}

/// One consumer's Secret; its data as written (or kept), or the problem.
async fn one(
    p: &mut Pass<'_>,
    t: &Target,
    ca: &EtcdCa,
    bundle: &str,
    policy: &CertPolicy,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let at = t.key();
    let found = current(p, &t.namespace, &t.name).await.map_err(|e| {
        format!(
            "consumer {}: reading Secret {at}: {}",
            t.consumer, e.message
        )
    })?;
    if let Some(s) = &found
        && label_of(s) != Some(t.consumer.as_str())
        && t.namespace != p.ctx.config.operator_namespace
    {
        return Err(format!(
            "consumer {}: Secret {at} exists without label {CONSUMER_LABEL}={}: it was not made by the operator and is left alone (delete it, or name another Secret)",
            t.consumer, t.consumer
        ));
    }
    let data_now = found.as_ref().map(secret_bytes);
    let (data, changed) = client_data(ca, bundle, policy, &t.spec, data_now.as_ref(), p.o.now)
        .map_err(|e| format!("consumer {}: {}", t.consumer, e.message))?;
    let (labels, annotations) = (labels(&t.consumer), annotations(&data));
    let marks = Marks {
        labels: &labels,
        annotations: &annotations,
    };
    let remark = found
        .as_ref()
        .is_some_and(|s| !marks.carried_by(&s.metadata));
    if (changed.is_some() || remark) && p.o.managed {
        if let Some(reason) = &changed {
            p.next(
                crate::controller::ControllerName::CertSigner,
                format!("{at}: {reason}"),
            );
        }
        p.w.secret(&t.namespace, &t.name, found.as_ref(), &data, None, marks)
            .await
            .map_err(|e| {
                let m = format!("consumer {}: {e}", t.consumer);
                with_hint(
                    m,
                    e.category() == crate::category::Category::Forbidden,
                    &t.namespace,
                )
            })?;
    }
    Ok(data)
}

/// Deletes a consumer Secret the operator made (label present). `Ok(true)`: it stays on record
/// (Unmanaged: not deleted yet). Where the API forbids it (the RoleBinding went with the
/// consumer), the operator says so in a warning Event and forgets the Secret: it can't act
/// there, and an admin who revoked its access owns what is left.
async fn remove(p: &mut Pass<'_>, ns: &str, name: &str) -> Result<bool, String> {
    let at = format!("{ns}/{name}");
    let found = match current(p, ns, name).await {
        Ok(found) => found,
        Err(e) if e.forbidden => return forget(p, &at, &e.message).await,
        Err(e) => return Err(format!("reading Secret {at} to delete it: {}", e.message)),
    };
    let Some(s) = found else {
        return Ok(false);
    };
    if ns != p.ctx.config.operator_namespace && label_of(&s).is_none() {
        p.note(format!(
            "Secret {at} lost label {CONSUMER_LABEL}: no longer the operator's, left alone"
        ));
        return Ok(false);
    }
    p.next(
        crate::controller::ControllerName::CertSigner,
        format!("delete {at}: its consumer left spec.clients"),
    );
    if !p.o.managed {
        return Ok(true);
    }
    match p.w.delete::<Secret>(ns, name).await {
        Ok(()) => Ok(false),
        Err(e) if e.category() == crate::category::Category::Forbidden => {
            forget(p, &at, &e.to_string()).await
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The operator may not delete a consumer Secret any more: said once, then forgotten.
async fn forget(p: &mut Pass<'_>, at: &str, why: &str) -> Result<bool, String> {
    let line = format!(
        "Secret {at} of a consumer that left spec.clients cannot be deleted ({why}); the operator no longer tracks it: delete it by hand"
    );
    p.note(line.clone());
    p.event(EventReason::ConsumerSecretLeftBehind, line).await;
    Ok(false)
}

#[cfg(test)]
mod tests;
