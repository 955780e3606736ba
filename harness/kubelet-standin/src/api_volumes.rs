//! API-backed volumes, as the kubelet mounts them before a pod's first container starts:
//! `projected` (serviceAccountToken, configMap, secret, downwardAPI sources), `configMap`,
//! `secret` and `downwardAPI`.
//!
//! This is what gives a pod its ServiceAccount identity on a real cluster: the API server's
//! ServiceAccount admission adds a `kube-api-access-*` projected volume (a bound token from
//! the TokenRequest API, `ca.crt` from the `kube-root-ca.crt` ConfigMap and the namespace) at
//! `/var/run/secrets/kubernetes.io/serviceaccount`, and in-cluster clients read it there.
//!
//! Decide, then act: [`needs`] lists the objects and tokens a pod's volumes name,
//! [`volume_files`] turns what was fetched into the files of one volume (pure, tested here);
//! [`crate::api_volume_io::materialize`] fetches and writes each volume into a fresh directory
//! under the pod's directory, swapped in by rename so a container never sees a half-written
//! volume.
//!
//! Stand-in differences: contents are written once per pod start (the kubelet also refreshes
//! ConfigMap/Secret contents and rotates tokens at 80% of their life; kube-apiserver's default
//! `--service-account-extend-token-expiration` makes the `kube-api-access` token valid for a
//! year, longer than any sandbox run); `clusterTrustBundle` and `podCertificate` sources and
//! `resourceFieldRef` items are refused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeFile, KeyToPath, PodSpec, Volume, VolumeProjection,
};

use crate::env::PodFacts;

/// The kubelet's default expiry for a projected token without `expirationSeconds`.
const DEFAULT_TOKEN_SECONDS: i64 = 3600;
/// `defaultMode` when a volume names none (0644).
const DEFAULT_MODE: u32 = 0o644;

/// A volume that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ApiVolumeError {
    #[error("volume {volume:?}: configmap {name:?} not found")]
    ConfigMapMissing { volume: String, name: String },
    #[error("volume {volume:?}: secret {name:?} not found")]
    SecretMissing { volume: String, name: String },
    #[error("volume {volume:?}: {object} has no key {key:?}")]
    KeyMissing {
        volume: String,
        object: String,
        key: String,
    },
    #[error("volume {volume:?}: path {path:?} must be relative and without '..'")]
    BadPath { volume: String, path: String },
    #[error("volume {volume:?}: {what} is not supported by the node agent stand-in")]
    Unsupported { volume: String, what: String },
    #[error("volume {volume:?}: no token was issued for service account {account:?}")]
    NoToken { volume: String, account: String },
    #[error("volume {volume:?}: this node agent has no API client")]
    NoApi { volume: String },
    #[error("fetching {what}: {source}")]
    Api {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One service account token request: audience (empty = the API server's) and lifetime.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TokenKey {
    pub audience: String,
    pub expiration_seconds: i64,
}

/// What a pod's API-backed volumes need fetched (names in the pod's namespace).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Needs {
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
    pub tokens: BTreeSet<TokenKey>,
}

impl Needs {
    pub fn is_empty(&self) -> bool {
        self.config_maps.is_empty() && self.secrets.is_empty() && self.tokens.is_empty()
    }
}

/// What was fetched: `None` for an object that does not exist.
#[derive(Debug, Default)]
pub struct Fetched {
    pub config_maps: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    pub secrets: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    pub tokens: BTreeMap<TokenKey, String>,
}

/// One file of a volume, relative to the volume's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeFile {
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Whether `v` is one of the API-backed kinds this module builds.
pub fn is_api_volume(v: &Volume) -> bool {
    v.projected.is_some()
        || v.config_map.is_some()
        || v.secret.is_some()
        || v.downward_api.is_some()
}

fn token_key(p: &k8s_openapi::api::core::v1::ServiceAccountTokenProjection) -> TokenKey {
    TokenKey {
        audience: p.audience.clone().unwrap_or_default(),
        expiration_seconds: p.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS),
    }
}

/// Whether the pod gets a ServiceAccount token (then its containers use in-cluster config).
pub fn has_service_account_token(spec: &PodSpec) -> bool {
    spec.volumes.iter().flatten().any(|v| {
        v.projected.as_ref().is_some_and(|p| {
            p.sources
                .iter()
                .flatten()
                .any(|s| s.service_account_token.is_some())
        })
    })
}

/// Every object and token the pod's volumes name.
pub fn needs(spec: &PodSpec) -> Needs {
    let mut n = Needs::default();
    for v in spec.volumes.iter().flatten() {
        if let Some(cm) = &v.config_map {
            n.config_maps.insert(cm.name.clone());
        }
        if let Some(s) = &v.secret {
            n.secrets.insert(s.secret_name.clone().unwrap_or_default());
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &src.config_map {
                n.config_maps.insert(cm.name.clone());
            }
            if let Some(s) = &src.secret {
                n.secrets.insert(s.name.clone());
            }
            if let Some(t) = &src.service_account_token {
                n.tokens.insert(token_key(t));
            }
        }
    }
    n
}

fn checked_path(volume: &str, path: &str) -> Result<String, ApiVolumeError> {
    let p = Path::new(path);
    let ok = !path.is_empty()
        && p.components().all(|c| matches!(c, Component::Normal(_)))
        && !path.starts_with("..");
    if ok {
        Ok(path.to_string())
    } else {
        Err(ApiVolumeError::BadPath {
            volume: volume.to_string(),
            path: path.to_string(),
        })
    }
}

fn mode_of(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok())
        .map_or(default, |m| m & 0o777)
}

/// The files of one ConfigMap or Secret: every key, or the listed `items`.
fn keyed_files(
    volume: &str,
    object: &str,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
    mode: u32,
) -> Result<Vec<VolumeFile>, ApiVolumeError> {
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        return data
            .iter()
            .map(|(k, v)| {
                Ok(VolumeFile {
                    path: checked_path(volume, k)?,
                    data: v.clone(),
                    mode,
                })
            })
            .collect();
    };
    let mut files = Vec::new();
    for item in items {
        match data.get(&item.key) {
            Some(v) => files.push(VolumeFile {
                path: checked_path(volume, &item.path)?,
                data: v.clone(),
                mode: mode_of(item.mode, mode),
            }),
            None if optional => {}
            None => {
                return Err(ApiVolumeError::KeyMissing {
                    volume: volume.to_string(),
                    object: object.to_string(),
                    key: item.key.clone(),
                });
            }
        }
    }
    Ok(files)
}

/// A ConfigMap or Secret a volume (or projection) names.
struct ObjectSource<'a> {
    secret: bool,
    name: &'a str,
    items: Option<&'a Vec<KeyToPath>>,
    optional: bool,
}

fn object_files(
    volume: &str,
    src: &ObjectSource<'_>,
    fetched: &Fetched,
    mode: u32,
) -> Result<Vec<VolumeFile>, ApiVolumeError> {
    let (kind, map) = if src.secret {
        ("secret", &fetched.secrets)
    } else {
        ("configmap", &fetched.config_maps)
    };
    let name = src.name;
    match map.get(name).and_then(Option::as_ref) {
        Some(data) => keyed_files(
            volume,
            &format!("{kind} {name:?}"),
            data,
            src.items,
            src.optional,
            mode,
        ),
        None if src.optional => Ok(Vec::new()),
        None if src.secret => Err(ApiVolumeError::SecretMissing {
            volume: volume.to_string(),
            name: name.to_string(),
        }),
        None => Err(ApiVolumeError::ConfigMapMissing {
            volume: volume.to_string(),
            name: name.to_string(),
        }),
    }
}

fn downward_files(
    volume: &str,
    items: &[DownwardAPIVolumeFile],
    facts: &PodFacts,
    mode: u32,
) -> Result<Vec<VolumeFile>, ApiVolumeError> {
    items
        .iter()
        .map(|item| {
            let unsupported = |what: String| ApiVolumeError::Unsupported {
                volume: volume.to_string(),
                what,
            };
            let Some(field) = &item.field_ref else {
                return Err(unsupported(format!(
                    "downwardAPI item {:?} without fieldRef",
                    item.path
                )));
            };
            let value = facts
                .field(&field.field_path)
                .ok_or_else(|| unsupported(format!("fieldRef {:?}", field.field_path)))?;
            Ok(VolumeFile {
                path: checked_path(volume, &item.path)?,
                data: value.into_bytes(),
                mode: mode_of(item.mode, mode),
            })
        })
        .collect()
}

fn projection_files(
    volume: &str,
    src: &VolumeProjection,
    facts: &PodFacts,
    fetched: &Fetched,
    mode: u32,
) -> Result<Vec<VolumeFile>, ApiVolumeError> {
    if let Some(cm) = &src.config_map {
        let source = ObjectSource {
            secret: false,
            name: &cm.name,
            items: cm.items.as_ref(),
            optional: cm.optional.unwrap_or(false),
        };
        return object_files(volume, &source, fetched, mode);
    }
    if let Some(s) = &src.secret {
        let source = ObjectSource {
            secret: true,
            name: &s.name,
            items: s.items.as_ref(),
            optional: s.optional.unwrap_or(false),
        };
        return object_files(volume, &source, fetched, mode);
    }
    if let Some(d) = &src.downward_api {
        return downward_files(volume, d.items.as_deref().unwrap_or_default(), facts, mode);
    }
    if let Some(t) = &src.service_account_token {
        let token = fetched
            .tokens
            .get(&token_key(t))
            .ok_or_else(|| ApiVolumeError::NoToken {
                volume: volume.to_string(),
                account: facts.service_account.clone(),
            })?;
        return Ok(vec![VolumeFile {
            path: checked_path(volume, &t.path)?,
            data: token.clone().into_bytes(),
            mode,
        }]);
    }
    let what = if src.cluster_trust_bundle.is_some() {
        "a clusterTrustBundle projection"
    } else if src.pod_certificate.is_some() {
        "a podCertificate projection"
    } else {
        "an empty projection"
    };
    Err(ApiVolumeError::Unsupported {
        volume: volume.to_string(),
        what: what.to_string(),
    })
}

/// The files of volume `v` from what was fetched; `None` when `v` is not API-backed.
/// Files are sorted by path; a later projection's file replaces an earlier one at the same path.
pub fn volume_files(
    v: &Volume,
    facts: &PodFacts,
    fetched: &Fetched,
) -> Result<Option<Vec<VolumeFile>>, ApiVolumeError> {
    let name = v.name.as_str();
    let files = if let Some(p) = &v.projected {
        let mode = mode_of(p.default_mode, DEFAULT_MODE);
        let mut all = Vec::new();
        for src in p.sources.iter().flatten() {
            all.extend(projection_files(name, src, facts, fetched, mode)?);
        }
        all
    } else if let Some(cm) = &v.config_map {
        let source = ObjectSource {
            secret: false,
            name: &cm.name,
            items: cm.items.as_ref(),
            optional: cm.optional.unwrap_or(false),
        };
        object_files(
            name,
            &source,
            fetched,
            mode_of(cm.default_mode, DEFAULT_MODE),
        )?
    } else if let Some(s) = &v.secret {
        let source = ObjectSource {
            secret: true,
            name: s.secret_name.as_deref().unwrap_or_default(),
            items: s.items.as_ref(),
            optional: s.optional.unwrap_or(false),
        };
        object_files(
            name,
            &source,
            fetched,
            mode_of(s.default_mode, DEFAULT_MODE),
        )?
    } else if let Some(d) = &v.downward_api {
        let mode = mode_of(d.default_mode, DEFAULT_MODE);
        downward_files(name, d.items.as_deref().unwrap_or_default(), facts, mode)?
    } else {
        return Ok(None);
    };
    let by_path: BTreeMap<String, VolumeFile> =
        files.into_iter().map(|f| (f.path.clone(), f)).collect();
    Ok(Some(by_path.into_values().collect()))
}

#[cfg(test)]
#[path = "api_volumes_tests.rs"]
mod tests;
