//! The `static-pod-removed` scenario: an admin moves n2's etcd manifest out of the node's
//! manifests directory (the first step of every manual recovery), so its kubelet stops etcd and
//! removes the mirror pod. The operator must say so (`NodeInstallerDegraded` naming n2, since
//! when, and what it will do), leave n2 alone while the Node carries the
//! `etcd.static-operator.io/etcd-stopped` annotation, even past the grace period, and once the
//! annotation is removed install n2's revision again, so n2's member serves again with its data.

use std::time::Duration;

use etcd_operator::api::EtcdClusterStatus;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;

const GRACE_S: u32 = 30;
const SETTLE: Duration = Duration::from_secs(240);
const ANNOTATION: &str = "etcd.static-operator.io/etcd-stopped";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn degraded_message(s: &EtcdClusterStatus) -> String {
    s.conditions
        .iter()
        .find(|c| c.type_ == "NodeInstallerDegraded" && c.status == "True")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

fn n2_missing_since(s: &EtcdClusterStatus) -> Option<time::OffsetDateTime> {
    let n2 = s.node_statuses.iter().find(|n| n.node_name == "n2")?;
    etcd_operator::certs::parse_time(&n2.etcd_pod_missing_since)
}

async fn annotate(h: &mut Harness, value: Option<&str>) -> Result<(), ControlPlaneError> {
    let nodes: Api<Node> = Api::all(h.cp.client());
    let patch = serde_json::json!({ "metadata": { "annotations": { ANNOTATION: value } } });
    nodes
        .patch("n2", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    h.step(match value {
        Some(v) => format!("Node n2 annotated {ANNOTATION}={v:?}"),
        None => format!("annotation {ANNOTATION} removed from Node n2"),
    });
    Ok(())
}

pub async fn static_pod_removed(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let revision = before.latest_available_revision;
    // Its own revision: the latest, or one equivalent to it (made before a later learner add).
    let n2_revision = before
        .node_statuses
        .iter()
        .find(|n| n.node_name == "n2")
        .map_or(0, |n| n.current_revision);
    h.patch_spec(serde_json::json!({ "missingPodGraceSeconds": GRACE_S }))
        .await?;
    annotate(h, Some("disk check, ticket 42")).await?;
    let manifest = h.cp.node("n2")?.manifest_dir().join("etcd-pod.yaml");
    let aside = h.cp.node("n2")?.root.join("etcd-pod.yaml.moved-away");
    std::fs::rename(&manifest, &aside)
        .map_err(|e| failed(format!("moving {}: {e}", manifest.display())))?;
    h.step("n2's etcd manifest moved out of its manifests directory");
    let s = h
        .wait_status(
            "n2 reported without an etcd pod, stopped by an admin",
            SETTLE,
            |s| {
                let m = degraded_message(s);
                m.contains("n2 shows no etcd static pod since")
                    && m.contains("stopped by an admin")
                    && m.contains("disk check, ticket 42")
            },
        )
        .await?;
    let since = n2_missing_since(&s).ok_or_else(|| failed("no etcdPodMissingSince for n2"))?;
    // Past the grace period (by the operator's own record), the annotation still holds n2 back.
    let past = since + time::Duration::seconds(i64::from(GRACE_S) + 5);
    h.wait_status("the grace period over while n2 is held", SETTLE, |_| {
        time::OffsetDateTime::now_utc() > past
    })
    .await?;
    let s = h.status().await;
    let n2 = s.node_statuses.iter().find(|n| n.node_name == "n2");
    if manifest.exists() || n2.is_none_or(|n| n.current_revision != n2_revision) {
        return Err(failed(format!(
            "n2 was touched although an admin stopped it: manifest back: {}, status {n2:?}",
            manifest.exists()
        )));
    }
    annotate(h, None).await?;
    h.wait_status("n2 reported as being installed again", SETTLE, |s| {
        degraded_message(s).contains("being installed again")
            || s.node_statuses
                .iter()
                .any(|n| n.node_name == "n2" && n.target_revision.is_some())
    })
    .await?;
    let s = h.wait_settled(3, SETTLE).await?;
    if s.latest_available_revision != revision {
        return Err(failed(format!(
            "a new revision was made ({} → {}): the same one should be installed again",
            revision, s.latest_available_revision
        )));
    }
    if !manifest.exists() || n2_missing_since(&s).is_some() || !degraded_message(&s).is_empty() {
        return Err(failed(format!(
            "after the reinstall: manifest there: {}, NodeInstallerDegraded: {:?}",
            manifest.exists(),
            degraded_message(&s)
        )));
    }
    std::fs::remove_file(&aside).map_err(|e| failed(e.to_string()))?;
    Ok(())
}
