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

use etcd_operator::controllers::cert_signer::consumers::MATERIAL_DIGEST_ANNOTATION;
use etcd_operator::controllers::host_endpoints::{ENDPOINTS_CONFIGMAP, EndpointNode, read_nodes};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::ListParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use super::kube_pods::{
    ApiServerInputs, ETCD_INPUTS_ANNOTATION, NAMESPACE, RESOURCES_DIR, apiserver_pod,
};
use super::{ControlPlaneError, OPERATOR_NS, STATIC_NS, io};

/// The consumer Secret kube-apiserver's files come from.
pub const CONSUMER_SECRET: &str = "etcd-consumer-kube-apiserver";
/// How often the stand-in looks.
const PERIOD: Duration = Duration::from_millis(500);

/// kube-apiserver's etcd client material (the consumer Secret's `ca.crt`, `tls.crt`,
/// `tls.key`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMaterial {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    /// The Secret's material digest (annotation [`MATERIAL_DIGEST_ANNOTATION`]), copied onto
    /// the pods laid down from it so the operator can tell which material each one runs.
    pub digest: Option<String>,
}

impl EtcdMaterial {
    /// The material in a consumer Secret; `None` when a key is missing.
    pub fn from_secret(secret: &Secret) -> Option<Self> {
        let data = secret.data.as_ref()?;
        let get = |k: &str| data.get(k).map(|b| b.0.clone());
        Some(Self {
            ca: get("ca.crt")?,
            cert: get("tls.crt")?,
            key: get("tls.key")?,
            digest: material_digest(secret),
        })
    }
}

/// A Secret's [`MATERIAL_DIGEST_ANNOTATION`].
pub fn material_digest(secret: &Secret) -> Option<String> {
    let annotations = secret.metadata.annotations.as_ref()?;
    annotations.get(MATERIAL_DIGEST_ANNOTATION).cloned()
}

/// `--etcd-servers` for `node`: its own voter first, then every other voter by node name.
pub fn etcd_servers(node: &str, nodes: &[EndpointNode]) -> Vec<String> {
    let mut voters: Vec<&EndpointNode> = nodes.iter().filter(|n| n.voter).collect();
    voters.sort_by_key(|n| (n.node != node, n.node.clone()));
    voters.iter().map(|n| n.client_url.clone()).collect()
}

/// The inputs of one node's kube-apiserver, with their digest.
pub fn inputs(material: &EtcdMaterial, servers: Vec<String>) -> ApiServerInputs {
    let mut h = Sha256::new();
    for part in [&material.ca, &material.cert, &material.key] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    for s in &servers {
        h.update((s.len() as u64).to_be_bytes());
        h.update(s.as_bytes());
    }
    let digest: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    ApiServerInputs {
        material_digest: material.digest.clone(),
        etcd_servers: servers,
        etcd_dir: format!("{RESOURCES_DIR}/kube-apiserver-etcd-{digest}"),
        digest,
    }
}

/// One node's kube-apiserver as the stand-in sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub node: String,
    /// The digest of the inputs it laid down last (`None`: nothing laid yet).
    pub laid: Option<String>,
    /// The digest its mirror pod shows while Ready (`None`: not Ready, or not seen).
    pub ready: Option<String>,
    /// The digest of the inputs it should run with.
    pub want: String,
}

/// What the stand-in does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Every kube-apiserver runs, Ready, with its inputs.
    Idle,
    /// Nodes that never had a kube-apiserver: laid down together (nothing runs there to keep).
    LayFirst(Vec<String>),
    /// A kube-apiserver given new inputs is not Ready with them yet.
    Wait(String),
    /// Give this node's kube-apiserver its new inputs (a restart).
    Roll(String),
}

/// The next step over `views` (one per node, sorted by node): first lays down what was never
/// laid; then waits for a restart in flight (a node laid with its wanted inputs, not Ready
/// with them); then rolls one outdated node, first one that is not Ready with what it was
/// laid last (down, or a restart still in flight whose inputs are outdated again: it serves
/// nothing now, and rolling another node would take two down at once).
pub fn next_step(views: &[NodeView]) -> Step {
    let unlaid: Vec<String> = views
        .iter()
        .filter(|v| v.laid.is_none())
        .map(|v| v.node.clone())
        .collect();
    if !unlaid.is_empty() {
        return Step::LayFirst(unlaid);
    }
    if let Some(v) = views
        .iter()
        .find(|v| v.laid.as_ref() == Some(&v.want) && v.ready.as_ref() != Some(&v.want))
    {
        return Step::Wait(v.node.clone());
    }
    let outdated = views.iter().filter(|v| v.laid.as_ref() != Some(&v.want));
    let (not_ready, ready): (Vec<&NodeView>, Vec<&NodeView>) =
        outdated.partition(|v| v.ready != v.laid);
    match not_ready.first().or(ready.first()) {
        Some(v) => Step::Roll(v.node.clone()),
        None => Step::Idle,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(node: &str, voter: bool) -> EndpointNode {
        EndpointNode {
            node: node.to_owned(),
            member_id: None,
            client_url: format!("https://{node}:2379"),
            voter,
        }
    }

    fn view(node: &str, laid: Option<&str>, ready: Option<&str>, want: &str) -> NodeView {
        NodeView {
            node: node.to_owned(),
            laid: laid.map(str::to_owned),
            ready: ready.map(str::to_owned),
            want: want.to_owned(),
        }
    }

    #[test]
    fn a_node_lists_its_own_voter_first_and_no_learner() {
        let nodes = [
            ep("n1", true),
            ep("n2", true),
            ep("n3", false),
            ep("n4", true),
        ];
        assert_eq!(
            etcd_servers("n2", &nodes),
            ["https://n2:2379", "https://n1:2379", "https://n4:2379"]
        );
        assert_eq!(
            etcd_servers("n3", &nodes),
            ["https://n1:2379", "https://n2:2379", "https://n4:2379"]
        );
    }

    #[test]
    fn new_material_or_servers_change_the_digest() {
        let m = EtcdMaterial {
            ca: b"ca".to_vec(),
            cert: b"c".to_vec(),
            key: b"k".to_vec(),
            digest: Some("0123".into()),
        };
        let a = inputs(&m, vec!["https://n1:2379".into()]);
        assert_eq!(a, inputs(&m, vec!["https://n1:2379".into()]));
        assert_ne!(a.digest, inputs(&m, vec!["https://n2:2379".into()]).digest);
        let rotated = EtcdMaterial {
            ca: b"ca2".to_vec(),
            ..m
        };
        assert_ne!(
            a.digest,
            inputs(&rotated, vec!["https://n1:2379".into()]).digest
        );
    }

    #[test]
    fn nodes_never_laid_are_laid_together() {
        let views = [view("n1", None, None, "a"), view("n2", None, None, "a")];
        assert_eq!(
            next_step(&views),
            Step::LayFirst(vec!["n1".into(), "n2".into()])
        );
    }

    #[test]
    fn one_restart_at_a_time_each_after_the_previous_is_ready() {
        let all_old = [
            view("n1", Some("a"), Some("a"), "b"),
            view("n2", Some("a"), Some("a"), "b"),
        ];
        assert_eq!(next_step(&all_old), Step::Roll("n1".into()));
        let n1_restarting = [
            view("n1", Some("b"), None, "b"),
            view("n2", Some("a"), Some("a"), "b"),
        ];
        assert_eq!(next_step(&n1_restarting), Step::Wait("n1".into()));
        let n1_ready = [
            view("n1", Some("b"), Some("b"), "b"),
            view("n2", Some("a"), Some("a"), "b"),
        ];
        assert_eq!(next_step(&n1_ready), Step::Roll("n2".into()));
        let done = [
            view("n1", Some("b"), Some("b"), "b"),
            view("n2", Some("b"), Some("b"), "b"),
        ];
        assert_eq!(next_step(&done), Step::Idle);
    }

    #[test]
    fn a_down_outdated_server_is_rolled_before_a_serving_one() {
        let views = [
            view("n1", Some("a"), Some("a"), "b"),
            view("n2", Some("a"), None, "b"),
        ];
        assert_eq!(next_step(&views), Step::Roll("n2".into()));
    }

    #[test]
    fn a_restart_in_flight_whose_inputs_changed_again_is_rolled_before_another_node() {
        // n2 was laid "b" and is still Ready with its old "a" (or shows it) when the wanted
        // inputs move on to "c": n2 again, not n1, or two would be down at once.
        let views = [
            view("n1", Some("b"), Some("b"), "c"),
            view("n2", Some("b"), Some("a"), "c"),
        ];
        assert_eq!(next_step(&views), Step::Roll("n2".into()));
    }

    #[test]
    fn nothing_rolls_while_the_api_shows_no_ready_server_with_its_inputs() {
        // The API down: no mirror pod seen Ready, the inputs laid are the wanted ones.
        let views = [
            view("n1", Some("b"), None, "b"),
            view("n2", Some("b"), None, "b"),
        ];
        assert_eq!(next_step(&views), Step::Wait("n1".into()));
    }
}
