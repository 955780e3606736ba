//! **The stacked control plane**, as kubeadm and OpenShift run it: on every control-plane node a
//! real kube-apiserver (v1.36, `../shared/kas`'s binary), kube-controller-manager and
//! kube-scheduler run as static pods from the node's manifest directory, started by its node
//! agent, beside the etcd the operator manages; the kube-apiservers store the cluster in that
//! etcd. Chosen by [`LocalControlPlane::start_on_managed_etcd`] when `TEST_API=kas`.
//!
//! The order is a real bootstrap's:
//!
//! 1. the nodes' addresses, and the control-plane endpoint's ([`ApiEndpoint`], the load
//!    balancer stand-in) are fixed; the Kubernetes PKI is made (a CA; per node a serving
//!    certificate naming the node and the endpoint; the admin's, the controller-manager's and
//!    the scheduler's client certificates; the ServiceAccount signing key);
//! 2. the node agents start, configured with the endpoint before it answers;
//! 3. `etcd-operator render` bootstraps n1; its etcd starts with no API at all;
//! 4. the kube-apiserver operator stand-in ([`ApiServerOperator`]) lays every node's
//!    kube-apiserver down from the material `render` wrote (`<out>/kube-apiserver/`), with
//!    `--etcd-servers` naming n1's member; controller-manager and scheduler are laid beside it;
//! 5. once the API answers through the endpoint, the objects `render` wrote are applied (the
//!    CA, the certificates, kube-apiserver's consumer Secret); from then on the stand-in follows
//!    the consumer Secret and `etcd-endpoints`, rolling the kube-apiservers one at a time.
//!
//! Losing etcd's quorum takes the API down with it.
//!
//! With `CONTAINER_RUNTIME=runc` ([`crate::container_runtime`]) every static pod of a node, the
//! control-plane components included, runs under runc from the images `scripts/build-images`
//! made of kas's binaries (`kube-apiserver:v1.36.2`, ...); without it the node agent's image
//! table runs those binaries directly.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use etcd_fixture::{KubeSubject, LoopbackAddr, Pki};
use etcd_operator::bootstrap::apiserver;
use etcd_operator::controllers::host_endpoints::EndpointNode;
use k8s_openapi::api::core::v1::Secret;
use kube_testapi::TestApi;
use kubelet_standin::images::ImageTable;
use kubelet_standin::{NodeAgent, NodeConfig};

use super::apiserver_operator::{
    ApiServerNode, ApiServerOperator, CONSUMER_SECRET, EtcdMaterial, material_digest, place_pod,
};
use super::endpoint::ApiEndpoint;
use super::kube_pods::{
    APISERVER_PORT, PKI_DIR, RESOURCES_DIR, component_images, controller_manager_pod, kube_images,
    scheduler_pod,
};
use super::{ControlPlaneError, LocalControlPlane, OPERATOR_NS, SimNode, create_or_keep, io};
use super::{render, wait_for};

/// Bound on the API answering through the endpoint after the kube-apiservers are laid.
const API_UP: Duration = Duration::from_secs(180);
/// etcd's client port on every node.
const CLIENT_PORT: u16 = 2379;

/// What the stacked control plane keeps running besides the nodes.
pub struct Stacked {
    /// The control-plane endpoint.
    pub endpoint: ApiEndpoint,
    /// The kube-apiserver operator stand-in.
    pub apiservers: ApiServerOperator,
    pki: Pki,
    endpoint_addr: LoopbackAddr,
    kas_bin: PathBuf,
}

impl std::fmt::Debug for Stacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stacked")
            .field("endpoint", &self.endpoint_addr.ip())
            .finish_non_exhaustive()
    }
}

impl LocalControlPlane {
    /// Nodes `names` (the first bootstrapped with `render`) with kube-apiserver,
    /// controller-manager and scheduler as static pods on each (see the module docs).
    /// The operator is not started.
    pub(super) async fn start_stacked(
        names: &[&str],
        kas_bin: PathBuf,
    ) -> Result<Self, ControlPlaneError> {
        let first = *names
            .first()
            .ok_or_else(|| ControlPlaneError::Failed("no node to bootstrap".into()))?;
        let (dir, bin_dir) = super::sandbox_dir()?;
        let endpoint_addr = LoopbackAddr::acquire()?;
        let endpoint_ip = IpAddr::V4(endpoint_addr.ip());
        let mut nodes = Vec::new();
        for name in names {
            let root = dir.path().join("nodes").join(name);
            nodes.push(SimNode {
                name: (*name).to_owned(),
                addr: LoopbackAddr::acquire()?,
                root,
                agent: None,
            });
        }
        let pki = Pki::create_named(&dir.path().join("kube-pki"), "kubernetes")?;
        let kubeconfig = dir.path().join("admin.kubeconfig");
        write_kubeconfig(&kubeconfig, endpoint_ip, &pki, &admin(&pki)?)?;
        let backends: Vec<SocketAddr> = nodes
            .iter()
            .map(|n| SocketAddr::new(n.ip(), APISERVER_PORT))
            .collect();
        let endpoint = ApiEndpoint::start(
            SocketAddr::new(endpoint_ip, APISERVER_PORT),
            &backends,
            pem_to_der(&pki.ca())?,
        )
        .await
        .map_err(io("starting the control-plane endpoint"))?;
        let api = TestApi::stacked(&kubeconfig, Some(kas_bin.join("kubectl"))).await?;
        if let Some(runc) = crate::container_runtime::from_env()? {
            crate::container_runtime::pull_images(&runc, &component_images()).await?;
        }
        for node in &mut nodes {
            prepare_node(node, &pki, endpoint_ip)?;
            let cfg = node_config(node, &bin_dir, &kas_bin, &api, endpoint_ip)?;
            node.agent = Some(NodeAgent::start(cfg).await?);
        }
        let n1 = nodes
            .iter()
            .find(|n| n.name == first)
            .ok_or_else(|| ControlPlaneError::Failed(format!("no node {first}")))?;
        let out_dir = render::render(&bin_dir, n1, None)?;
        render::place_manifest(n1, &out_dir)?;
        let apiservers = ApiServerOperator::start(
            api.client(),
            nodes.iter().map(apiserver_node).collect(),
            rendered_material(&out_dir)?,
            bootstrap_member(n1),
        )?;
        let stacked = Stacked {
            endpoint,
            apiservers,
            pki,
            endpoint_addr,
            kas_bin,
        };
        let mut cp = Self::assemble(api, dir, bin_dir, nodes);
        cp.stacked = Some(stacked);
        cp.wait_api().await?;
        cp.install_prerequisites().await?;
        cp.operator_kubeconfig = Some(cp.operator_identity().await?);
        cp.wait_token_volume_sources().await?;
        cp.apply_bootstrap_objects(&out_dir).await?;
        cp.apply_apiserver_secret(&out_dir).await?;
        Ok(cp)
    }

    /// Waits until the API answers `/readyz` through the control-plane endpoint.
    async fn wait_api(&self) -> Result<(), ControlPlaneError> {
        let client = self.client();
        wait_for(API_UP, "kube-apiserver through the endpoint", || {
            let client = client.clone();
            async move {
                let req = http::Request::get("/readyz")
                    .body(Vec::new())
                    .map_err(|e| e.to_string())?;
                match client.request_text(req).await {
                    Ok(body) if body.trim() == "ok" => Ok(()),
                    Ok(body) => Err(body),
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await
    }

    /// Applies the consumer Secret `render` wrote for the first kube-apiserver, which the
    /// operator adopts.
    async fn apply_apiserver_secret(&self, out_dir: &Path) -> Result<(), ControlPlaneError> {
        let secret: Secret = render::read_rendered(out_dir, "etcd-consumer-kube-apiserver.json")?;
        create_or_keep(
            &kube::Api::<Secret>::namespaced(self.client(), OPERATOR_NS),
            &secret,
        )
        .await
    }

    /// On the stacked control plane: makes `node` a control-plane node like the others (PKI,
    /// kubeconfigs, controller-manager and scheduler) and hands it to the endpoint and the
    /// kube-apiserver operator stand-in. Nothing elsewhere.
    pub(super) fn join_stacked(&self, node: &SimNode) -> Result<(), ControlPlaneError> {
        let Some(s) = &self.stacked else {
            return Ok(());
        };
        prepare_node(node, &s.pki, IpAddr::V4(s.endpoint_addr.ip()))?;
        s.endpoint
            .add_backend(SocketAddr::new(node.ip(), APISERVER_PORT));
        s.apiservers.add_node(apiserver_node(node));
        Ok(())
    }

    /// On the stacked control plane: `node`'s machine is gone; the endpoint and the
    /// kube-apiserver operator stand-in forget it.
    pub(super) fn leave_stacked(&self, node: &SimNode) {
        if let Some(s) = &self.stacked {
            s.endpoint
                .remove_backend(SocketAddr::new(node.ip(), APISERVER_PORT));
            s.apiservers.remove_node(&node.name);
        }
    }

    /// The node agent configuration of a node of this control plane.
    pub(super) fn stacked_node_config(
        &self,
        node: &SimNode,
    ) -> Option<Result<NodeConfig, ControlPlaneError>> {
        let s = self.stacked.as_ref()?;
        Some(node_config(
            node,
            &self.bin_dir,
            &s.kas_bin,
            &self.api,
            IpAddr::V4(s.endpoint_addr.ip()),
        ))
    }

    /// An admin's client of `node`'s own kube-apiserver (not through the endpoint): the
    /// admin kubeconfig with the node's address as the server (its serving certificate names
    /// it).
    pub async fn apiserver_client(&self, node: &str) -> Result<kube::Client, ControlPlaneError> {
        let ip = self.node(node)?.ip();
        let path = self.api.kubeconfig();
        let kubeconfig = kube::config::Kubeconfig::read_from(path)
            .map_err(|e| ControlPlaneError::Failed(format!("{}: {e}", path.display())))?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| ControlPlaneError::Failed(format!("{}: {e}", path.display())))?;
        let url = format!("https://{ip}:{APISERVER_PORT}");
        config.cluster_url = url
            .parse()
            .map_err(|e| ControlPlaneError::Failed(format!("{url}: {e}")))?;
        Ok(kube::Client::try_from(config)?)
    }

    /// The stacked control plane's parts, when this is one.
    pub fn stacked(&self) -> Option<&Stacked> {
        self.stacked.as_ref()
    }
}

/// A node agent for `node` on the API through the endpoint: under runc when the environment
/// asks for it (the control-plane images pulled first: [`crate::container_runtime::pull_images`]),
/// otherwise with an image table that runs the kas binaries.
fn node_config(
    node: &SimNode,
    bin_dir: &Path,
    kas_bin: &Path,
    api: &TestApi,
    endpoint: IpAddr,
) -> Result<NodeConfig, ControlPlaneError> {
    let cfg = NodeConfig::new(&node.name, node.ip(), &node.root, bin_dir)
        .with_client(api.client())
        .with_kubeconfig(api.kubeconfig())
        .with_api_service(&format!("https://{endpoint}:{APISERVER_PORT}"));
    if let Some(runc) = crate::container_runtime::from_env()? {
        return Ok(cfg.with_runc(runc));
    }
    let images = kube_images(kas_bin)
        .into_iter()
        .fold(ImageTable::standard(bin_dir), ImageTable::with_entry);
    Ok(NodeConfig {
        images: Some(images),
        ..cfg
    })
}

/// The node as the kube-apiserver operator stand-in knows it.
fn apiserver_node(node: &SimNode) -> ApiServerNode {
    ApiServerNode {
        name: node.name.clone(),
        ip: node.ip(),
        root: node.root.clone(),
    }
}

/// The bootstrap node's member, before `etcd-endpoints` exists.
fn bootstrap_member(node: &SimNode) -> EndpointNode {
    EndpointNode {
        node: node.name.clone(),
        member_id: None,
        client_url: format!("https://{}:{CLIENT_PORT}", node.ip()),
        voter: true,
    }
}

/// The material `render` laid down for the first kube-apiserver, with the material digest of
/// the consumer Secret it rendered alongside.
fn rendered_material(out_dir: &Path) -> Result<EtcdMaterial, ControlPlaneError> {
    let read = |f: &str| {
        let p = out_dir.join(f);
        std::fs::read(&p).map_err(io(format!("reading {}", p.display())))
    };
    let secret_file = format!("manifests/{CONSUMER_SECRET}.json");
    let secret: Secret = serde_json::from_slice(&read(&secret_file)?)
        .map_err(|e| ControlPlaneError::Failed(format!("{secret_file}: {e}")))?;
    Ok(EtcdMaterial {
        ca: read(apiserver::CA_FILE)?,
        cert: read(apiserver::CERT_FILE)?,
        key: read(apiserver::KEY_FILE)?,
        digest: material_digest(&secret),
    })
}

/// Lays down on `node` what kubeadm's `init`/`join --control-plane` does: the PKI (the CA, a
/// serving certificate naming the node and the endpoint, the ServiceAccount key), the
/// controller-manager's and scheduler's kubeconfigs (their own node's kube-apiserver) and their
/// static pods.
fn prepare_node(node: &SimNode, pki: &Pki, endpoint: IpAddr) -> Result<(), ControlPlaneError> {
    let etc = node.root.join("etc/kubernetes");
    let node_pki = node.root.join(PKI_DIR.trim_start_matches('/'));
    for d in [
        node.manifest_dir(),
        node_pki.clone(),
        node.root.join(RESOURCES_DIR.trim_start_matches('/')),
    ] {
        std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
    }
    let serving = pki.issue_kube(
        &format!("apiserver-{}", node.name),
        &KubeSubject {
            common_name: "kube-apiserver",
            organization: None,
        },
        Some((
            &[node.ip(), endpoint, IpAddr::from([10, 96, 0, 1])],
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
        )),
    )?;
    copy(&pki.ca(), &node_pki.join("ca.crt"))?;
    copy(&serving.cert, &node_pki.join("apiserver.crt"))?;
    copy(&serving.key, &node_pki.join("apiserver.key"))?;
    let sa = service_account_key(pki)?;
    copy(&sa.key, &node_pki.join("sa.key"))?;
    copy(&sa.cert, &node_pki.join("sa.pub"))?;
    for (user, file) in [
        ("system:kube-controller-manager", "controller-manager.conf"),
        ("system:kube-scheduler", "scheduler.conf"),
    ] {
        let client = pki.issue_kube(
            &format!("{file}-{}", node.name),
            &KubeSubject {
                common_name: user,
                organization: None,
            },
            None,
        )?;
        write_kubeconfig(&etc.join(file), node.ip(), pki, &client)?;
    }
    for (file, pod) in [
        (
            "kube-controller-manager.json",
            controller_manager_pod(node.ip()),
        ),
        ("kube-scheduler.json", scheduler_pod(node.ip())),
    ] {
        place_pod(&node.manifest_dir(), file, &pod)?;
    }
    Ok(())
}

/// The one ServiceAccount signing key pair every kube-apiserver shares (made once).
fn service_account_key(pki: &Pki) -> Result<etcd_fixture::CertFiles, ControlPlaneError> {
    let made = etcd_fixture::CertFiles {
        cert: pki.ca().with_file_name("sa.pub"),
        key: pki.ca().with_file_name("sa.key"),
    };
    if made.cert.is_file() && made.key.is_file() {
        return Ok(made);
    }
    Ok(pki.signing_key("sa")?)
}

/// The admin's client certificate (group `system:masters`, as kubeadm's `admin.conf`).
fn admin(pki: &Pki) -> Result<etcd_fixture::CertFiles, ControlPlaneError> {
    Ok(pki.issue_kube(
        "admin",
        &KubeSubject {
            common_name: "kubernetes-admin",
            organization: Some("system:masters"),
        },
        None,
    )?)
}

/// A kubeconfig for `https://<server>:6443` with the CA and the client certificate embedded.
pub fn write_kubeconfig(
    path: &Path,
    server: IpAddr,
    pki: &Pki,
    client: &etcd_fixture::CertFiles,
) -> Result<(), ControlPlaneError> {
    let b64 = |p: &Path| {
        std::fs::read(p)
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
            .map_err(io(format!("reading {}", p.display())))
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: sandbox\n  cluster:\n    server: https://{server}:{APISERVER_PORT}\n    certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: sandbox\n  context:\n    cluster: sandbox\n    user: user\n    namespace: default\ncurrent-context: sandbox\n",
        ca = b64(&pki.ca())?,
        cert = b64(&client.cert)?,
        key = b64(&client.key)?,
    );
    std::fs::write(path, text).map_err(io(format!("writing {}", path.display())))?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(io(format!("chmod {}", path.display())))
}

/// The DER of the one certificate in the PEM file `path`.
fn pem_to_der(path: &Path) -> Result<Vec<u8>, ControlPlaneError> {
    let text = std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .map_err(|e| ControlPlaneError::Failed(format!("{}: not PEM: {e}", path.display())))
}

fn copy(from: &Path, to: &Path) -> Result<(), ControlPlaneError> {
    std::fs::copy(from, to).map(|_| ()).map_err(io(format!(
        "copying {} to {}",
        from.display(),
        to.display()
    )))
}
