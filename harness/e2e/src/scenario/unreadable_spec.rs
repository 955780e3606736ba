//! `unreadable-spec`: the API server stores an EtcdCluster this operator cannot decode, as it
//! does when the CRD installed is newer or looser than the operator (here: the CRD is edited
//! so that `spec.clients[].commonName` is no longer required, and a client without one is
//! patched in together with a `forceRedeploymentReason`). The operator must say so at once
//! and act on nothing: `SpecDegraded` and `Degraded` True with reason `SpecUnreadable` naming
//! the field, a warning Event, `observedGeneration` and the latest revision unchanged, and
//! `etcd-operator plan` exiting non-zero with the same finding. Once the spec is fixed, the
//! held redeployment goes through (one new revision, rolled to every node) and the condition
//! clears. The CRD is put back as it was.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, PostParams};

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;

const CRD: &str = "etcdclusters.etcd.static-operator.io";
const SETTLE: Duration = Duration::from_secs(240);
const SEEN: Duration = Duration::from_secs(60);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

pub(super) async fn unreadable_spec(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let (acted, revision) = (before.observed_generation, before.latest_available_revision);
    let crds: Api<CustomResourceDefinition> = Api::all(h.cp.client());
    let original = crds.get(CRD).await?;
    crds.replace(CRD, &PostParams::default(), &loosened(&original)?)
        .await?;
    h.step("the CRD loosened: spec.clients[].commonName no longer required");
    patch_once_loosened(h).await?;
    let s = h
        .wait_status(
            "SpecDegraded names spec.clients[0] and commonName",
            SEEN,
            |s| {
                spec_degraded(s)
                    .is_some_and(|m| m.contains("spec.clients[0]") && m.contains("commonName"))
            },
        )
        .await?;
    held(&s, acted, revision)?;
    warning_event(h).await?;
    plan_refuses(h).await?;
    let s = h.status().await;
    held(&s, acted, revision)?;
    h.step("observedGeneration and the latest revision unchanged; Event and plan name the field");

    h.patch_spec(serde_json::json!({"clients": [{"name": "kas", "commonName": "kas"}]}))
        .await?;
    let s = h
        .wait_status(
            "the fixed spec acted on: one new revision rolled out",
            SETTLE,
            |s| {
                s.latest_available_revision == revision + 1
                    && crate::view::settled(s, 3)
                    && spec_degraded(s).is_none()
            },
        )
        .await?;
    if s.observed_generation <= acted {
        return Err(failed(format!(
            "observedGeneration {:?} did not move past {acted:?}",
            s.observed_generation
        )));
    }
    // The CRD as it was (the spec is valid under it again).
    let mut back = crds.get(CRD).await?;
    back.spec = original.spec;
    crds.replace(CRD, &PostParams::default(), &back).await?;
    h.step("the CRD put back as it was");
    Ok(())
}

/// Patches in the client without `commonName`. kube-apiserver serves a replaced CRD's schema
/// a moment later (until then it refuses the patch as the old schema would: 422 naming
/// `commonName`), so a refusal of that kind is tried again within [`SEEN`].
async fn patch_once_loosened(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let patch = serde_json::json!({
        "clients": [{"name": "kas"}],
        "forceRedeploymentReason": "unreadable-spec",
    });
    let deadline = tokio::time::Instant::now() + SEEN;
    loop {
        match h.patch_spec(patch.clone()).await {
            Err(ControlPlaneError::Kube(kube::Error::Api(s)))
                if s.code == 422
                    && s.message.contains("commonName")
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// The CRD with `commonName` dropped from what a client requires.
fn loosened(crd: &CustomResourceDefinition) -> Result<CustomResourceDefinition, ControlPlaneError> {
    let mut v = serde_json::to_value(crd).map_err(|e| failed(e.to_string()))?;
    let required = v
        .pointer_mut(
            "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/clients/items/required",
        )
        .and_then(serde_json::Value::as_array_mut)
        .ok_or_else(|| failed("the CRD has no required fields for spec.clients[]"))?;
    required.retain(|f| f != "commonName");
    serde_json::from_value(v).map_err(|e| failed(e.to_string()))
}

/// `SpecDegraded`'s message while it is True with reason `SpecUnreadable`.
fn spec_degraded(s: &etcd_operator::api::EtcdClusterStatus) -> Option<String> {
    s.conditions
        .iter()
        .find(|c| c.type_ == "SpecDegraded" && c.status == "True" && c.reason == "SpecUnreadable")
        .map(|c| c.message.clone())
}

/// Nothing acted on: the aggregate Degraded says why, observedGeneration and the revision stay.
fn held(
    s: &etcd_operator::api::EtcdClusterStatus,
    acted: Option<i64>,
    revision: i64,
) -> Result<(), ControlPlaneError> {
    let degraded = s
        .conditions
        .iter()
        .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "SpecUnreadable");
    if !degraded || s.observed_generation != acted || s.latest_available_revision != revision {
        return Err(failed(format!(
            "while the spec cannot be read: Degraded/SpecUnreadable {degraded}, observedGeneration \
             {:?} (was {acted:?}), latest revision {} (was {revision})",
            s.observed_generation, s.latest_available_revision
        )));
    }
    Ok(())
}

/// A warning Event `SpecUnreadable` on the EtcdCluster names the field.
async fn warning_event(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(h.cp.client());
    let deadline = tokio::time::Instant::now() + SEEN;
    loop {
        let list = events.list(&ListParams::default()).await?;
        let found = list.items.iter().find(|e| {
            e.reason.as_deref() == Some("SpecUnreadable")
                && e.type_.as_deref() == Some("Warning")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("spec.clients[0]"))
        });
        if let Some(e) = found {
            h.step(format!(
                "Event SpecUnreadable: {}",
                e.note.clone().unwrap_or_default()
            ));
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            let reasons: Vec<_> = list.items.iter().filter_map(|e| e.reason.clone()).collect();
            return Err(failed(format!(
                "no Warning Event SpecUnreadable; reasons seen: {reasons:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `etcd-operator plan` prints the finding and exits non-zero, without a backtrace.
async fn plan_refuses(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let io = |e: std::io::Error| ControlPlaneError::Io("running etcd-operator plan".into(), e);
    let bin = crate::binaries::binary("etcd-operator").map_err(io)?;
    let out = tokio::process::Command::new(bin)
        .arg("plan")
        .env("KUBECONFIG", h.cp.admin_kubeconfig())
        .env_remove("RUST_BACKTRACE")
        .output()
        .await
        .map_err(io)?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let named = |t: &str| t.contains("spec.clients[0]") && t.contains("commonName");
    if out.status.success() || !named(&stdout) || !named(&stderr) || stderr.contains("backtrace") {
        return Err(failed(format!(
            "plan on an unreadable spec: {}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        )));
    }
    h.step(format!("plan exits {} naming the field", out.status));
    Ok(())
}
