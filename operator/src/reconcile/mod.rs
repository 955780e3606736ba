//! One reconcile pass: observe (the watch caches and etcd), decide (the pure controller
//! functions), act (API and etcd calls), report (status, events, metrics).
//!
//! The pass is a fixed pipeline, so the order of effects is easy to reason about after a crash:
//! certificates → etcd observation → membership (one change, then a fresh pass) → target config
//! → revisions → rollout → host endpoints → status. Every step is re-derived from observation and
//! idempotent; the operator can be killed anywhere and the next pass continues. A pass acts only
//! once the caches show the previous pass's writes (see [`writes`]).

mod endpoints;
pub mod etcd;
mod steps;
pub mod writes;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::Client;
use kube::runtime::events::Reporter;
use membership::MemberId;
use time::OffsetDateTime;
use tokio::sync::Mutex;

pub use etcd::{EtcdConnection, EtcdObservation, MemberObs};

use crate::api::EtcdCluster;
use crate::metrics::Metrics;
use crate::podspec::Images;
use writes::Awaited;

/// Static configuration of the operator process.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    pub images: Images,
    /// Where the operator runs and keeps its CA and client certificate.
    pub operator_namespace: String,
    /// Bound on each etcd call.
    pub etcd_timeout: Duration,
}

/// What every pass shares.
pub struct Context {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub config: OperatorConfig,
    pub reporter: Reporter,
    pub state: Mutex<PassState>,
    /// `etcd-operator plan`: decide everything, change nothing (no API write, no etcd change,
    /// no event); the would-be actions are the report's plan.
    pub plan_only: bool,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// State carried from pass to pass (all of it can be rebuilt from observation).
#[derive(Debug, Default)]
pub struct PassState {
    pub etcd: EtcdConnection,
    /// When each pending learner was first seen.
    pub learner_added: BTreeMap<MemberId, OffsetDateTime>,
    /// Writes the caches must show before the next pass acts.
    pub awaited: Vec<Awaited>,
    /// Client URLs of the members last seen (to find etcd next time).
    pub known_endpoints: BTreeSet<String>,
}

/// A snapshot of the watch caches.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub cluster: Option<EtcdCluster>,
    pub nodes: Vec<Node>,
    /// Pods, ConfigMaps and Secrets of the static-pod namespace.
    pub pods: Vec<Pod>,
    pub configmaps: Vec<ConfigMap>,
    pub secrets: Vec<Secret>,
    /// Secrets of the operator's namespace.
    pub operator_secrets: Vec<Secret>,
}

impl Inputs {
    /// The cache's resourceVersion of an object, if the cache has it.
    pub fn resource_version(&self, a: &Awaited) -> Option<String> {
        fn find<'a, K: kube::Resource>(items: &'a [K], ns: &str, name: &str) -> Option<&'a K> {
            items.iter().find(|o| {
                o.meta().name.as_deref() == Some(name)
                    && o.meta().namespace.as_deref().unwrap_or("") == ns
            })
        }
        let meta = match a.kind {
            "ConfigMap" => find(&self.configmaps, &a.namespace, &a.name).map(|o| &o.metadata),
            "Pod" => find(&self.pods, &a.namespace, &a.name).map(|o| &o.metadata),
            "Secret" => find(&self.secrets, &a.namespace, &a.name)
                .or_else(|| find(&self.operator_secrets, &a.namespace, &a.name))
                .map(|o| &o.metadata),
            // Kinds without a cache here never hold a pass back.
            _ => return a.resource_version.clone(),
        };
        meta.and_then(|m| m.resource_version.clone())
    }
}

/// What one pass did and what it waits for, one line each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    pub lines: Vec<String>,
    pub requeue_after: Duration,
    /// Each controller's next action (or why it waits), in pipeline order.
    pub plan: Vec<PlanEntry>,
}

/// One controller's next action, as `etcd-operator plan` prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlanEntry {
    pub controller: String,
    pub next: String,
}

impl PassReport {
    fn note(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }

    fn next(&mut self, controller: &str, next: impl Into<String>) {
        self.plan.push(PlanEntry {
            controller: controller.to_owned(),
            next: next.into(),
        });
    }
}

/// Short pause while something is in flight; longer when all is settled (etcd health is polled).
pub const BUSY_REQUEUE: Duration = Duration::from_millis(500);
pub const IDLE_REQUEUE: Duration = Duration::from_secs(5);

/// Runs one pass.
pub async fn pass(ctx: &Context, inputs: &Inputs, now: OffsetDateTime) -> PassReport {
    let mut state = ctx.state.lock().await;
    let pending: Vec<&Awaited> = state
        .awaited
        .iter()
        .filter(|a| !writes::satisfied(a, inputs.resource_version(a).as_deref()))
        .collect();
    if let Some(first) = pending.first() {
        let line = format!(
            "waiting for the caches to show {} write(s), e.g. {} {}/{}",
            pending.len(),
            first.kind,
            first.namespace,
            first.name
        );
        return PassReport {
            lines: vec![line.clone()],
            requeue_after: Duration::from_millis(100),
            plan: vec![PlanEntry {
                controller: "caches".into(),
                next: line,
            }],
        };
    }
    state.awaited.clear();
    let report = steps::run(ctx, &mut state, inputs, now).await;
    tracing::debug!(lines = ?report.lines, "pass done");
    report
}
