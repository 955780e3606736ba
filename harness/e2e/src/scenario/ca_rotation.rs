//! The `ca-rotation` scenario: the etcd CA is replaced under write load, in three phases that
//! each reach every node before the next (trust both CAs, re-issue every leaf from the new one,
//! drop the old one). The write load is a client of the issued certificates: it reads its
//! certificate and the CAs to trust (`ca.crt`) from Secret `etcd-client` every second, as a
//! consumer that reloads its Secret would. At the end every leaf and client certificate is the
//! new CA's, the bundles trust it alone, and the next CA's Secret is gone.
//!
//! With `TEST_API=kas` it runs on the stacked control plane (real kube-apiservers on the
//! managed etcd, a consumer with `reload: Restart` whose pods the kube-apiserver operator
//! stand-in restarts onto each phase's material): there it also checks that the operator saw
//! every kube-apiserver pick the final material up by the digest its pods carry. The same
//! rotation is a phase of `api-availability` ([`super::api_availability`]), with the API's
//! clients watched throughout.

use std::time::{Duration, Instant};

use etcd_operator::api::EtcdClusterStatus;
use etcd_operator::certs::{inspect_certs, inspect_pem};
use etcd_operator::controllers::cert_signer::consumers::MATERIAL_DIGEST_ANNOTATION;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Api;
use kube::api::ListParams;

use super::harness::Harness;
use crate::controlplane::apiserver_operator::CONSUMER_SECRET;
use crate::controlplane::{ControlPlaneError, OPERATOR_NS, STATIC_NS, retry_transport};

/// Three rollouts of three nodes each.
const DEADLINE: Duration = Duration::from_secs(300);
const TRIGGER: &str = "rotate-1";
const PHASES: [&str; 3] = ["TrustBoth", "ReissueLeaves", "DropOld"];

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// How far the rotation got: 0 none, 1..=3 the phases, 4 done.
fn progress(s: &EtcdClusterStatus) -> usize {
    let Some(c) = &s.certificates else {
        return 0;
    };
    if c.handled_ca_rotation == TRIGGER && c.ca_rotation.is_none() {
        return 4;
    }
    c.ca_rotation
        .as_ref()
        .filter(|r| r.trigger == TRIGGER)
        .and_then(|r| PHASES.iter().position(|p| *p == r.phase))
        .map_or(0, |i| i + 1)
}

pub async fn ca_rotation(h: &mut Harness) -> Result<(), ControlPlaneError> {
    rotate(h).await
}

/// Waits for the rotation to pass each phase and complete: when each phase was seen, and how long it all took.
async fn wait_phases(
    h: &mut Harness,
    deadline: Duration,
) -> Result<(Vec<String>, Duration), ControlPlaneError> {
    let started = Instant::now();
    let mut at = Vec::new();
    for (i, phase) in PHASES.iter().enumerate() {
        let s = h
            .wait_status(
                &format!("CA rotation at phase {phase} or later"),
                deadline,
                |s| progress(s) > i,
            )
            .await?;
        at.push(format!("{phase} +{:.1}s", started.elapsed().as_secs_f64()));
        if let Some(r) = s.certificates.and_then(|c| c.ca_rotation) {
            h.step(format!(
                "caRotation: phase {} since {}: {}",
                r.phase, r.phase_started_at, r.message
            ));
        }
    }
    h.wait_status("the CA rotation completed", deadline, |s| progress(s) == 4)
        .await?;
    let took = started.elapsed();
    Ok((at, took))
}

pub(super) async fn rotate(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let old = h.signer().await?;
    h.patch_spec(serde_json::json!({"certificates": {"caRotationRequest": TRIGGER}}))
        .await?;
    let deadline = DEADLINE + h.control_plane_slack();
    let (at, took) = wait_phases(h, deadline).await?;
    h.wait_settled(3, deadline).await?;

    // Everything is the new CA's.
    let new = h.signer().await?;
    if new.cert_pem() == old.cert_pem() {
        return Err(failed("etcd-signer still holds the old CA"));
    }
    if h.secret_data(OPERATOR_NS, "etcd-signer-next")
        .await?
        .is_some()
    {
        return Err(failed("etcd-signer-next outlived the rotation"));
    }
    let all = h.secret_data_of(STATIC_NS, "etcd-all-certs").await?;
    let infos = inspect_certs(&new, &all);
    let stale: Vec<&str> = infos
        .iter()
        .filter(|i| !i.issued_by_ca)
        .map(|i| i.secret_key.as_str())
        .collect();
    let client = h.secret_data_of(OPERATOR_NS, "etcd-client").await?;
    let client_cert = client.get("tls.crt").cloned().unwrap_or_default();
    if !stale.is_empty() || !inspect_pem(&new, "etcd-client", &client_cert).issued_by_ca {
        return Err(failed(format!(
            "not issued by the new CA: {stale:?} (etcd-client included when listed last)"
        )));
    }
    let cms: Api<ConfigMap> = Api::namespaced(h.cp.client(), STATIC_NS);
    let bundles = cms
        .get("etcd-all-bundles")
        .await
        .map_err(|e| failed(format!("etcd-all-bundles: {e}")))?;
    let old_pem = old.cert_pem().trim().to_owned();
    let still_old: Vec<String> = bundles
        .data
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, v)| v.contains(&old_pem) || !v.contains(new.cert_pem().trim()))
        .map(|(k, _)| k)
        .collect();
    if !still_old.is_empty() {
        return Err(failed(format!(
            "bundles still trusting the old CA or not the new: {still_old:?}"
        )));
    }
    if h.cp.stacked().is_some() {
        let line = kube_apiservers_on_material(h).await?;
        h.step(line);
    }
    h.step(format!(
        "CA rotated in {:.1}s ({}): {} leaves and the operator's client certificate issued by the new CA (expires {}), every bundle trusts it alone, etcd-signer-next deleted",
        took.as_secs_f64(),
        at.join(", "),
        infos.len(),
        etcd_operator::certs::format_time(new.not_after())
    ));
    Ok(())
}

/// On the stacked control plane: kube-apiserver's consumer is current in status, and every
/// kube-apiserver mirror pod carries the material digest the operator recorded (and annotated
/// its Secret with), as laid down by the kube-apiserver operator stand-in.
async fn kube_apiservers_on_material(h: &Harness) -> Result<String, ControlPlaneError> {
    let status = h.status().await;
    let consumer = status
        .certificates
        .iter()
        .flat_map(|c| c.consumers.iter())
        .find(|c| c.name == "kube-apiserver")
        .ok_or_else(|| failed("status names no consumer kube-apiserver"))?;
    let secret: Api<Secret> = Api::namespaced(h.cp.client(), OPERATOR_NS);
    // Every kube-apiserver restarts in a rotation: a connection may end under a call.
    let annotated = retry_transport(CONSUMER_SECRET, || secret.get(CONSUMER_SECRET))
        .await?
        .metadata
        .annotations
        .unwrap_or_default()
        .remove(MATERIAL_DIGEST_ANNOTATION);
    let pods: Api<Pod> = Api::namespaced(h.cp.client(), "kube-system");
    let selector = ListParams::default().labels("component=kube-apiserver");
    let listed = retry_transport("listing kube-apiserver pods", || pods.list(&selector)).await?;
    let on: Vec<(String, Option<String>)> = listed
        .items
        .iter()
        .map(|p| {
            let digest = p.metadata.annotations.as_ref();
            (
                p.metadata.name.clone().unwrap_or_default(),
                digest.and_then(|a| a.get(MATERIAL_DIGEST_ANNOTATION).cloned()),
            )
        })
        .collect();
    let want = Some(consumer.material_digest.clone());
    if !consumer.current || annotated != want || on.is_empty() || on.iter().any(|(_, d)| *d != want)
    {
        return Err(failed(format!(
            "kube-apiserver's material: status {:?} (current {}), Secret annotation {annotated:?}, pods {on:?}",
            consumer.material_digest, consumer.current
        )));
    }
    Ok(format!(
        "consumer kube-apiserver current on material {}: its Secret and all {} kube-apiserver pods carry that digest",
        consumer.material_digest,
        on.len()
    ))
}
