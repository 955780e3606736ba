//! The I/O half of [`crate::api_volumes`]: fetching the ConfigMaps, Secrets and ServiceAccount
//! tokens a pod's volumes name, and writing each volume whole (staged, then renamed into place).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret, ServiceAccount};
use kube::Api;
use kube::api::PostParams;

use crate::api_volumes::{
    ApiVolumeError, Fetched, Needs, VolumeFile, is_api_volume, needs, volume_files,
};
use crate::env::PodFacts;

/// Where volume `name` of pod `uid` is built.
pub fn volume_dir(pod_dir: &Path, name: &str) -> PathBuf {
    pod_dir.join("volumes/api").join(name)
}

fn api_error(what: String) -> impl FnOnce(kube::Error) -> ApiVolumeError {
    move |e| ApiVolumeError::Api {
        what,
        source: Box::new(e),
    }
}

fn config_map_data(cm: ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    out.extend(
        cm.binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    out
}

fn secret_data(s: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    out.extend(
        s.string_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes())),
    );
    out
}

/// Fetches what `needs` lists: objects from the pod's namespace, tokens bound to the pod.
pub async fn fetch(
    client: &kube::Client,
    facts: &PodFacts,
    needs: &Needs,
) -> Result<Fetched, ApiVolumeError> {
    let ns = facts.namespace.as_str();
    let mut fetched = Fetched::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for name in &needs.config_maps {
        let got = cms
            .get_opt(name)
            .await
            .map_err(api_error(format!("configmap {ns}/{name}")))?;
        fetched
            .config_maps
            .insert(name.clone(), got.map(config_map_data));
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for name in &needs.secrets {
        let got = secrets
            .get_opt(name)
            .await
            .map_err(api_error(format!("secret {ns}/{name}")))?;
        fetched.secrets.insert(name.clone(), got.map(secret_data));
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let account = if facts.service_account.is_empty() {
        "default"
    } else {
        facts.service_account.as_str()
    };
    for key in &needs.tokens {
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: (!key.audience.is_empty()).then(|| vec![key.audience.clone()]),
                expiration_seconds: Some(key.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(facts.name.clone()),
                    uid: Some(facts.uid.clone()),
                }),
            }),
            ..Default::default()
        };
        let issued = accounts
            .create_token_request(account, &PostParams::default(), &request)
            .await
            .map_err(api_error(format!(
                "a token for service account {ns}/{account}"
            )))?;
        if let Some(token) = issued.status.and_then(|s| s.token) {
            fetched.tokens.insert(key.clone(), token);
        }
    }
    Ok(fetched)
}

pub(crate) fn write_volume(dir: &Path, files: &[VolumeFile]) -> Result<(), ApiVolumeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ApiVolumeError::Io { path, source }
    };
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let file_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = parent.join(format!(".{file_name}.staging"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    for f in files {
        let path = staging.join(&f.path);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(io(p))?;
        }
        std::fs::write(&path, &f.data).map_err(io(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode))
            .map_err(io(&path))?;
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    std::fs::rename(&staging, dir).map_err(io(dir))
}

/// Builds every API-backed volume of the pod under `pod_dir` (see [`volume_dir`]).
pub async fn materialize(
    client: Option<&kube::Client>,
    spec: &PodSpec,
    facts: &PodFacts,
    pod_dir: &Path,
) -> Result<(), ApiVolumeError> {
    let needs = needs(spec);
    let fetched = match client {
        Some(client) if !needs.is_empty() => fetch(client, facts, &needs).await?,
        None if !needs.is_empty() => {
            let volume = spec
                .volumes
                .iter()
                .flatten()
                .find(|v| is_api_volume(v))
                .map(|v| v.name.clone())
                .unwrap_or_default();
            return Err(ApiVolumeError::NoApi { volume });
        }
        _ => Fetched::default(),
    };
    for v in spec.volumes.iter().flatten() {
        if let Some(files) = volume_files(v, facts, &fetched)? {
            write_volume(&volume_dir(pod_dir, &v.name), &files)?;
        }
    }
    Ok(())
}
