//! # kube-testapi
//!
//! The Kubernetes API that tests and the sandbox talk to, chosen once:
//!
//! * `KUBECONFIG` set (non-empty): a **real cluster**. Tests then run unchanged against it; each
//!   test works in its own namespace ([`TestApi::temp_namespace`]).
//! * `TEST_API=kas`: a **real kube-apiserver and controller-manager** of its own from the shared
//!   kas control plane ([`TestApi::kas`]); an error when kas is absent.
//! * otherwise (`TEST_API` unset or `stand-in`): the **API stand-in** (`apiserver-standin`, a stand-in for kube-apiserver) on its
//!   own real etcd (`etcd-fixture`, one member on a unique loopback address). Both stop when the
//!   [`TestApi`] is dropped.
//!
//! Either way the caller gets a `kube::Client` and a kubeconfig file for subprocesses (the
//! installer, the operator, node agents).
//!
//! [`TestApi::kas`] gives a **real kube-apiserver** v1.36 (optionally with controller-manager and
//! scheduler) from the shared `kas` control plane (`../shared/kas/kas` beside the repository, or
//! `$KAS`), on its own loopback address `127.0.90.N`; `None` where kas is absent (a user's fresh
//! clone), so the caller can skip loudly. It is stopped and its data wiped on drop. Beside it
//! runs a stand-in for OpenShift's service CA publisher (`service_ca`), which the fork's
//! token volumes need.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

mod kas;
mod service_ca;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use apiserver_standin::{ApiServerStandIn, StandInConfig};
use etcd_fixture::{ClusterSpec, EtcdCluster};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

use kas::KasParts;
pub use kas::{KasOptions, kas_binaries, kas_script};

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
    #[error("kas up failed ({0}): {1}")]
    Kas(String, String),
    #[error("compacting the API's etcd at {0}: {1}")]
    Compact(String, String),
    #[error("{0}")]
    Unsupported(&'static str),
}

enum Backend {
    StandIn(Box<StandInParts>),
    Real,
    Kas(KasParts),
    /// Real kube-apiservers this process runs elsewhere (the sandbox's static pods on the
    /// managed etcd, see [`TestApi::stacked`]), with the service CA publisher beside them.
    Stacked(StackedParts),
}

/// What a [`Backend::Stacked`] API holds.
struct StackedParts {
    kubectl: Option<PathBuf>,
    publisher: tokio::task::JoinHandle<()>,
}

impl Drop for StackedParts {
    fn drop(&mut self) {
        self.publisher.abort();
    }
}

struct StandInParts {
    server: ApiServerStandIn,
    /// Its own etcd; `None` when it serves from an etcd someone else runs.
    _etcd: Option<EtcdCluster>,
    _dir: tempfile::TempDir,
}

/// Bound on a connect and on each wait for a byte to or from the stacked control plane's
/// kube-apiservers ([`TestApi::stacked`]): half of kube-apiserver's own 60 s request timeout,
/// far below the scenarios' waits, which poll again after a failed call. A watch that is quiet
/// this long is ended and re-opened by its watcher.
pub const STACKED_READ_BOUND: Duration = Duration::from_secs(30);

/// Bounds the connect of a client made from `config` and each of its waits for a byte to
/// `bound` (kube's defaults are 295 s, above a watch's lifetime).
pub fn bound_requests(config: &mut kube::Config, bound: Duration) {
    config.connect_timeout = Some(bound);
    config.read_timeout = Some(bound);
    config.write_timeout = Some(bound);
}

/// A Kubernetes API for one test (or one sandbox run).
pub struct TestApi {
    backend: Backend,
    client: Client,
    kubeconfig: PathBuf,
    server_url: String,
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
    /// A real cluster when `KUBECONFIG` is set, else what `TEST_API` names (`kas`: a kas
    /// control plane with its controller-manager; unset or `stand-in`: the stand-in).
    pub async fn start() -> Result<Self, TestApiError> {
        if let Ok(path) = std::env::var("KUBECONFIG")
            && !path.is_empty()
        {
            return Self::real(&path, None).await;
        }
        match std::env::var("TEST_API").as_deref() {
            Ok("kas") => {
                let options = KasOptions {
                    controller_manager: true,
                    ..KasOptions::default()
                };
                Self::kas(options).await?.ok_or_else(|| {
                    TestApiError::Kas(
                        "TEST_API=kas".into(),
                        "no kas control plane: put shared/kas beside the repository or set KAS"
                            .into(),
                    )
                })
            }
            Ok("" | "stand-in") | Err(_) => Self::stand_in().await,
            Ok(other) => Err(TestApiError::Kas(
                format!("TEST_API={other:?}"),
                "expected kas or stand-in".into(),
            )),
        }
    }

    /// The API stand-in on its own etcd, whatever the environment says.
    pub async fn stand_in() -> Result<Self, TestApiError> {
        let etcd = EtcdCluster::start(ClusterSpec::plain(1)).await?;
        let endpoints: Vec<String> = etcd.client_urls().iter().map(ToString::to_string).collect();
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        Self::stand_in_with(StandInConfig::new(endpoints, listen), Some(etcd)).await
    }

    /// The API stand-in serving from an etcd run by someone else (the sandbox's managed etcd,
    /// as kube-apiserver does in a real control plane), on `listen`, over mutual TLS.
    pub async fn stand_in_on(
        endpoints: Vec<String>,
        tls: apiserver_standin::EtcdTls,
        listen: SocketAddr,
    ) -> Result<Self, TestApiError> {
        let config = StandInConfig::new(endpoints, listen).with_etcd_tls(tls);
        Self::stand_in_with(config, None).await
    }

    async fn stand_in_with(
        config: StandInConfig,
        etcd: Option<EtcdCluster>,
    ) -> Result<Self, TestApiError> {
        let server = ApiServerStandIn::start(config).await?;
        let dir = tempfile::Builder::new()
            .prefix("kube-testapi-")
            .tempdir()
            .map_err(|e| TestApiError::Io("creating a temp dir".into(), e))?;
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig)?;
        let client = server.client()?;
        let server_url = server.url();
        tracing::info!(url = %server_url, "API stand-in up");
        Ok(Self {
            backend: Backend::StandIn(Box::new(StandInParts {
                server,
                _etcd: etcd,
                _dir: dir,
            })),
            client,
            kubeconfig,
            server_url,
        })
    }

    /// A real kube-apiserver from the shared kas control plane, on a free `127.0.90.N`; `None`
    /// when kas is not there.
    pub async fn kas(options: KasOptions) -> Result<Option<Self>, TestApiError> {
        let Some(script) = kas_script() else {
            return Ok(None);
        };
        let io = |what: String| move |e| TestApiError::Io(what, e);
        let lock_dir = std::env::temp_dir().join("kube-testapi-kas");
        std::fs::create_dir_all(&lock_dir)
            .map_err(io(format!("creating {}", lock_dir.display())))?;
        // One kas per address: hold the address's lock for as long as the API lives.
        let mut held = None;
        for n in 10..=250u8 {
            let path = lock_dir.join(format!("127.0.90.{n}.lock"));
            let file =
                std::fs::File::create(&path).map_err(io(format!("creating {}", path.display())))?;
            if file.try_lock().is_ok() {
                held = Some((Ipv4Addr::new(127, 0, 90, n), file));
                break;
            }
        }
        let Some((ip, lock)) = held else {
            return Err(TestApiError::Kas(
                "no free address".into(),
                "every 127.0.90.10-250 is in use".into(),
            ));
        };
        let mut parts = KasParts {
            script,
            ip,
            _lock: lock,
            publisher: None,
            state: None,
        };
        // Whatever an earlier, crashed user of this address left: stop it and wipe its data.
        parts.down();
        let mut args = vec!["up".to_owned(), "--ip".to_owned(), ip.to_string()];
        if !options.controller_manager {
            args.push("--no-kcm".into());
        }
        if !options.scheduler {
            args.push("--no-scheduler".into());
        }
        let out = tokio::process::Command::new(&parts.script)
            .args(&args)
            .env("KAS_APISERVER_ARGS", options.apiserver_args.join(" "))
            .output()
            .await
            .map_err(io(format!("running {}", parts.script.display())))?;
        if !out.status.success() {
            return Err(TestApiError::Kas(
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        let kubeconfig = std::env::temp_dir()
            .join(format!("kas-0-{ip}"))
            .join("admin.kubeconfig");
        let printed = String::from_utf8_lossy(&out.stdout);
        let kubeconfig = printed
            .trim()
            .strip_prefix("export KUBECONFIG=")
            .map_or(kubeconfig, PathBuf::from);
        parts.state = kubeconfig.parent().map(Path::to_path_buf);
        let mut api = Self::real(&kubeconfig.to_string_lossy(), None).await?;
        parts.publisher = Some(tokio::spawn(service_ca::publish(api.client())));
        api.backend = Backend::Kas(parts);
        tracing::info!(%ip, "kas control plane up");
        Ok(Some(api))
    }

    /// Real kube-apiservers run by the caller (the sandbox's static pods on the managed etcd),
    /// reached through `kubeconfig`; the service CA publisher runs beside them as beside kas.
    /// They need not answer yet: nothing is called here. Their API is served from the etcd the
    /// scenarios disrupt, so a kube-apiserver may keep a connection open and never answer on it:
    /// every wait for a byte is bounded by [`STACKED_READ_BOUND`] (a request that hangs fails,
    /// and the waits that poll try again on a new connection, as the operator's own client does).
    pub async fn stacked(
        kubeconfig: &Path,
        kubectl: Option<PathBuf>,
    ) -> Result<Self, TestApiError> {
        let mut api = Self::real(&kubeconfig.to_string_lossy(), Some(STACKED_READ_BOUND)).await?;
        api.backend = Backend::Stacked(StackedParts {
            kubectl,
            publisher: tokio::spawn(service_ca::publish(api.client())),
        });
        Ok(api)
    }

    /// A client of the kube-apiserver `path` names; `bound`, when given: [`bound_requests`].
    async fn real(path: &str, bound: Option<Duration>) -> Result<Self, TestApiError> {
        let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| {
            TestApiError::Kubeconfig {
                path: path.to_owned(),
                source,
            }
        })?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|source| TestApiError::Kubeconfig {
                path: path.to_owned(),
                source,
            })?;
        if let Some(bound) = bound {
            bound_requests(&mut config, bound);
        }
        let server_url = config.cluster_url.to_string();
        Ok(Self {
            backend: Backend::Real,
            client: Client::try_from(config)?,
            kubeconfig: PathBuf::from(path),
            server_url,
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

    /// The API server's URL (`http://` for the stand-in, `https://` for a real one).
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The kas control plane's `kubectl` (v1.36, beside its other binaries); `None` on the
    /// stand-in or a cluster this process did not start.
    pub fn kubectl(&self) -> Option<PathBuf> {
        match &self.backend {
            Backend::Kas(_) => {
                let path = self.kubeconfig.parent()?.join("bin").join("kubectl");
                path.is_file().then_some(path)
            }
            Backend::Stacked(parts) => parts.kubectl.clone(),
            Backend::StandIn(_) | Backend::Real => None,
        }
    }

    /// True against a real cluster.
    pub fn is_real(&self) -> bool {
        matches!(
            self.backend,
            Backend::Real | Backend::Kas(_) | Backend::Stacked(_)
        )
    }

    /// True for a real kube-apiserver this process started (kas, or the stacked static pods):
    /// one whose admin may mint ServiceAccount tokens, so RBAC is enforced on the operator.
    pub fn is_own_real(&self) -> bool {
        matches!(self.backend, Backend::Kas(_) | Backend::Stacked(_))
    }

    /// The bound on each wait for a byte that a client of this API should have:
    /// [`STACKED_READ_BOUND`] on the stacked control plane, none elsewhere.
    pub fn request_bound(&self) -> Option<Duration> {
        matches!(self.backend, Backend::Stacked(_)).then_some(STACKED_READ_BOUND)
    }

    /// The stand-in, when this is one.
    pub fn stand_in_server(&self) -> Option<&ApiServerStandIn> {
        match &self.backend {
            Backend::StandIn(parts) => Some(&parts.server),
            Backend::Real | Backend::Kas(_) | Backend::Stacked(_) => None,
        }
    }

    /// Compacts the etcd behind this API up to its current revision (kube-apiserver does this
    /// every five minutes), so watches and lists from older resourceVersions get 410 Expired
    /// where the server reads etcd directly. Returns the compacted revision.
    pub async fn compact_storage(&self) -> Result<i64, TestApiError> {
        let endpoint = match &self.backend {
            Backend::StandIn(parts) => return Ok(parts.server.compact().await?),
            Backend::Kas(parts) => format!("http://{}:2379", parts.ip),
            Backend::Real | Backend::Stacked(_) => {
                return Err(TestApiError::Unsupported(
                    "compacting storage needs the stand-in or a kas control plane, not KUBECONFIG",
                ));
            }
        };
        let failed = |e: etcd_client::Error| TestApiError::Compact(endpoint.clone(), e.to_string());
        let mut etcd = etcd_client::Client::connect([endpoint.as_str()], None)
            .await
            .map_err(failed)?;
        let revision = etcd
            .status()
            .await
            .map_err(failed)?
            .header()
            .map_or(0, |h| h.revision());
        etcd.compact(revision, None).await.map_err(failed)?;
        Ok(revision)
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
