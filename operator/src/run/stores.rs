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
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::Notify;

use super::node_watch::NodeWatch;
use crate::api::StoredCluster;
use crate::observed::{Inputs, NodeListing};
use crate::podspec::STATIC_POD_NAMESPACE;

/// The caches, and the signal that one of them changed.
#[derive(Clone)]
pub struct Stores {
    /// The EtcdCluster as stored: decoded in each snapshot, so one the operator cannot read is
    /// reported rather than failing the watch.
    pub clusters: Store<StoredCluster>,
    pub nodes: NodeWatch,
    pub pods: Store<Pod>,
    pub configmaps: Store<ConfigMap>,
    pub secrets: Store<Secret>,
    pub operator_secrets: Store<Secret>,
    /// PodDisruptionBudgets of the static-pod namespace (the quorum guard's).
    pub pdbs: Store<PodDisruptionBudget>,
    pub changed: Arc<Notify>,
    ready: Arc<AtomicBool>,
    _tasks: Arc<Tasks>,
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

/// Wakes on a new object, a deletion, a relist, or a change of what `project` picks out of an
/// object; any other write (a status the operator wrote itself, a Node heartbeat) does not wake.
pub struct ChangedBy<K, P> {
    project: fn(&K) -> P,
    seen: BTreeMap<String, P>,
}

impl<K, P> ChangedBy<K, P> {
    pub fn new(project: fn(&K) -> P) -> Self {
        Self {
            project,
            seen: BTreeMap::new(),
        }
    }
}

impl<K: Resource + 'static, P: PartialEq + Send + 'static> Wake<K> for ChangedBy<K, P> {
    fn wakes(&mut self, event: &watcher::Event<K>) -> bool {
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let name = o.meta().name.clone().unwrap_or_default();
                let now = (self.project)(o);
                let changed = self.seen.get(&name) != Some(&now);
                self.seen.insert(name, now);
                changed
            }
            watcher::Event::Delete(o) => {
                self.seen
                    .remove(o.meta().name.as_deref().unwrap_or_default());
                true
            }
            watcher::Event::Init => {
                // A relist: what was seen before may be gone without a Delete.
                self.seen.clear();
                true
            }
            watcher::Event::InitDone => true,
        }
    }
}

/// An EtcdCluster wakes the loop only for a spec edit (`metadata.generation`).
fn generation<K: Resource>(o: &K) -> Option<i64> {
    o.meta().generation
}

/// What the operator reads of a Node: labels (the selector), addresses, Ready, deletion, the
/// admin's etcd-stopped annotation, cordoning. Its heartbeats (a status write every few seconds from every
/// node's kubelet, control plane or not) do not wake the loop.
pub type NodeFacts = (
    Option<BTreeMap<String, String>>,
    Vec<(String, String)>,
    bool,
    bool,
    Option<String>,
    bool,
);

pub fn node_facts(n: &Node) -> NodeFacts {
    let status = n.status.as_ref();
    let addresses = status
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .map(|a| (a.type_.clone(), a.address.clone()))
                .collect()
        })
        .unwrap_or_default();
    (
        n.metadata.labels.clone(),
        addresses,
        crate::observed::node_ready(n),
        n.metadata.deletion_timestamp.is_some(),
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::observed::objects::ETCD_STOPPED_ANNOTATION))
            .cloned(),
        n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
    )
}

/// Drops what the operator never reads and the API server attaches to every object (which
/// field manager wrote what): most of a cached object's size.
pub fn strip<K: Resource>(event: &mut watcher::Event<K>) {
    match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
            o.meta_mut().managed_fields = None;
        }
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

/// The reflector tasks, aborted when the last copy of the caches is dropped (a relist starts new
/// ones).
#[derive(Debug, Default)]
pub struct Tasks(std::sync::Mutex<Vec<tokio::task::AbortHandle>>);

impl Tasks {
    /// Keeps `task` to abort with the caches.
    pub fn keep(&self, task: &tokio::task::JoinHandle<()>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(task.abort_handle());
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in self
            .0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            task.abort();
        }
    }
}

fn start<K>(api: Api<K>, changed: Arc<Notify>, mut wake: impl Wake<K>, tasks: &Tasks) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let scope = api_scope(&api);
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o| o.meta_mut().managed_fields = None),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let wakes = match &event {
                Ok(e) => wake.wakes(e),
                Err(e) => {
                    tracing::warn!(kind, scope, error = %e, "watch of {kind} ({scope}) failed; retrying with back-off");
                    true
                }
            };
            if wakes {
                changed.notify_one();
            }
        }
    });
    tasks.keep(&task);
    reader
}

/// What a watch covers, for its log lines: `all namespaces` or `namespace <ns>`.
fn api_scope<K: Resource>(api: &Api<K>) -> String {
    api.namespace().map_or_else(
        || "all namespaces".to_owned(),
        |ns| format!("namespace {ns}"),
    )
}

impl Stores {
    /// Starts every reflector.
    pub fn start(client: &Client, operator_namespace: &str) -> Self {
        let changed = Arc::new(Notify::new());
        let ns = STATIC_POD_NAMESPACE;
        let tasks = Arc::new(Tasks::default());
        Self {
            clusters: start(
                Api::<StoredCluster>::all(client.clone()),
                changed.clone(),
                ChangedBy::new(generation::<StoredCluster>),
                &tasks,
            ),
            nodes: NodeWatch::start(Api::<Node>::all(client.clone()), changed.clone(), &tasks),
            pods: start(
                Api::<Pod>::namespaced(client.clone(), ns),
                changed.clone(),
                Always,
                &tasks,
            ),
            configmaps: start(
                Api::<ConfigMap>::namespaced(client.clone(), ns),
                changed.clone(),
                Always,
                &tasks,
            ),
            secrets: start(
                Api::<Secret>::namespaced(client.clone(), ns),
                changed.clone(),
                Always,
                &tasks,
            ),
            operator_secrets: start(
                Api::<Secret>::namespaced(client.clone(), operator_namespace),
                changed.clone(),
                Always,
                &tasks,
            ),
            pdbs: start(
                Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
                changed.clone(),
                Always,
                &tasks,
            ),
            changed,
            ready: Arc::new(AtomicBool::new(false)),
            _tasks: tasks,
        }
    }

    /// Waits until every cache has its first full list; the Node cache lists once the first
    /// snapshot names its selector, and a pass waits for it then.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.clusters.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await?;
        self.secrets.wait_until_ready().await?;
        self.operator_secrets.wait_until_ready().await?;
        self.pdbs.wait_until_ready().await?;
        self.ready.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// True once every cache is synced (readiness).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// A snapshot for one pass. It also points the Node watch at the selector of the cluster it
    /// returns (the default one before the cluster exists); a selector the API would refuse
    /// leaves the watch as it is, and the pass reports it.
    pub fn snapshot(&self) -> Inputs {
        fn all<K: Clone + Resource>(s: &Store<K>) -> Vec<K>
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            s.state().iter().map(|o| (**o).clone()).collect()
        }
        let stored = self
            .clusters
            .state()
            .iter()
            .find(|c| c.meta().name.as_deref() == Some(crate::api::SINGLETON))
            .map(|c| (**c).clone());
        let (cluster, unreadable) = crate::observed::decode_cluster(stored.as_ref());
        // An unreadable spec names no selector: the watch stays on the last one.
        if unreadable.is_none() {
            let spec = cluster.as_ref().map(|c| c.spec.clone()).unwrap_or_default();
            if let Ok(selector) = spec.node_label_selector() {
                self.nodes.select(&selector);
            }
        }
        Inputs {
            cluster,
            unreadable,
            node_listing: NodeListing::Selected(self.nodes.listed_with()),
            nodes: all(&self.nodes.store),
            pods: all(&self.pods),
            configmaps: all(&self.configmaps),
            secrets: all(&self.secrets),
            operator_secrets: all(&self.operator_secrets),
            pdbs: all(&self.pdbs),
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
        let mut g = ChangedBy::new(generation::<ConfigMap>);
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

    fn node(heartbeat: &str, ready: &str, ip: &str) -> Node {
        use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |s: &str| Some(Time(s.parse().unwrap()));
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                }]),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_heartbeat_time: at(heartbeat),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn node_heartbeats_do_not_wake_but_readiness_and_addresses_do() {
        use watcher::Event::{Apply, InitApply};
        let mut w = ChangedBy::new(node_facts);
        assert!(w.wakes(&InitApply(node("2026-01-01T00:00:00Z", "True", "10.0.0.1"))));
        assert!(!w.wakes(&Apply(node("2026-01-01T00:00:10Z", "True", "10.0.0.1"))));
        assert!(w.wakes(&Apply(node("2026-01-01T00:00:20Z", "False", "10.0.0.1"))));
        assert!(w.wakes(&Apply(node("2026-01-01T00:00:30Z", "False", "10.0.0.9"))));
        assert!(!w.wakes(&Apply(node("2026-01-01T00:00:40Z", "False", "10.0.0.9"))));
        // An admin marking etcd on the node as stopped on purpose, and unmarking it.
        let mut stopped = node("2026-01-01T00:00:50Z", "False", "10.0.0.9");
        stopped.metadata.annotations = Some(
            [(
                crate::observed::objects::ETCD_STOPPED_ANNOTATION.to_owned(),
                "disk check".to_owned(),
            )]
            .into(),
        );
        assert!(w.wakes(&Apply(stopped)));
        assert!(w.wakes(&Apply(node("2026-01-01T00:01:00Z", "False", "10.0.0.9"))));
    }
}
