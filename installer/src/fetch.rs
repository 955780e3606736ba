//! The API side: building the client and fetching the revision's ConfigMaps and Secrets
//! (`<name>-<revision>`), each with bounded retries and back-off inside the overall deadline.
//!
//! A required object that is missing (404) is retried until the deadline (a revision's copies
//! may still be appearing in a lagging cache); an optional one that is missing is skipped at
//! once with a log line. Transient errors (connection, 429, 5xx) are retried; other client
//! errors (401, 403, 422, ...) fail at once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use tokio::time::Instant;

use crate::args::Wanted;
use crate::plan::{Kind, Resource};

const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Why the revision's objects could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("no Kubernetes client configuration: {0}")]
    Infer(String),
    #[error("building the client: {0}")]
    Client(kube::Error),
    #[error("required {kind} {namespace}/{name} not found within {waited:?} (last: {last})")]
    MissingRequired {
        kind: Kind,
        namespace: String,
        name: String,
        waited: Duration,
        last: String,
    },
    #[error("{kind} {namespace}/{name}: API unavailable for {waited:?} (last: {last})")]
    Unavailable {
        kind: Kind,
        namespace: String,
        name: String,
        waited: Duration,
        last: String,
    },
    #[error("reading {kind} {namespace}/{name}: {source}")]
    Api {
        kind: Kind,
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("{kind} {namespace}/{name}: key {key:?} is in both data and binaryData")]
    Conflict {
        kind: Kind,
        namespace: String,
        name: String,
        key: String,
    },
}

impl FetchError {
    /// A short static category, for the termination message and events.
    pub fn category(&self) -> &'static str {
        match self {
            FetchError::Kubeconfig { .. } | FetchError::Infer(_) | FetchError::Client(_) => {
                "ClientConfig"
            }
            FetchError::MissingRequired { .. } => "MissingResource",
            FetchError::Unavailable { .. } => "ApiUnavailable",
            FetchError::Api { .. } => "ApiError",
            FetchError::Conflict { .. } => "InvalidResource",
        }
    }
}

/// A client from `--kubeconfig`, else kube's inference (in-cluster, then `KUBECONFIG`).
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, FetchError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc_err = |e: kube::config::KubeconfigError| FetchError::Kubeconfig {
                path: path.display().to_string(),
                message: e.to_string(),
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(kc_err)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(kc_err)?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| FetchError::Infer(e.to_string()))?,
    };
    // One slow call must not eat the whole budget; the deadline bounds the rest.
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(15));
    config.write_timeout = Some(Duration::from_secs(15));
    Client::try_from(config).map_err(FetchError::Client)
}

/// Whether an API error is worth retrying.
fn transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

/// Fetches every wanted object of `revision`; missing optional ones are left out.
pub async fn fetch_all(
    client: &Client,
    namespace: &str,
    revision: u64,
    wanted: &[Wanted],
    deadline: Instant,
) -> Result<Vec<Resource>, FetchError> {
    let mut found = Vec::new();
    for w in wanted {
        let fetched = match w.kind {
            Kind::ConfigMap => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
                fetch_one(&api, namespace, w, revision, deadline)
                    .await?
                    .map(|cm| configmap_data(cm, namespace, w))
                    .transpose()?
            }
            Kind::Secret => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                fetch_one(&api, namespace, w, revision, deadline)
                    .await?
                    .map(secret_data)
            }
        };
        if let Some(data) = fetched {
            found.push(Resource {
                kind: w.kind,
                name: w.name.clone(),
                data,
            });
        }
    }
    Ok(found)
}

async fn fetch_one<K>(
    api: &Api<K>,
    namespace: &str,
    w: &Wanted,
    revision: u64,
    deadline: Instant,
) -> Result<Option<K>, FetchError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = format!("{}-{revision}", w.name);
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0u32;
    // The last real answer: (was it "not found", what it said).
    let mut last: Option<(bool, String)> = None;
    loop {
        attempt += 1;
        match tokio::time::timeout_at(deadline, api.get_opt(&name)).await {
            Ok(Ok(Some(obj))) => {
                tracing::info!(kind = %w.kind, %name, attempt, "fetched");
                return Ok(Some(obj));
            }
            Ok(Ok(None)) if w.optional => {
                tracing::info!(kind = %w.kind, %name, "optional object not found, skipped");
                return Ok(None);
            }
            Ok(Ok(None)) => last = Some((true, "not found".to_owned())),
            Ok(Err(e)) if !transient(&e) => {
                return Err(FetchError::Api {
                    kind: w.kind,
                    namespace: namespace.to_owned(),
                    name,
                    source: e,
                });
            }
            Ok(Err(e)) => last = Some((false, e.to_string())),
            // Cut off by the deadline: an earlier answer says more than this.
            Err(_) => {
                last.get_or_insert_with(|| (false, "no answer before the deadline".to_owned()));
            }
        }
        let (not_found, said) = last.clone().unwrap_or_default();
        let now = Instant::now();
        if now >= deadline {
            let (kind, namespace, waited) = (w.kind, namespace.to_owned(), now - started);
            return Err(if not_found {
                FetchError::MissingRequired {
                    kind,
                    namespace,
                    name,
                    waited,
                    last: said,
                }
            } else {
                FetchError::Unavailable {
                    kind,
                    namespace,
                    name,
                    waited,
                    last: said,
                }
            });
        }
        tracing::warn!(kind = %w.kind, %name, attempt, error = %said, retry_in = ?backoff, "not available yet");
        tokio::time::sleep_until(deadline.min(now + backoff)).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn configmap_data(
    cm: ConfigMap,
    namespace: &str,
    w: &Wanted,
) -> Result<BTreeMap<String, Vec<u8>>, FetchError> {
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    for (key, bytes) in cm.binary_data.unwrap_or_default() {
        if data.contains_key(&key) {
            return Err(FetchError::Conflict {
                kind: Kind::ConfigMap,
                namespace: namespace.to_owned(),
                name: w.name.clone(),
                key,
            });
        }
        data.insert(key, bytes.0);
    }
    Ok(data)
}

fn secret_data(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    // Only set on objects that never went through a real API server; it wins there too.
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    data
}
