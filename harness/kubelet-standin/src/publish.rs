//! Publishing pod status (the kubelet status manager and mirror-pod manager stand-in).
//!
//! For a static pod the agent keeps a **mirror pod** in the API: same spec, name
//! `<pod>-<node>`, annotations `kubernetes.io/config.mirror` (= the manifest hash) and
//! `kubernetes.io/config.source: file`, `spec.nodeName` set. A mirror pod with another hash
//! (an older manifest) is deleted and recreated; a deleted one is recreated on the next
//! resync. For a pod bound through the API the agent patches that pod's status.
//! Status is computed by [`crate::status::pod_status`] and sent only when it changed (plus
//! every resync interval for mirror pods).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::events::{PodEvent, events_between};
use crate::static_pods::PodKey;
use crate::status::{PodObservation, pod_phase, pod_status};

/// The mirror-pod annotation.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Whether an API pod is a mirror pod (never run by the agent).
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

fn mirror_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .map(String::as_str)
}

/// The mirror pod object to create for a static pod (pure): owned by the Node, as the
/// kubelet does it.
pub fn mirror_pod(static_pod: &Pod, node_uid: &str) -> Pod {
    let mut p = static_pod.clone();
    p.metadata.uid = None;
    p.metadata.resource_version = None;
    p.status = None;
    let node = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    p.metadata.owner_references = Some(vec![crate::node::node_owner(&node, node_uid)]);
    p
}

/// Makes sure the mirror pod exists with the right hash; returns whether it was (re)created.
pub async fn ensure_mirror(api: &Api<Pod>, pod: &Pod, node_uid: &str) -> Result<bool, kube::Error> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let want = mirror_hash(pod);
    if let Some(existing) = api.get_opt(&name).await? {
        if mirror_hash(&existing) == want && existing.metadata.deletion_timestamp.is_none() {
            return Ok(false);
        }
        tracing::info!(pod = %name, "replacing outdated mirror pod");
        delete_now(api, &name).await?;
    }
    match api
        .create(&PostParams::default(), &mirror_pod(pod, node_uid))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes a pod with grace period 0; NotFound is success.
pub async fn delete_now(api: &Api<Pod>, name: &str) -> Result<(), kube::Error> {
    match api
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Patches a pod's status subresource.
pub async fn patch_status(
    api: &Api<Pod>,
    name: &str,
    status: &PodStatus,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// What one pod's publisher needs.
#[derive(Clone)]
pub struct Publisher {
    pub api: Api<Pod>,
    pub key: PodKey,
    pub pod: Arc<Pod>,
    /// Static pod (mirror pod managed here) or API pod (status only).
    pub is_static: bool,
    /// The Node's UID once registered.
    pub node_uid: watch::Receiver<Option<String>>,
    pub resync: Duration,
    /// Records pod events (reporter `kubelet`, instance = node).
    pub recorder: Recorder,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("key", &self.key)
            .field("is_static", &self.is_static)
            .finish_non_exhaustive()
    }
}

/// Records events on the pod (the mirror pod for a static pod); failures are only logged.
async fn record(
    recorder: &Recorder,
    key: &PodKey,
    pod: &Pod,
    is_static: bool,
    events: &[PodEvent],
) {
    let reference = |field_path: &str| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(key.name.clone()),
        namespace: Some(key.namespace.clone()),
        // A mirror pod's UID is the API's, not the static pod's.
        uid: if is_static {
            None
        } else {
            pod.metadata.uid.clone()
        },
        field_path: Some(field_path.to_string()),
        ..Default::default()
    };
    for e in events {
        let ev = Event {
            type_: if e.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: e.reason.to_string(),
            note: Some(e.note.clone()),
            action: e.action.to_string(),
            secondary: None,
        };
        let published = tokio::time::timeout(
            Duration::from_secs(5),
            recorder.publish(&ev, &reference(&e.field_path)),
        )
        .await;
        if !matches!(published, Ok(Ok(()))) {
            tracing::debug!(pod = %key, reason = e.reason, "recording event failed");
        }
    }
}

/// Makes sure a static pod's mirror pod exists; false when it could not (yet).
async fn sync_mirror(
    api: &Api<Pod>,
    key: &PodKey,
    pod: &Pod,
    node_uid: &watch::Receiver<Option<String>>,
    published: &mut Option<PodStatus>,
) -> bool {
    let uid = node_uid.borrow().clone();
    let Some(uid) = uid else {
        // Like the kubelet: no mirror pod before the Node is registered.
        return false;
    };
    match ensure_mirror(api, pod, &uid).await {
        Ok(created) => {
            if created {
                *published = None;
            }
            true
        }
        Err(e) => {
            tracing::warn!(pod = %key, error = %e, "mirror pod sync failed");
            false
        }
    }
}

/// What sending a status to the API came to.
enum Sent {
    Published,
    Failed,
    /// The API pod is gone: stop publishing.
    PodGone,
}

/// Patches the pod's status in the API and logs the result.
async fn send_status(api: &Api<Pod>, key: &PodKey, is_static: bool, status: &PodStatus) -> Sent {
    match patch_status(api, &key.name, status).await {
        Ok(()) => {
            tracing::debug!(pod = %key, phase = ?status.phase, "status published");
            Sent::Published
        }
        Err(kube::Error::Api(s)) if s.is_not_found() && !is_static => {
            tracing::info!(pod = %key, "pod is gone from the API; stop publishing");
            Sent::PodGone
        }
        Err(e) => {
            tracing::warn!(pod = %key, error = %e, "status update failed");
            Sent::Failed
        }
    }
}

/// The delay before the next round: the resync period, or after a failure the doubling retry.
fn next_wait(ok: bool, retry: &mut Duration, resync: Duration) -> Duration {
    if ok {
        *retry = Duration::from_millis(200).min(resync);
        resync
    } else {
        let w = *retry;
        *retry = (*retry * 2).min(resync);
        w
    }
}

/// Waits for a new observation or for `wait` to pass; returns whether the next round must
/// publish even an unchanged status, or `None` to stop (cancelled).
async fn wait_next_round(
    observations: &mut watch::Receiver<PodObservation>,
    cancel: &CancellationToken,
    wait: Duration,
    is_static: bool,
    ok: bool,
) -> Option<bool> {
    tokio::select! {
        changed = observations.changed() => {
            if changed.is_err() {
                // Worker gone: publish the last state once more, then wait for cancel.
                if cancel.is_cancelled() { return None; }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => { return Some(true); }
                    _ = cancel.cancelled() => return None,
                }
            }
            Some(!ok)
        }
        _ = tokio::time::sleep(wait) => Some(is_static || !ok),
        _ = cancel.cancelled() => None,
    }
}

/// Keeps the API's view of one pod in line with the worker's observations until cancelled.
pub async fn publish_loop(
    publisher: Publisher,
    mut observations: watch::Receiver<PodObservation>,
    cancel: CancellationToken,
) {
    let Publisher {
        api,
        key,
        pod,
        is_static,
        node_uid,
        resync,
        recorder,
    } = publisher;
    let mut last_obs = PodObservation::default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut published: Option<PodStatus> = None;
    let mut force = true;
    // Failed API calls are retried with a doubling delay, from 200 ms up to the resync period.
    let mut retry = Duration::from_millis(200).min(resync);
    loop {
        let obs = observations.borrow_and_update().clone();
        let events = events_between(&last_obs, &obs);
        last_obs = obs.clone();
        let status = pod_status(&spec, &obs, published.as_ref(), Timestamp::now());
        let mut ok = true;
        if is_static && force {
            ok = sync_mirror(&api, &key, &pod, &node_uid, &mut published).await;
        }
        if ok && (published.as_ref() != Some(&status) || force) {
            match send_status(&api, &key, is_static, &status).await {
                Sent::Published => published = Some(status),
                Sent::Failed => ok = false,
                Sent::PodGone => return,
            }
        }
        if !events.is_empty() {
            record(&recorder, &key, &pod, is_static, &events).await;
        }
        if !is_static && ok && pod_phase(&spec, &obs).is_terminal() && published.is_some() {
            // Terminal phase of a run-to-completion pod is final.
            return;
        }
        let wait = next_wait(ok, &mut retry, resync);
        match wait_next_round(&mut observations, &cancel, wait, is_static, ok).await {
            Some(next_force) => force = next_force,
            None => return,
        }
    }
}
