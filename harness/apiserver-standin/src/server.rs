//! Configuration and lifecycle of the stand-in: connect to etcd, load CRDs, create the default
//! namespaces, bind, serve, run the garbage collector and the disruption controller; stop on
//! drop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::json;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

use crate::error::StandInError;
use crate::resources::Registry;
use crate::state::State;
use crate::store::Store;
use crate::verbs::{self, Target, WriteOptions};
use crate::{disruption, gc, http, kubeconfig};

/// Client certificate files for an etcd that requires mTLS (PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// CA bundle that signed etcd's serving certificate.
    pub ca: PathBuf,
    /// Client certificate.
    pub cert: PathBuf,
    /// Client key.
    pub key: PathBuf,
}

/// How the stand-in runs.
#[derive(Clone, Debug)]
pub struct StandInConfig {
    /// etcd client URLs (e.g. `http://127.0.100.7:2379`).
    pub etcd_endpoints: Vec<String>,
    /// Client certificates when etcd requires mTLS (`https://` endpoints).
    pub etcd_tls: Option<EtcdTls>,
    /// Address to serve HTTP on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// etcd key prefix (`/registry`, as kube-apiserver).
    pub key_prefix: String,
    /// Bound on every etcd call.
    pub etcd_timeout: Duration,
    /// How often watches with `allowWatchBookmarks` get a bookmark.
    pub bookmark_interval: Duration,
    /// How often the garbage collector sweeps when nothing wakes it (every deletion wakes it;
    /// default 10 s).
    pub gc_interval: Duration,
    /// How often the disruption controller recomputes PodDisruptionBudget statuses when
    /// nothing wakes it (every pod or budget write does; default 500 ms).
    pub disruption_interval: Duration,
    /// Reject pods whose service account does not exist (kube-apiserver's admission plugin).
    pub service_account_admission: bool,
    /// Create a `default` ServiceAccount in every new namespace (the controller-manager's job).
    pub default_service_accounts: bool,
    /// Pods bound to a node are deleted gracefully and wait for a second delete with
    /// `gracePeriodSeconds=0` (the kubelet's job).
    pub graceful_pod_deletion: bool,
    /// Namespaces created at start if missing.
    pub default_namespaces: Vec<String>,
    /// Compact etcd history every interval, up to the revision seen one interval earlier
    /// (kube-apiserver: every 5 minutes). `None` never compacts.
    pub compaction_interval: Option<Duration>,
}

impl StandInConfig {
    /// Defaults for the given etcd endpoints and listen address.
    pub fn new<I, S>(etcd_endpoints: I, listen: SocketAddr) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            etcd_endpoints: etcd_endpoints.into_iter().map(Into::into).collect(),
            etcd_tls: None,
            listen,
            key_prefix: "/registry".into(),
            etcd_timeout: Duration::from_secs(5),
            bookmark_interval: Duration::from_secs(10),
            gc_interval: Duration::from_secs(10),
            disruption_interval: Duration::from_millis(500),
            service_account_admission: true,
            default_service_accounts: true,
            graceful_pod_deletion: true,
            default_namespaces: ["default", "kube-system", "kube-public", "kube-node-lease"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            compaction_interval: Some(Duration::from_secs(300)),
        }
    }

    /// Sets (or disables) periodic compaction.
    pub fn with_compaction_interval(mut self, interval: Option<Duration>) -> Self {
        self.compaction_interval = interval;
        self
    }

    /// Talks to etcd over mTLS with these files.
    pub fn with_etcd_tls(mut self, tls: EtcdTls) -> Self {
        self.etcd_tls = Some(tls);
        self
    }

    /// Sets the bookmark interval.
    pub fn with_bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Sets the garbage-collector interval.
    pub fn with_gc_interval(mut self, interval: Duration) -> Self {
        self.gc_interval = interval;
        self
    }

    /// Sets the disruption controller's interval.
    pub fn with_disruption_interval(mut self, interval: Duration) -> Self {
        self.disruption_interval = interval;
        self
    }

    /// Sets the etcd key prefix (lets several stand-ins share one etcd).
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into().trim_end_matches('/').to_string();
        self
    }
}

/// A running Kubernetes API stand-in. Stops serving when dropped.
#[derive(Debug)]
pub struct ApiServerStandIn {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
    gc: JoinHandle<()>,
    disruption: JoinHandle<()>,
    compactor: Option<JoinHandle<()>>,
}

impl ApiServerStandIn {
    /// Connects to etcd, prepares the initial state and starts serving.
    pub async fn start(config: StandInConfig) -> Result<Self, StandInError> {
        if config.etcd_endpoints.is_empty() {
            return Err(StandInError::NoEtcdEndpoints);
        }
        let store = Store::connect(
            &config.etcd_endpoints,
            config.etcd_timeout,
            config.etcd_tls.as_ref(),
        )
        .await
        .map_err(|e| {
            StandInError::Init(format!(
                "connecting to etcd {:?}: {e}",
                config.etcd_endpoints
            ))
        })?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| StandInError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StandInError::Bind {
            addr: config.listen,
            source,
        })?;
        let state = Arc::new(State {
            store,
            registry: RwLock::new(Registry::default()),
            config,
            gc_wake: Notify::new(),
            disruption_wake: Notify::new(),
            address: addr.to_string(),
        });
        bootstrap(&state).await?;
        let (tx, rx) = oneshot::channel::<()>();
        let router = http::router(Arc::clone(&state));
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async {
                let _ = rx.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "API stand-in: HTTP server failed");
            }
        });
        let gc = tokio::spawn(gc::run(Arc::clone(&state)));
        let disruption = tokio::spawn(disruption::run(Arc::clone(&state)));
        let compactor = state
            .config
            .compaction_interval
            .map(|every| tokio::spawn(compact_every(Arc::clone(&state), every)));
        tracing::info!(url = %format!("http://{addr}"), etcd = ?state.config.etcd_endpoints,
            "API stand-in serving the Kubernetes API");
        Ok(Self {
            addr,
            state,
            shutdown: Some(tx),
            server,
            gc,
            disruption,
            compactor,
        })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube config for the stand-in (no auth, default namespace `default`).
    pub fn kube_config(&self) -> Result<kube::Config, StandInError> {
        let uri = self
            .url()
            .parse()
            .map_err(|e| StandInError::Client(format!("{e}")))?;
        Ok(kube::Config::new(uri))
    }

    /// A kube client for the stand-in.
    pub fn client(&self) -> Result<kube::Client, StandInError> {
        kube::Client::try_from(self.kube_config()?).map_err(|e| StandInError::Client(e.to_string()))
    }

    /// Writes a kubeconfig for the stand-in to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), StandInError> {
        kubeconfig::write(path, &self.url(), "default")
    }

    /// The configuration in use.
    pub fn config(&self) -> &StandInConfig {
        &self.state.config
    }

    /// The current etcd revision.
    pub async fn revision(&self) -> Result<i64, StandInError> {
        self.state
            .store
            .revision()
            .await
            .map_err(|e| StandInError::Init(e.to_string()))
    }

    /// Compacts etcd history up to the current revision (kube-apiserver does this every five
    /// minutes); watches and paged lists from older revisions then get 410 Expired.
    pub async fn compact(&self) -> Result<i64, StandInError> {
        let rev = self.revision().await?;
        self.state
            .store
            .compact(rev)
            .await
            .map_err(|e| StandInError::Init(e.to_string()))?;
        Ok(rev)
    }

    /// Stops serving (also done on drop).
    pub fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.gc.abort();
        self.disruption.abort();
        if let Some(c) = &self.compactor {
            c.abort();
        }
    }

    /// Waits until the HTTP server task ends (after [`Self::stop`]) or `within` passes.
    pub async fn stopped(mut self, within: Duration) {
        self.stop();
        let _ = tokio::time::timeout(within, &mut self.server).await;
    }
}

impl Drop for ApiServerStandIn {
    fn drop(&mut self) {
        self.stop();
        self.server.abort();
    }
}

/// Compacts etcd every `every`, up to the revision seen at the previous tick, so history of
/// about one interval stays available to watches (kube-apiserver's compaction loop).
async fn compact_every(state: Arc<State>, every: Duration) {
    let mut previous: Option<i64> = None;
    loop {
        tokio::time::sleep(every).await;
        if let Some(rev) = previous
            && rev > 0
        {
            match state.store.compact(rev).await {
                Ok(()) => tracing::debug!(revision = rev, "API stand-in: compacted etcd"),
                Err(e) => {
                    tracing::debug!(revision = rev, error = %e, "API stand-in: compaction skipped")
                }
            }
        }
        previous = state.store.revision().await.ok();
    }
}

/// Serves existing CRDs and creates the default namespaces.
async fn bootstrap(state: &State) -> Result<(), StandInError> {
    let reg = state.registry();
    let crds = reg
        .lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .ok_or_else(|| StandInError::Init("CRD resource missing from the registry".into()))?;
    let page = state
        .store
        .list(&crds.collection_prefix(state.prefix(), None), None, 0, 0)
        .await
        .map_err(|e| StandInError::Init(format!("loading CRDs: {e}")))?;
    // Terminating CRDs too: their instances must stay reachable until the GC removes them.
    for s in &page.items {
        verbs::register_crd(state, &s.object);
    }
    let namespaces = reg
        .lookup("", "v1", "namespaces")
        .ok_or_else(|| StandInError::Init("namespace resource missing from the registry".into()))?;
    for ns in &state.config.default_namespaces {
        let t = Target {
            info: namespaces.clone(),
            namespace: None,
            name: None,
            status: false,
        };
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        match verbs::create(state, &t, obj, &WriteOptions::default()).await {
            Ok(_) => tracing::debug!(namespace = %ns, "API stand-in: created default namespace"),
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(StandInError::Init(format!("creating namespace {ns}: {e}"))),
        }
    }
    Ok(())
}
