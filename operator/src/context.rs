//! What every pass shares: the API client, the operator's static configuration, its metrics and
//! event reporter, and the state carried from pass to pass (all of which can be rebuilt from
//! observation: a restarted operator loses nothing it needs).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::Reporter;
use membership::MemberId;
use time::OffsetDateTime;
use tokio::sync::Mutex;

use crate::controllers::ControllerName;
use crate::etcd::EtcdConnection;
use crate::metrics::Metrics;
use crate::podspec::Images;
use crate::retry::Backoff;
use crate::writer::Awaited;

/// Static configuration of the operator process.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    pub images: Images,
    /// Where the operator runs and keeps its CA and client certificate.
    pub operator_namespace: String,
    /// Bound on each etcd call.
    pub etcd_timeout: Duration,
    /// Where backups are written and checked.
    pub backup: BackupPaths,
}

/// The operator's own paths for backups (`run`'s flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupPaths {
    /// The local destination: a hostPath of the control-plane node the operator runs on.
    pub dir: std::path::PathBuf,
    /// Holds `etcd` and `etcdctl` (3.4) or `etcdutl` (3.5+) of the cluster's etcd version, for
    /// verification by restore.
    pub etcd_tools: std::path::PathBuf,
    /// Snapshots are streamed here first, and verification restores here (emptied after).
    pub scratch: std::path::PathBuf,
}

impl Default for BackupPaths {
    fn default() -> Self {
        Self {
            dir: "/var/lib/etcd-backup".into(),
            etcd_tools: "/usr/local/bin".into(),
            scratch: std::env::temp_dir(),
        }
    }
}

/// What every pass shares.
pub struct Context {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub config: OperatorConfig,
    pub reporter: Reporter,
    /// Events, published off the pass.
    pub events: crate::events::EventSink,
    pub state: Mutex<PassState>,
    /// `etcd-operator plan`: decide everything, change nothing (no API write, no etcd change,
    /// no event); the would-be actions are the report's plan.
    pub plan_only: bool,
}

impl Context {
    /// A context for one process (`run`, `plan`): fresh metrics and pass state.
    pub fn new(
        client: Client,
        config: OperatorConfig,
        reporter: Reporter,
        plan_only: bool,
    ) -> Self {
        Self {
            events: crate::events::EventSink::new(client.clone(), reporter.clone()),
            client,
            metrics: Arc::new(Metrics::new()),
            config,
            reporter,
            state: Mutex::new(PassState::default()),
            plan_only,
        }
    }

    /// A context for tests: a client for an address nothing listens on (any API call fails
    /// fast), default images, the default operator namespace.
    #[cfg(test)]
    pub fn for_tests() -> Self {
        let url = "http://127.0.0.1:9".parse().unwrap();
        let client = Client::try_from(kube::Config::new(url)).unwrap();
        let config = OperatorConfig {
            images: Images {
                etcd: "etcd:3.4.23".into(),
                operator: "etcd-operator:test".into(),
            },
            operator_namespace: "etcd-operator".into(),
            etcd_timeout: Duration::from_secs(1),
            backup: BackupPaths::default(),
        };
        let reporter = Reporter {
            controller: "etcd-operator-test".into(),
            instance: None,
        };
        Self::new(client, config, reporter, false)
    }
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
    /// The generation of an unreadable EtcdCluster already announced (Event, counter).
    pub unreadable_reported: Option<i64>,
    /// When each pending learner was first seen.
    pub learner_added: BTreeMap<MemberId, OffsetDateTime>,
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
    /// Membership's learner add that etcd refuses for its health window (the rollout holds
    /// serving nodes' restarts meanwhile: `controllers::rollout_hold`).
    pub add_refused: Option<crate::controllers::rollout_hold::AddRefused>,
    /// The defragmentation running now (`controllers::defrag`).
    pub defrag: Option<crate::controllers::defrag::DefragRun>,
    /// The consistency check running now (`controllers::corruption_check`).
    pub corruption: Option<crate::controllers::corruption_check::CheckRun>,
    /// The backup being taken now (`controllers::backup`).
    pub backup: Option<crate::controllers::backup::BackupRun>,
    /// `status.backup` as this operator last wrote it (see `maintenance_status`).
    pub backup_status: Option<Option<crate::api::BackupStatus>>,
    /// `status.certificates` as this operator last wrote it: the CA rotation's phase must not
    /// go back to what a lagging cache shows.
    pub certificates_status: Option<Option<crate::api::CertificatesStatus>>,
    /// A consumer Secret could not be written in the last pass (`controllers::consumers`): a
    /// CA rotation holds its phase until every consumer has the phase's material.
    pub consumers_behind: bool,
    /// The backup schedule's longest gap between two runs, for the schedule it was computed
    /// for and when (recomputed on a new schedule or after a day: it walks up to 500 runs).
    pub backup_interval: Option<(String, OffsetDateTime, Option<std::time::Duration>)>,
    /// `status.defragmentation` and `status.corruptionCheck` as this operator last wrote them:
    /// status writes are awaited by the barrier now, so this cache only repeats what the next
    /// pass reads anyway (kept until the pass redesign). `None` until this process wrote them.
    /// Whether the API serves ClusterOperators, and when that was asked
    /// (`controllers::cluster_operator`).
    pub cluster_operator_api: Option<(bool, OffsetDateTime)>,
    pub maintenance_status: Option<(
        crate::api::DefragmentationStatus,
        Option<crate::api::CorruptionCheckStatus>,
    )>,
}
