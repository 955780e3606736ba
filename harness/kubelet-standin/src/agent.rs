//! The node agent: one simulated control-plane node (the kubelet stand-in's main loop).
//!
//! [`NodeAgent::start`] creates the node's directories, then runs:
//! - the static pod loop: polls `<root>/etc/kubernetes/manifests`, starts, restarts (content
//!   changed) and stops static pods, each with a mirror-pod publisher when a client is set;
//! - with a client: the Node heartbeat ([`crate::node`]) and the bound-pod loop
//!   ([`crate::api_pods`]) that runs pods with `spec.nodeName` = this node to completion.
//!
//! [`NodeAgentHandle::shutdown`] stops every pod (SIGTERM, grace, SIGKILL per container
//! process group) and every loop, and reports the node `Ready=Unknown`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::{ApiClient, NodeContext};
use crate::images::ImageTable;
use crate::publish::{Publisher, delete_now, publish_loop};
use crate::runc::RuncRuntime;
use crate::static_pods::PodKey;
use crate::status::{PodObservation, pod_status};
use crate::worker::PodWorker;

mod config;
mod manifest_loop;
pub use config::NodeConfig;
use manifest_loop::static_pod_loop;

/// Errors starting an agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("creating node directories under {root}: {source}")]
    Dirs {
        root: PathBuf,
        source: std::io::Error,
    },
    #[error("node agent helper binary {0} does not exist (build the kubelet-standin binary)")]
    NoHelper(PathBuf),
    #[error("runc runtime: {0}")]
    Runc(#[from] crate::image_store::StoreError),
}

/// Where a running pod came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodSource {
    /// A manifest file, with the content hash.
    Static { hash: String, file: PathBuf },
    /// Bound to the node through the API (or handed in with [`NodeAgentHandle::run_pod`]).
    Api { uid: String },
}

#[derive(Debug)]
struct Managed {
    worker: PodWorker,
    source: PodSource,
    publisher: Option<(CancellationToken, JoinHandle<()>)>,
}

/// The agent's pods, shared by its loops.
pub(crate) struct Pods {
    pub(crate) ctx: NodeContext,
    client: Option<kube::Client>,
    resync: Duration,
    map: Mutex<BTreeMap<PodKey, Managed>>,
    /// UIDs of API pods already run here (a pod is never run twice).
    pub(crate) seen_uids: Mutex<BTreeSet<String>>,
    /// The Node's UID once registered (owner of mirror pods).
    node_uid: tokio::sync::watch::Receiver<Option<String>>,
}

impl std::fmt::Debug for Pods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pods")
            .field("node", &self.ctx.name)
            .field("api", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl Pods {
    pub(crate) async fn start(&self, key: PodKey, pod: Pod, source: PodSource) {
        // A pod replacing one of the same name: the old one is gone before the new one starts
        // (they would share ports and data directories).
        let old = self.map.lock().await.remove(&key);
        if let Some(old) = old {
            stop_managed(old).await;
        }
        let is_static = matches!(source, PodSource::Static { .. });
        let worker = PodWorker::start(self.ctx.clone(), key.clone(), pod);
        let publisher = self.client.clone().map(|client| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &key.namespace);
            let cancel = CancellationToken::new();
            let span = tracing::info_span!("publish", node = %self.ctx.name, pod = %key);
            let publisher = Publisher {
                api,
                key: key.clone(),
                pod: worker.pod.clone(),
                is_static,
                node_uid: self.node_uid.clone(),
                resync: self.resync,
                recorder: Recorder::new(
                    client,
                    Reporter {
                        controller: "kubelet".into(),
                        instance: Some(self.ctx.name.clone()),
                    },
                ),
            };
            let task = tokio::spawn(
                publish_loop(publisher, worker.observations(), cancel.clone()).instrument(span),
            );
            (cancel, task)
        });
        let raced = self.map.lock().await.insert(
            key,
            Managed {
                worker,
                source,
                publisher,
            },
        );
        if let Some(raced) = raced {
            stop_managed(raced).await;
        }
    }

    /// Stops a pod; `delete_mirror` removes a static pod's mirror pod from the API.
    pub(crate) async fn stop(&self, key: &PodKey, delete_mirror: bool) {
        let Some(m) = self.map.lock().await.remove(key) else {
            return;
        };
        stop_managed(m).await;
        if delete_mirror && let Some(client) = &self.client {
            // In the background, bounded: the static-pod loop never waits on the API (it may be
            // served from the very etcd whose next manifest is waiting to start).
            let api: Api<Pod> = Api::namespaced(client.clone(), &key.namespace);
            let key = key.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(MIRROR_DELETE_BOUND, delete_now(&api, &key.name)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(pod = %key, error = %e, "deleting mirror pod failed")
                    }
                    Err(_) => {
                        tracing::warn!(pod = %key, bound = ?MIRROR_DELETE_BOUND, "deleting mirror pod: the API did not answer")
                    }
                }
            });
        }
    }

    pub(crate) async fn stop_all(&self, kill: bool) {
        let all: Vec<Managed> = std::mem::take(&mut *self.map.lock().await)
            .into_values()
            .collect();
        futures::future::join_all(all.into_iter().map(|m| stop_or_kill(m, kill))).await;
    }

    pub(crate) async fn sources(&self) -> BTreeMap<PodKey, PodSource> {
        self.map
            .lock()
            .await
            .iter()
            .map(|(k, m)| (k.clone(), m.source.clone()))
            .collect()
    }

    async fn view(&self, key: &PodKey) -> Option<(Arc<Pod>, PodObservation)> {
        let map = self.map.lock().await;
        let m = map.get(key)?;
        let obs = m.worker.observations().borrow().clone();
        Some((m.worker.pod.clone(), obs))
    }
}

async fn stop_managed(m: Managed) {
    stop_or_kill(m, false).await;
}

async fn stop_or_kill(m: Managed, kill: bool) {
    if kill {
        m.worker.kill().await;
    } else {
        m.worker.stop().await;
    }
    if let Some((cancel, mut task)) = m.publisher {
        cancel.cancel();
        // As with the kubelet, a pod's lifecycle never waits on the API: a publisher stuck in a
        // call to an API that does not answer (served, perhaps, from the very etcd pod being
        // replaced) is abandoned after a short grace.
        if tokio::time::timeout(PUBLISHER_GRACE, &mut task)
            .await
            .is_err()
        {
            tracing::warn!("status publisher stuck in an API call; abandoned");
            task.abort();
        }
    }
}

/// How long a stopped pod's status publisher may take to finish its API call.
const PUBLISHER_GRACE: Duration = Duration::from_secs(2);
/// Bound on deleting the mirror pod of a static pod whose manifest went away.
const MIRROR_DELETE_BOUND: Duration = Duration::from_secs(30);

/// A started node agent.
#[derive(Debug)]
pub struct NodeAgentHandle {
    pods: Arc<Pods>,
    cancel: CancellationToken,
    /// Set by [`NodeAgentHandle::crash`]: the node goes silent instead of reporting its stop.
    silent: Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Entry point type (see [`NodeAgent::start`]).
#[derive(Debug)]
pub struct NodeAgent;

impl NodeAgent {
    /// Starts one simulated node. Returns once the directories exist and the loops run.
    pub async fn start(config: NodeConfig) -> Result<NodeAgentHandle, AgentError> {
        let helper = config
            .helper
            .clone()
            .unwrap_or_else(|| config.bin_dir.join("kubelet-standin"));
        if !helper.exists() {
            return Err(AgentError::NoHelper(helper));
        }
        let ctx = NodeContext {
            name: config.name.clone(),
            ip: config.ip,
            root: config.root.clone(),
            helper,
            images: Arc::new(
                config
                    .images
                    .clone()
                    .unwrap_or_else(|| ImageTable::standard(&config.bin_dir)),
            ),
            runc: match &config.runc {
                Some(r) => Some(Arc::new(RuncRuntime::start(r, &config.root).await?)),
                None => None,
            },
            backoff: config.backoff,
            kubeconfig: config.kubeconfig.clone(),
            client: config.client.clone().map(ApiClient),
            api_service: config.api_service.clone(),
        };
        ctx.create_dirs().map_err(|source| AgentError::Dirs {
            root: config.root.clone(),
            source,
        })?;
        let (uid_tx, uid_rx) = tokio::sync::watch::channel(None);
        let pods = Arc::new(Pods {
            ctx: ctx.clone(),
            client: config.client.clone(),
            resync: config.resync,
            map: Mutex::new(BTreeMap::new()),
            seen_uids: Mutex::new(BTreeSet::new()),
            node_uid: uid_rx,
        });
        let cancel = CancellationToken::new();
        let silent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        let span = tracing::info_span!("node", node = %ctx.name);
        tasks.push(tokio::spawn(
            static_pod_loop(pods.clone(), config.manifest_poll, cancel.clone())
                .instrument(span.clone()),
        ));
        if let Some(client) = &config.client {
            tasks.push(tokio::spawn(
                crate::node::heartbeat_loop(
                    client.clone(),
                    ctx.name.clone(),
                    ctx.ip,
                    config.heartbeat,
                    uid_tx,
                    silent.clone(),
                    cancel.clone(),
                )
                .instrument(span.clone()),
            ));
            tasks.push(tokio::spawn(
                crate::api_pods::bound_pod_loop(client.clone(), pods.clone(), cancel.clone())
                    .instrument(span),
            ));
        }
        tracing::info!(node = %ctx.name, ip = %ctx.ip, root = %ctx.root.display(), "node agent started");
        Ok(NodeAgentHandle {
            pods,
            cancel,
            silent,
            tasks,
        })
    }
}

impl NodeAgentHandle {
    /// The node's context (name, ip, root, helper, images).
    pub fn context(&self) -> &NodeContext {
        &self.pods.ctx
    }

    /// Pods currently managed, with where they came from.
    pub async fn pods(&self) -> BTreeMap<PodKey, PodSource> {
        self.pods.sources().await
    }

    /// The latest observation of a pod's processes.
    pub async fn observation(&self, key: &PodKey) -> Option<PodObservation> {
        self.pods.view(key).await.map(|(_, o)| o)
    }

    /// The status the agent would publish for a pod right now (pure, no API needed).
    pub async fn pod_status(&self, key: &PodKey) -> Option<PodStatus> {
        let (pod, obs) = self.pods.view(key).await?;
        Some(pod_status(
            &pod.spec.clone().unwrap_or_default(),
            &obs,
            None,
            Timestamp::now(),
        ))
    }

    /// Runs a pod as if it had been bound to this node through the API (status is published
    /// when a client is configured). The pod keeps its name and namespace.
    pub async fn run_pod(&self, pod: Pod) -> PodKey {
        let key = PodKey {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
        };
        let uid = pod
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| format!("local-{key}").replace('/', "_"));
        let mut pod = pod;
        pod.metadata.uid = Some(uid.clone());
        self.pods.seen_uids.lock().await.insert(uid.clone());
        self.pods
            .start(key.clone(), pod, PodSource::Api { uid })
            .await;
        key
    }

    /// Stops every pod (SIGTERM, grace period, SIGKILL) and loop, and reports the Node
    /// `Ready=Unknown`. After it returns no process the agent started is alive.
    pub async fn shutdown(self) {
        tracing::info!(node = %self.pods.ctx.name, "node agent stopping");
        self.finish(false).await;
    }

    /// Simulates a node crash: every container is SIGKILLed at once (no grace period), the
    /// loops stop and the Node is left as it was (no final status; its heartbeat just stops).
    /// After it returns no process the agent started is alive. Mirror pods stay in the API.
    pub async fn crash(self) {
        tracing::warn!(node = %self.pods.ctx.name, "node agent crashing (simulated)");
        self.silent.store(true, std::sync::atomic::Ordering::SeqCst);
        self.finish(true).await;
    }

    async fn finish(self, kill: bool) {
        self.cancel.cancel();
        self.pods.stop_all(kill).await;
        for t in self.tasks {
            if let Err(e) = t.await {
                tracing::error!(error = %e, "agent task failed");
            }
        }
        // A loop may have started a pod while we were stopping.
        self.pods.stop_all(kill).await;
        if let Some(runc) = &self.pods.ctx.runc {
            runc.settle().await;
        }
        tracing::info!(node = %self.pods.ctx.name, "node agent stopped");
    }
}
