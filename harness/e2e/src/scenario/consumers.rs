//! A consumer of etcd named in `spec.clients` gets a client certificate Secret (`tls.crt`,
//! `tls.key`, `ca.crt`) that real etcd accepts, and loses it when it leaves the list. The first,
//! kube-apiserver, is adopted from what `etcd-operator render` issued on n1 (its Secret applied
//! as the platform does, then `spec.clients` naming it): the operator keeps that certificate
//! byte-identical, the one the first kube-apiserver's files hold. One in the
//! operator's namespace (`etcd-consumer-<name>`), one published in the consumer's own namespace
//! under the name it asks for. There, the operator writes only once an admin bound ClusterRole
//! `etcd-static-operator-consumer-secrets` (on kas, where RBAC is enforced, the refusal is seen
//! first, named in `CertSignerDegraded`), and it leaves alone a Secret it did not make.

use std::time::{Duration, Instant};

use etcd_operator::controllers::cert_signer::consumers::{CONSUMER_LABEL, CONSUMER_ROLE};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use membership::{EtcdClient, TlsPem};

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, OPERATOR_NS};

const DEADLINE: Duration = Duration::from_secs(60);
const SECRET: &str = "etcd-consumer-kube-apiserver";
/// The consumer's own namespace and the Secret names it asks for there.
const CONSUMER_NS: &str = "etcd-consumers";
const PUBLISHED: &str = "apiserver-etcd-client";
const TAKEN: &str = "someone-elses";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// Polls Secret `name` until `present` says what it should be, with a deadline.
async fn secret_until(
    api: &Api<Secret>,
    name: &str,
    what: &str,
    present: bool,
) -> Result<Option<Secret>, ControlPlaneError> {
    let until = Instant::now() + DEADLINE;
    loop {
        let got = api.get_opt(name).await;
        match &got {
            Ok(s) if s.is_some() == present => return Ok(got.ok().flatten()),
            _ if Instant::now() > until => {
                return Err(failed(format!(
                    "{what}: Secret {name} after {DEADLINE:?}: last seen {got:?}"
                )));
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn pem_of(secret: Secret, name: &str) -> Result<TlsPem, ControlPlaneError> {
    let data = secret.data.unwrap_or_default();
    let get = |k: &str| {
        data.get(k)
            .map(|b| b.0.clone())
            .ok_or_else(|| failed(format!("Secret {name} has no {k}")))
    };
    Ok(TlsPem {
        ca: get("ca.crt")?,
        cert: get("tls.crt")?,
        key: get("tls.key")?,
    })
}

/// A write to etcd with the certificate of Secret `name`; its revision.
async fn write_with(h: &Harness, secret: Secret, name: &str) -> Result<i64, ControlPlaneError> {
    let pem = pem_of(secret, name)?;
    let client = EtcdClient::with_pem(h.node_endpoints(), Some(&pem), Duration::from_secs(5))
        .map_err(|e| failed(format!("a client from {name}: {e}")))?;
    client
        .put(
            "/consumer-check",
            format!("written with {name}'s certificate").into_bytes(),
        )
        .await
        .map_err(|e| failed(format!("a write with {name}'s certificate: {e}")))
}

pub async fn consumer_secret(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let api: Api<Secret> = Api::namespaced(h.cp.client(), OPERATOR_NS);
    let rendered = apply_rendered_secret(h, &api).await?;
    h.patch_spec(serde_json::json!({"clients": [
        {"name": "kube-apiserver", "commonName": "kube-apiserver-etcd-client"}
    ]}))
    .await?;
    let served = format!("{OPERATOR_NS}/{SECRET}");
    h.wait_status("the operator serves kube-apiserver", DEADLINE, |s| {
        s.certificates
            .as_ref()
            .is_some_and(|c| c.consumer_secrets.contains(&served))
    })
    .await?;
    let secret = secret_until(&api, SECRET, "spec.clients names kube-apiserver", true)
        .await?
        .ok_or_else(|| failed("no Secret"))?;
    let cert = secret.data.as_ref().and_then(|d| d.get("tls.crt")).cloned();
    if cert.as_ref().map(|b| &b.0) != Some(&rendered) {
        return Err(failed(format!(
            "the operator replaced the certificate render issued for kube-apiserver instead of adopting it ({SECRET})"
        )));
    }
    let revision = write_with(h, secret, SECRET).await?;
    h.step(format!(
        "spec.clients kube-apiserver: Secret {SECRET} as render issued it adopted byte-identical; etcd accepts its certificate (a write at revision {revision})"
    ));
    in_its_own_namespace(h).await?;
    h.patch_spec(serde_json::json!({"clients": null})).await?;
    secret_until(&api, SECRET, "kube-apiserver left spec.clients", false).await?;
    let theirs: Api<Secret> = Api::namespaced(h.cp.client(), CONSUMER_NS);
    secret_until(
        &theirs,
        PUBLISHED,
        "the published Secret's consumer left",
        false,
    )
    .await?;
    let kept = theirs.get_opt(TAKEN).await?;
    if kept
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get("owner"))
        != Some(&ByteString(b"not the operator".to_vec()))
    {
        return Err(failed(format!(
            "{CONSUMER_NS}/{TAKEN} was not the operator's and must be left as it was: {kept:?}"
        )));
    }
    h.step(format!(
        "the consumers left spec.clients: Secrets {SECRET} and {CONSUMER_NS}/{PUBLISHED} deleted, {CONSUMER_NS}/{TAKEN} left alone"
    ));
    Ok(())
}

/// Applies the consumer Secret `render` wrote on n1, as the platform does with its output;
/// returns the certificate (the one in the first kube-apiserver's files).
async fn apply_rendered_secret(
    h: &Harness,
    api: &Api<Secret>,
) -> Result<Vec<u8>, ControlPlaneError> {
    let out = h.cp.node("n1")?.root.join("etc/kubernetes/bootstrap");
    let read = |rel: &str| {
        let path = out.join(rel);
        std::fs::read(&path).map_err(|e| failed(format!("reading {}: {e}", path.display())))
    };
    let secret: Secret = serde_json::from_slice(&read(&format!("manifests/{SECRET}.json"))?)
        .map_err(|e| failed(format!("render's {SECRET}: {e}")))?;
    crate::controlplane::create_or_keep(api, &secret).await?;
    read(etcd_operator::bootstrap::apiserver::CERT_FILE)
}

/// Binds the consumer ClusterRole to the operator's ServiceAccount in the consumer namespace.
async fn bind_consumer_role(client: &kube::Client) -> Result<(), ControlPlaneError> {
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("etcd-operator-consumer-secrets".into()),
            namespace: Some(CONSUMER_NS.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: CONSUMER_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "etcd-operator".into(),
            namespace: Some(OPERATOR_NS.into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), CONSUMER_NS)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// The published consumer Secret: refused while the operator may not write the namespace (kas),
/// written once the role is bound; a Secret of someone else's is never overwritten.
async fn in_its_own_namespace(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let client = h.cp.client();
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(CONSUMER_NS.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    crate::controlplane::create_or_keep(&Api::<Namespace>::all(client.clone()), &ns).await?;
    let theirs: Api<Secret> = Api::namespaced(client.clone(), CONSUMER_NS);
    let foreign = Secret {
        metadata: ObjectMeta {
            name: Some(TAKEN.into()),
            ..Default::default()
        },
        data: Some([("owner".to_owned(), ByteString(b"not the operator".to_vec()))].into()),
        ..Default::default()
    };
    crate::controlplane::create_or_keep(&theirs, &foreign).await?;
    h.patch_spec(serde_json::json!({"clients": [
        {"name": "kube-apiserver", "commonName": "kube-apiserver-etcd-client"},
        {"name": "published", "commonName": "kube-apiserver-etcd-client",
         "namespace": CONSUMER_NS, "secretName": PUBLISHED},
        {"name": "squatter", "commonName": "squatter", "namespace": CONSUMER_NS, "secretName": TAKEN}
    ]}))
    .await?;
    let degraded = |s: &etcd_operator::api::EtcdClusterStatus, text: &str| {
        s.conditions.iter().any(|c| {
            c.type_ == "CertSignerDegraded" && c.status == "True" && c.message.contains(text)
        })
    };
    if h.cp.operator_rbac_enforced() {
        let bind = format!("bind ClusterRole {CONSUMER_ROLE}");
        h.wait_status(
            &format!("CertSignerDegraded naming the RoleBinding {CONSUMER_NS} lacks"),
            DEADLINE,
            |s| degraded(s, &bind) && degraded(s, CONSUMER_NS),
        )
        .await?;
    } else {
        h.step("the API stand-in enforces no RBAC: the refusal before the RoleBinding is checked on kas only");
    }
    bind_consumer_role(&client).await?;
    let published = secret_until(&theirs, PUBLISHED, "the RoleBinding exists", true)
        .await?
        .ok_or_else(|| failed("no Secret"))?;
    let label = published
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CONSUMER_LABEL))
        .cloned();
    if label.as_deref() != Some("published") {
        return Err(failed(format!(
            "{CONSUMER_NS}/{PUBLISHED} should carry {CONSUMER_LABEL}=published, has {label:?}"
        )));
    }
    let revision = write_with(h, published, PUBLISHED).await?;
    h.wait_status(
        &format!("CertSignerDegraded naming {CONSUMER_NS}/{TAKEN}, not made by the operator"),
        DEADLINE,
        |s| degraded(s, &format!("{CONSUMER_NS}/{TAKEN} exists without label")),
    )
    .await?;
    h.step(format!(
        "consumer Secret {CONSUMER_NS}/{PUBLISHED} published once the role was bound; etcd accepts it (a write at revision {revision}); {CONSUMER_NS}/{TAKEN} refused, not the operator's"
    ));
    Ok(())
}
