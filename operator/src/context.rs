//! What every controller shares: the API client, the operator's static configuration, its
//! metrics and event reporter, and whether this is `plan`'s dry run. What is carried from pass to
//! pass is not here: the driver keeps its own ([`crate::pass::Bookkeeping`]) and each controller's
//! ([`crate::driver`]).

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::Reporter;

use crate::metrics::Metrics;
use crate::podspec::Images;

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
    /// `etcd-operator plan`: decide everything, change nothing (no API write, no etcd change,
    /// no event); the would-be actions are the report's plan.
    pub plan_only: bool,
}

impl Context {
    /// A context for one process (`run`, `plan`): fresh metrics.
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
