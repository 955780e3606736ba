//! The pass driver: what carries one pass from the caches to the status write. It waits for the
//! caches to show the previous pass's writes, holds everything while the EtcdCluster cannot be
//! decoded, builds a [`Pass`] from observation, walks the controllers in their order (each may
//! end the pass: [`Flow::Stop`]), runs what every pass ends with (backup readiness, the quorum
//! guard, the payload status) and writes status. The order and what holds each step are one
//! list, [`steps::PASS`].
//!
//! Every step is re-derived from observation and idempotent; the operator can be killed
//! anywhere and the next pass continues. A failed controller sets its Degraded condition and
//! ends the pass; a transient failure is retried with back-off ([`crate::retry`]), a permanent
//! one when an input changes. The driver owns what is carried from pass to pass ([`Driver`]):
//! its own bookkeeping ([`Bookkeeping`]) and each controller's state, handed to the controller
//! that owns it.

use std::collections::BTreeSet;
use std::time::Duration;

use time::OffsetDateTime;

use crate::api::{EtcdCluster, EtcdClusterSpec};
use crate::category::Category;
use crate::context::Context;
use crate::controller::{ControllerError, ControllerName, Flow};
use crate::controllers::{backup, cert_signer, corruption_check, defragmentation, membership};
use crate::observed::{Inputs, Observed};
use crate::pass::{
    BUSY_REQUEUE, Bookkeeping, IDLE_REQUEUE, Pass, PassReport, PlanEntry, caches_lag,
};
use crate::retry::ErrorKind;
use crate::status::Reason;
use crate::writer::{self, Awaited, Writer};
use steps::{HandOffs, Runs, Step};

/// What the driver carries from pass to pass: its own bookkeeping and each controller's state
/// (all of it can be rebuilt from observation: a restarted operator loses nothing it needs).
#[derive(Debug, Default)]
pub struct Driver {
    st: Bookkeeping,
    controllers: Controllers,
}

/// The state each controller carries between passes, owned by that controller's module.
#[derive(Debug, Default)]
struct Controllers {
    cert_signer: cert_signer::State,
    /// The client URLs of the members the observer last saw.
    etcd_observer: BTreeSet<String>,
    membership: membership::State,
    /// The defragmentation running now.
    defrag: Option<defragmentation::DefragRun>,
    /// The consistency check running now.
    corruption: Option<corruption_check::CheckRun>,
    backup: backup::State,
}

impl Driver {
    /// Runs one pass.
    pub async fn pass(
        &mut self,
        ctx: &Context,
        inputs: &Inputs,
        now: OffsetDateTime,
    ) -> PassReport {
        pass(ctx, self, inputs, now).await
    }

    /// See [`etcd_changed`].
    pub async fn etcd_changed(&self, ctx: &Context) -> bool {
        etcd_changed(ctx, &self.st).await
    }

    /// The next pass is a whole one, whatever the idle health check would find (a new leader
    /// decides from a full pass, not from what it saw when it last led).
    pub fn forget_settled(&mut self) {
        self.st.settled_etcd = None;
    }

    /// The etcd client the last pass built, if any.
    pub fn etcd_client(&self) -> Option<std::sync::Arc<::membership::EtcdClient>> {
        self.st.etcd.current()
    }
}

async fn pass(ctx: &Context, d: &mut Driver, inputs: &Inputs, now: OffsetDateTime) -> PassReport {
    let state = &mut d.st;
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
            crate::history::barrier_check(state, since, now, count, first.as_deref()).await
        {
            return crate::history::relist(ctx, state, inputs, why);
        }
    }
    if let Some(line) = lag.or_else(|| inputs.nodes_lag()) {
        let mut report = caches_lag(line.clone());
        report.say(ctx, line);
        return report;
    }
    state.awaited.clear();
    state.awaited_since = None;
    let report = run(ctx, d, inputs, now).await;
    tracing::debug!(lines = ?report.lines, "pass done");
    report
}

async fn run(ctx: &Context, d: &mut Driver, inputs: &Inputs, now: OffsetDateTime) -> PassReport {
    let (st, cs) = (&mut d.st, &mut d.controllers);
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
    let mut h = HandOffs::default();
    let mut ok = match controllers(&mut p, cs, &mut h).await {
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
    h.backup_risk = backup::ready::reconcile(&mut p, &mut cs.backup.schedule);
    backup::preop::reconcile(&mut p).await;
    // The guard's budget follows etcd in every pass that read it, also one that stopped early
    // (etcd not answering, a membership change just made).
    if p.o.etcd_read && p.o.managed {
        for step in steps::PASS.iter().filter(|s| s.runs == Runs::EveryPass) {
            if let Err(e) = walk(step, &mut p, cs, &mut h).await {
                failed(&mut p, e);
                ok = false;
            }
        }
    }
    if p.o.etcd_read {
        payload_status::reconcile(&mut p, h.backup_risk.as_ref());
    }
    if ctx.plan_only {
        // What would reach etcd, exactly as the etcd writer would send it.
        for line in std::mem::take(&mut p.ew.planned) {
            p.report.plan.push(PlanEntry {
                controller: "etcd-writer".into(),
                next: line,
            });
        }
    } else {
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
async fn etcd_changed(ctx: &Context, st: &Bookkeeping) -> bool {
    let (client, last) = match (st.etcd.current(), st.settled_etcd.clone()) {
        (Some(c), Some(last)) => (c, last),
        _ => return true,
    };
    let print = crate::etcd::probe(&client, &last).await;
    let changed = print != last.health_print;
    ctx.metrics.health_check(changed);
    if changed {
        tracing::info!(before = ?last.health_print, now = ?print, "etcd changed since the last pass");
    }
    changed
}

/// The pipeline part of [`steps::PASS`], in order: each step unless what holds it holds (then
/// the pass ends there: everything after it depends on it) or it has nothing to work on; a step
/// may end the pass itself ([`Flow::Stop`]).
async fn controllers(
    p: &mut Pass<'_>,
    cs: &mut Controllers,
    h: &mut HandOffs,
) -> Result<(), ControllerError> {
    // Which nodes are control-plane nodes is every controller's input; a selector the API
    // would refuse stops the pass before any of them acts on a wrong node set.
    if let Err(e) = p.o.spec.node_label_selector() {
        return Err(ControllerError::new(
            ControllerName::Membership,
            ErrorKind::Permanent,
            Category::Spec,
            e.to_string(),
        ));
    }
    for step in steps::PASS.iter().filter(|s| s.runs == Runs::Pipeline) {
        if walk(step, p, cs, h).await? == Flow::Stop {
            return Ok(());
        }
    }
    Ok(())
}

/// One step: what holds it, then its controller.
async fn walk(
    step: &Step,
    p: &mut Pass<'_>,
    cs: &mut Controllers,
    h: &mut HandOffs,
) -> Result<Flow, ControllerError> {
    if !steps::has_input(step.controller, h) {
        return Ok(Flow::Continue);
    }
    for hold in step.held_by {
        if steps::holds(*hold, p, cs) {
            return Ok(Flow::Stop);
        }
    }
    steps::run_step(step.controller, p, cs, h).await
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

pub mod cluster_operator;
pub mod payload_status;
pub mod steps;
pub mod unreadable;

mod status_write;
use status_write::write_status;

#[cfg(test)]
mod tests;
