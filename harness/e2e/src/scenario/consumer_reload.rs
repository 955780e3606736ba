//! `consumer-reload`: a consumer that reads its etcd TLS files only at start (as kube-apiserver
//! does its CA file) is declared `reload: Restart` with a pod selector, and a CA rotation waits
//! for its pod to restart before every step. The pod is an API object only: on the API
//! stand-in and on kas a Pod without a node is never run, so the test plays the kubelet by
//! writing the pod's status through the status subresource (phase `Running`, its container's
//! `state.running.startedAt`). On the stand-in the pod carries the mirror-pod annotation, as a
//! kube-apiserver static pod's mirror pod does (kube-apiserver refuses it on a pod without
//! `spec.nodeName`, so on kas the pod is a plain one). Story: the rotation is held in `TrustBoth` with status, plan and
//! an Event naming the consumer and the pod, and past the consumer's `deadlineSeconds` (10)
//! `CertSignerDegraded` says `ConsumerNotReloaded`; the pod "restarts" (its `startedAt` moves to
//! now) and the rotation goes on; in `ReissueLeaves` and `DropOld` it waits again until the pod
//! restarts; the rotation completes and the consumer is current.

use std::time::Duration;

use etcd_operator::api::{ConsumerStatus, EtcdClusterStatus};
use etcd_operator::controllers::cert_signer::consumers::CONSUMER_ROLE;
use etcd_operator::controllers::cert_signer::consumers::reload::MIRROR_ANNOTATION;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, OPERATOR_NS, create_or_keep};

const NS: &str = "etcd-reload";
const POD: &str = "kube-apiserver-n1";
const CONSUMER: &str = "kas-standin";
const TRIGGER: &str = "reload-1";
const DEADLINE_S: u64 = 10;
/// A phase's rollout (three nodes) and the wait.
const PHASE: Duration = Duration::from_secs(240);
const SEEN: Duration = Duration::from_secs(60);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// An object from its JSON.
fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, ControlPlaneError> {
    serde_json::from_value(v).map_err(|e| failed(format!("building an object: {e}")))
}

fn consumer(s: &EtcdClusterStatus) -> Option<&ConsumerStatus> {
    s.certificates
        .as_ref()?
        .consumers
        .iter()
        .find(|c| c.name == CONSUMER)
}

/// The rotation's phase, `Done` once it completed.
fn phase(s: &EtcdClusterStatus) -> &str {
    let Some(c) = &s.certificates else {
        return "";
    };
    match &c.ca_rotation {
        Some(r) if r.trigger == TRIGGER => r.phase.as_str(),
        None if c.handled_ca_rotation == TRIGGER => "Done",
        _ => "",
    }
}

/// The phase waits for our pod: `waitingFor` names the consumer and the pod.
fn held_in(s: &EtcdClusterStatus, p: &str) -> bool {
    let pod = format!("{NS}/{POD}");
    phase(s) == p
        && s.certificates
            .as_ref()
            .and_then(|c| c.ca_rotation.as_ref())
            .is_some_and(|r| {
                r.waiting_for
                    .iter()
                    .any(|w| w.contains(CONSUMER) && w.contains(&pod))
            })
}

fn cert_signer_reason(s: &EtcdClusterStatus) -> Option<(String, String)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == "CertSignerDegraded" && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

pub(super) async fn consumer_reload(h: &mut Harness) -> Result<(), ControlPlaneError> {
    setup(h).await?;
    started_at(h, "2020-01-01T00:00:00Z").await?;
    h.patch_spec(serde_json::json!({"clients": [{
        "name": CONSUMER, "commonName": "kube-apiserver-etcd-client",
        "namespace": NS, "secretName": "kas-etcd-client",
        "reload": {"mode": "Restart", "deadlineSeconds": DEADLINE_S,
                   "pods": {"matchLabels": {"component": "kas-standin"}}}
    }]}))
    .await?;
    let pod = format!("{NS}/{POD}");
    h.wait_status(
        "the consumer's status names its pod, not restarted since the Secret was written",
        SEEN,
        |s| consumer(s).is_some_and(|c| !c.current && c.pods == [pod.clone()]),
    )
    .await?;
    let before = h.status().await.latest_available_revision;
    h.patch_spec(serde_json::json!({"certificates": {"caRotationRequest": TRIGGER}}))
        .await?;
    held_in_trust_both(h, before).await?;
    restart(h).await?;
    for p in ["ReissueLeaves", "DropOld"] {
        h.wait_status(
            &format!("phase {p} waits for {CONSUMER}'s pod {pod}"),
            PHASE,
            |s| held_in(s, p),
        )
        .await?;
        restart(h).await?;
    }
    let s = h
        .wait_status("the CA rotation completed", PHASE, |s| phase(s) == "Done")
        .await?;
    let c = consumer(&s).ok_or_else(|| failed("no consumer status"))?;
    if !c.current || c.overdue || cert_signer_reason(&s).is_some() {
        return Err(failed(format!(
            "after the rotation: consumer {c:?}, CertSignerDegraded {:?}",
            cert_signer_reason(&s)
        )));
    }
    h.step(format!(
        "CA rotation completed with {CONSUMER} current (Secret written {}); CertSignerDegraded False",
        c.material_written_time
    ));
    h.wait_settled(3, PHASE).await?;
    Ok(())
}

/// The phase `TrustBoth` is held by the pod alone (every node already runs the latest
/// revision), named in status, plan and an Event; past the deadline, Degraded says so.
async fn held_in_trust_both(h: &mut Harness, before: i64) -> Result<(), ControlPlaneError> {
    let pod = format!("{NS}/{POD}");
    h.wait_status(
        "TrustBoth rolled to every node and held for the pod",
        PHASE,
        |s| {
            held_in(s, "TrustBoth")
                && s.latest_available_revision > before
                && !s.node_statuses.is_empty()
                && s.node_statuses
                    .iter()
                    .all(|n| n.current_revision == s.latest_available_revision)
        },
    )
    .await?;
    let s = h
        .wait_status(
            "CertSignerDegraded ConsumerNotReloaded naming the consumer and pod",
            SEEN,
            |s| {
                cert_signer_reason(s).is_some_and(|(r, m)| {
                    r == "ConsumerNotReloaded" && m.contains(CONSUMER) && m.contains(&pod)
                })
            },
        )
        .await?;
    if phase(&s) != "TrustBoth" || !consumer(&s).is_some_and(|c| c.overdue) {
        return Err(failed(format!(
            "past the deadline the rotation must still wait in TrustBoth with the consumer overdue: phase {}, consumer {:?}",
            phase(&s),
            consumer(&s)
        )));
    }
    plan_names_the_pod(h).await?;
    event_names_the_pod(h).await
}

/// The test plays the kubelet: the pod's container (re)started at `at`, written through the
/// status subresource.
async fn started_at(h: &Harness, at: &str) -> Result<(), ControlPlaneError> {
    let status = serde_json::json!({"status": {
        "phase": "Running",
        "containerStatuses": [{
            "name": "kube-apiserver", "image": "kube-apiserver:standin", "imageID": "",
            "ready": true, "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": at}}
        }]
    }});
    Api::<Pod>::namespaced(h.cp.client(), NS)
        .patch_status(POD, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// "Restarts" the pod: its container started now, at or after the Secret's write (the clock is
/// waited on, in whole seconds, until it has passed `materialWrittenTime`).
async fn restart(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let written = consumer(&h.status().await)
        .and_then(|c| etcd_operator::certs::parse_time(&c.material_written_time))
        .ok_or_else(|| failed("no materialWrittenTime for the consumer"))?;
    let now = loop {
        let now = time::OffsetDateTime::now_utc();
        if now >= written {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let at = etcd_operator::certs::format_time(now);
    started_at(h, &at).await?;
    h.step(format!(
        "pod {NS}/{POD} restarted at {at} (Secret written {})",
        etcd_operator::certs::format_time(written)
    ));
    Ok(())
}

/// The namespace, its default ServiceAccount (no controller makes it here), the RoleBinding the
/// operator needs to read the Secret and list the pods there, and the pod (no node: never run).
async fn setup(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let client = h.cp.client();
    let ns: Namespace = obj(serde_json::json!({"metadata": {"name": NS}}))?;
    create_or_keep(&Api::<Namespace>::all(client.clone()), &ns).await?;
    let sa: ServiceAccount = obj(serde_json::json!({"metadata": {"name": "default"}}))?;
    create_or_keep(&Api::<ServiceAccount>::namespaced(client.clone(), NS), &sa).await?;
    let binding: RoleBinding = obj(serde_json::json!({
        "metadata": {"name": "etcd-operator-consumer", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CONSUMER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "etcd-operator", "namespace": OPERATOR_NS}]
    }))?;
    create_or_keep(
        &Api::<RoleBinding>::namespaced(client.clone(), NS),
        &binding,
    )
    .await?;
    // kube-apiserver refuses the mirror-pod annotation without spec.nodeName, and a pod bound
    // to a node would be run by its node agent (or, on a node that does not exist, deleted by
    // the pod garbage collector): the annotation only where the API takes it unbound (the
    // stand-in); that mirror pods are selected is also a unit test (`consumers::reload`).
    let mirror = !h.cp.operator_rbac_enforced();
    let annotations = if mirror {
        serde_json::json!({MIRROR_ANNOTATION: "standin"})
    } else {
        serde_json::json!({})
    };
    let pod: Pod = obj(serde_json::json!({
        "metadata": {"name": POD, "namespace": NS,
                     "labels": {"component": "kas-standin"},
                     "annotations": annotations},
        "spec": {"automountServiceAccountToken": false,
                 "containers": [{"name": "kube-apiserver", "image": "kube-apiserver:standin"}]}
    }))?;
    Api::<Pod>::namespaced(client, NS)
        .create(&PostParams::default(), &pod)
        .await?;
    let kind = if mirror {
        "with the mirror-pod annotation"
    } else {
        "without the mirror-pod annotation (kube-apiserver requires spec.nodeName with it)"
    };
    h.step(format!(
        "namespace {NS}: pod {POD} {kind}, no node: the test plays its kubelet; ClusterRole {CONSUMER_ROLE} bound to the operator"
    ));
    Ok(())
}

/// `etcd-operator plan` names the consumer and the pod the phase waits for.
async fn plan_names_the_pod(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let stdout = h.plan().await?;
    let line = stdout
        .lines()
        .find(|l| l.contains("TrustBoth") && l.contains(CONSUMER) && l.contains(POD));
    let Some(line) = line else {
        return Err(failed(format!(
            "plan does not name {CONSUMER} and {POD} in TrustBoth:\n{stdout}"
        )));
    };
    h.step(format!("plan: {}", line.trim()));
    Ok(())
}

/// Event `CaRotationWaitingForConsumers` names the consumer and the pod.
async fn event_names_the_pod(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(h.cp.client());
    let list = events.list(&Default::default()).await?;
    let found = list.items.iter().find_map(|e| {
        let note = e.note.as_deref()?;
        (e.reason.as_deref() == Some("CaRotationWaitingForConsumers")
            && note.contains(CONSUMER)
            && note.contains(POD))
        .then(|| note.to_owned())
    });
    match found {
        Some(note) => {
            h.step(format!("Event CaRotationWaitingForConsumers: {note}"));
            Ok(())
        }
        None => {
            let reasons: Vec<_> = list.items.iter().filter_map(|e| e.reason.clone()).collect();
            Err(failed(format!(
                "no Event CaRotationWaitingForConsumers naming {CONSUMER} and {POD}; reasons seen: {reasons:?}"
            )))
        }
    }
}
