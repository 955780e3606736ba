//! Pods bound to the node through the API (the kubelet's API pod source stand-in).
//!
//! Watches pods with `spec.nodeName` = this node (field selector, and filtered again here in
//! case a server ignores it), skipping mirror pods. Each pod UID runs at most once; a pod
//! already `Succeeded`/`Failed` is not started. A pod being deleted (deletionTimestamp set)
//! is stopped and then removed with grace period 0, as the kubelet finalises deletions; a
//! pod deleted outright is stopped.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

use crate::agent::{PodSource, Pods};
use crate::publish::{delete_now, is_mirror};
use crate::static_pods::PodKey;

fn key_of(pod: &Pod) -> PodKey {
    PodKey {
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: pod.metadata.name.clone().unwrap_or_default(),
    }
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// What to do about one observed pod (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodAction {
    Ignore,
    Start,
    /// Stop it and finalise the deletion.
    StopAndDelete,
    /// Same name, new UID: stop the old one, start this one.
    Replace,
}

/// Decides what to do with a pod seen in the watch, given what runs here.
pub fn decide(
    node: &str,
    pod: &Pod,
    running: Option<&PodSource>,
    seen: &BTreeSet<String>,
) -> PodAction {
    if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node) || is_mirror(pod) {
        return PodAction::Ignore;
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        return PodAction::StopAndDelete;
    }
    match running {
        Some(PodSource::Api { uid: r }) if *r == uid => PodAction::Ignore,
        Some(PodSource::Api { .. }) => PodAction::Replace,
        Some(PodSource::Static { .. }) => PodAction::Ignore,
        None if seen.contains(&uid) || is_terminal(pod) => PodAction::Ignore,
        None => PodAction::Start,
    }
}

async fn handle(pods: &Pods, client: &kube::Client, pod: Pod) {
    let key = key_of(&pod);
    let sources = pods.sources().await;
    let seen = pods.seen_uids.lock().await.clone();
    let action = decide(&pods.ctx.name, &pod, sources.get(&key), &seen);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    match action {
        PodAction::Ignore => {}
        PodAction::Start | PodAction::Replace => {
            tracing::info!(pod = %key, %uid, "running pod bound to this node");
            pods.seen_uids.lock().await.insert(uid.clone());
            pods.start(key, pod, PodSource::Api { uid }).await;
        }
        PodAction::StopAndDelete => {
            if sources.contains_key(&key) {
                tracing::info!(pod = %key, "pod is being deleted; stopping it");
                pods.stop(&key, false).await;
            }
            let api: Api<Pod> = Api::namespaced(client.clone(), &key.namespace);
            if let Err(e) = delete_now(&api, &key.name).await {
                tracing::warn!(pod = %key, error = %e, "finalising pod deletion failed");
            }
        }
    }
}

async fn stop_api_pod(pods: &Pods, key: &PodKey) {
    if let Some(PodSource::Api { .. }) = pods.sources().await.get(key) {
        tracing::info!(pod = %key, "pod deleted; stopping it");
        pods.stop(key, false).await;
    }
}

/// Watches pods bound to this node until cancelled.
pub(crate) async fn bound_pod_loop(
    client: kube::Client,
    pods: Arc<Pods>,
    cancel: CancellationToken,
) {
    let api: Api<Pod> = Api::all(client.clone());
    let selector = format!("spec.nodeName={}", pods.ctx.name);
    let stream = watcher(api, watcher::Config::default().fields(&selector)).default_backoff();
    futures::pin_mut!(stream);
    let mut listed: BTreeSet<PodKey> = BTreeSet::new();
    loop {
        let next = tokio::select! {
            n = stream.next() => n,
            _ = cancel.cancelled() => return,
        };
        match next {
            None => {
                // The watcher never ends by itself; be defensive and bounded.
                if crate::probes::cancelled_sleep(&cancel, Duration::from_secs(1)).await {
                    return;
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "watching bound pods"),
            Some(Ok(watcher::Event::Init)) => listed.clear(),
            Some(Ok(watcher::Event::InitApply(pod))) => {
                listed.insert(key_of(&pod));
                handle(&pods, &client, pod).await;
            }
            Some(Ok(watcher::Event::InitDone)) => {
                for (key, src) in pods.sources().await {
                    if matches!(src, PodSource::Api { .. }) && !listed.contains(&key) {
                        stop_api_pod(&pods, &key).await;
                    }
                }
            }
            Some(Ok(watcher::Event::Apply(pod))) => handle(&pods, &client, pod).await,
            Some(Ok(watcher::Event::Delete(pod))) => {
                let key = key_of(&pod);
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(PodSource::Api { uid: r }) = pods.sources().await.get(&key)
                    && *r == uid
                {
                    stop_api_pod(&pods, &key).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    fn pod(node: &str, uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("installer-3-n1".into()),
                namespace: Some("etcd".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn decisions() {
        let none = BTreeSet::new();
        assert_eq!(
            decide("n1", &pod("n2", "u"), None, &none),
            PodAction::Ignore
        );
        assert_eq!(decide("n1", &pod("n1", "u"), None, &none), PodAction::Start);
        let seen: BTreeSet<String> = ["u".to_string()].into();
        assert_eq!(
            decide("n1", &pod("n1", "u"), None, &seen),
            PodAction::Ignore
        );
        let running = PodSource::Api { uid: "u".into() };
        assert_eq!(
            decide("n1", &pod("n1", "u"), Some(&running), &none),
            PodAction::Ignore
        );
        assert_eq!(
            decide("n1", &pod("n1", "v"), Some(&running), &none),
            PodAction::Replace
        );
        let mut done = pod("n1", "w");
        done.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        assert_eq!(decide("n1", &done, None, &none), PodAction::Ignore);
        let mut deleting = pod("n1", "u");
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(
            decide("n1", &deleting, Some(&running), &none),
            PodAction::StopAndDelete
        );
        let mut mirror = pod("n1", "m");
        mirror.metadata.annotations = Some(
            [(
                crate::publish::MIRROR_ANNOTATION.to_string(),
                "h".to_string(),
            )]
            .into(),
        );
        assert_eq!(decide("n1", &mirror, None, &none), PodAction::Ignore);
    }
}
