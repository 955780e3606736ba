//! The first node's bootstrap, as the platform does it: `etcd-operator render` writes the static
//! pod and the objects the operator adopts; the pod is placed in the node's manifest dir.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{ControlPlaneError, SimNode, io};

/// `etcd-operator render` for `node`, with `etcd_image` when given (else the operator's
/// default); returns its output dir.
pub(super) fn render(
    bin_dir: &Path,
    node: &SimNode,
    etcd_image: Option<&str>,
) -> Result<PathBuf, ControlPlaneError> {
    let out_dir = node.root.join("etc/kubernetes/bootstrap");
    let mut command = Command::new(bin_dir.join("etcd-operator"));
    if let Some(image) = etcd_image {
        command.env("ETCD_IMAGE", image);
    }
    let output = command
        .args([
            "render",
            "--node-name",
            &node.name,
            "--local-client-listener=false",
        ])
        .arg("--node-ip")
        .arg(node.ip().to_string())
        .arg("--output-dir")
        .arg(&out_dir)
        .args([
            "--resource-host-dir",
            "/etc/kubernetes/bootstrap/etcd-certs",
        ])
        .output()
        .map_err(io("running etcd-operator render"))?;
    if !output.status.success() {
        return Err(ControlPlaneError::Failed(format!(
            "etcd-operator render failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(out_dir)
}

/// One object `render` wrote (JSON) in `<out_dir>/manifests/`.
pub(super) fn read_rendered<T: serde::de::DeserializeOwned>(
    out_dir: &Path,
    file: &str,
) -> Result<T, ControlPlaneError> {
    let p = out_dir.join("manifests").join(file);
    let bytes = std::fs::read(&p).map_err(io(format!("reading {}", p.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| ControlPlaneError::Failed(format!("{file}: {e}")))
}

/// Places the rendered static pod in `node`'s manifest dir, whole or not at all, as the
/// installer writes: a kubelet (and the node agent) reads the directory as soon as a file
/// appears in it.
pub(super) fn place_manifest(node: &SimNode, out_dir: &Path) -> Result<(), ControlPlaneError> {
    let pod = out_dir.join("etcd-pod.yaml");
    let target = node.manifest_dir().join("etcd-pod.yaml");
    let tmp = node.manifest_dir().join(".etcd-pod.yaml.tmp");
    std::fs::copy(&pod, &tmp).map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &target).map_err(io(format!("placing {}", target.display())))
}
