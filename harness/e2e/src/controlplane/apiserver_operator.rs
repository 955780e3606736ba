//! **A stand-in for kube-apiserver's operator** (OpenShift's kube-apiserver-operator; with
//! kubeadm, its certificate renewal plus the kubelet's restart of the static pod). In a
//! platform, something outside etcd's operator lays kube-apiserver's etcd client files down from
//! the consumer Secret and restarts kube-apiserver to read them: kube-apiserver reads its etcd CA
//! file only at start (`docs/kube-apiserver-etcd-tls.md`). This plays that part for the stacked
//! control plane ([`super::stacked`]), and nothing more:
//!
//! * it reads the consumer Secret `etcd-consumer-kube-apiserver` (the operator's namespace) and
//!   the `etcd-endpoints` ConfigMap's node list; before the API answers, the material `render`
//!   laid down and the bootstrap node's member;
//! * for each node it computes kube-apiserver's inputs: the material, and `--etcd-servers` with
//!   the node's own voter first, then the other voters ([`etcd_servers`]);
//! * it rolls the kube-apiservers **one at a time, never two at once, each only after the
//!   previous one is Ready again** with the inputs it was given ([`next_step`], pure), as seen on
//!   its mirror pod (annotation [`ETCD_INPUTS_ANNOTATION`] and the `Ready` condition). A roll
//!   writes the files to a directory of their own, then the manifest, so the node agent restarts
//!   the pod with files and flags of one piece.
//!
//! Every roll is kept in [`Roll`]s, so a scenario can check that no two overlapped.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_operator::controllers::host_endpoints::{ENDPOINTS_CONFIGMAP, EndpointNode, read_nodes};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::ListParams;
use kube::{Api, Client};

use super::kube_pods::{
    ApiServerInputs, ETCD_INPUTS_ANNOTATION, NAMESPACE, RESOURCES_DIR, apiserver_pod,
};
use super::{ControlPlaneError, OPERATOR_NS, STATIC_NS, io};

mod inputs;
pub use inputs::{EtcdMaterial, NodeView, Step, etcd_servers, inputs, material_digest, next_step};

/// The consumer Secret kube-apiserver's files come from.
pub const CONSUMER_SECRET: &str = "etcd-consumer-kube-apiserver";
/// How often the stand-in looks.
const PERIOD: Duration = Duration::from_millis(500);

/// A node the stand-in lays kube-apiserver on.
#[derive(Clone, Debug)]
pub struct ApiServerNode {
    pub name: String,
    pub ip: IpAddr,
    pub root: PathBuf,
}

/// One roll: a kube-apiserver given new inputs, and when it was Ready with them.
#[derive(Clone, Debug)]
pub struct Roll {
    pub node: String,
    pub digest: String,
    pub started: Instant,
    pub ready: Option<Instant>,
}

/// What the stand-in knows between rounds.
struct State {
    nodes: Vec<ApiServerNode>,
    material: EtcdMaterial,
    endpoints: Vec<EndpointNode>,
    laid: BTreeMap<String, String>,
    rolls: Vec<Roll>,
}

/// The running stand-in (stopped on drop).
pub struct ApiServerOperator {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ApiServerOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerOperator").finish_non_exhaustive()
    }
}

impl Drop for ApiServerOperator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiServerOperator {
    /// Starts it over `nodes`, from `render`'s `material` and the bootstrap member
    /// `bootstrap` (until the API answers with the Secret and `etcd-endpoints`). The first
    /// round lays every node's kube-apiserver down at once.
    pub fn start(
        client: Client,
        nodes: Vec<ApiServerNode>,
        material: EtcdMaterial,
        bootstrap: EndpointNode,
    ) -> Result<Self, ControlPlaneError> {
        let state = Arc::new(Mutex::new(State {
            nodes,
            material,
            endpoints: vec![bootstrap],
            laid: BTreeMap::new(),
            rolls: Vec::new(),
        }));
        round(&state, &BTreeMap::new())?;
        let s = state.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(PERIOD).await;
                let ready = observe(&client, &s).await;
                if let Err(e) = round(&s, &ready) {
                    tracing::warn!(error = %e, "kube-apiserver operator stand-in: round failed");
                }
            }
        });
        Ok(Self { state, task })
    }

    /// Adds a node (a control-plane node joined later); its kube-apiserver is laid next round.
    pub fn add_node(&self, node: ApiServerNode) {
        if let Ok(mut s) = self.state.lock() {
            s.nodes.retain(|n| n.name != node.name);
            s.nodes.push(node);
        }
    }

    /// Removes a node (its machine is gone): nothing is laid or waited for there any more, and
    /// a restart of it still in flight leaves the history (it ended with the machine, not Ready).
    pub fn remove_node(&self, name: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.nodes.retain(|n| n.name != name);
            s.laid.remove(name);
            s.rolls.retain(|r| r.node != name || r.ready.is_some());
        }
    }

    /// Every roll so far, in order.
    pub fn rolls(&self) -> Vec<Roll> {
        self.state
            .lock()
            .map(|s| s.rolls.clone())
            .unwrap_or_default()
    }
}

/// Reads the Secret and `etcd-endpoints` into the state (each kept as it was when unreadable)
/// and returns the digest each node's Ready kube-apiserver mirror pod shows.
async fn observe(client: &Client, state: &Mutex<State>) -> BTreeMap<String, String> {
    let secret = Api::<Secret>::namespaced(client.clone(), OPERATOR_NS)
        .get_opt(CONSUMER_SECRET)
        .await;
    let endpoints = Api::<ConfigMap>::namespaced(client.clone(), STATIC_NS)
        .get_opt(ENDPOINTS_CONFIGMAP)
        .await;
    if let Ok(mut s) = state.lock() {
        if let Some(m) = secret
            .ok()
            .flatten()
            .as_ref()
            .and_then(EtcdMaterial::from_secret)
        {
            s.material = m;
        }
        if let Some(nodes) = endpoints.ok().flatten().and_then(|cm| read_nodes(&cm).ok())
            && nodes.iter().any(|n| n.voter)
        {
            s.endpoints = nodes;
        }
    }
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("component=kube-apiserver"))
        .await;
    pods.map(|l| l.items.iter().filter_map(ready_digest).collect())
        .unwrap_or_default()
}

/// `(node, digest)` of a Ready kube-apiserver mirror pod.
fn ready_digest(pod: &Pod) -> Option<(String, String)> {
    let node = pod.spec.as_ref()?.node_name.clone()?;
    let digest = pod
        .metadata
        .annotations
        .as_ref()?
        .get(ETCD_INPUTS_ANNOTATION)?
        .clone();
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready.then_some((node, digest))
}

/// One round: the step over what is known, and its writes.
fn round(state: &Mutex<State>, ready: &BTreeMap<String, String>) -> Result<(), ControlPlaneError> {
    let mut s = state
        .lock()
        .map_err(|_| ControlPlaneError::Failed("stand-in state poisoned".into()))?;
    let mut nodes = s.nodes.clone();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let wanted: BTreeMap<String, ApiServerInputs> = nodes
        .iter()
        .map(|n| {
            let servers = etcd_servers(&n.name, &s.endpoints);
            (n.name.clone(), inputs(&s.material, servers))
        })
        .collect();
    let now = Instant::now();
    for roll in s.rolls.iter_mut().filter(|r| r.ready.is_none()) {
        if ready.get(&roll.node) == Some(&roll.digest) {
            roll.ready = Some(now);
        }
    }
    let views: Vec<NodeView> = nodes
        .iter()
        .map(|n| NodeView {
            node: n.name.clone(),
            laid: s.laid.get(&n.name).cloned(),
            ready: ready.get(&n.name).cloned(),
            want: wanted
                .get(&n.name)
                .map(|i| i.digest.clone())
                .unwrap_or_default(),
        })
        .collect();
    let to_lay = match next_step(&views) {
        Step::LayFirst(names) => names,
        Step::Roll(name) => vec![name],
        Step::Idle | Step::Wait(_) => return Ok(()),
    };
    for node in nodes.iter().filter(|n| to_lay.contains(&n.name)) {
        let Some(inputs) = wanted.get(&node.name) else {
            continue;
        };
        lay(node, &s.material, inputs)?;
        tracing::info!(node = %node.name, digest = %inputs.digest, servers = ?inputs.etcd_servers,
            "kube-apiserver operator stand-in: kube-apiserver given new etcd inputs");
        s.laid.insert(node.name.clone(), inputs.digest.clone());
        s.rolls.push(Roll {
            node: node.name.clone(),
            digest: inputs.digest.clone(),
            started: now,
            ready: None,
        });
    }
    Ok(())
}

/// Writes `inputs`' files (each whole, the key 0600) into their own directory on `node`, then
/// its kube-apiserver manifest, and removes older input directories but the one it replaced.
fn lay(
    node: &ApiServerNode,
    material: &EtcdMaterial,
    inputs: &ApiServerInputs,
) -> Result<(), ControlPlaneError> {
    let host = |p: &str| node.root.join(p.trim_start_matches('/'));
    let dir = host(&inputs.etcd_dir);
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    for (file, bytes, mode) in [
        ("ca.crt", &material.ca, 0o644),
        ("client.crt", &material.cert, 0o644),
        ("client.key", &material.key, 0o600),
    ] {
        write_whole(&dir.join(file), bytes, mode)?;
    }
    let manifests = host("/etc/kubernetes/manifests");
    let previous = std::fs::read(manifests.join(MANIFEST)).ok();
    place_pod(&manifests, MANIFEST, &apiserver_pod(node.ip, inputs))?;
    prune(&host(RESOURCES_DIR), &dir, previous.as_deref());
    Ok(())
}

/// kube-apiserver's manifest file in a node's manifest dir.
const MANIFEST: &str = "kube-apiserver.json";

/// Places static pod `pod` as `<manifests>/<file>` (JSON), whole: the node agent, like a
/// kubelet, reads the directory as soon as a file appears in it.
pub(super) fn place_pod(manifests: &Path, file: &str, pod: &Pod) -> Result<(), ControlPlaneError> {
    let bytes = serde_json::to_vec_pretty(pod)
        .map_err(|e| ControlPlaneError::Failed(format!("{file}: {e}")))?;
    write_whole(&manifests.join(file), &bytes, 0o644)
}

/// Removes `kube-apiserver-etcd-*` dirs under `resources` other than `keep` and the one the
/// `previous` manifest named (a pod still starting from it must find its files).
fn prune(resources: &Path, keep: &Path, previous: Option<&[u8]>) {
    let previous = previous.map(String::from_utf8_lossy).unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(resources) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("kube-apiserver-etcd-")
            && e.path() != keep
            && !previous.contains(&format!("{RESOURCES_DIR}/{name}/"))
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Writes `bytes` to `path` whole (temp file, fsync, rename) with `mode`.
fn write_whole(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ControlPlaneError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io(format!("creating {}", tmp.display())))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("placing {}", path.display())))
}
