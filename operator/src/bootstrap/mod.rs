//! `etcd-operator render`: the bootstrap path. Before any operator (or even a Kubernetes API)
//! exists, the first control-plane node needs etcd. `render` writes, for that node:
//!
//! * `DIR/etcd-pod.yaml`: a single-member static pod (`ETCD_INITIAL_CLUSTER_STATE=new`, no
//!   member ids yet), rendered from the same template as every later revision;
//! * `DIR/etcd-certs/`: its certificates laid out like a revision's resource dir
//!   (`configmaps/etcd-all-bundles/*`, `secrets/etcd-all-certs/*`, secrets 0600), which the pod
//!   mounts (`--resource-host-dir`, default the absolute path of `DIR/etcd-certs`);
//! * `DIR/manifests/*.json`: the CA Secrets `etcd-signer` and `etcd-metric-signer` (the metrics
//!   CA: the metrics proxy's certificate and scrapers'), Secret `etcd-all-certs` and ConfigMap
//!   `etcd-all-bundles`, which the platform applies once the API is up. The operator then adopts
//!   that CA and those certificates (its plan keeps valid certificates byte-identical), and adopts
//!   the running member, so bootstrap causes no certificate churn;
//! * `DIR/kube-apiserver/`: the first kube-apiserver's etcd client certificate, key and CA
//!   bundle, with `DIR/manifests/etcd-consumer-kube-apiserver.json` (the same as the consumer
//!   Secret the operator adopts) and `DIR/manifests/etcdcluster.json` (the EtcdCluster, naming
//!   kube-apiserver in `spec.clients`): see [`apiserver`].
//!
//! Planning ([`plan`]) is pure given the CA and `now`; [`output::write_dir`] lays the whole
//! output down as one step (a staging dir renamed into place; nothing half-written, nothing
//! written through a planted file or symlink). The node name and address are checked first
//! ([`validate`]).
//!
//! **Re-running** `render` on an output dir that already holds a CA (`manifests/etcd-signer.json`)
//! reuses that CA (and the metrics CA of `manifests/etcd-metric-signer.json`), as kubeadm reuses the CA in its pki dir: the certificates are issued again by
//! the same CA, so an etcd already started from the first render, and whatever trusts its CA,
//! stay valid. A CA file that cannot be read as one is an error naming the file; nothing is
//! replaced silently. kube-apiserver's certificate and key are kept too, while valid. The
//! previous output is kept as `<dir>.replaced-<UTC>`.

pub mod apiserver;
pub mod output;
pub mod validate;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ObjectMeta;
use time::OffsetDateTime;

use crate::api::EtcdClusterSpec;
use crate::certs::{self, CaRole, CertPolicy, EtcdCa};
use crate::podspec::paths::{ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET};
use crate::podspec::{Images, NodeTarget, PodInput, STATIC_POD_NAMESPACE, render_pod};

/// Namespace the operator runs in (its CA Secret lives there).
pub const OPERATOR_NAMESPACE: &str = "etcd-operator";

/// One file to write, relative to the output dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    pub mode: u32,
}

/// What to render.
#[derive(Clone, Debug)]
pub struct RenderRequest {
    pub node: NodeTarget,
    pub images: Images,
    /// Host path of the certificates dir as the kubelet will see it.
    pub resource_host_dir: String,
    /// etcd also listens on `127.0.0.1:2379` and `[::1]:2379` (see
    /// `EtcdClusterSpec::local_client_listener`).
    pub local_client_listener: bool,
    /// `ETCD_INITIAL_CLUSTER_TOKEN` of the new cluster: unique per cluster, so a cluster
    /// bootstrapped again on the same address never gets the ids of the one before it.
    pub cluster_token: String,
    /// kube-apiserver's certificate and key from a previous render with the same CA (kept while
    /// valid).
    pub apiserver_client: Option<BTreeMap<String, Vec<u8>>>,
}

/// Why the bootstrap render failed.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Certs(#[from] certs::CertError),
    #[error(transparent)]
    Render(#[from] crate::podspec::RenderError),
    #[error("encoding {what}: {source}")]
    Encode {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    InvalidInput(String),
    #[error(
        "the existing CA {path} cannot be reused ({reason}); move the output dir away to render with a new CA"
    )]
    ExistingCa { path: PathBuf, reason: String },
}

/// What a render wrote.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub files: Vec<OutFile>,
    /// The CA came from a previous render in the same dir.
    pub reused_ca: bool,
    /// Where the previous output was moved.
    pub previous: Option<PathBuf>,
}

fn json<T: serde::Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, BootstrapError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|source| BootstrapError::Encode { what, source })?;
    bytes.push(b'\n');
    Ok(bytes)
}

fn secret(name: &str, namespace: &str, data: &BTreeMap<String, Vec<u8>>, tls: bool) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        type_: Some(if tls { "kubernetes.io/tls" } else { "Opaque" }.to_owned()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Plans every file of the bootstrap render for `request`, signed by `signers`.
pub fn plan(
    request: &RenderRequest,
    signers: certs::Signers<'_>,
    now: OffsetDateTime,
) -> Result<Vec<OutFile>, BootstrapError> {
    let ca = signers.etcd;
    let policy = CertPolicy::default();
    let node = &request.node;
    let desired = BTreeMap::from([(node.name.clone(), [node.ip].into_iter().collect())]);
    let empty = BTreeMap::new();
    let cert_plan = certs::plan_node_certs(signers, &policy, &empty, &desired, now);
    let node_certs = certs::apply_plan(signers, &policy, &cert_plan, &empty, now)?;
    let bundles = certs::bundle_data(signers);

    let mut files = vec![
        pod_file(request)?,
        OutFile {
            path: PathBuf::from(TOKEN_FILE),
            bytes: format!("{}\n", request.cluster_token).into_bytes(),
            mode: 0o644,
        },
    ];
    files.extend(cert_dir_files(&bundles, &node_certs));
    let bundle = bundles
        .get(certs::SERVER_CA_BUNDLE_KEY)
        .cloned()
        .unwrap_or_default();
    files.extend(apiserver::files(
        ca,
        &bundle,
        request.apiserver_client.as_ref(),
        now,
    )?);
    files.push(apiserver::cluster_file(request.local_client_listener)?);
    files.extend(manifest_files(signers, &node_certs, bundles)?);
    Ok(files)
}

/// The single-member bootstrap static pod (`etcd-pod.yaml`) for the request's node.
fn pod_file(request: &RenderRequest) -> Result<OutFile, BootstrapError> {
    let node = &request.node;
    let spec = EtcdClusterSpec {
        local_client_listener: request.local_client_listener,
        ..EtcdClusterSpec::default()
    };
    let nodes = [node.clone()];
    let pod = render_pod(&PodInput {
        node,
        nodes: &nodes,
        members: &[],
        revision: Some(0),
        bootstrap: true,
        cluster_token: Some(&request.cluster_token),
        spec: &spec,
        images: &request.images,
        resource_host_dir: Some(request.resource_host_dir.clone()),
    })?;
    Ok(OutFile {
        path: PathBuf::from("etcd-pod.yaml"),
        bytes: pod.into_bytes(),
        mode: 0o644,
    })
}

/// The `etcd-certs/` resource dir: the CA bundles (0644), then the node certificates (0600).
fn cert_dir_files(
    bundles: &BTreeMap<String, String>,
    node_certs: &BTreeMap<String, Vec<u8>>,
) -> Vec<OutFile> {
    let mut files = Vec::new();
    for (key, text) in bundles {
        files.push(OutFile {
            path: PathBuf::from(format!(
                "etcd-certs/configmaps/{ALL_BUNDLES_CONFIGMAP}/{key}"
            )),
            bytes: text.clone().into_bytes(),
            mode: 0o644,
        });
    }
    for (key, bytes) in node_certs {
        files.push(OutFile {
            path: PathBuf::from(format!("etcd-certs/secrets/{ALL_CERTS_SECRET}/{key}")),
            bytes: bytes.clone(),
            mode: 0o600,
        });
    }
    files
}

/// The `manifests/` the operator adopts: the CA Secrets, the certificates Secret and the
/// bundles ConfigMap.
fn manifest_files(
    signers: certs::Signers<'_>,
    node_certs: &BTreeMap<String, Vec<u8>>,
    bundles: BTreeMap<String, String>,
) -> Result<Vec<OutFile>, BootstrapError> {
    let ca_secret = |role: CaRole| {
        let data = signers.of(role).to_secret_data();
        secret(role.secret_name(), OPERATOR_NAMESPACE, &data, true)
    };
    let signer = ca_secret(CaRole::Etcd);
    let metric_signer = ca_secret(CaRole::Metrics);
    let all_certs = secret(ALL_CERTS_SECRET, STATIC_POD_NAMESPACE, node_certs, false);
    let bundles_cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(ALL_BUNDLES_CONFIGMAP.to_owned()),
            namespace: Some(STATIC_POD_NAMESPACE.to_owned()),
            ..Default::default()
        },
        data: Some(bundles),
        ..Default::default()
    };
    let mut files = Vec::new();
    for (name, bytes, mode) in [
        (
            "manifests/etcd-signer.json",
            json("the CA Secret", &signer)?,
            0o600,
        ),
        (
            METRICS_CA_FILE,
            json("the metrics CA Secret", &metric_signer)?,
            0o600,
        ),
        (
            "manifests/etcd-all-certs.json",
            json("the certificates Secret", &all_certs)?,
            0o600,
        ),
        (
            "manifests/etcd-all-bundles.json",
            json("the bundles ConfigMap", &bundles_cm)?,
            0o644,
        ),
    ] {
        files.push(OutFile {
            path: PathBuf::from(name),
            bytes,
            mode,
        });
    }
    Ok(files)
}

/// Where a render keeps the CA Secret, relative to the output dir.
const CA_FILE: &str = "manifests/etcd-signer.json";
/// Where a render keeps the metrics CA Secret, relative to the output dir.
const METRICS_CA_FILE: &str = "manifests/etcd-metric-signer.json";

/// Where a render keeps the cluster's initial-cluster token, relative to the output dir.
pub const TOKEN_FILE: &str = "cluster-token";

/// A new cluster token: `etcd-` and 128 random bits in hex.
pub fn new_cluster_token() -> String {
    format!("etcd-{}", uuid::Uuid::new_v4().simple())
}

/// The token of a previous render in `output_dir`, if there is one.
fn existing_token(output_dir: &Path) -> Result<Option<String>, BootstrapError> {
    let path = output_dir.join(TOKEN_FILE);
    let text = match std::fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BootstrapError::Io { path, source: e }),
        Ok(t) => t,
    };
    let token = text.trim();
    let valid = !token.is_empty()
        && token.len() <= 64
        && token
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        return Err(BootstrapError::InvalidInput(format!(
            "{} does not hold a cluster token (lowercase letters, digits and '-', at most 64); \
             move the output dir away to render a new cluster",
            path.display()
        )));
    }
    Ok(Some(token.to_owned()))
}

/// A file of a previous render (at most 1 MiB), never through a symlink, nor blocking on a
/// FIFO; `None` when it does not exist; anything but a regular file is an error.
fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, std::io::Error> {
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(path)
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(f) => f,
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.by_ref().take(1 << 20).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// The CA of `role` of a previous render in `output_dir`, if there is one.
fn existing_ca(output_dir: &Path, role: CaRole) -> Result<Option<EtcdCa>, BootstrapError> {
    let file = match role {
        CaRole::Etcd => CA_FILE,
        CaRole::Metrics => METRICS_CA_FILE,
    };
    let path = output_dir.join(file);
    let bad = |reason: String| BootstrapError::ExistingCa {
        path: path.clone(),
        reason,
    };
    let Some(bytes) = read_bounded(&path).map_err(|e| bad(e.to_string()))? else {
        return Ok(None);
    };
    let secret: Secret =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not a Secret: {e}")))?;
    EtcdCa::from_role_secret(role, secret)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

/// `etcd-operator render`: checks the node's name and address, plans with the CA of a previous
/// render in `output_dir` (or a new one) and lays everything down under `output_dir`.
pub fn render(
    node_name: &str,
    node_ip: IpAddr,
    output_dir: &Path,
    resource_host_dir: Option<String>,
    local_client_listener: bool,
    images: Images,
    now: OffsetDateTime,
) -> Result<Rendered, BootstrapError> {
    validate::node_name(node_name).map_err(BootstrapError::InvalidInput)?;
    validate::node_ip(&node_ip.to_string()).map_err(BootstrapError::InvalidInput)?;
    let existing = existing_ca(output_dir, CaRole::Etcd)?;
    let reused_ca = existing.is_some();
    // The cluster of a previous render keeps its token, as it keeps its CA, and kube-apiserver
    // its certificate.
    let cluster_token = match existing_token(output_dir)? {
        Some(token) if reused_ca => token,
        _ => new_cluster_token(),
    };
    let apiserver_client = if reused_ca {
        apiserver::existing(output_dir)?
    } else {
        None
    };
    let ca = match existing {
        Some(ca) => ca,
        None => EtcdCa::generate(now)?,
    };
    // A render from before the metrics CA existed has none: one is made then.
    let metrics_ca = match existing_ca(output_dir, CaRole::Metrics)? {
        Some(ca) if reused_ca => ca,
        _ => EtcdCa::generate_for(CaRole::Metrics, &CertPolicy::default(), now)?,
    };
    let resource_host_dir = resource_host_dir.unwrap_or_else(|| {
        let dir = std::path::absolute(output_dir).unwrap_or_else(|_| output_dir.to_owned());
        dir.join("etcd-certs").display().to_string()
    });
    let request = RenderRequest {
        node: NodeTarget::new(node_name, node_ip),
        images,
        resource_host_dir,
        local_client_listener,
        cluster_token,
        apiserver_client,
    };
    let signers = certs::Signers {
        etcd: &ca,
        metrics: &metrics_ca,
    };
    let files = plan(&request, signers, now)?;
    let previous = output::write_dir(output_dir, &files, now)?;
    Ok(Rendered {
        files,
        reused_ca,
        previous,
    })
}
