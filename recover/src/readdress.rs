//! `from-member --address`: the node's member moves to a new address while the cluster is down.
//!
//! When every control-plane node comes back on another address at once, no etcd can start: each
//! manifest listens on an address the node no longer has, and a member's peer URL can only
//! change through `MemberUpdate`, which needs a quorum that no longer exists. Recovery then makes
//! one node's member a one-member cluster *at its new address*:
//!
//! * [`moved`] (pure) rewrites the pod: every URL whose host is the old address (listen, advertise,
//!   the contract's peer and client URLs, `ETCDCTL_ENDPOINTS`) and every probe host equal to it
//!   take the new one, and the volume holding the TLS files points at a copy of the revision's
//!   files made for the move;
//! * [`prepare`] makes that copy in the recovery record dir and issues the node's peer and
//!   serving certificates for the new address there, signed by the cluster's signer (the
//!   `etcd-signer` Secret, which the admin brings: the API that holds it is down), after checking
//!   that the signer is one the node's CA bundle trusts. The metrics proxy's certificate is the
//!   metrics CA's, which the admin does not bring: the proxy listens at the new address with
//!   the old certificate (scrapers' host check fails) until the operator's first revision after
//!   the API is back issues one for the new address;
//! * after the forced start, the member's peer URL (etcd keeps the one it had) is moved with
//!   `MemberUpdate`, which a one-member cluster can commit.
//!
//! Nothing of the revision's own files changes: the old manifest and resources stay as they were.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use etcd_pki::{CaRole, CertKind, CertPolicy, EtcdCa};
use k8s_openapi::api::core::v1::{Pod, Probe, Secret};
use membership::{MemberUrl, TlsFiles, url_host};

use crate::act::{ActError, copy_tree, io};
use crate::pod::{EtcdPod, below_root, containers_mut, etcd_container};

/// What the move needs: the new address and the signer that issues the node's certificates.
pub struct Move {
    pub ip: IpAddr,
    pub signer: EtcdCa,
}

impl std::fmt::Debug for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Move")
            .field("ip", &self.ip)
            .finish_non_exhaustive()
    }
}

/// Reads the signer from `path`: Secret `etcd-signer` as `kubectl get secret -o yaml` (or
/// `-o json`) prints it, or as `etcd-operator render` wrote it.
pub fn load_signer(path: &Path) -> Result<EtcdCa, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--signer {}: {e}", path.display()))?;
    let secret: Secret = serde_saphyr::from_str(&text).map_err(|e| {
        format!(
            "--signer {}: not a Secret manifest (YAML or JSON): {e}",
            path.display()
        )
    })?;
    EtcdCa::from_secret(secret).map_err(|e| format!("--signer {}: {e}", path.display()))
}

/// `text` with every `//<old>:` replaced by `//<new>:` (URL hosts only: `10.0.0.1` in
/// `10.0.0.12` or in a path is left alone), and a `--listen=<old>:` flag (the metrics proxy's
/// socket address) by `--listen=<new>:`.
fn rehost(text: &str, old: &str, new: &str) -> String {
    let text = text.replace(&format!("//{old}:"), &format!("//{new}:"));
    match text.strip_prefix(&format!("--listen={old}:")) {
        Some(port) => format!("--listen={new}:{port}"),
        None => text,
    }
}

fn rehost_url(url: &MemberUrl, old: &str, new: &str) -> Result<MemberUrl, String> {
    rehost(url.as_str(), old, new)
        .parse()
        .map_err(|e| format!("{url} at the new address: {e}"))
}

/// Whether the pod already runs at `ip` (an operator revision may have moved it meanwhile).
pub fn already_at(current: &EtcdPod, ip: IpAddr) -> bool {
    current.peer_url.host() == url_host(ip)
}

/// The pod at the new address, and the TLS dirs of the move on the host (below the node root).
#[derive(Clone, Debug)]
pub struct Moved {
    pub pod: EtcdPod,
    /// The revision's TLS dir, which [`prepare`] copies.
    pub tls_from: PathBuf,
    /// The copy the moved pod mounts instead.
    pub tls_to: PathBuf,
}

/// The pod at `ip` (see the module docs), its TLS volume at `resources` (an absolute path on
/// the node whose `/` is `root`).
pub fn moved(
    current: &EtcdPod,
    ip: IpAddr,
    root: &Path,
    resources: &Path,
) -> Result<Moved, String> {
    let old = current.peer_url.host().to_owned();
    let new = url_host(ip);
    let bare = old.trim_start_matches('[').trim_end_matches(']').to_owned();
    let mut pod = current.pod.clone();
    let volume = tls_volume(&pod).ok_or("no hostPath volume holds the etcd TLS files")?;
    let old_host = volume_path(&pod, &volume)
        .and_then(|p| below_root(root, Path::new(&p)))
        .ok_or_else(|| format!("volume {volume} is not a hostPath below the node root"))?;
    let new_host = below_root(root, resources)
        .ok_or_else(|| format!("{} is not below the node root", resources.display()))?;
    for c in containers_mut(&mut pod) {
        for a in c.args.iter_mut().chain(c.command.iter_mut()).flatten() {
            *a = rehost(a, &old, &new);
        }
        for e in c.env.iter_mut().flatten() {
            if let Some(v) = e.value.as_mut() {
                *v = rehost(v, &old, &new);
            }
        }
        for p in [
            &mut c.startup_probe,
            &mut c.readiness_probe,
            &mut c.liveness_probe,
        ] {
            if let Some(p) = p.as_mut() {
                rehost_probe(p, &bare, &ip.to_string());
            }
        }
    }
    set_volume_path(&mut pod, &volume, resources);
    let tls = current.tls.as_ref().map(|t| TlsFiles {
        ca: rebase(&t.ca, &old_host, &new_host),
        cert: rebase(&t.cert, &old_host, &new_host),
        key: rebase(&t.key, &old_host, &new_host),
    });
    let pod = EtcdPod {
        pod,
        peer_url: rehost_url(&current.peer_url, &old, &new)?,
        client_url: rehost_url(&current.client_url, &old, &new)?,
        endpoints: current
            .endpoints
            .iter()
            .map(|u| rehost_url(u, &old, &new))
            .collect::<Result<_, _>>()?,
        tls,
        ..current.clone()
    };
    Ok(Moved {
        pod,
        tls_from: old_host,
        tls_to: new_host,
    })
}

fn rehost_probe(p: &mut Probe, old: &str, new: &str) {
    let hosts = [
        p.tcp_socket.as_mut().and_then(|t| t.host.as_mut()),
        p.http_get.as_mut().and_then(|h| h.host.as_mut()),
    ];
    for h in hosts.into_iter().flatten() {
        if h == old {
            *h = new.to_owned();
        }
    }
}

/// `file` below `old_host`, moved below `new_host` (unchanged when not below it).
fn rebase(file: &Path, old_host: &Path, new_host: &Path) -> PathBuf {
    file.strip_prefix(old_host)
        .map_or_else(|_| file.to_owned(), |rest| new_host.join(rest))
}

/// The name of the hostPath volume the etcd container mounts its `--cert-file` through.
fn tls_volume(pod: &Pod) -> Option<String> {
    let c = etcd_container(pod)?;
    let cert = c
        .args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix("--cert-file="))?;
    c.volume_mounts
        .iter()
        .flatten()
        .filter(|m| Path::new(cert).starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())
        .map(|m| m.name.clone())
}

fn volume_path(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)?
        .host_path
        .as_ref()
        .map(|h| h.path.clone())
}

fn set_volume_path(pod: &mut Pod, name: &str, path: &Path) {
    let volumes = pod
        .spec
        .iter_mut()
        .flat_map(|s| s.volumes.iter_mut().flatten());
    for v in volumes.filter(|v| v.name == name) {
        if let Some(h) = v.host_path.as_mut() {
            h.path = path.display().to_string();
        }
    }
}

/// Refuses a signer the member does not trust: one that is not in the CA bundle its manifest
/// names (`ETCDCTL_CACERT`), i.e. another cluster's, or a CA rotated out.
pub fn check_signer(current: &EtcdPod, signer: &EtcdCa) -> Result<(), String> {
    let Some(tls) = &current.tls else {
        return Err("the manifest names no TLS files: there is nothing to issue".into());
    };
    let bundle = std::fs::read_to_string(&tls.ca)
        .map_err(|e| format!("reading the CA bundle {}: {e}", tls.ca.display()))?;
    if trusts(&bundle, signer.cert_pem()) {
        Ok(())
    } else {
        Err(format!(
            "the signer ({}) is not in the CA bundle this member trusts ({}): it is not this cluster's signer",
            signer.subject(),
            tls.ca.display()
        ))
    }
}

/// Copies the revision's TLS files (`moved.tls_from`) to `moved.tls_to` (new), then replaces
/// the certificates of node `node` there with ones for `mv.ip` (a signer [`check_signer`]
/// accepted). Returns what was issued.
pub fn prepare(
    moved: &Moved,
    node: &str,
    mv: &Move,
    now: time::OffsetDateTime,
) -> Result<Vec<PathBuf>, ActError> {
    let to = &moved.tls_to;
    if let Some(parent) = to.parent() {
        etcd_installer::atomic::ensure_dir_all(parent, 0o700).map_err(io("creating", parent))?;
    }
    copy_tree(&moved.tls_from, to)?;
    issue_into(to, node, mv, now)
}

/// Whether the PEM bundle holds `cert_pem` (compared without whitespace).
fn trusts(bundle: &str, cert_pem: &str) -> bool {
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    squash(bundle).contains(&squash(cert_pem))
}

/// Replaces every file of this node's certificates under `dir` (any depth) with a new one.
fn issue_into(
    dir: &Path,
    node: &str,
    mv: &Move,
    now: time::OffsetDateTime,
) -> Result<Vec<PathBuf>, ActError> {
    let mut written = Vec::new();
    for file in files_under(dir)? {
        let Some(name) = file.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let Some(kind) = CertKind::ALL
            .into_iter()
            .filter(|k| k.role() == CaRole::Etcd)
            .find(|k| k.cert_key(node) == name)
        else {
            continue;
        };
        let spec = kind.spec(node, &[mv.ip].into());
        let issued = mv
            .signer
            .issue(&spec, &CertPolicy::default(), now)
            .map_err(|e| ActError::Failed(format!("issuing {}: {e}", kind.name(node))))?;
        let parent = file.parent().unwrap_or(dir);
        let key_name = kind.key_key(node);
        etcd_installer::atomic::write_file(parent, &key_name, issued.key_pem.as_bytes(), 0o600)
            .map_err(io("writing", &parent.join(&key_name)))?;
        etcd_installer::atomic::write_file(parent, &name, issued.cert_pem.as_bytes(), 0o644)
            .map_err(io("writing", &file))?;
        written.push(file);
    }
    if written.is_empty() {
        return Err(ActError::Failed(format!(
            "no certificate of {node} under {}",
            dir.display()
        )));
    }
    written.sort();
    Ok(written)
}

fn files_under(dir: &Path) -> Result<Vec<PathBuf>, ActError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("reading", dir))? {
        let entry = entry.map_err(io("reading", dir))?;
        let kind = entry.file_type().map_err(io("inspecting", &entry.path()))?;
        if kind.is_dir() {
            out.extend(files_under(&entry.path())?);
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(out)
}
