//! Which container runtime the scenarios' node agents use.
//!
//! By default the node agent maps image names to host binaries (its image table). With
//! `CONTAINER_RUNTIME=runc` every container of every pod runs under `runc` from the images
//! `scripts/build-images` wrote, found in `IMAGE_STORE` (default `target/images`); their root
//! filesystems are unpacked once per digest into `<IMAGE_STORE>/rootfs-cache`. The stacked
//! control plane's kube-apiservers are not in that store, so it keeps the host-binary runtime
//! whatever `CONTAINER_RUNTIME` says.

use std::path::{Path, PathBuf};

use kubelet_standin::NodeConfig;
use kubelet_standin::runc::RuncConfig;

/// An unusable runtime selection.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("CONTAINER_RUNTIME={0:?}: want `runc` or unset")]
    Unknown(String),
    #[error(
        "CONTAINER_RUNTIME=runc: {0} has no images.json (run scripts/build-images, or set IMAGE_STORE)"
    )]
    NoStore(PathBuf),
    #[error("CONTAINER_RUNTIME=runc: {0} not found on PATH (scripts/install-deps installs it)")]
    NoTool(&'static str),
}

/// The runc runtime the environment asks for, if it asks for one.
pub fn from_env() -> Result<Option<RuncConfig>, RuntimeError> {
    match std::env::var("CONTAINER_RUNTIME").as_deref() {
        Err(_) | Ok("") => return Ok(None),
        Ok("runc") => {}
        Ok(other) => return Err(RuntimeError::Unknown(other.to_owned())),
    }
    let store = std::env::var_os("IMAGE_STORE")
        .map(PathBuf::from)
        .unwrap_or_else(default_store);
    if !store.join("images.json").is_file() {
        return Err(RuntimeError::NoStore(store));
    }
    Ok(Some(RuncConfig {
        unpack_cache: store.join("rootfs-cache"),
        image_store: store,
        runc: which("runc").ok_or(RuntimeError::NoTool("runc"))?,
        umoci: which("umoci").ok_or(RuntimeError::NoTool("umoci"))?,
    }))
}

/// `cfg` with the container runtime the environment asks for.
pub fn apply(cfg: NodeConfig) -> Result<NodeConfig, RuntimeError> {
    Ok(match from_env()? {
        Some(runc) => cfg.with_runc(runc),
        None => cfg,
    })
}

/// `target/images` of the workspace the test binaries were built in.
fn default_store() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/images")
}

/// The first executable `name` on `PATH` or in the sbin directories (runc is in `/usr/sbin`).
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
