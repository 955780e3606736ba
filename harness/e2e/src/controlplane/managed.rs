//! The local control plane with the Kubernetes API served from the etcd the operator manages, as
//! in a real control plane: losing etcd's quorum takes the API down with it.
//!
//! The order is a real bootstrap's. The API's address is fixed first (so the node agents, like
//! kubelets, can be configured with it before it answers); the nodes start; `render` bootstraps
//! n1 and its static pod runs with no API at all; once n1's etcd answers, the API stand-in starts
//! on it, over mutual TLS with the client certificate `render` issued for the first
//! kube-apiserver (`<out>/kube-apiserver/`, kubeadm's `apiserver-etcd-client`); then the objects
//! `render` wrote are applied and the operator grows etcd from there. Like kube-apiserver with
//! every member in `--etcd-servers`, the stand-in is given every node's client URL (n1's first)
//! and moves to the next member when one fails (`apiserver_standin::store::Store`): a reboot of
//! n1 alone leaves the API up, a lost quorum takes it down. Nodes added later are not in its
//! list, as they would not be in a kube-apiserver's flag that nobody re-rendered.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use etcd_fixture::LoopbackAddr;
use etcd_operator::bootstrap::apiserver;
use kube_testapi::TestApi;
use kubelet_standin::{NodeAgent, NodeConfig};
use membership::{ClientConfig, EtcdClient, MemberUrl, TlsFiles};

use super::{ControlPlaneError, LocalControlPlane, SimNode, io, render, wait_for};

/// The port the API listens on, at its own loopback address.
const API_PORT: u16 = 6443;
/// etcd's client port on every node.
const CLIENT_PORT: u16 = 2379;
/// Bound on n1's etcd answering after its manifest is placed.
const ETCD_UP: Duration = Duration::from_secs(90);

impl LocalControlPlane {
    /// Nodes `names` (the first bootstrapped with `render`) and the API stand-in serving from
    /// their etcd (see the module docs). The operator is not started.
    ///
    /// With `TEST_API=kas` the API is real kube-apiservers run as static pods on every node
    /// instead ([`super::stacked`]); an error when kas is absent.
    pub async fn start_on_managed_etcd(
        names: &[&str],
        etcd_image: Option<&str>,
    ) -> Result<Self, ControlPlaneError> {
        if std::env::var("TEST_API").as_deref() == Ok("kas") {
            if let Some(image) = etcd_image {
                return Err(ControlPlaneError::Failed(format!(
                    "the stacked control plane starts on the operator's default etcd only, not {image}"
                )));
            }
            let kas_bin = kube_testapi::kas_binaries()?.ok_or_else(|| {
                ControlPlaneError::Failed(
                    "TEST_API=kas: no kas control plane: put shared/kas beside the repository \
                     or set KAS"
                        .into(),
                )
            })?;
            return Self::start_stacked(names, kas_bin).await;
        }
        let first = names
            .first()
            .ok_or_else(|| ControlPlaneError::Failed("no node to bootstrap".into()))?;
        let (dir, bin_dir) = super::sandbox_dir()?;
        let api_addr = LoopbackAddr::acquire()?;
        let api_url = format!("http://{}:{API_PORT}", api_addr.ip());
        let kubeconfig = dir.path().join("api.kubeconfig");
        apiserver_standin::kubeconfig::write(&kubeconfig, &api_url, "default")
            .map_err(|e| ControlPlaneError::Failed(format!("writing the kubeconfig: {e}")))?;
        let uri = api_url
            .parse()
            .map_err(|e| ControlPlaneError::Failed(format!("API URL {api_url}: {e}")))?;
        let client = kube::Client::try_from(kube::Config::new(uri))?;

        let mut nodes = Vec::new();
        for name in names {
            let root = dir.path().join("nodes").join(name);
            std::fs::create_dir_all(root.join("etc/kubernetes/manifests"))
                .map_err(io(format!("creating {}", root.display())))?;
            let mut node = SimNode {
                name: (*name).to_owned(),
                addr: LoopbackAddr::acquire()?,
                root,
                agent: None,
            };
            let cfg = crate::container_runtime::apply(
                NodeConfig::new(&node.name, node.ip(), &node.root, &bin_dir)
                    .with_client(client.clone())
                    .with_kubeconfig(&kubeconfig)
                    .with_api_service(&api_url),
            )?;
            node.agent = Some(NodeAgent::start(cfg).await?);
            nodes.push(node);
        }
        let n1 = nodes
            .iter()
            .find(|n| n.name == *first)
            .ok_or_else(|| ControlPlaneError::Failed(format!("no node {first}")))?;
        let out_dir = render::render(&bin_dir, n1, etcd_image)?;
        let tls = api_client_files(&out_dir);
        render::place_manifest(n1, &out_dir)?;
        wait_etcd(&client_url(n1)?, &tls).await?;

        // Every node's client URL, n1's first, as kube-apiserver's `--etcd-servers` lists every
        // member: the stand-in's store moves to the next member when one fails, so a reboot of
        // n1 alone does not take the API down, and a lost quorum does.
        let mut endpoints = vec![client_url(n1)?.to_string()];
        for n in nodes.iter().filter(|n| n.name != n1.name) {
            endpoints.push(client_url(n)?.to_string());
        }
        let api = TestApi::stand_in_on(
            endpoints,
            apiserver_standin::EtcdTls {
                ca: tls.ca.clone(),
                cert: tls.cert.clone(),
                key: tls.key.clone(),
            },
            SocketAddr::from((api_addr.ip(), API_PORT)),
        )
        .await?;
        let mut cp = Self::assemble(api, dir, bin_dir, nodes);
        cp._api_addr = Some(api_addr);
        if let Some(image) = etcd_image {
            cp.starting_etcd_image(image);
        }
        cp.install_prerequisites().await?;
        cp.apply_bootstrap_objects(&out_dir).await?;
        Ok(cp)
    }
}

/// `https://<node ip>:2379`.
fn client_url(node: &SimNode) -> Result<MemberUrl, ControlPlaneError> {
    format!("https://{}:{CLIENT_PORT}", node.ip())
        .parse()
        .map_err(|e| ControlPlaneError::Failed(format!("client URL of {}: {e}", node.name)))
}

/// The API's etcd client material as `render` laid it down for the first kube-apiserver.
fn api_client_files(out_dir: &Path) -> TlsFiles {
    TlsFiles {
        ca: out_dir.join(apiserver::CA_FILE),
        cert: out_dir.join(apiserver::CERT_FILE),
        key: out_dir.join(apiserver::KEY_FILE),
    }
}

/// Waits until the etcd at `url` answers with a leader.
async fn wait_etcd(url: &MemberUrl, tls: &TlsFiles) -> Result<(), ControlPlaneError> {
    let client = EtcdClient::new(ClientConfig {
        endpoints: vec![url.clone()],
        tls: Some(tls.clone()),
        call_timeout: Duration::from_secs(2),
    })
    .map_err(|e| ControlPlaneError::Failed(format!("etcd client for {url}: {e}")))?;
    wait_for(ETCD_UP, &format!("the bootstrap etcd at {url}"), || {
        let client = &client;
        async move {
            match client.status_of(url).await {
                Ok(s) if s.leader != 0 => Ok(()),
                Ok(_) => Err("answers without a leader".into()),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await
}
