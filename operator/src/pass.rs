//! One pass in progress, as the controllers see it: [`Pass`] holds what the pass observed
//! ([`Observed`]), the writer it writes with, the conditions and plan lines it computed and the
//! status sections the controllers move; [`PassReport`] is what it tells the run loop. The
//! controllers act on a `Pass`; [`crate::driver`] builds one, walks the controllers over it in
//! their order and writes status from it. This floor names no controller.

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;

use crate::api::{
    BackupStatus, CertificatesStatus, ClusterIdentity, CorruptionCheckStatus,
    DefragmentationStatus, EtcdClusterStatus, EtcdVersionStatus, NodeStatus, OperandVersion,
    QuorumGuardStatus, RelatedObject, RemediationStatus,
};
use crate::context::Context;
use crate::controller::ControllerName;
use crate::etcd::EtcdConnection;
use crate::observed::{Inputs, Observed};
use crate::retry::Backoff;
use crate::status::Computed;
use crate::writer::etcd::EtcdWriter;
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
    pub st: &'a mut Bookkeeping,
    pub inputs: &'a Inputs,
    pub o: Observed,
    pub w: Writer,
    /// The pass's changes to etcd (see [`crate::writer::etcd`]).
    pub ew: EtcdWriter,
    pub conds: Vec<Computed>,
    pub report: PassReport,
    /// Something is in flight: come back soon.
    pub busy: bool,
    /// The status sections the controllers move: one draft, written at the end of the pass.
    pub status: StatusDraft,
    /// The kube-apiservers among the consumers' pods, as the certificate signer listed them
    /// this pass (the gate's rule 10; empty until then).
    pub api_servers: Vec<::membership::ApiServer>,
    /// `spec.controlPlanePods` as listed this pass (rule 10's preflight).
    pub control_plane: ::membership::ControlPlanePods,
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
    /// A pass over `o` with the driver's bookkeeping `st`, carrying on from the status last
    /// written (and, where this process keeps a newer copy of a status section than the caches
    /// show, from its last draft).
    pub fn new(ctx: &'a Context, st: &'a mut Bookkeeping, inputs: &'a Inputs, o: Observed) -> Self {
        Pass {
            w: Writer::new(ctx.client.clone(), ctx.plan_only).caching(&[
                crate::podspec::STATIC_POD_NAMESPACE,
                &ctx.config.operator_namespace,
            ]),
            ew: EtcdWriter::new(ctx.plan_only),
            status: StatusDraft::carried(&o.prev, st.written.as_ref()),
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

/// The EtcdCluster status sections the controllers move in a pass; conditions and members are
/// computed at its end. Each controller writes only its own sections.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusDraft {
    pub latest: i64,
    pub node_statuses: Vec<NodeStatus>,
    pub remediations: Vec<RemediationStatus>,
    pub defrag: DefragmentationStatus,
    pub corruption: Option<CorruptionCheckStatus>,
    pub backup: Option<BackupStatus>,
    pub certificates: Option<CertificatesStatus>,
    pub etcd_version: Option<EtcdVersionStatus>,
    pub quorum_guard: Option<QuorumGuardStatus>,
    pub versions: Vec<OperandVersion>,
    pub related_objects: Vec<RelatedObject>,
    /// The live cluster's token, once known ([`crate::controllers::etcd_observer::cluster_token`]).
    pub cluster_identity: Option<ClusterIdentity>,
}

impl StatusDraft {
    /// The draft a pass starts from: the status as last written, except the sections whose
    /// last write by this process may still be missing from the caches (the maintenance runs'
    /// records and the CA rotation's phase must not go back to a lagging or failed write).
    pub fn carried(prev: &EtcdClusterStatus, written: Option<&StatusDraft>) -> Self {
        let mut draft = StatusDraft {
            latest: prev.latest_available_revision,
            node_statuses: prev.node_statuses.clone(),
            remediations: prev.remediations.clone(),
            defrag: prev.defragmentation.clone().unwrap_or_default(),
            corruption: prev.corruption_check.clone(),
            backup: prev.backup.clone(),
            certificates: prev.certificates.clone(),
            etcd_version: prev.etcd_version.clone(),
            quorum_guard: prev.quorum_guard.clone(),
            versions: prev.versions.clone(),
            related_objects: prev.related_objects.clone(),
            cluster_identity: prev.cluster_identity.clone(),
        };
        if let Some(w) = written {
            draft.defrag = w.defrag.clone();
            draft.corruption = w.corruption.clone();
            draft.backup = w.backup.clone();
            draft.certificates = w.certificates.clone();
        }
        draft
    }
}

#[path = "pass_methods.rs"]
mod methods;
pub use methods::denied_line;

/// The driver's own bookkeeping, carried from pass to pass and lent to each [`Pass`] (all of it
/// can be rebuilt from observation): the etcd connection the observer keeps and every step
/// that calls etcd uses, the read-your-writes barrier, each controller's back-off, the settled
/// view of the idle health check, and the status draft last written. No controller's own state
/// is here (the driver hands that only to the controller that owns it), and no controller
/// hands another a fact through it.
#[derive(Debug, Default)]
pub struct Bookkeeping {
    pub etcd: EtcdConnection,
    /// The generation of an unreadable EtcdCluster already announced (Event, counter).
    pub unreadable_reported: Option<i64>,
    /// Writes the caches must show before the next pass acts.
    pub awaited: Vec<Awaited>,
    /// Since when the barrier has waited for `awaited` (see [`crate::history`]).
    pub awaited_since: Option<OffsetDateTime>,
    /// The etcd cluster id this process's caches were filled from (see [`crate::history`]).
    pub cluster_id: Option<u64>,
    /// Consecutive failures of each controller, for the back-off of transient errors.
    pub failures: BTreeMap<ControllerName, Backoff>,
    /// etcd as the last pass saw it, when that pass left everything settled: what the idle
    /// health check compares with.
    pub settled_etcd: Option<crate::etcd::EtcdObservation>,
    /// The status draft this process last wrote: its maintenance records and CA rotation phase
    /// carry over ([`StatusDraft::carried`]). `None` until this process wrote status.
    pub written: Option<StatusDraft>,
    /// Whether the API serves ClusterOperators, and when that was asked
    /// (`driver::cluster_operator`).
    pub cluster_operator_api: Option<(bool, OffsetDateTime)>,
}
