//! The static-pod loop: the manifest dir polled like the kubelet's file source, each change
//! (a pod added, changed or removed) applied to the node's pods, unreadable manifests logged
//! once per change.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{PodSource, Pods};
use crate::static_pods::{Change, ManifestError, PodKey, StaticPod, desired_pods, diff, scan_dir};

fn log_manifest_errors(errors: &[ManifestError], last: &mut Vec<String>) {
    let now: Vec<String> = errors.iter().map(ToString::to_string).collect();
    if &now != last {
        for e in &now {
            tracing::warn!(error = %e, "manifest ignored");
        }
        *last = now;
    }
}

async fn apply_static_changes(pods: &Pods, desired: &BTreeMap<PodKey, StaticPod>) {
    let running: BTreeMap<PodKey, String> = pods
        .sources()
        .await
        .into_iter()
        .filter_map(|(k, s)| match s {
            PodSource::Static { hash, .. } => Some((k, hash)),
            PodSource::Api { .. } => None,
        })
        .collect();
    for change in diff(&running, desired) {
        match change {
            Change::Stop(key) => {
                tracing::info!(pod = %key, "static pod manifest removed; stopping pod");
                pods.stop(&key, true).await;
            }
            Change::Restart(key) | Change::Start(key) => {
                let Some(sp) = desired.get(&key) else {
                    continue;
                };
                if running.contains_key(&key) {
                    tracing::info!(pod = %key, hash = %sp.hash, "static pod manifest changed; restarting pod");
                    pods.stop(&key, false).await;
                } else {
                    tracing::info!(pod = %key, hash = %sp.hash, file = %sp.file.display(), "starting static pod");
                }
                pods.start(
                    key.clone(),
                    sp.pod.clone(),
                    PodSource::Static {
                        hash: sp.hash.clone(),
                        file: sp.file.clone(),
                    },
                )
                .await;
            }
        }
    }
}

pub(super) async fn static_pod_loop(pods: Arc<Pods>, poll: Duration, cancel: CancellationToken) {
    let dir = pods.ctx.manifest_dir();
    let mut watch = crate::manifest_watch::DirWatch::new(&dir);
    let reread = if watch.active() {
        crate::manifest_watch::RESYNC
    } else {
        poll
    };
    let mut last_errors = Vec::new();
    loop {
        match scan_dir(&dir) {
            Ok(files) => {
                let (desired, errors) = desired_pods(&pods.ctx.name, &files);
                log_manifest_errors(&errors, &mut last_errors);
                if !cancel.is_cancelled() {
                    apply_static_changes(&pods, &desired).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading manifest directory failed"),
        }
        tokio::select! {
            _ = watch.changed(reread) => {}
            _ = cancel.cancelled() => return,
        }
    }
}
