//! The watch caches the reconcile pass reads: one reflector per resource the operator uses, each
//! waking the loop on a change. The operator lists once and then only watches, so an idle
//! operator makes no repeated API requests. The `EtcdCluster` wakes it only when its generation
//! changes (a spec edit), never for a status write: the operator's own status writes would
//! otherwise wake it at once, and a status that follows a moving value (a learner's raft index
//! under load) kept it writing status as fast as the API answered (seen on the real
//! kube-apiserver: a pass every 30 ms while a learner waited to start).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::Notify;

use crate::api::EtcdCluster;
use crate::observed::Inputs;
use crate::podspec::STATIC_POD_NAMESPACE;

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

/// Which events of one resource wake the loop.
pub trait Wake<K>: Send + 'static {
    fn wakes(&mut self, event: &watcher::Event<K>) -> bool;
}

/// Every event wakes the loop.
struct Always;

impl<K> Wake<K> for Always {
    fn wakes(&mut self, _: &watcher::Event<K>) -> bool {
        true
    }
}

/// Wakes on a new object, a deletion, a relist, or a changed `metadata.generation`; a write
/// that leaves the generation alone (status, labels) does not wake.
#[derive(Debug, Default)]
pub struct GenerationChanged {
    seen: BTreeMap<String, Option<i64>>,
}

impl<K: Resource> Wake<K> for GenerationChanged {
    fn wakes(&mut self, event: &watcher::Event<K>) -> bool {
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let generation = o.meta().generation;
                let name = o.meta().name.clone().unwrap_or_default();
                self.seen.insert(name, generation) != Some(generation)
            }
            watcher::Event::Delete(o) => {
                self.seen
                    .remove(o.meta().name.as_deref().unwrap_or_default());
                true
            }
            watcher::Event::Init | watcher::Event::InitDone => true,
        }
    }
}

fn start<K>(api: Api<K>, changed: Arc<Notify>, mut wake: impl Wake<K>) -> Store<K>
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
            let wakes = match &event {
                Ok(e) => wake.wakes(e),
                Err(e) => {
                    tracing::warn!(error = %e, "watch failed; retrying with back-off");
                    true
                }
            };
            if wakes {
                changed.notify_one();
            }
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
            clusters: start(
                Api::<EtcdCluster>::all(client.clone()),
                changed.clone(),
                GenerationChanged::default(),
            ),
            nodes: start(Api::<Node>::all(client.clone()), changed.clone(), Always),
            pods: start(
                Api::<Pod>::namespaced(client.clone(), ns),
                changed.clone(),
                Always,
            ),
            configmaps: start(
                Api::<ConfigMap>::namespaced(client.clone(), ns),
                changed.clone(),
                Always,
            ),
            secrets: start(
                Api::<Secret>::namespaced(client.clone(), ns),
                changed.clone(),
                Always,
            ),
            operator_secrets: start(
                Api::<Secret>::namespaced(client.clone(), operator_namespace),
                changed.clone(),
                Always,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn obj(name: &str, generation: i64, label: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                generation: Some(generation),
                labels: Some([("l".to_owned(), label.to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn only_generation_changes_deletes_and_relists_wake() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let mut g = GenerationChanged::default();
        let init: watcher::Event<ConfigMap> = Init;
        assert!(g.wakes(&init));
        assert!(g.wakes(&InitApply(obj("cluster", 1, "a"))));
        let done: watcher::Event<ConfigMap> = InitDone;
        assert!(g.wakes(&done));
        assert!(
            !g.wakes(&Apply(obj("cluster", 1, "b"))),
            "a status-only write"
        );
        assert!(g.wakes(&Apply(obj("cluster", 2, "b"))), "a spec edit");
        assert!(!g.wakes(&Apply(obj("cluster", 2, "c"))));
        assert!(g.wakes(&Apply(obj("other", 1, "a"))), "a new object");
        assert!(g.wakes(&Delete(obj("cluster", 2, "c"))));
        assert!(g.wakes(&Apply(obj("cluster", 1, "a"))), "created again");
    }
}
