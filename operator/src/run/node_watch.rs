//! The Node cache: only the Nodes the spec's control-plane selector picks, so worker Nodes (and
//! their kubelets' status writes) never reach the operator. The selector is part of the spec and
//! may change while the operator runs; the watch then starts over with the new one. The cache
//! says which selector its contents were listed with, and a pass runs only when that is the
//! selector in the spec: a cache listed with an old selector, filtered by a new one, could look
//! like nodes were removed, and membership acts on removed nodes.

use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};

use super::stores::{ChangedBy, Tasks, Wake, node_facts};

/// The Node cache and the selector it follows.
#[derive(Clone)]
pub struct NodeWatch {
    pub store: Store<Node>,
    want: Arc<watch::Sender<Option<String>>>,
    listed: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for NodeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeWatch")
            .field("listed", &self.listed_with())
            .finish_non_exhaustive()
    }
}

impl NodeWatch {
    /// Starts the watch task; it lists nothing until [`NodeWatch::select`] names a selector.
    pub fn start(api: Api<Node>, changed: Arc<Notify>, tasks: &Tasks) -> Self {
        let (reader, writer) = reflector::store();
        let (want, rx) = watch::channel(None);
        let listed = Arc::new(Mutex::new(None));
        tasks.keep(&tokio::spawn(follow(
            api,
            writer,
            rx,
            listed.clone(),
            changed,
        )));
        Self {
            store: reader,
            want: Arc::new(want),
            listed,
        }
    }

    /// Points the watch at `selector`; a change starts it over.
    pub fn select(&self, selector: &str) {
        self.want.send_if_modified(|want| {
            let changed = want.as_deref() != Some(selector);
            if changed {
                tracing::info!(selector, "watching the Nodes the selector picks");
                *want = Some(selector.to_owned());
            }
            changed
        });
    }

    /// The selector the cache's contents were listed with (none before the first list).
    pub fn listed_with(&self) -> Option<String> {
        self.listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn follow(
    api: Api<Node>,
    mut writer: Writer<Node>,
    mut want: watch::Receiver<Option<String>>,
    listed: Arc<Mutex<Option<String>>>,
    changed: Arc<Notify>,
) {
    loop {
        let selector = loop {
            if let Some(s) = want.borrow_and_update().clone() {
                break s;
            }
            if want.changed().await.is_err() {
                return;
            }
        };
        let config = watcher::Config::default().labels(&selector);
        let stream = watcher(api.clone(), config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut wake = ChangedBy::new(node_facts);
        loop {
            tokio::select! {
                r = want.changed() => {
                    if r.is_err() {
                        return;
                    }
                    if want.borrow().as_deref() != Some(selector.as_str()) {
                        break;
                    }
                }
                event = stream.next() => match event {
                    Some(Ok(mut e)) => {
                        super::stores::strip(&mut e);
                        writer.apply_watcher_event(&e);
                        if matches!(e, watcher::Event::InitDone) {
                            *listed.lock().unwrap_or_else(PoisonError::into_inner) =
                                Some(selector.clone());
                        }
                        if wake.wakes(&e) {
                            changed.notify_one();
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, selector, "Node watch failed; retrying with back-off");
                        changed.notify_one();
                    }
                    None => return,
                }
            }
        }
    }
}
