//! The node's etcd static pod, as recovery reads and rewrites it (pure).
//!
//! [`EtcdPod::read`] takes the manifest the kubelet runs and the node's root, and finds what
//! recovery needs on the host: the member's name and URLs (the static-pod env contract, parsed
//! by `etcd-verify`'s own reader), the data dir and the client TLS files translated from container
//! paths to host paths through the pod's `hostPath` volumes. [`one_member`] rewrites the pod as a
//! one-member cluster of its own member: the same image, certificates and resource dir, with the
//! contract naming only this member, and, for the first start only, `--force-new-cluster`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use etcd_verify::config::VerifyConfig;
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use membership::{InitialCluster, MemberId, MemberIds, MemberUrl, TlsFiles};

/// The etcd container's name in the static pod.
pub const ETCD_CONTAINER: &str = "etcd";
/// The annotation a recovered manifest carries: what recovery did and when.
pub const RECOVERY_ANNOTATION: &str = "etcd.static-operator.io/recovery";
/// The flag that makes etcd drop every other member on its first start.
pub const FORCE_NEW_CLUSTER: &str = "--force-new-cluster";

/// What is wrong with the manifest.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    #[error("{path}: {reason}")]
    Manifest { path: PathBuf, reason: String },
    #[error("{path}: the etcd container's env: {source}")]
    Contract {
        path: PathBuf,
        source: Box<etcd_verify::config::ConfigError>,
    },
    #[error(
        "{path}: {what} {container_path} is not under any hostPath volume the etcd container mounts"
    )]
    NotOnHost {
        path: PathBuf,
        what: &'static str,
        container_path: String,
    },
    #[error("rendering the recovery manifest: {0}")]
    Render(String),
}

/// The node's etcd static pod and what recovery reads from it, with host paths.
#[derive(Clone, Debug)]
pub struct EtcdPod {
    pub pod: Pod,
    /// The member name (`ETCD_NAME`, the node name).
    pub name: String,
    pub peer_url: MemberUrl,
    /// This member's client URL (the first of `ETCD_ADVERTISE_CLIENT_URLS`).
    pub client_url: MemberUrl,
    /// The revision's voters' client URLs (`ETCDCTL_ENDPOINTS`).
    pub endpoints: Vec<MemberUrl>,
    /// The membership the revision expects (`ETCD_MEMBER_IDS`).
    pub member_ids: MemberIds,
    pub initial_cluster: InitialCluster,
    /// The data dir on the host (below the node root).
    pub data_dir: PathBuf,
    /// The client TLS files on the host.
    pub tls: Option<TlsFiles>,
    /// The revision the manifest declares (`ETCD_STATIC_POD_REVISION`).
    pub revision: Option<String>,
}

impl EtcdPod {
    /// Reads `bytes` (the manifest at `path`) for a node whose `/` is `root`.
    pub fn read(bytes: &[u8], path: &Path, root: &Path) -> Result<Self, PodError> {
        let bad = |reason: String| PodError::Manifest {
            path: path.to_owned(),
            reason,
        };
        let pod = etcd_installer::manifest::parse(bytes).map_err(|e| bad(e.to_string()))?;
        let container = etcd_container(&pod)
            .ok_or_else(|| bad(format!("no container named {ETCD_CONTAINER:?}")))?;
        let env: BTreeMap<String, String> = container
            .env
            .iter()
            .flatten()
            .filter_map(|e| e.value.clone().map(|v| (e.name.clone(), v)))
            .collect();
        let contract = VerifyConfig::from_env(&env).map_err(|source| PodError::Contract {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        let client_text = env
            .get("ETCD_ADVERTISE_CLIENT_URLS")
            .and_then(|v| v.split(',').next())
            .unwrap_or_default();
        let client_url: MemberUrl = client_text
            .parse()
            .map_err(|e| bad(format!("ETCD_ADVERTISE_CLIENT_URLS={client_text:?}: {e}")))?;
        let host = |what: &'static str, p: &Path| -> Result<PathBuf, PodError> {
            host_path(&pod, container, p, root).ok_or_else(|| PodError::NotOnHost {
                path: path.to_owned(),
                what,
                container_path: p.display().to_string(),
            })
        };
        let data_dir = host("ETCD_DATA_DIR", &contract.data_dir)?;
        let tls = match &contract.tls {
            None => None,
            Some(t) => Some(TlsFiles {
                ca: host("ETCDCTL_CACERT", &t.ca)?,
                cert: host("ETCDCTL_CERT", &t.cert)?,
                key: host("ETCDCTL_KEY", &t.key)?,
            }),
        };
        Ok(Self {
            name: contract.name,
            peer_url: contract.peer_url,
            client_url,
            endpoints: contract.endpoints,
            member_ids: contract.member_ids,
            initial_cluster: contract.initial_cluster,
            data_dir,
            tls,
            revision: env.get(etcd_installer::manifest::REVISION_ENV).cloned(),
            pod,
        })
    }
}

/// The container named `etcd`.
pub fn etcd_container(pod: &Pod) -> Option<&Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == ETCD_CONTAINER)
}

/// `container_path` as the host sees it: through the container's volume mount with the longest
/// matching mount path, whose volume is a `hostPath`, then below `root`.
pub fn host_path(
    pod: &Pod,
    container: &Container,
    container_path: &Path,
    root: &Path,
) -> Option<PathBuf> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    let (mount, rest) = container
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let rest = container_path.strip_prefix(&m.mount_path).ok()?;
            Some((m, rest))
        })
        .max_by_key(|(m, _)| m.mount_path.len())?;
    if rest
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let volume = volumes.iter().find(|v| v.name == mount.name)?;
    let source = Path::new(&volume.host_path.as_ref()?.path).join(rest);
    below_root(root, &source)
}

/// An absolute host path below the node root (`/` on a real node).
pub fn below_root(root: &Path, absolute: &Path) -> Option<PathBuf> {
    let relative = absolute.strip_prefix("/").ok()?;
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    Some(root.join(relative))
}

/// The pod as a one-member cluster of member `id`: every container's contract names only this
/// member (`ETCD_INITIAL_CLUSTER`, `ETCD_MEMBER_IDS`, and `ETCDCTL_ENDPOINTS` its own client URL,
/// so `etcd-verify` asks no former peer), the etcd container gets `--force-new-cluster` when
/// `force`, and the pod is annotated with `note`.
pub fn one_member(current: &EtcdPod, id: MemberId, force: bool, note: &str) -> Pod {
    let mut pod = current.pod.clone();
    let mut cluster = InitialCluster::default();
    cluster.insert(&current.name, current.peer_url.clone());
    let mut ids = MemberIds::default();
    ids.insert(id, current.peer_url.clone());
    let values = [
        ("ETCD_INITIAL_CLUSTER", cluster.to_string()),
        ("ETCD_MEMBER_IDS", ids.to_string()),
        ("ETCDCTL_ENDPOINTS", current.client_url.to_string()),
    ];
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(RECOVERY_ANNOTATION.to_owned(), note.to_owned());
    for c in containers_mut(&mut pod) {
        for (name, value) in &values {
            set_env(c, name, value);
        }
        if c.name == ETCD_CONTAINER {
            let args = c.args.get_or_insert_with(Vec::new);
            args.retain(|a| a != FORCE_NEW_CLUSTER);
            if force {
                args.push(FORCE_NEW_CLUSTER.to_owned());
            }
        }
    }
    pod
}

/// Every init container and container of `pod`.
pub(crate) fn containers_mut(pod: &mut Pod) -> impl Iterator<Item = &mut Container> {
    pod.spec.iter_mut().flat_map(|spec| {
        spec.init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut())
    })
}

/// Sets `ETCD_INITIAL_CLUSTER_TOKEN` to `token` in every container that carries the contract
/// (has `ETCD_INITIAL_CLUSTER`), adding it in name order where it is missing (a manifest of a
/// cluster made with etcd's default token has none).
pub fn set_cluster_token(pod: &mut Pod, token: &str) {
    const VAR: &str = "ETCD_INITIAL_CLUSTER_TOKEN";
    for c in containers_mut(pod) {
        let Some(env) = c.env.as_mut() else { continue };
        if !env.iter().any(|e| e.name == "ETCD_INITIAL_CLUSTER") {
            continue;
        }
        let var = EnvVar {
            name: VAR.to_owned(),
            value: Some(token.to_owned()),
            value_from: None,
        };
        match env.iter_mut().find(|e| e.name == VAR) {
            Some(existing) => *existing = var,
            None => {
                let at = env
                    .iter()
                    .position(|e| e.name.as_str() > VAR)
                    .unwrap_or(env.len());
                env.insert(at, var);
            }
        }
    }
}

fn set_env(c: &mut Container, name: &str, value: &str) {
    let Some(env) = c.env.as_mut() else { return };
    if let Some(var) = env.iter_mut().find(|e| e.name == name) {
        *var = EnvVar {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            value_from: None,
        };
    }
}

/// The manifest text: a comment saying what wrote it, then the pod as YAML.
pub fn render(pod: &Pod, header: &str) -> Result<String, PodError> {
    let body = serde_saphyr::to_string(pod).map_err(|e| PodError::Render(e.to_string()))?;
    let comment: String = header.lines().map(|l| format!("# {l}\n")).collect();
    Ok(format!("{comment}{body}"))
}

/// Whether the etcd container starts with `--force-new-cluster`.
pub fn forces_new_cluster(pod: &Pod) -> bool {
    etcd_container(pod)
        .and_then(|c| c.args.as_ref())
        .is_some_and(|a| a.iter().any(|x| x == FORCE_NEW_CLUSTER))
}
