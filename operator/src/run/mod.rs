//! `etcd-operator run`: the control loop. Starts the watch caches and the HTTP endpoints, takes
//! the leader Lease, and runs a reconcile pass when a watched object changed or when the last
//! pass asked to be called again (work in flight, a back-off). A Lease renewal never runs a pass.
//! etcd is not watched: while the cluster is settled, every [`pass::IDLE_REQUEUE`] an idle health
//! check (one status call per member) compares etcd with what the last pass saw, and only a
//! difference runs a pass; a whole pass runs at least every [`pass::RESYNC`]. On SIGTERM or
//! Ctrl-C it finishes the pass in progress and exits.

mod http;
pub mod leader;
mod node_watch;
mod stores;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use kube::runtime::events::Reporter;
use tokio::time::Instant;
use tracing::Instrument;

use crate::context::{Context, OperatorConfig};
use crate::driver::Driver;
use crate::observed::Inputs;
use crate::pass::{self, PassReport};
pub use node_watch::NodeWatch;
pub use stores::{Stores, Tasks};

/// How `run` is configured.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub config: OperatorConfig,
    /// Where `/metrics`, `/healthz`, `/readyz` are served.
    pub listen: SocketAddr,
    /// This instance's identity in the Lease (the pod name).
    pub identity: String,
    pub lease_duration: Duration,
}

/// Why `run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("serving HTTP on {addr}: {source}")]
    Http {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the watch caches stopped before they synced")]
    Caches,
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

/// Reads everything a pass needs straight from the API (list calls, no watch): for
/// `etcd-operator plan`, which runs once.
pub async fn read_inputs(client: &Client, operator_namespace: &str) -> Result<Inputs, kube::Error> {
    use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
    use kube::Api;
    use kube::api::ListParams;
    let ns = crate::podspec::STATIC_POD_NAMESPACE;
    let lp = ListParams::default();
    let stored = Api::<crate::api::StoredCluster>::all(client.clone())
        .get_opt(crate::api::SINGLETON)
        .await?;
    let (cluster, unreadable) = crate::observed::decode_cluster(stored.as_ref());
    Ok(Inputs {
        cluster,
        unreadable,
        nodes: Api::<Node>::all(client.clone()).list(&lp).await?.items,
        node_listing: crate::observed::NodeListing::All,
        pods: Api::<Pod>::namespaced(client.clone(), ns)
            .list(&lp)
            .await?
            .items,
        configmaps: Api::<ConfigMap>::namespaced(client.clone(), ns)
            .list(&lp)
            .await?
            .items,
        secrets: Api::<Secret>::namespaced(client.clone(), ns)
            .list(&lp)
            .await?
            .items,
        operator_secrets: Api::<Secret>::namespaced(client.clone(), operator_namespace)
            .list(&lp)
            .await?
            .items,
        pdbs: Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
            client.clone(),
            ns,
        )
        .list(&lp)
        .await?
        .items,
    })
}

/// `etcd-operator plan`: one pass that decides everything and changes nothing. Boxed so that
/// its state machine is compiled once, in this crate, and a binary that polls it does not
/// compile it again (docs/benchmarks.md, "Release build").
pub fn plan(
    client: Client,
    config: OperatorConfig,
) -> BoxFuture<'static, Result<PassReport, kube::Error>> {
    Box::pin(plan_once(client, config))
}

async fn plan_once(client: Client, config: OperatorConfig) -> Result<PassReport, kube::Error> {
    let inputs = read_inputs(&client, &config.operator_namespace).await?;
    let reporter = Reporter {
        controller: "etcd-operator-plan".into(),
        instance: None,
    };
    let ctx = Context::new(client, config, reporter, true);
    let now = time::OffsetDateTime::now_utc();
    Ok(Driver::default().pass(&ctx, &inputs, now).await)
}

/// Takes or renews the leader Lease; whether this instance leads now. `seen` is what this
/// instance last saw of the Lease (see `leader::observe`).
async fn renew_lease(
    client: &Client,
    opts: &RunOptions,
    was: bool,
    seen: &mut Option<leader::Observed>,
) -> bool {
    // Bounded: an API that accepts the request and never answers (its etcd in trouble) must not
    // hold the loop; a renewal not answered by the time it would stop letting this instance act
    // is a lost one.
    let limit = leader::renew_deadline(opts.lease_duration);
    let attempt = leader::try_lead(
        client,
        &opts.config.operator_namespace,
        &opts.identity,
        opts.lease_duration,
        seen,
    );
    let leading = match tokio::time::timeout(limit, attempt).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "lease renewal failed");
            false
        }
        Err(_) => {
            tracing::warn!(
                limit_s = limit.as_secs_f64(),
                "lease renewal failed: the API did not answer in time"
            );
            false
        }
    };
    if leading != was {
        tracing::info!(leading, "leadership changed");
    }
    leading
}

/// Gives the lease up on the way out, so a standby takes over at once (bounded: a silent API
/// server must not hold the shutdown).
async fn release_lease(client: &Client, opts: &RunOptions) {
    let release = leader::release(client, &opts.config.operator_namespace, &opts.identity);
    match tokio::time::timeout(Duration::from_secs(2), release).await {
        Ok(Ok(true)) => tracing::info!("leader lease released"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "could not release the leader lease"),
        Err(_) => tracing::warn!("could not release the leader lease within 2 s"),
    }
}

/// The liveness and readiness the HTTP server reports, over the context's metrics.
fn health_of(ctx: &Context) -> http::Health {
    http::Health {
        metrics: ctx.metrics.clone(),
        ready: Arc::new(AtomicBool::new(false)),
        last_loop: Arc::new(AtomicI64::new(
            time::OffsetDateTime::now_utc().unix_timestamp(),
        )),
    }
}

/// Runs the operator until SIGTERM / Ctrl-C. Boxed so that its state machine is compiled once,
/// in this crate, and a binary that polls it does not compile it again (docs/benchmarks.md,
/// "Release build").
pub fn run(client: Client, opts: RunOptions) -> BoxFuture<'static, Result<(), RunError>> {
    Box::pin(run_until_shutdown(client, opts))
}

async fn run_until_shutdown(client: Client, opts: RunOptions) -> Result<(), RunError> {
    let reporter = Reporter {
        controller: "etcd-operator".into(),
        instance: Some(opts.identity.clone()),
    };
    let ctx = Context::new(client.clone(), opts.config.clone(), reporter, false);
    let health = health_of(&ctx);
    let addr = opts.listen;
    let server = tokio::spawn(http::serve(addr, health.clone()));
    let mut stores = Stores::start(&client, &opts.config.operator_namespace);
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    if caches_or_shutdown(&stores, &mut shutdown).await? {
        return Ok(());
    }
    health
        .ready
        .store(true, std::sync::atomic::Ordering::SeqCst);
    tracing::info!(identity = %opts.identity, "caches synced");
    let mut lead = Leadership::default();
    let mut driver = Driver::default();
    let mut next_pass = Instant::now();
    let mut last_full = Instant::now();
    let mut resync = pass::RESYNC;
    loop {
        if server.is_finished() {
            return match server.await {
                Ok(Err(source)) => Err(RunError::Http { addr, source }),
                _ => Ok(()),
            };
        }
        let changed = tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("shutting down");
                lead.release(&client, &opts).await;
                return Ok(());
            }
            _ = stores.changed.notified() => true,
            _ = tokio::time::sleep_until(next_pass) => false,
            _ = tokio::time::sleep_until(lead.next_renew) => false,
        };
        if lead.renew_when_due(&client, &opts, &ctx).await {
            // Just took over: decide from a full pass at once, not from what this instance saw
            // when it last led.
            next_pass = Instant::now();
            driver.forget_settled();
            // The barrier for the predecessor's writes (#65): the caches this instance kept
            // while standing by may still lag what the previous leader wrote before its lease
            // ran out (a revision's copies, its status); a consistent list taken now, after the
            // lease changed hands, holds every one of them. Nothing acts until it is in.
            if relist(&mut stores, &client, &opts, &lead, &mut shutdown).await? {
                return Ok(());
            }
            tracing::info!("caches listed anew on taking the lease over");
        }
        health.beat();
        if !lead.leading {
            next_pass = lead.next_renew;
            continue;
        }
        if !changed && Instant::now() < next_pass {
            continue;
        }
        if !changed && last_full.elapsed() < resync && !driver.etcd_changed(&ctx).await {
            next_pass = Instant::now() + pass::IDLE_REQUEUE;
            continue;
        }
        let Some(report) = lead.fenced_pass(&ctx, &mut driver, &stores).await else {
            continue;
        };
        if report.relist.is_some() {
            // etcd's history changed under the caches (`crate::history`): the old reflectors go
            // with the old caches, and nothing acts until the new ones have listed.
            if relist(&mut stores, &client, &opts, &lead, &mut shutdown).await? {
                return Ok(());
            }
            tracing::info!("caches listed anew");
        }
        last_full = Instant::now();
        next_pass = last_full + report.requeue_after;
        resync = report
            .full_pass_within
            .map_or(pass::RESYNC, |d| d.min(pass::RESYNC));
    }
}

/// Replaces the caches with new ones and waits until they have listed; true when a shutdown
/// came first (the lease is then given up).
async fn relist(
    stores: &mut Stores,
    client: &Client,
    opts: &RunOptions,
    lead: &Leadership,
    shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> Result<bool, RunError> {
    *stores = Stores::start(client, &opts.config.operator_namespace);
    let stopped = caches_or_shutdown(stores, shutdown).await?;
    if stopped {
        lead.release(client, opts).await;
    }
    Ok(stopped)
}

/// Waits until every cache has listed; true when a shutdown came first.
async fn caches_or_shutdown(
    stores: &Stores,
    shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> Result<bool, RunError> {
    tokio::select! {
        r = stores.wait_ready() => r.map(|_| false).map_err(|_| RunError::Caches),
        _ = shutdown => Ok(true),
    }
}

/// This instance's hold on the leader lease.
struct Leadership {
    leading: bool,
    /// The lease as last seen (see `leader::Observed`).
    lease_seen: Option<leader::Observed>,
    /// Until when this instance may act on its last renewal (see `leader::renew_deadline`).
    act_until: Option<Instant>,
    next_renew: Instant,
}

impl Default for Leadership {
    fn default() -> Self {
        Self {
            leading: false,
            lease_seen: None,
            act_until: None,
            next_renew: Instant::now(),
        }
    }
}

impl Leadership {
    /// Renews the lease (or tries to take it) when due; true when this instance just took over.
    async fn renew_when_due(&mut self, client: &Client, opts: &RunOptions, ctx: &Context) -> bool {
        if Instant::now() < self.next_renew {
            return false;
        }
        let was = self.leading;
        let asked = Instant::now();
        self.leading = renew_lease(client, opts, was, &mut self.lease_seen).await;
        self.act_until = self
            .leading
            .then(|| asked + leader::renew_deadline(opts.lease_duration));
        ctx.metrics.is_leader.set(i64::from(self.leading));
        self.next_renew = Instant::now() + opts.lease_duration / 3;
        self.leading && !was
    }

    /// One pass, fenced: it starts only while the last renewal lets this instance act, and is
    /// cut short when that runs out (the caches and etcd decide the next pass; every step is
    /// idempotent, so a cut pass is like a killed operator). `None`: no pass ran to its end,
    /// and the lease is renewed first.
    async fn fenced_pass(
        &mut self,
        ctx: &Context,
        driver: &mut Driver,
        stores: &Stores,
    ) -> Option<PassReport> {
        let Some(until) = self.act_until.filter(|u| Instant::now() < *u) else {
            self.next_renew = Instant::now();
            return None;
        };
        let now = time::OffsetDateTime::now_utc();
        let span = tracing::info_span!("reconcile", cluster = crate::api::SINGLETON);
        let inputs = stores.snapshot();
        let pass = driver.pass(ctx, &inputs, now).instrument(span);
        let report = tokio::time::timeout_at(until, pass).await.ok();
        if report.is_none() {
            tracing::warn!(
                "pass cut short: the lease was last renewed too long ago to go on acting; \
                 renewing before the next pass"
            );
            self.next_renew = Instant::now();
        }
        report
    }

    /// Gives the lease up when held.
    async fn release(&self, client: &Client, opts: &RunOptions) {
        if self.leading {
            release_lease(client, opts).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API server that accepts connections and never answers (what kube-apiserver does while
    /// its etcd has no quorum) costs the loop one renew deadline, then the renewal counts as
    /// lost: the loop goes on (and stops acting) instead of waiting for the client's own read
    /// timeout, minutes later.
    #[tokio::test]
    async fn an_api_that_never_answers_loses_the_lease_within_the_renew_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let opts = RunOptions {
            config: Context::for_tests().config.clone(),
            listen: "127.0.0.1:0".parse().unwrap(),
            identity: "op-a".into(),
            lease_duration: Duration::from_secs(3),
        };
        let started = Instant::now();
        let leading = renew_lease(&client, &opts, true, &mut None).await;
        let took = started.elapsed();
        held.abort();
        assert!(!leading, "an unanswered renewal must not count as leading");
        assert!(
            took < Duration::from_secs(4),
            "the renewal waited {took:?}, past the renew deadline of 2s"
        );
    }
}
