//! How one simulated node is configured ([`NodeConfig`]): its name, address and root, the
//! API, the container runtime (an image table of host binaries, or runc from an image store),
//! back-off and the loops' intervals.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backoff::Backoff;
use crate::images::ImageTable;
use crate::runc::RuncConfig;

/// How to run one simulated node.
#[derive(Clone)]
pub struct NodeConfig {
    pub name: String,
    pub ip: IpAddr,
    pub root: PathBuf,
    /// The project's binaries (`etcd-operator`, `etcd-installer`, `etcd-verify`).
    pub bin_dir: PathBuf,
    /// The `kubelet-standin` binary used as container helper; default `<bin_dir>/kubelet-standin`.
    pub helper: Option<PathBuf>,
    /// The Kubernetes API; `None` runs static pods only (no Node, no mirror pods).
    pub client: Option<kube::Client>,
    /// Image table; default [`ImageTable::standard`] with `bin_dir`. Unused under runc.
    pub images: Option<ImageTable>,
    /// Run containers under runc from an image store instead of mapping images to host
    /// binaries ([`crate::runc`]).
    pub runc: Option<RuncConfig>,
    pub backoff: Backoff,
    /// Manifest directory poll interval where inotify is unavailable (then it bounds the
    /// latency of a manifest change; with inotify a change is seen at once).
    pub manifest_poll: Duration,
    /// Node status heartbeat interval.
    pub heartbeat: Duration,
    /// Mirror pod / status resync interval.
    pub resync: Duration,
    /// A kubeconfig containers get as `KUBECONFIG` when their pod has no ServiceAccount token:
    /// the API stand-in has no ServiceAccount admission, auth or TLS, so pods on it get the
    /// agent's own credentials. On a real API server pods get their token volume instead.
    pub kubeconfig: Option<PathBuf>,
    /// Host and port containers get as `KUBERNETES_SERVICE_HOST`/`_PORT` (see
    /// [`NodeConfig::with_api_service`]).
    pub api_service: Option<(String, u16)>,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("name", &self.name)
            .field("ip", &self.ip)
            .field("root", &self.root)
            .field("bin_dir", &self.bin_dir)
            .field("runc", &self.runc)
            .field("helper", &self.helper)
            .field("client", &self.client.as_ref().map(|_| "kube::Client"))
            .field("backoff", &self.backoff)
            .field("manifest_poll", &self.manifest_poll)
            .field("heartbeat", &self.heartbeat)
            .field("resync", &self.resync)
            .finish_non_exhaustive()
    }
}

impl NodeConfig {
    /// Defaults: kubelet back-off, manifests watched by inotify (250 ms poll without it), 10 s
    /// heartbeat and resync.
    pub fn new(name: &str, ip: IpAddr, root: &Path, bin_dir: &Path) -> Self {
        NodeConfig {
            name: name.to_string(),
            ip,
            root: root.to_path_buf(),
            bin_dir: bin_dir.to_path_buf(),
            helper: None,
            client: None,
            images: None,
            runc: None,
            backoff: Backoff::kubelet(),
            manifest_poll: Duration::from_millis(250),
            heartbeat: Duration::from_secs(10),
            resync: Duration::from_secs(10),
            kubeconfig: None,
            api_service: None,
        }
    }

    /// Points in-cluster clients at the API server `url` (`https://host:port`): the stand-in
    /// for the `kubernetes` Service, which needs kube-proxy to reach.
    pub fn with_api_service(mut self, url: &str) -> Self {
        self.api_service = crate::env::api_service_of(url);
        self
    }

    /// Gives every container `KUBECONFIG=<path>` (see [`NodeConfig::kubeconfig`]).
    pub fn with_kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig = Some(path.into());
        self
    }

    /// Runs containers under runc from `runc`'s image store.
    pub fn with_runc(mut self, runc: RuncConfig) -> Self {
        self.runc = Some(runc);
        self
    }

    pub fn with_client(mut self, client: kube::Client) -> Self {
        self.client = Some(client);
        self
    }

    pub fn with_helper(mut self, helper: impl Into<PathBuf>) -> Self {
        self.helper = Some(helper.into());
        self
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}
