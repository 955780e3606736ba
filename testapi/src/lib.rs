//! # kube-testapi
//!
//! The Kubernetes API that tests and the sandbox talk to, chosen once:
//!
//! * `KUBECONFIG` set (non-empty): a **real cluster**. Tests then run unchanged against it; each
//!   test works in its own namespace ([`TestApi::temp_namespace`]).
//! * otherwise: the **API stand-in** (`apiserver-standin`, a stand-in for kube-apiserver) on its
//!   own real etcd (`etcd-fixture`, one member on a unique loopback address). Both stop when the
//!   [`TestApi`] is dropped.
//!
//! Either way the caller gets a `kube::Client` and a kubeconfig file for subprocesses (the
//! installer, the operator, node agents).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use apiserver_standin::{ApiServerStandIn, StandInConfig};
use etcd_fixture::{ClusterSpec, EtcdCluster};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

/// What went wrong getting an API.
#[derive(Debug, thiserror::Error)]
pub enum TestApiError {
    #[error("starting the API stand-in's etcd: {0}")]
    Etcd(#[from] etcd_fixture::FixtureError),
    #[error("starting the API stand-in: {0}")]
    StandIn(#[from] apiserver_standin::StandInError),
    #[error("KUBECONFIG={path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("building a client: {0}")]
    Client(#[from] kube::Error),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

enum Backend {
    StandIn(Box<StandInParts>),
    Real,
}

struct StandInParts {
    server: ApiServerStandIn,
    _etcd: EtcdCluster,
    _dir: tempfile::TempDir,
}

/// A Kubernetes API for one test (or one sandbox run).
pub struct TestApi {
    backend: Backend,
    client: Client,
    kubeconfig: PathBuf,
}

impl std::fmt::Debug for TestApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApi")
            .field("real", &self.is_real())
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl TestApi {
    /// A real cluster when `KUBECONFIG` is set, else the stand-in.
    pub async fn start() -> Result<Self, TestApiError> {
        match std::env::var("KUBECONFIG") {
            Ok(path) if !path.is_empty() => Self::real(&path).await,
            _ => Self::stand_in().await,
        }
    }

    /// The API stand-in on its own etcd, whatever the environment says.
    pub async fn stand_in() -> Result<Self, TestApiError> {
        let etcd = EtcdCluster::start(ClusterSpec::plain(1)).await?;
        let endpoints: Vec<String> = etcd.client_urls().iter().map(ToString::to_string).collect();
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let server = ApiServerStandIn::start(StandInConfig::new(endpoints, listen)).await?;
        let dir = tempfile::Builder::new()
            .prefix("kube-testapi-")
            .tempdir()
            .map_err(|e| TestApiError::Io("creating a temp dir".into(), e))?;
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig)?;
        let client = server.client()?;
        tracing::info!(url = %server.url(), "API stand-in up");
        Ok(Self {
            backend: Backend::StandIn(Box::new(StandInParts {
                server,
                _etcd: etcd,
                _dir: dir,
            })),
            client,
            kubeconfig,
        })
    }

    async fn real(path: &str) -> Result<Self, TestApiError> {
        let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| {
            TestApiError::Kubeconfig {
                path: path.to_owned(),
                source,
            }
        })?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|source| TestApiError::Kubeconfig {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            backend: Backend::Real,
            client: Client::try_from(config)?,
            kubeconfig: PathBuf::from(path),
        })
    }

    /// A client for this API.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A kubeconfig file pointing at this API, for subprocesses.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// True against a real cluster.
    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real)
    }

    /// The stand-in, when this is one.
    pub fn stand_in_server(&self) -> Option<&ApiServerStandIn> {
        match &self.backend {
            Backend::StandIn(parts) => Some(&parts.server),
            Backend::Real => None,
        }
    }

    /// Creates a namespace with a unique name (`<prefix>-xxxxx`) and returns its name.
    pub async fn temp_namespace(&self, prefix: &str) -> Result<String, TestApiError> {
        let ns = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(created.metadata.name.unwrap_or_default())
    }

    /// Deletes a namespace made by [`TestApi::temp_namespace`] (matters on a real cluster).
    pub async fn delete_namespace(&self, name: &str) -> Result<(), TestApiError> {
        Api::<Namespace>::all(self.client())
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}
