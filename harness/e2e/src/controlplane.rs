//! The local control plane: a Kubernetes API ([`kube_testapi::TestApi`]: the API stand-in on its
//! own etcd, or a real cluster when `KUBECONFIG` is set), simulated control-plane nodes (one
//! `kubelet-standin` each, the kubelet stand-in, with its own loopback address and root dir), the
//! bootstrap of the first node with `etcd-operator render`, and the operator as a local process.
//!
//! ```text
//!  <dir>/nodes/n1/ (root of node n1: etc/kubernetes/{manifests,static-pod-resources,bootstrap},
//!                   var/lib/etcd)         kubelet-standin n1 @ 127.0.x.y
//!  <dir>/nodes/n2/ ...                    kubelet-standin n2 @ 127.0.x.z
//!  <dir>/operator.log                     etcd-operator run (KUBECONFIG = the API)
//!  <dir>/operator-<identity>.log          a second instance, a standby (see [`operators`])
//! ```
//!
//! Everything is torn down by [`LocalControlPlane::shutdown`]: the operator processes (SIGTERM,
//! then SIGKILL), every node agent (which stops its pods), then the API. Dropping without
//! shutdown still kills the operator processes.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_fixture::LoopbackAddr;
use etcd_operator::api::{EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, StoredCluster};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client, CustomResourceExt};
use kube_testapi::TestApi;
use kubelet_standin::{NodeAgent, NodeAgentHandle, NodeConfig};

/// What went wrong bringing the control plane up or driving it.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("API: {0}")]
    Api(#[from] kube_testapi::TestApiError),
    #[error("Kubernetes call: {0}")]
    Kube(#[from] kube::Error),
    #[error("node agent: {0}")]
    Agent(#[from] kubelet_standin::AgentError),
    #[error("address: {0}")]
    Address(#[from] etcd_fixture::FixtureError),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Runtime(#[from] crate::container_runtime::RuntimeError),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ControlPlaneError {
    let c = context.into();
    move |e| ControlPlaneError::Io(c, e)
}

/// One simulated control-plane node.
pub struct SimNode {
    pub name: String,
    pub addr: LoopbackAddr,
    pub root: PathBuf,
    agent: Option<NodeAgentHandle>,
}

impl std::fmt::Debug for SimNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNode")
            .field("name", &self.name)
            .field("ip", &self.addr.ip())
            .field("running", &self.agent.is_some())
            .finish()
    }
}

impl SimNode {
    pub fn ip(&self) -> IpAddr {
        IpAddr::V4(self.addr.ip())
    }

    /// The node's static-pod manifest dir.
    pub fn manifest_dir(&self) -> PathBuf {
        self.root.join("etc/kubernetes/manifests")
    }

    /// The node's etcd data dir.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("var/lib/etcd")
    }
}

/// The running local control plane.
pub struct LocalControlPlane {
    pub api: TestApi,
    pub dir: tempfile::TempDir,
    pub bin_dir: PathBuf,
    pub nodes: Vec<SimNode>,
    /// The operator processes started so far (see [`operators`]).
    operators: Vec<OperatorProcess>,
    /// On the kas control plane: a kubeconfig with a token of the operator's ServiceAccount,
    /// so the local operator process has exactly the RBAC `manifests/` grant it.
    operator_kubeconfig: Option<PathBuf>,
    /// The API's own loopback address, held while the API serves from the managed etcd
    /// ([`managed`]).
    _api_addr: Option<LoopbackAddr>,
    /// The stacked control plane's endpoint and kube-apiserver operator stand-in, when the API
    /// is kube-apiservers run as static pods on the nodes ([`stacked`]).
    stacked: Option<stacked::Stacked>,
    /// The etcd image `render` and the operator (its `ETCD_IMAGE`) start with; `None`: the
    /// operator's default ([`LocalControlPlane::starting_etcd_image`]).
    etcd_image: Option<String>,
}

impl std::fmt::Debug for LocalControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalControlPlane")
            .field("dir", &self.dir.path())
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

pub mod apiserver_operator;
pub mod endpoint;
mod identity;
pub mod kube_pods;
mod managed;
pub mod operators;
mod render;
mod retired;
mod retry;
pub mod stacked;

pub use operators::{DEFAULT_OPERATOR, OPERATOR_LEASE_DURATION, OperatorProcess};
pub use retired::RetiredAddress;
pub use retry::{RECONNECT, is_transport, retry_transport};

/// The namespace of the etcd static pods and the operator's own.
pub const STATIC_NS: &str = etcd_operator::podspec::STATIC_POD_NAMESPACE;
pub const OPERATOR_NS: &str = etcd_operator::bootstrap::OPERATOR_NAMESPACE;

impl LocalControlPlane {
    /// The API plus the objects the operator expects (namespaces, the installer's
    /// ServiceAccount, the CRD). No nodes yet.
    pub async fn start() -> Result<Self, ControlPlaneError> {
        Self::start_on(TestApi::start().await?).await
    }

    /// [`LocalControlPlane::start`] on a given API.
    pub async fn start_on(api: TestApi) -> Result<Self, ControlPlaneError> {
        let (dir, bin_dir) = sandbox_dir()?;
        let mut cp = Self::assemble(api, dir, bin_dir, Vec::new());
        cp.install_prerequisites().await?;
        if cp.api.is_own_real() {
            cp.operator_kubeconfig = Some(cp.operator_identity().await?);
            cp.wait_token_volume_sources().await?;
        }
        Ok(cp)
    }

    pub fn client(&self) -> Client {
        self.api.client()
    }

    /// Starts the cluster on `image` instead of the operator's default etcd image: `render`
    /// and every operator started afterwards use it (as a platform shipping that etcd would).
    pub fn starting_etcd_image(&mut self, image: &str) {
        self.etcd_image = Some(image.to_owned());
    }

    /// A control plane of these parts, no operator started yet.
    fn assemble(
        api: TestApi,
        dir: tempfile::TempDir,
        bin_dir: PathBuf,
        nodes: Vec<SimNode>,
    ) -> Self {
        Self {
            api,
            dir,
            bin_dir,
            nodes,
            operators: Vec::new(),
            operator_kubeconfig: None,
            _api_addr: None,
            stacked: None,
            etcd_image: None,
        }
    }

    async fn install_prerequisites(&self) -> Result<(), ControlPlaneError> {
        let client = self.client();
        for ns in [STATIC_NS, OPERATOR_NS] {
            let obj = Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            };
            create_or_keep(&Api::<Namespace>::all(client.clone()), &obj).await?;
        }
        self.apply_installer_rbac().await?;
        self.install_crd(&EtcdCluster::crd()).await
    }

    /// Creates `crd` (kept when it exists) and waits until it is Established.
    pub async fn install_crd(
        &self,
        crd: &CustomResourceDefinition,
    ) -> Result<(), ControlPlaneError> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client());
        create_or_keep(&crds, crd).await?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        wait_for(
            Duration::from_secs(30),
            &format!("CRD {name} to be Established"),
            || {
                let (crds, name) = (crds.clone(), name.clone());
                async move {
                    let crd = crds.get(&name).await.map_err(|e| e.to_string())?;
                    let established = crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                    if established {
                        Ok(())
                    } else {
                        Err("not Established yet".into())
                    }
                }
            },
        )
        .await
    }

    /// Adds a simulated node (its agent starts at once).
    pub async fn add_node(&mut self, name: &str) -> Result<&SimNode, ControlPlaneError> {
        let addr = LoopbackAddr::acquire()?;
        let root = self.dir.path().join("nodes").join(name);
        std::fs::create_dir_all(root.join("etc/kubernetes/manifests"))
            .map_err(io(format!("creating {}", root.display())))?;
        let mut node = SimNode {
            name: name.to_owned(),
            addr,
            root,
            agent: None,
        };
        self.join_stacked(&node)?;
        self.start_agent(&mut node).await?;
        self.nodes.push(node);
        self.nodes
            .last()
            .ok_or_else(|| ControlPlaneError::Failed("node vanished".into()))
    }

    async fn start_agent(&self, node: &mut SimNode) -> Result<(), ControlPlaneError> {
        let cfg = match self.stacked_node_config(node) {
            Some(cfg) => cfg?,
            None => crate::container_runtime::apply(
                NodeConfig::new(&node.name, node.ip(), &node.root, &self.bin_dir)
                    .with_client(self.client())
                    .with_kubeconfig(self.api.kubeconfig())
                    .with_api_service(self.api.server_url()),
            )?,
        };
        node.agent = Some(NodeAgent::start(cfg).await?);
        Ok(())
    }

    /// The operator runs as its ServiceAccount under the shipped RBAC (kas), so the API refuses
    /// what the manifests do not grant; the stand-in stores RBAC objects without enforcing them.
    pub fn operator_rbac_enforced(&self) -> bool {
        self.operator_kubeconfig.is_some()
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Result<&SimNode, ControlPlaneError> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| ControlPlaneError::Failed(format!("no node {name}")))
    }

    /// Stops a node's agent (its pods stop, like a powered-off machine); the Node object stays.
    pub async fn stop_node(&mut self, name: &str) -> Result<(), ControlPlaneError> {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.name == name)
            .ok_or_else(|| ControlPlaneError::Failed(format!("no node {name}")))?;
        if let Some(agent) = node.agent.take() {
            agent.shutdown().await;
        }
        Ok(())
    }

    /// Starts a stopped node's agent again (same address and root).
    pub async fn restart_node(&mut self, name: &str) -> Result<(), ControlPlaneError> {
        let idx = self
            .nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| ControlPlaneError::Failed(format!("no node {name}")))?;
        let mut node = self.nodes.remove(idx);
        let result = self.start_agent(&mut node).await;
        self.nodes.insert(idx, node);
        result
    }

    /// The addresses of nodes `names` change at once, as after a reboot (or a whole control
    /// plane's power loss) into new DHCP leases: their agents stop (their pods with them), then
    /// each comes back on a new loopback address with the same root (its Node's InternalIP
    /// follows with the agent's first status patch); each old address is retired
    /// ([`RetiredAddress`], held until the returned value is dropped).
    pub async fn change_node_addresses(
        &mut self,
        names: &[&str],
    ) -> Result<Vec<RetiredAddress>, ControlPlaneError> {
        for name in names {
            self.stop_node(name).await?;
        }
        let mut retired = Vec::new();
        for name in names {
            let new = LoopbackAddr::acquire()?;
            let node = self
                .nodes
                .iter_mut()
                .find(|n| n.name == *name)
                .ok_or_else(|| ControlPlaneError::Failed(format!("no node {name}")))?;
            let old = std::mem::replace(&mut node.addr, new);
            retired.push(RetiredAddress::hold(old).await?);
        }
        for name in names {
            self.restart_node(name).await?;
        }
        Ok(retired)
    }

    /// Stops a node's agent and deletes its Node object (the machine is gone).
    pub async fn delete_node(&mut self, name: &str) -> Result<(), ControlPlaneError> {
        self.stop_node(name).await?;
        let api: Api<Node> = Api::all(self.client());
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(node) = self.nodes.iter().find(|n| n.name == name) {
            self.leave_stacked(node);
        }
        self.nodes.retain(|n| n.name != name);
        Ok(())
    }

    /// `etcd-operator render` for the first node, its static pod placed, and the CA and
    /// certificates applied for the operator to adopt.
    pub async fn bootstrap(&self, name: &str) -> Result<(), ControlPlaneError> {
        let node = self.node(name)?;
        let out_dir = render::render(&self.bin_dir, node, self.etcd_image.as_deref())?;
        self.apply_bootstrap_objects(&out_dir).await?;
        render::place_manifest(node, &out_dir)
    }

    /// Applies what `render` wrote for the operator to adopt: the CAs, the certificates and the
    /// bundles.
    async fn apply_bootstrap_objects(&self, out_dir: &Path) -> Result<(), ControlPlaneError> {
        let client = self.client();
        for file in ["etcd-signer.json", "etcd-metric-signer.json"] {
            let signer: Secret = render::read_rendered(out_dir, file)?;
            create_or_keep(
                &Api::<Secret>::namespaced(client.clone(), OPERATOR_NS),
                &signer,
            )
            .await?;
        }
        let certs: Secret = render::read_rendered(out_dir, "etcd-all-certs.json")?;
        create_or_keep(
            &Api::<Secret>::namespaced(client.clone(), STATIC_NS),
            &certs,
        )
        .await?;
        let bundles: ConfigMap = render::read_rendered(out_dir, "etcd-all-bundles.json")?;
        create_or_keep(
            &Api::<ConfigMap>::namespaced(client.clone(), STATIC_NS),
            &bundles,
        )
        .await
    }

    /// Creates the EtcdCluster (defaults unless `spec` is given).
    /// Creates the EtcdCluster. The simulated nodes share one network namespace, so etcd's
    /// local listener on 127.0.0.1:2379 (one per real node) is turned off here.
    /// On the stacked control plane the kube-apiservers are a consumer (`render`'s, with
    /// `reload: Restart`) unless `spec` names them.
    pub async fn create_cluster(&self, spec: EtcdClusterSpec) -> Result<(), ControlPlaneError> {
        let mut spec = EtcdClusterSpec {
            local_client_listener: false,
            ..spec
        };
        let kas = etcd_operator::bootstrap::apiserver::consumer();
        if self.stacked.is_some() && !spec.clients.iter().any(|c| c.name == kas.name) {
            spec.clients.push(kas);
        }
        let cr = EtcdCluster::new(etcd_operator::api::SINGLETON, spec);
        create_or_keep(&Api::<EtcdCluster>::all(self.client()), &cr).await
    }

    /// An admin's kubeconfig for this API (what `kubectl` or `etcd-operator gather` would use).
    pub fn admin_kubeconfig(&self) -> &Path {
        self.api.kubeconfig()
    }

    /// Stops everything: operator, agents (and their pods), then the API.
    pub async fn shutdown(mut self) {
        self.stop_operators(Duration::from_secs(5));
        for node in &mut self.nodes {
            if let Some(agent) = node.agent.take() {
                agent.shutdown().await;
            }
        }
        if self.api.is_real() {
            let nodes: Api<Node> = Api::all(self.api.client());
            for node in &self.nodes {
                let _ = nodes.delete(&node.name, &DeleteParams::default()).await;
            }
        }
    }

    /// The EtcdCluster as the API has it now.
    pub async fn cluster(&self) -> Result<Option<EtcdCluster>, ControlPlaneError> {
        Ok(Api::<EtcdCluster>::all(self.client())
            .get_opt(etcd_operator::api::SINGLETON)
            .await?)
    }

    /// The EtcdCluster's status as stored, read without decoding the spec: it reads also while
    /// the spec is one the operator cannot decode (`None`: no EtcdCluster, or no status).
    pub async fn cluster_status(&self) -> Result<Option<EtcdClusterStatus>, ControlPlaneError> {
        let stored = Api::<StoredCluster>::all(self.client())
            .get_opt(etcd_operator::api::SINGLETON)
            .await?;
        Ok(stored.and_then(|c| status_of(&c)))
    }

    /// Path of the sandbox dir.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A new sandbox dir, and where the project's binaries are.
fn sandbox_dir() -> Result<(tempfile::TempDir, PathBuf), ControlPlaneError> {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-")
        .tempdir()
        .map_err(io("creating the sandbox dir"))?;
    let bin_dir = crate::binaries::bin_dir().map_err(io("locating the project's binaries"))?;
    Ok((dir, bin_dir))
}

/// The status of a stored EtcdCluster, decoded on its own (`None` when absent or unreadable).
pub fn status_of(c: &StoredCluster) -> Option<EtcdClusterStatus> {
    c.status
        .as_ref()
        .and_then(|s| serde_json::from_value(s.clone()).ok())
}

/// Creates `obj`; AlreadyExists is fine (the object is kept as it is).
pub async fn create_or_keep<K>(api: &Api<K>, obj: &K) -> Result<(), ControlPlaneError>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Polls `check` until it succeeds or `deadline` passes; the error names what was last seen.
pub async fn wait_for<F, Fut>(
    deadline: Duration,
    what: &str,
    mut check: F,
) -> Result<(), ControlPlaneError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    let mut last = String::from("nothing checked yet");
    while started.elapsed() < deadline {
        match check().await {
            Ok(()) => return Ok(()),
            Err(seen) => last = seen,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(ControlPlaneError::Failed(format!(
        "timed out after {deadline:?} waiting for {what}; last seen: {last}"
    )))
}
