//! Where a revision's files are, on the node and inside the etcd pod. The installer writes a
//! revision to `<resource-dir>/etcd-pod-<N>/{configmaps,secrets}/<name>/<key>`; the pod mounts
//! that directory at [`CONTAINER_RESOURCE_DIR`].

/// The node's resource dir (installer `--resource-dir`).
pub const HOST_RESOURCE_DIR: &str = "/etc/kubernetes/static-pod-resources";
/// The node's static-pod manifest dir (installer `--pod-manifest-dir`).
pub const HOST_MANIFEST_DIR: &str = "/etc/kubernetes/manifests";
/// Where the pod sees its revision's resources.
pub const CONTAINER_RESOURCE_DIR: &str = "/etc/kubernetes/static-pod-resources";
/// Secret holding every node's certificates.
pub const ALL_CERTS_SECRET: &str = "etcd-all-certs";
/// ConfigMap holding the CA bundles.
pub const ALL_BUNDLES_CONFIGMAP: &str = "etcd-all-bundles";
/// ConfigMap holding the per-node manifests (`pod-<node>.yaml`).
pub const POD_CONFIGMAP: &str = "etcd-pod";

/// Host dir of revision `revision` (a number, or the revision token).
pub fn revision_host_dir(revision: &str) -> String {
    format!("{HOST_RESOURCE_DIR}/{POD_CONFIGMAP}-{revision}")
}

/// Paths of one node's TLS files inside the pod.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CertPaths {
    pub server_ca: String,
    pub peer_ca: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub peer_cert: String,
    pub peer_key: String,
    /// The metrics proxy's serving certificate and key, and the metrics CA bundle it trusts
    /// scrapers' certificates with.
    pub metrics_cert: String,
    pub metrics_key: String,
    pub metrics_ca: String,
}

impl CertPaths {
    /// The paths for `node` under [`CONTAINER_RESOURCE_DIR`].
    pub fn for_node(node: &str) -> Self {
        let secret = format!("{CONTAINER_RESOURCE_DIR}/secrets/{ALL_CERTS_SECRET}");
        let bundles = format!("{CONTAINER_RESOURCE_DIR}/configmaps/{ALL_BUNDLES_CONFIGMAP}");
        Self {
            server_ca: format!("{bundles}/server-ca-bundle.crt"),
            peer_ca: format!("{bundles}/peer-ca-bundle.crt"),
            serving_cert: format!("{secret}/etcd-serving-{node}.crt"),
            serving_key: format!("{secret}/etcd-serving-{node}.key"),
            peer_cert: format!("{secret}/etcd-peer-{node}.crt"),
            peer_key: format!("{secret}/etcd-peer-{node}.key"),
            metrics_cert: format!("{secret}/etcd-serving-metrics-{node}.crt"),
            metrics_key: format!("{secret}/etcd-serving-metrics-{node}.key"),
            metrics_ca: format!("{bundles}/metrics-ca-bundle.crt"),
        }
    }
}
