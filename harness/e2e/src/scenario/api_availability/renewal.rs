//! The renewal phase of `api-availability`: kube-apiserver's etcd client certificate is
//! replaced by one past its renewal point, and the API must stay up while the operator renews it
//! and every kube-apiserver restarts onto the new one.

use std::time::Instant;

use etcd_operator::api::EtcdConsumer;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::{PLANTED_LIFETIME, SETTLE, failed};
use crate::controlplane::apiserver_operator::CONSUMER_SECRET;
use crate::controlplane::{ControlPlaneError, OPERATOR_NS, wait_for};
use crate::scenario::harness::Harness;

/// kube-apiserver's client certificate renewed: a certificate of the CA past its renewal
/// point is planted in its Secret; the operator must replace it, and every kube-apiserver
/// must have restarted onto the renewed one.
pub(super) async fn renewal(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let secrets: Api<Secret> = Api::namespaced(h.cp.client(), OPERATOR_NS);
    let planted = plant_expiring(h, &secrets).await?;
    let planted_at = Instant::now();
    h.step(format!(
        "{CONSUMER_SECRET}: a certificate of the CA expiring in {PLANTED_LIFETIME:?} planted"
    ));
    wait_for(
        SETTLE,
        "the operator renewed the planted certificate",
        || {
            let (secrets, planted) = (secrets.clone(), planted.clone());
            async move {
                let s = secrets
                    .get(CONSUMER_SECRET)
                    .await
                    .map_err(|e| e.to_string())?;
                let now = s
                    .data
                    .unwrap_or_default()
                    .get("tls.crt")
                    .map(|b| b.0.clone());
                if now.as_ref() == Some(&planted) || now.is_none() {
                    Err("the planted certificate is still there".into())
                } else {
                    Ok(())
                }
            }
        },
    )
    .await?;
    h.step("the operator renewed it");
    let stacked =
        h.cp.stacked()
            .ok_or_else(|| failed("not on the stacked control plane"))?;
    wait_for(
        SETTLE,
        "every kube-apiserver restarted after the renewal and Ready",
        || {
            let rolls = stacked.apiservers.rolls();
            async move {
                let behind: Vec<&str> = ["n1", "n2", "n3"]
                    .into_iter()
                    .filter(|n| {
                        !rolls
                            .iter()
                            .any(|r| r.node == *n && r.started > planted_at && r.ready.is_some())
                    })
                    .collect();
                if behind.is_empty() {
                    Ok(())
                } else {
                    Err(format!("not restarted since: {behind:?}"))
                }
            }
        },
    )
    .await?;
    h.wait_settled(3, SETTLE).await?;
    Ok(())
}

/// Writes into kube-apiserver's consumer Secret a certificate for its spec, issued by the CA,
/// with [`PLANTED_LIFETIME`] left (so past any renewal point); returns its PEM.
async fn plant_expiring(h: &Harness, secrets: &Api<Secret>) -> Result<Vec<u8>, ControlPlaneError> {
    let cluster =
        h.cp.cluster()
            .await?
            .ok_or_else(|| failed("no EtcdCluster"))?;
    let consumer: EtcdConsumer = cluster
        .spec
        .clients
        .iter()
        .find(|c| c.name == "kube-apiserver")
        .cloned()
        .ok_or_else(|| failed("spec.clients names no kube-apiserver"))?;
    let ca = h.signer().await?;
    let mut policy = etcd_operator::certs::policy_for(&cluster.spec.certificates);
    let now = time::OffsetDateTime::now_utc();
    let lifetime =
        time::Duration::try_from(PLANTED_LIFETIME).map_err(|e| failed(format!("lifetime: {e}")))?;
    // Issued as if an hour ago, valid until `lifetime` from now.
    policy.leaf_validity = lifetime + time::Duration::hours(1);
    let issued = ca
        .issue(
            &etcd_operator::controllers::cert_signer::consumers::leaf_spec(&consumer),
            &policy,
            now - time::Duration::hours(1),
        )
        .map_err(|e| failed(format!("issuing the planted certificate: {e}")))?;
    let pem = issued.cert_pem.into_bytes();
    let patch = serde_json::json!({"data": {
        "tls.crt": base64_of(&pem),
        "tls.key": base64_of(issued.key_pem.as_bytes()),
    }});
    secrets
        .patch(
            CONSUMER_SECRET,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(pem)
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
