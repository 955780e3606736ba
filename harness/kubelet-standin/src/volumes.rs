//! Volumes: turning a container's `volumeMounts` into bind mounts of node-local directories.
//!
//! Supported: `hostPath` (below the node root; `DirectoryOrCreate`/unset create a missing
//! directory, `FileOrCreate` a missing file, the other types must exist), `emptyDir` (a
//! per-pod directory) and the API-backed kinds [`crate::api_volumes`] builds before the pod's
//! first container (`projected`, `configMap`, `secret`, `downwardAPI`). Anything else is
//! refused with a clear error.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::context::{NodeContext, PathEscape};
use crate::mounts::BindMount;

/// A volume mount the stand-in cannot provide.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volumeMount {0:?} names no volume of the pod")]
    NoSuchVolume(String),
    #[error("volume {name:?}: {kind} volumes are not supported by the node agent stand-in")]
    Unsupported { name: String, kind: String },
    #[error("volume {name:?}: hostPath {path} (type {type_}) does not exist")]
    Missing {
        name: String,
        path: PathBuf,
        type_: String,
    },
    #[error("volume {0:?} was not built before the container started")]
    NotBuilt(String),
    #[error(transparent)]
    Escape(#[from] PathEscape),
    #[error("creating {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn volume_kind(v: &k8s_openapi::api::core::v1::Volume) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|j| {
            j.as_object()
                .and_then(|o| o.keys().find(|k| k.as_str() != "name").cloned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Host directory (or file) backing volume `name` of the pod, created when the type allows.
pub fn volume_source(
    ctx: &NodeContext,
    spec: &PodSpec,
    pod_uid: &str,
    name: &str,
) -> Result<PathBuf, VolumeError> {
    let v = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .ok_or_else(|| VolumeError::NoSuchVolume(name.to_string()))?;
    if let Some(hp) = &v.host_path {
        let path = ctx.host_path(&hp.path)?;
        let type_ = hp.type_.clone().unwrap_or_default();
        if !path.exists() {
            match type_.as_str() {
                "" | "DirectoryOrCreate" => std::fs::create_dir_all(&path).map_err(io(&path))?,
                "FileOrCreate" => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(io(parent))?;
                    }
                    std::fs::File::create(&path).map_err(io(&path))?;
                }
                _ => {
                    return Err(VolumeError::Missing {
                        name: name.to_string(),
                        path,
                        type_,
                    });
                }
            }
        }
        return Ok(path);
    }
    if crate::api_volumes::is_api_volume(v) {
        let path = crate::api_volume_io::volume_dir(&ctx.pod_dir(pod_uid), name);
        if !path.is_dir() {
            return Err(VolumeError::NotBuilt(name.to_string()));
        }
        return Ok(path);
    }
    if v.empty_dir.is_some() {
        let path = ctx.pod_dir(pod_uid).join("volumes/empty-dir").join(name);
        std::fs::create_dir_all(&path).map_err(io(&path))?;
        // Writable by the container's user, whoever it is (the kubelet makes it 0777 too).
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .map_err(io(&path))?;
        return Ok(path);
    }
    Err(VolumeError::Unsupported {
        name: name.to_string(),
        kind: volume_kind(v),
    })
}

/// The bind mounts for a container's `volumeMounts` (subPath honoured).
pub fn container_binds(
    ctx: &NodeContext,
    spec: &PodSpec,
    pod_uid: &str,
    container: &Container,
) -> Result<Vec<BindMount>, VolumeError> {
    let mut binds = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let mut source = volume_source(ctx, spec, pod_uid, &m.name)?;
        if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            if Path::new(sub).is_absolute() || sub.split('/').any(|c| c == "..") {
                return Err(PathEscape(sub.to_string()).into());
            }
            source = source.join(sub);
            if !source.exists() {
                std::fs::create_dir_all(&source).map_err(io(&source))?;
            }
        }
        binds.push(BindMount {
            source,
            target: PathBuf::from(&m.mount_path),
            read_only: m.read_only.unwrap_or(false),
        });
    }
    Ok(binds)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::backoff::Backoff;
    use crate::images::ImageTable;
    use k8s_openapi::api::core::v1::{
        CSIVolumeSource, ConfigMapVolumeSource, HostPathVolumeSource, Volume, VolumeMount,
    };
    use std::sync::Arc;

    #[test]
    fn host_paths_live_under_the_node_root() {
        let root = tempfile::tempdir().unwrap();
        let ctx = NodeContext {
            name: "n1".into(),
            ip: "127.0.0.2".parse().unwrap(),
            root: root.path().to_path_buf(),
            helper: "/x".into(),
            runc: None,
            images: Arc::new(ImageTable::standard(Path::new("/b"))),
            backoff: Backoff::kubelet(),
            kubeconfig: None,
            client: None,
            api_service: None,
        };
        let spec = PodSpec {
            volumes: Some(vec![
                Volume {
                    name: "data".into(),
                    host_path: Some(HostPathVolumeSource {
                        path: "/var/lib/etcd".into(),
                        type_: Some("DirectoryOrCreate".into()),
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "cm".into(),
                    config_map: Some(ConfigMapVolumeSource::default()),
                    ..Default::default()
                },
                Volume {
                    name: "csi".into(),
                    csi: Some(CSIVolumeSource {
                        driver: "d".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let c = Container {
            name: "etcd".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".into(),
                mount_path: "/var/lib/etcd".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let b = container_binds(&ctx, &spec, "uid", &c).unwrap();
        assert_eq!(b[0].source, root.path().join("var/lib/etcd"));
        assert!(b[0].source.is_dir());
        let mounting = |volume: &str| Container {
            name: "x".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: volume.into(),
                mount_path: "/v".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let err = container_binds(&ctx, &spec, "uid", &mounting("cm"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("was not built"), "{err}");
        let err = container_binds(&ctx, &spec, "uid", &mounting("csi"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("csi volumes are not supported"), "{err}");
        assert!(ctx.host_path("/../etc").is_err());
    }
}
