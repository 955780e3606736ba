//! The node a stand-in agent simulates: its name, address, root directory and tools.
//!
//! Every host path a pod names (hostPath volumes) is interpreted below the node's root
//! directory, so `/var/lib/etcd` on node `n1` is `<root>/var/lib/etcd`.

use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::backoff::Backoff;
use crate::images::ImageTable;
use crate::runc::RuncRuntime;

/// Static facts about the simulated node, shared by every pod worker.
#[derive(Debug, Clone)]
pub struct NodeContext {
    pub name: String,
    pub ip: IpAddr,
    pub root: PathBuf,
    /// The `kubelet-standin` binary, whose `exec-container` subcommand starts containers.
    pub helper: PathBuf,
    pub images: Arc<ImageTable>,
    /// Set: containers run under runc from the node's image store, not from `images`.
    pub runc: Option<Arc<RuncRuntime>>,
    pub backoff: Backoff,
    /// Given as `KUBECONFIG` to containers of pods without a ServiceAccount token (the API
    /// stand-in issues none).
    pub kubeconfig: Option<PathBuf>,
    /// The API, for API-backed volumes (tokens, ConfigMaps, Secrets).
    pub client: Option<ApiClient>,
    /// `KUBERNETES_SERVICE_HOST` and `_PORT` for every container: the API server's own address
    /// (a kubelet gives the `kubernetes` Service's cluster IP; no kube-proxy runs here).
    pub api_service: Option<(String, u16)>,
}

/// The agent's API client (a newtype so the context stays `Debug`).
#[derive(Clone)]
pub struct ApiClient(pub kube::Client);

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("kube::Client")
    }
}

/// A host path that would escape the node root.
#[derive(Debug, thiserror::Error)]
#[error("path {0:?} must be absolute and without '..'")]
pub struct PathEscape(pub String);

impl NodeContext {
    /// `/var/lib/etcd` → `<root>/var/lib/etcd`.
    pub fn host_path(&self, path: &str) -> Result<PathBuf, PathEscape> {
        let p = Path::new(path);
        if !p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(PathEscape(path.to_string()));
        }
        Ok(self.root.join(path.trim_start_matches('/')))
    }

    /// The static pod manifest directory.
    pub fn manifest_dir(&self) -> PathBuf {
        self.root.join("etc/kubernetes/manifests")
    }

    /// Scratch mount point for the exec-container helper (a tmpfs inside each container).
    pub fn staging_dir(&self) -> PathBuf {
        self.root.join("run/kubelet-standin/staging")
    }

    /// Per-pod state (empty dirs, termination message files).
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root.join("var/lib/kubelet/pods").join(uid)
    }

    /// Container log file for one run.
    pub fn log_path(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        container: &str,
        run: u32,
    ) -> PathBuf {
        self.root
            .join("var/log/pods")
            .join(format!("{namespace}_{name}_{uid}"))
            .join(container)
            .join(format!("{run}.log"))
    }

    /// The directories every node has.
    pub fn create_dirs(&self) -> std::io::Result<()> {
        for d in [
            self.manifest_dir(),
            self.root.join("etc/kubernetes/static-pod-resources"),
            self.root.join("var/lib/etcd"),
            self.staging_dir(),
        ] {
            std::fs::create_dir_all(d)?;
        }
        Ok(())
    }
}
