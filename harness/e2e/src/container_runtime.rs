//! Which container runtime the scenarios' node agents use.
//!
//! By default the node agent maps image names to host binaries (its image table). With
//! `CONTAINER_RUNTIME=runc` every container of every pod runs under `runc` from the images
//! `scripts/build-images` wrote, found in `IMAGE_STORE` (default `target/images`); their root
//! filesystems are unpacked once per digest into `<IMAGE_STORE>/rootfs-cache`. The stacked
//! control plane needs its components' images there too ([`pull_images`]): `build-images`
//! makes them from `../shared/kas`'s binaries.

use std::path::{Path, PathBuf};

use kubelet_standin::NodeConfig;
use kubelet_standin::image_store::ImageStore;
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
    #[error("CONTAINER_RUNTIME=runc: the image store {0}: {1}")]
    Store(PathBuf, String),
    #[error(
        "CONTAINER_RUNTIME=runc: the image store {0} lacks {1} (scripts/build-images builds the \
         control-plane images where ../shared/kas is, or $KAS names it)"
    )]
    MissingImage(PathBuf, String),
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

/// Pulls `images` (references as pods name them) onto the node store of `runc` before any node
/// starts, as kubeadm's preflight pulls the control-plane images: fails at once naming an image
/// the store lacks (instead of a pod waiting in `ImagePullBackOff`), and unpacks each one, one at
/// a time, so that the first kube-apiservers do not wait for several nodes unpacking the same
/// images at once.
pub async fn pull_images(runc: &RuncConfig, images: &[String]) -> Result<(), RuntimeError> {
    let dir = &runc.image_store;
    let store = ImageStore::open(dir, &runc.unpack_cache, &runc.umoci)
        .map_err(|e| RuntimeError::Store(dir.clone(), e.to_string()))?;
    for image in images {
        let stored = store
            .lookup(image)
            .map_err(|_| RuntimeError::MissingImage(dir.clone(), image.clone()))?;
        store
            .rootfs(stored)
            .await
            .map_err(|e| RuntimeError::Store(dir.clone(), e.to_string()))?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[tokio::test]
    async fn a_store_without_the_control_plane_images_is_refused_naming_the_first_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("images.json"), r#"{"images": []}"#).unwrap();
        let runc = RuncConfig {
            image_store: dir.path().to_path_buf(),
            unpack_cache: dir.path().join("rootfs-cache"),
            runc: PathBuf::from("/usr/sbin/runc"),
            umoci: PathBuf::from("/usr/bin/umoci"),
        };
        let images = crate::controlplane::kube_pods::component_images();
        let err = pull_images(&runc, &images).await.unwrap_err();
        assert!(
            matches!(&err, RuntimeError::MissingImage(_, i) if i == "registry.k8s.io/kube-apiserver:v1.36.2"),
            "{err}"
        );
        assert!(pull_images(&runc, &[]).await.is_ok());
        std::fs::write(dir.path().join("images.json"), "{").unwrap();
        assert!(matches!(
            pull_images(&runc, &images).await,
            Err(RuntimeError::Store(..))
        ));
    }
}
