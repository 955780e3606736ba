//! One pass in progress, as the controllers see it: [`Pass`] holds what the pass observed
//! ([`Observed`]), the writer it writes with, the conditions and plan lines it computed and the
//! status sections the controllers move; [`PassReport`] is what it tells the run loop. The
//! controllers act on a `Pass`; [`crate::driver`] builds one, walks the controllers over it in
//! their order and writes status from it. This floor names no controller.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use time::OffsetDateTime;

use crate::api::{
    CorruptionCheckStatus, DefragmentationStatus, EtcdVersionStatus, NodeStatus, RemediationStatus,
};
use crate::context::Context;
use crate::controller::ControllerName;
use crate::etcd::EtcdConnection;
use crate::observed::{Inputs, Observed};
use crate::retry::Backoff;
use crate::status::Computed;
use crate::writer::{Awaited, Writer};

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
    /// The live cluster's token, once known ([`crate::controllers::etcd_observer::cluster_token`]).
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
    pub fn new(ctx: &'a Context, st: &'a mut PassState, inputs: &'a Inputs, o: Observed) -> Self {
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

#[path = "pass_methods.rs"]
mod methods;
pub use methods::denied_line;

/// What the driver carries from pass to pass and lends each [`Pass`] (all of it can be rebuilt
/// from observation). Each controller's own state is not here: the driver hands it to the
/// controller that owns it.
#[derive(Debug, Default)]
pub struct PassState {
    pub etcd: EtcdConnection,
    /// The generation of an unreadable EtcdCluster already announced (Event, counter).
    pub unreadable_reported: Option<i64>,
    /// Writes the caches must show before the next pass acts.
    pub awaited: Vec<Awaited>,
    /// Since when the barrier has waited for `awaited` (see [`crate::history`]).
    pub awaited_since: Option<OffsetDateTime>,
    /// The etcd cluster id this process's caches were filled from (see [`crate::history`]).
    pub cluster_id: Option<u64>,
    /// Client URLs of the members last seen (to find etcd next time).
    pub known_endpoints: BTreeSet<String>,
    /// Consecutive failures of each controller, for the back-off of transient errors.
    pub failures: BTreeMap<ControllerName, Backoff>,
    /// etcd as the last pass saw it, when that pass left everything settled: what the idle
    /// health check compares with.
    pub settled_etcd: Option<crate::etcd::EtcdObservation>,
    /// `status.backup` as this operator last wrote it (see `maintenance_status`).
    pub backup_status: Option<Option<crate::api::BackupStatus>>,
    /// `status.certificates` as this operator last wrote it: the CA rotation's phase must not
    /// go back to what a lagging cache shows.
    pub certificates_status: Option<Option<crate::api::CertificatesStatus>>,
    /// A consumer Secret could not be written in the last pass (`cert_signer::consumers`): a
    /// CA rotation holds its phase until every consumer has the phase's material.
    pub consumers_behind: bool,
    /// The backup schedule's longest gap between two runs, for the schedule it was computed
    /// for and when (recomputed on a new schedule or after a day: it walks up to 500 runs).
    pub backup_interval: Option<(String, OffsetDateTime, Option<std::time::Duration>)>,
    /// Whether the API serves ClusterOperators, and when that was asked
    /// (`driver::cluster_operator`).
    pub cluster_operator_api: Option<(bool, OffsetDateTime)>,
    /// `status.defragmentation` and `status.corruptionCheck` as this operator last wrote them:
    /// status writes are awaited by the barrier now, so this cache only repeats what the next
    /// pass reads anyway (kept until the pass redesign). `None` until this process wrote them.
    pub maintenance_status: Option<(
        crate::api::DefragmentationStatus,
        Option<crate::api::CorruptionCheckStatus>,
    )>,
}
