//! The watch caches the reconcile pass reads: one reflector per resource the operator uses, each
//! waking the loop on any change. The operator lists once and then only watches, so an idle
//! operator makes no repeated API requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::Notify;

use crate::api::EtcdCluster;
use crate::podspec::STATIC_POD_NAMESPACE;
use crate::reconcile::Inputs;

/// The caches, and the signal that one of them changed.
#[derive(Clone)]
pub struct Stores {
    pub clusters: Store<EtcdCluster>,
    pub nodes: Store<Node>,
    pub pods: Store<Pod>,
    pub configmaps: Store<ConfigMap>,
    pub secrets: Store<Secret>,
    pub operator_secrets: Store<Secret>,
    pub changed: Arc<Notify>,
    ready: Arc<AtomicBool>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

fn start<K>(api: Api<K>, changed: Arc<Notify>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                tracing::warn!(error = %e, "watch failed; retrying with back-off");
            }
            changed.notify_one();
        }
    });
    reader
}

impl Stores {
    /// Starts every reflector.
    pub fn start(client: &Client, operator_namespace: &str) -> Self {
        let changed = Arc::new(Notify::new());
        let ns = STATIC_POD_NAMESPACE;
        Self {
            clusters: start(Api::<EtcdCluster>::all(client.clone()), changed.clone()),
            nodes: start(Api::<Node>::all(client.clone()), changed.clone()),
            pods: start(Api::<Pod>::namespaced(client.clone(), ns), changed.clone()),
            configmaps: start(
                Api::<ConfigMap>::namespaced(client.clone(), ns),
                changed.clone(),
            ),
            secrets: start(
                Api::<Secret>::namespaced(client.clone(), ns),
                changed.clone(),
            ),
            operator_secrets: start(
                Api::<Secret>::namespaced(client.clone(), operator_namespace),
                changed.clone(),
            ),
            changed,
            ready: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Waits until every cache has its first full list.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.clusters.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await?;
        self.secrets.wait_until_ready().await?;
        self.operator_secrets.wait_until_ready().await?;
        self.ready.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// True once every cache is synced (readiness).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// A snapshot for one pass.
    pub fn snapshot(&self) -> Inputs {
        fn all<K: Clone + Resource>(s: &Store<K>) -> Vec<K>
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            s.state().iter().map(|o| (**o).clone()).collect()
        }
        Inputs {
            cluster: self
                .clusters
                .state()
                .iter()
                .find(|c| c.meta().name.as_deref() == Some(crate::api::SINGLETON))
                .map(|c| (**c).clone()),
            nodes: all(&self.nodes),
            pods: all(&self.pods),
            configmaps: all(&self.configmaps),
            secrets: all(&self.secrets),
            operator_secrets: all(&self.operator_secrets),
        }
    }
}
