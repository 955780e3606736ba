//! The `ca-rotation` scenario: the etcd CA is replaced under write load, in three phases that
//! each reach every node before the next (trust both CAs, re-issue every leaf from the new one,
//! drop the old one). Here nobody asks for it: the story is an upgrade from an operator that
//! issued `etcd-metric-client` from the etcd CA (planted as that version wrote it, and shown to
//! write a key through a member's client port). The operator rotates the CA by itself (trigger
//! `scraperRevocation`); afterwards that certificate reads and writes nothing, and the new
//! `etcd-metric-client` is the metrics CA's and scrapes through the metrics proxy. The write load is a client of the issued certificates: it reads its
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
use etcd_operator::certs::{CaRole, Signers, inspect_certs, inspect_pem};
use etcd_operator::controllers::cert_signer::consumers::MATERIAL_DIGEST_ANNOTATION;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Api;
use kube::api::ListParams;

use super::harness::Harness;
use crate::controlplane::apiserver_operator::CONSUMER_SECRET;
use crate::controlplane::{ControlPlaneError, OPERATOR_NS, STATIC_NS, retry_transport};
use membership::{EtcdClient, TlsPem};

/// Three rollouts of three nodes each.
const DEADLINE: Duration = Duration::from_secs(300);
/// The request [`rotate`] makes.
const REQUEST: &str = "rotate-1";
/// The trigger of the rotation that revokes a scraper's certificate of the etcd CA.
const SCRAPER_TRIGGER: &str = etcd_operator::controllers::cert_signer::scrapers::TRIGGER;
const PHASES: [&str; 3] = ["TrustBoth", "ReissueLeaves", "DropOld"];
const CALL: Duration = Duration::from_secs(5);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// How far the rotation for `trigger` got: 0 none, 1..=3 the phases, 4 done (no rotation runs
/// and one completed after `before`, the `lastCaRotation` seen before it started).
fn progress(s: &EtcdClusterStatus, trigger: &str, before: &str) -> usize {
    let Some(c) = &s.certificates else {
        return 0;
    };
    if c.ca_rotation.is_none() && !c.last_ca_rotation.is_empty() && c.last_ca_rotation != before {
        return 4;
    }
    c.ca_rotation
        .as_ref()
        .filter(|r| r.trigger == trigger)
        .and_then(|r| PHASES.iter().position(|p| *p == r.phase))
        .map_or(0, |i| i + 1)
}

pub async fn ca_rotation(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let planted = plant_scraper_of_the_etcd_ca(h).await?;
    let old = h.signer().await?;
    let before = last_rotation(h).await;
    let deadline = DEADLINE + h.control_plane_slack();
    let (at, took) = wait_phases(h, SCRAPER_TRIGGER, &before, deadline).await?;
    h.wait_settled(3, deadline).await?;
    everything_of_the_new_ca(h, &old, &at, took).await?;
    let said = scraper_refused(h, &planted).await?;
    h.step(format!(
        "the planted etcd-metric-client of the old etcd CA after the rotation: {said}"
    ));
    super::metrics_port::client_certs_required(h).await
}

/// `lastCaRotation` as status has it now.
async fn last_rotation(h: &Harness) -> String {
    h.status()
        .await
        .certificates
        .map(|c| c.last_ca_rotation)
        .unwrap_or_default()
}

/// Writes Secret `etcd-metric-client` as an operator before the metrics CA did (issued by the
/// etcd CA, the etcd CA bundle as `ca.crt`) and shows that it writes a key through n1's client
/// port (so the check after the rotation can fail). Returns it.
async fn plant_scraper_of_the_etcd_ca(h: &mut Harness) -> Result<TlsPem, ControlPlaneError> {
    use etcd_operator::certs::{CertPolicy, ClientCertKind};
    let ca = h.signer().await?;
    let now = time::OffsetDateTime::now_utc();
    let issued = ca
        .issue(&ClientCertKind::Metrics.spec(), &CertPolicy::default(), now)
        .map_err(|e| failed(format!("issuing the old-style scraper certificate: {e}")))?;
    let operator = h.secret_data_of(OPERATOR_NS, "etcd-client").await?;
    let tls = TlsPem {
        ca: operator.get("ca.crt").cloned().unwrap_or_default(),
        cert: issued.cert_pem.into_bytes(),
        key: issued.key_pem.into_bytes(),
    };
    let data: std::collections::BTreeMap<String, k8s_openapi::ByteString> = [
        ("ca.crt", &tls.ca),
        ("tls.crt", &tls.cert),
        ("tls.key", &tls.key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), k8s_openapi::ByteString(v.clone())))
    .collect();
    let secrets: Api<Secret> = Api::namespaced(h.cp.client(), OPERATOR_NS);
    let patch = serde_json::json!({"data": data});
    secrets
        .patch(
            "etcd-metric-client",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(|e| failed(format!("planting etcd-metric-client: {e}")))?;
    let client = scraper_client(h, &tls)?;
    tokio::time::timeout(CALL * 2, client.put("/scraper-planted", b"x".to_vec()))
        .await
        .map_err(|_| failed("the planted scraper certificate's write timed out"))?
        .map_err(|e| {
            failed(format!(
                "the planted scraper certificate could not write: {e}"
            ))
        })?;
    h.step("planted etcd-metric-client issued by the etcd CA (as an operator before the metrics CA wrote it): it wrote /scraper-planted through n1's client port");
    Ok(tls)
}

fn scraper_client(h: &Harness, tls: &TlsPem) -> Result<EtcdClient, ControlPlaneError> {
    let ip = h.cp.node("n1")?.ip();
    let endpoint = format!("https://{ip}:2379")
        .parse()
        .map_err(|e| failed(format!("n1's client URL: {e}")))?;
    EtcdClient::with_pem(vec![endpoint], Some(tls), CALL)
        .map_err(|e| failed(format!("a client with the planted certificate: {e}")))
}

/// The planted certificate writes and reads nothing now; what the write met.
async fn scraper_refused(h: &Harness, tls: &TlsPem) -> Result<String, ControlPlaneError> {
    // It verifies n1 with the new CA now; the refusal must come from its own certificate.
    let operator = h.secret_data_of(OPERATOR_NS, "etcd-client").await?;
    let tls = TlsPem {
        ca: operator.get("ca.crt").cloned().unwrap_or_default(),
        ..tls.clone()
    };
    let client = scraper_client(h, &tls)?;
    let wrote = tokio::time::timeout(CALL * 2, client.put("/scraper-planted", b"y".to_vec())).await;
    let said = match wrote {
        Ok(Ok(_)) => return Err(failed("the planted scraper certificate still writes")),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "timed out".to_owned(),
    };
    if let Ok(Ok(v)) = tokio::time::timeout(CALL * 2, client.get("/scraper-planted")).await {
        return Err(failed(format!(
            "the planted scraper certificate still reads ({v:?})"
        )));
    }
    Ok(said)
}

/// Waits for the rotation for `trigger` to pass each phase and complete (`before`: the
/// `lastCaRotation` seen before it started): when each phase was seen, and how long it all
/// took.
async fn wait_phases(
    h: &mut Harness,
    trigger: &str,
    before: &str,
    deadline: Duration,
) -> Result<(Vec<String>, Duration), ControlPlaneError> {
    let started = Instant::now();
    let mut at = Vec::new();
    for (i, phase) in PHASES.iter().enumerate() {
        let s = h
            .wait_status(
                &format!("CA rotation ({trigger}) at phase {phase} or later"),
                deadline,
                |s| progress(s, trigger, before) > i,
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
    h.wait_status("the CA rotation completed", deadline, |s| {
        progress(s, trigger, before) == 4
    })
    .await?;
    let took = started.elapsed();
    Ok((at, took))
}

pub(super) async fn rotate(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let old = h.signer().await?;
    let before = last_rotation(h).await;
    h.patch_spec(serde_json::json!({"certificates": {"caRotationRequest": REQUEST}}))
        .await?;
    let deadline = DEADLINE + h.control_plane_slack();
    let (at, took) = wait_phases(h, REQUEST, &before, deadline).await?;
    h.wait_settled(3, deadline).await?;
    everything_of_the_new_ca(h, &old, &at, took).await
}

/// Everything is the new CA's: every etcd leaf and the operator's client certificate, every
/// bundle (the metrics leaves stay the metrics CA's), and the next CA's Secret is gone.
async fn everything_of_the_new_ca(
    h: &mut Harness,
    old: &etcd_operator::certs::EtcdCa,
    at: &[String],
    took: Duration,
) -> Result<(), ControlPlaneError> {
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
    // The metrics leaves stay the metrics CA's: an etcd CA rotation does not touch them.
    let metrics = h.signer_of(CaRole::Metrics).await?;
    let signers = Signers {
        etcd: &new,
        metrics: &metrics,
    };
    let infos = inspect_certs(signers, &all);
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
        .filter(|(k, v)| {
            if k == etcd_operator::certs::METRICS_CA_BUNDLE_KEY {
                v.trim() != metrics.cert_pem().trim()
            } else {
                v.contains(&old_pem) || !v.contains(new.cert_pem().trim())
            }
        })
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
        "CA rotated in {:.1}s ({}): {} leaves (the metrics proxies' of the metrics CA, the others) and the operator's client certificate issued by the new CA (expires {}), every bundle trusts it alone, etcd-signer-next deleted",
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
