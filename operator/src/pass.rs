//! One reconcile pass: observe (the watch caches, then etcd), run each controller in a fixed
//! order, write status.
//!
//! ```text
//! cert-signer → etcd-observer → membership (+ learner-promotion; one change, then a fresh pass)
//!   → target-config → revision → installer → endpoints → defragmentation → corruption-check
//!   → backup → status
//! ```
//!
//! The order is a pipeline: each controller may end the pass ([`Flow::Stop`]) when what follows
//! must be decided from what it just changed. Every step is re-derived from observation and
//! idempotent; the operator can be killed anywhere and the next pass continues. A pass acts only
//! once the caches show the previous pass's writes (see [`crate::writer`]). A failed controller
//! sets its Degraded condition and ends the pass; a transient failure is retried with back-off
//! ([`crate::retry`]), a permanent one when an input changes.

use std::time::Duration;

use time::OffsetDateTime;

use crate::api::{
    CorruptionCheckStatus, DefragmentationStatus, EtcdCluster, EtcdClusterSpec, EtcdClusterStatus,
    EtcdVersionStatus, NodeStatus, RemediationStatus,
};
use crate::category::Category;
use crate::context::{Context, PassState};
use crate::controllers::{
    ControllerError, ControllerName, Flow, address_move, backup, cert_signer, cluster_operator,
    cluster_token, corruption_check, defrag, endpoints, etcd_observer, installer, member_status,
    membership, payload_status, quorum_guard, remediation, revisions, target_config,
    version_report,
};
use crate::observed::{Inputs, Observed};
use crate::retry::ErrorKind;
use crate::status::{Computed, ConditionType as C, Reason, merge, with_aggregates};
use crate::writer::{self, Awaited, Writer};

/// What one pass did and what it waits for, one line each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    pub lines: Vec<String>,
    pub requeue_after: Duration,
    /// Each controller's next action (or why it waits), in pipeline order.
    pub plan: Vec<PlanEntry>,
    /// Time-driven work (a scheduled check) wants a whole pass within this long, even while
    /// the cluster is settled and the idle health check sees no change; `None`: [`RESYNC`].
    pub full_pass_within: Option<Duration>,
    /// Every cache must be listed anew before the next pass (why): etcd's history changed under
    /// them ([`crate::history`]).
    pub relist: Option<String>,
    /// The EtcdCluster could not be decoded (what stops it): the pass held every action.
    pub unreadable: Option<String>,
}

impl PassReport {
    /// `etcd-operator plan`'s text: each controller's next action, one line each, aligned.
    pub fn plan_text(&self) -> String {
        let width = self
            .plan
            .iter()
            .map(|p| p.controller.len())
            .max()
            .unwrap_or(0);
        self.plan
            .iter()
            .map(|p| format!("{:<width$}  {}\n", p.controller, p.next))
            .collect()
    }

    /// Adds a line; a running operator also logs it at once (`plan` only prints its plan).
    pub fn say(&mut self, ctx: &Context, line: String) {
        if !ctx.plan_only {
            tracing::info!("{line}");
        }
        self.lines.push(line);
    }
}

/// One controller's next action, as `etcd-operator plan` prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlanEntry {
    pub controller: String,
    pub next: String,
}

/// Short pause while something is in flight; longer when all is settled (etcd health is polled).
pub const BUSY_REQUEUE: Duration = Duration::from_millis(500);
pub const IDLE_REQUEUE: Duration = Duration::from_secs(5);
/// A settled cluster still gets a whole pass this often (time-driven work such as certificate
/// renewal), even when no watched object changed and etcd looks the same.
pub const RESYNC: Duration = Duration::from_secs(60);

/// How soon a pass waiting for its caches looks again.
pub const CACHES_POLL: Duration = Duration::from_millis(100);

/// The report of a pass that waits for its caches (`line` says for what): a whole pass again
/// within [`CACHES_POLL`]. The awaited write is often one that wakes nothing (the operator's own
/// status write, see `run::stores`) while etcd looks the same, so without asking for the whole
/// pass the idle check would skip every look until the resync, a minute later.
pub fn caches_lag(line: String) -> PassReport {
    PassReport {
        requeue_after: CACHES_POLL,
        full_pass_within: Some(CACHES_POLL),
        plan: vec![PlanEntry {
            controller: "caches".into(),
            next: line,
        }],
        ..PassReport::default()
    }
}

/// Runs one pass.
pub async fn pass(ctx: &Context, inputs: &Inputs, now: OffsetDateTime) -> PassReport {
    let mut state = ctx.state.lock().await;
    let pending: Vec<&Awaited> = state
        .awaited
        .iter()
        .filter(|a| !writer::satisfied(a, inputs.resource_version(a).as_deref()))
        .collect();
    let lag = pending.first().map(|first| {
        format!(
            "waiting for the caches to show {} write(s), e.g. {} {}/{}",
            pending.len(),
            first.kind,
            first.namespace,
            first.name
        )
    });
    if lag.is_some() {
        let first = pending
            .first()
            .map(|a| format!("{} {}/{}", a.kind, a.namespace, a.name));
        let count = pending.len();
        let since = *state.awaited_since.get_or_insert(now);
        if let Some(why) =
            crate::history::barrier_check(&state, since, now, count, first.as_deref()).await
        {
            return crate::history::relist(ctx, &mut state, inputs, why);
        }
    }
    if let Some(line) = lag.or_else(|| inputs.nodes_lag()) {
        let mut report = caches_lag(line.clone());
        report.say(ctx, line);
        return report;
    }
    state.awaited.clear();
    state.awaited_since = None;
    let report = run(ctx, &mut state, inputs, now).await;
    tracing::debug!(lines = ?report.lines, "pass done");
    report
}

/// One pass in progress: what it observed, what it writes with, and what it has to report.
pub struct Pass<'a> {
    pub ctx: &'a Context,
    pub st: &'a mut PassState,
    pub inputs: &'a Inputs,
    pub o: Observed,
    pub w: Writer,
    pub conds: Vec<Computed>,
    pub report: PassReport,
    /// Something is in flight: come back soon.
    pub busy: bool,
    /// Status fields the controllers move.
    pub latest: i64,
    pub node_statuses: Vec<NodeStatus>,
    pub remediations: Vec<RemediationStatus>,
    pub defrag: DefragmentationStatus,
    pub corruption: Option<CorruptionCheckStatus>,
    pub backup: Option<crate::api::BackupStatus>,
    pub certificates: Option<crate::api::CertificatesStatus>,
    /// The kube-apiservers among the consumers' pods, as the certificate signer listed them
    /// this pass (the gate's rule 10; empty until then).
    pub api_servers: Vec<::membership::ApiServer>,
    /// `spec.controlPlanePods` as listed this pass (rule 10's preflight).
    pub control_plane: ::membership::ControlPlanePods,
    pub etcd_version: Option<EtcdVersionStatus>,
    pub quorum_guard: Option<crate::api::QuorumGuardStatus>,
    pub versions: Vec<crate::api::OperandVersion>,
    pub related_objects: Vec<crate::api::RelatedObject>,
    /// The live cluster's token, once known ([`crate::controllers::cluster_token`]).
    pub cluster_identity: Option<crate::api::ClusterIdentity>,
}

impl std::fmt::Debug for Pass<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pass")
            .field("conds", &self.conds)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl<'a> Pass<'a> {
    /// A pass over `o`, carrying on from the status last written (and, where this process
    /// keeps a newer copy of a status section than the caches show, from that copy).
    fn new(ctx: &'a Context, st: &'a mut PassState, inputs: &'a Inputs, o: Observed) -> Self {
        Pass {
            w: Writer::new(ctx.client.clone(), ctx.plan_only).caching(&[
                crate::podspec::STATIC_POD_NAMESPACE,
                &ctx.config.operator_namespace,
            ]),
            latest: o.prev.latest_available_revision,
            node_statuses: o.prev.node_statuses.clone(),
            remediations: o.prev.remediations.clone(),
            defrag: st.maintenance_status.as_ref().map_or_else(
                || o.prev.defragmentation.clone().unwrap_or_default(),
                |m| m.0.clone(),
            ),
            corruption: st
                .maintenance_status
                .as_ref()
                .map_or_else(|| o.prev.corruption_check.clone(), |m| m.1.clone()),
            backup: st
                .backup_status
                .clone()
                .unwrap_or_else(|| o.prev.backup.clone()),
            certificates: st
                .certificates_status
                .clone()
                .unwrap_or_else(|| o.prev.certificates.clone()),
            etcd_version: o.prev.etcd_version.clone(),
            quorum_guard: o.prev.quorum_guard.clone(),
            versions: o.prev.versions.clone(),
            related_objects: o.prev.related_objects.clone(),
            cluster_identity: o.prev.cluster_identity.clone(),
            report: PassReport {
                requeue_after: IDLE_REQUEUE,
                ..Default::default()
            },
            conds: Vec::new(),
            busy: false,
            api_servers: Vec::new(),
            control_plane: ::membership::ControlPlanePods::NotListed,
            o,
            ctx,
            st,
            inputs,
        }
    }
}

async fn run(
    ctx: &Context,
    st: &mut PassState,
    inputs: &Inputs,
    now: OffsetDateTime,
) -> PassReport {
    if let Some(u) = &inputs.unreadable {
        return unreadable::hold(ctx, st, u, now).await;
    }
    st.unreadable_reported = None;
    ctx.metrics.spec_unreadable.set(0);
    let Some(cluster) = inputs.cluster.clone() else {
        return create_singleton(ctx).await;
    };
    let o = Observed::new(inputs, cluster, now);
    ctx.metrics
        .control_plane_nodes
        .set(i64::try_from(o.nodes.len()).unwrap_or(i64::MAX));
    let mut p = Pass::new(ctx, st, inputs, o);
    let mut ok = match controllers(&mut p).await {
        Ok(()) => true,
        Err(e) => {
            failed(&mut p, e);
            false
        }
    };
    if p.report.relist.is_some() {
        // The caches hold the lost cluster's objects (`crate::history`): nothing is written
        // from them; the next pass runs on caches listed anew.
        return p.report;
    }
    let backup_risk = backup::ready::reconcile(&mut p);
    backup::preop::reconcile(&mut p).await;
    // The guard's budget follows etcd in every pass that read it, also one that stopped early
    // (etcd not answering, a membership change just made).
    if p.o.etcd_read
        && p.o.managed
        && !p.waits(ControllerName::QuorumGuard)
        && let Err(e) = quorum_guard::reconcile(&mut p, backup_risk.as_ref()).await
    {
        failed(&mut p, e);
        ok = false;
    }
    if p.o.etcd_read {
        payload_status::reconcile(&mut p, backup_risk.as_ref());
    }
    if !ctx.plan_only {
        write_status(&mut p).await;
    }
    if p.busy && p.report.requeue_after > BUSY_REQUEUE {
        p.report.requeue_after = BUSY_REQUEUE;
    }
    // Settled: nothing in flight, no controller failed or backs off, and etcd answered. Until a
    // watched object changes, the idle health check ([`etcd_changed`]) stands in for passes.
    let settled = ok
        && !p.busy
        && p.report.requeue_after >= IDLE_REQUEUE
        && p.o.etcd.error.is_none()
        && !p.o.etcd.members.is_empty();
    p.st.settled_etcd = settled.then(|| p.o.etcd.clone());
    p.report
}

/// The idle health check of a settled cluster: one status call per started member, compared
/// with what the last pass saw (who answers, as what, which leader, which alarms). True when
/// something differs, or when the last pass did not leave the cluster settled (then nothing is
/// asked), so a pass must run.
pub async fn etcd_changed(ctx: &Context) -> bool {
    let (client, last) = {
        let st = ctx.state.lock().await;
        match (st.etcd.current(), st.settled_etcd.clone()) {
            (Some(c), Some(last)) => (c, last),
            _ => return true,
        }
    };
    let print = crate::etcd::probe(&client, &last).await;
    let changed = print != last.health_print;
    ctx.metrics.health_check(changed);
    if changed {
        tracing::info!(before = ?last.health_print, now = ?print, "etcd changed since the last pass");
    }
    changed
}

/// The controllers, in order. A controller backing off from a transient error ends the pass
/// before it (what follows depends on it).
async fn controllers(p: &mut Pass<'_>) -> Result<(), ControllerError> {
    use ControllerName as N;
    // Which nodes are control-plane nodes is every controller's input; a selector the API
    // would refuse stops the pass before any of them acts on a wrong node set.
    if let Err(e) = p.o.spec.node_label_selector() {
        return Err(ControllerError::new(
            N::Membership,
            ErrorKind::Permanent,
            Category::Spec,
            e.to_string(),
        ));
    }
    if p.waits(N::CertSigner) {
        return Ok(());
    }
    let tls = cert_signer::reconcile(p).await?;
    let known: std::collections::BTreeSet<String> = p.o.node_names().into_iter().collect();
    p.control_plane =
        membership::control_plane::observe(&p.ctx.client, &p.o.spec.control_plane_pods, &known)
            .await;
    if etcd_observer::reconcile(p, &tls).await == Flow::Stop {
        return Ok(());
    }
    cluster_token::track(p);
    version_report::reconcile(p).await;
    defrag::collect(p).await;
    corruption_check::collect(p).await;
    backup::collect(p).await;
    if defrag::holds(p)
        || p.waits(N::Membership)
        || p.waits(N::LearnerPromotion)
        || membership::reconcile(p, &tls.with_certs).await? == Flow::Stop
        || p.waits(N::TargetConfig)
    {
        return Ok(());
    }
    if let Some(line) = address_move::hold_line(&p.o.address_moves()) {
        p.next(N::TargetConfig, line.clone());
        p.next(N::Revision, line);
    } else if !target_config::upgrade_may_start(p).await {
        // An etcd upgrade waits for a backup taken for it (the plan says so); the pass goes
        // on so the backup controller can take it.
    } else {
        let Some(pods) = target_config::reconcile(p).await? else {
            return Ok(());
        };
        if p.waits(N::Revision) || revisions::reconcile(p, &tls, pods).await? == Flow::Stop {
            return Ok(());
        }
    }
    if p.waits(N::Installer) {
        return Ok(());
    }
    installer::reconcile(p).await?;
    if p.waits(N::Endpoints) {
        return Ok(());
    }
    endpoints::reconcile(p).await?;
    if p.waits(N::Defrag) {
        return Ok(());
    }
    defrag::reconcile(p).await?;
    corruption_check::reconcile(p);
    backup::reconcile(p);
    Ok(())
}

/// A controller failed: its Degraded condition, a metric, and when to come back.
fn failed(p: &mut Pass<'_>, e: ControllerError) {
    let name = e.controller.as_str();
    p.ctx.metrics.error(name, e.category);
    p.note(format!("{name}: {}", e.message));
    let retry = match e.kind {
        ErrorKind::Transient => {
            let backoff = p.st.failures.entry(e.controller).or_default();
            backoff.last = Some((e.category, e.message.clone()));
            backoff.fail(p.o.now)
        }
        ErrorKind::Permanent => {
            p.st.failures.remove(&e.controller);
            IDLE_REQUEUE
        }
    };
    p.cond(
        e.controller.degraded(),
        true,
        Reason::Failed(e.category),
        e.message,
    );
    // The failed controller's delay, not the short pause of work in flight.
    p.busy = false;
    p.report.requeue_after = retry;
}

/// No EtcdCluster yet: create the singleton with the default spec.
async fn create_singleton(ctx: &Context) -> PassReport {
    let mut report = PassReport {
        requeue_after: Duration::from_secs(1),
        ..Default::default()
    };
    if ctx.plan_only {
        report.requeue_after = IDLE_REQUEUE;
        report.plan.push(PlanEntry {
            controller: "cluster".into(),
            next: "would create EtcdCluster/cluster with the default spec".into(),
        });
        return report;
    }
    let cr = EtcdCluster::new(crate::api::SINGLETON, EtcdClusterSpec::default());
    let w = Writer::new(ctx.client.clone(), false);
    let line = match w.create_cluster(&cr).await {
        Ok(()) => "created EtcdCluster/cluster with the default spec".to_owned(),
        Err(e) => format!("could not create EtcdCluster/cluster: {e}"),
    };
    report.say(ctx, line);
    report
}

#[path = "pass_methods.rs"]
mod methods;
pub use methods::denied_line;

#[path = "pass_unreadable.rs"]
pub mod unreadable;

#[path = "pass_status.rs"]
mod status_write;
use status_write::write_status;

#[cfg(test)]
#[path = "pass_tests.rs"]
mod tests;
