//! The operator's Prometheus metrics, all under the `etcd_operator_` prefix, registered once in
//! [`Metrics::new`] and served on `/metrics`. Labels are static categories (never built from
//! Debug strings), so the series stay few and stable.

use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod labels;
mod register;
pub use labels::{
    ActionLabel, AlarmLabel, CertLabels, ConditionLabels, ConsumerLabel, ControllerLabel,
    ErrorLabels, MemberLabel, MemberRoleLabels, MemberVersionLabels, NodeLabel, ResultLabel,
    RuleLabel, VersionLabel,
};

/// Every metric the operator exports.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    pub reconcile_duration: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub gate_denials: Family<RuleLabel, Counter>,
    pub health_checks: Family<ResultLabel, Counter>,
    pub membership_changes: Family<ActionLabel, Counter>,
    pub members: Family<MemberRoleLabels, Gauge>,
    pub control_plane_nodes: Gauge,
    /// 1 while the EtcdCluster cannot be decoded (every action held).
    pub spec_unreadable: Gauge,
    /// Generations of the EtcdCluster that could not be decoded.
    pub spec_unreadable_generations: Counter,
    pub latest_revision: Gauge,
    pub node_current_revision: Family<NodeLabel, Gauge>,
    pub node_equivalent_revision: Family<NodeLabel, Gauge>,
    pub learner_age_seconds: Family<MemberLabel, Gauge>,
    pub learner_raft_index: Family<MemberLabel, Gauge>,
    pub learner_standby: Family<MemberLabel, Gauge>,
    pub desired_voters: Gauge,
    pub members_without_node: Gauge,
    pub leader_raft_index: Gauge,
    pub certificate_expiry: Family<CertLabels, Gauge>,
    pub ca_expiry: Gauge,
    /// 1 while a CA rotation waits for the consumer to pick up its Secret.
    pub consumer_reload_pending: Family<ConsumerLabel, Gauge>,
    /// `notAfter` of the certificate each member serves, by member name.
    pub serving_certificate_expiry: Family<MemberLabel, Gauge>,
    /// The revision waiting for an approved restart of a lone voter (0: none).
    pub lone_voter_restart_pending: Gauge,
    pub is_leader: Gauge,
    pub condition: Family<ConditionLabels, Gauge>,
    pub member_db_size: Family<MemberLabel, Gauge>,
    pub member_db_size_in_use: Family<MemberLabel, Gauge>,
    pub quota_backend_bytes: Gauge,
    pub alarms: Family<AlarmLabel, Gauge>,
    pub defragmentations: Family<ResultLabel, Counter>,
    pub defrag_reclaimed_bytes: Counter,
    pub defrag_last_success: Family<MemberLabel, Gauge>,
    pub defrag_in_progress: Gauge,
    pub corruption_checks: Family<ResultLabel, Counter>,
    pub members_divergent: Gauge,
    pub backup_enabled: Gauge,
    pub backups: Family<ResultLabel, Counter>,
    pub backup_last_success: Gauge,
    pub backup_last_size: Gauge,
    pub backup_last_duration: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub backup_consecutive_failures: Gauge,
    pub backup_max_interval: Gauge,
    pub member_version: Family<MemberVersionLabels, Gauge>,
    pub cluster_version: Family<VersionLabel, Gauge>,
    pub quorum_guards_expected: Gauge,
    pub quorum_guards_ready: Gauge,
}

fn duration_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates every metric and registers it under the `etcd_operator` prefix, group by group.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("etcd_operator");
        let m = Self {
            reconcile_duration: Family::new_with_constructor(
                duration_histogram as fn() -> Histogram,
            ),
            reconcile_errors: Family::default(),
            gate_denials: Family::default(),
            health_checks: Family::default(),
            membership_changes: Family::default(),
            members: Family::default(),
            control_plane_nodes: Gauge::default(),
            spec_unreadable: Gauge::default(),
            spec_unreadable_generations: Counter::default(),
            latest_revision: Gauge::default(),
            node_current_revision: Family::default(),
            node_equivalent_revision: Family::default(),
            learner_age_seconds: Family::default(),
            learner_raft_index: Family::default(),
            learner_standby: Family::default(),
            desired_voters: Gauge::default(),
            members_without_node: Gauge::default(),
            leader_raft_index: Gauge::default(),
            certificate_expiry: Family::default(),
            ca_expiry: Gauge::default(),
            consumer_reload_pending: Family::default(),
            lone_voter_restart_pending: Gauge::default(),
            serving_certificate_expiry: Family::default(),
            is_leader: Gauge::default(),
            condition: Family::default(),
            member_db_size: Family::default(),
            member_db_size_in_use: Family::default(),
            quota_backend_bytes: Gauge::default(),
            alarms: Family::default(),
            defragmentations: Family::default(),
            defrag_reclaimed_bytes: Counter::default(),
            defrag_last_success: Family::default(),
            defrag_in_progress: Gauge::default(),
            corruption_checks: Family::default(),
            members_divergent: Gauge::default(),
            backup_enabled: Gauge::default(),
            backups: Family::default(),
            backup_last_success: Gauge::default(),
            backup_last_size: Gauge::default(),
            backup_last_duration: Gauge::default(),
            backup_consecutive_failures: Gauge::default(),
            backup_max_interval: Gauge::default(),
            member_version: Family::default(),
            cluster_version: Family::default(),
            quorum_guards_expected: Gauge::default(),
            quorum_guards_ready: Gauge::default(),
            registry: Registry::default(),
        };
        m.register_reconcile_metrics(&mut registry);
        m.register_membership_metrics(&mut registry);
        m.register_rollout_metrics(&mut registry);
        m.register_learner_metrics(&mut registry);
        m.register_certificate_metrics(&mut registry);
        m.register_status_metrics(&mut registry);
        m.register_maintenance_metrics(&mut registry);
        m.register_guard_metrics(&mut registry);
        for alarm in ["NOSPACE", "CORRUPT"] {
            m.alarms
                .get_or_create(&AlarmLabel {
                    alarm: alarm.to_owned(),
                })
                .set(0);
        }
        Self { registry, ..m }
    }

    /// Records the guards the budget counts and how many are Ready.
    pub fn quorum_guards(&self, expected: usize, ready: usize) {
        self.quorum_guards_expected
            .set(i64::try_from(expected).unwrap_or(i64::MAX));
        self.quorum_guards_ready
            .set(i64::try_from(ready).unwrap_or(i64::MAX));
    }

    /// Starts timing one controller step; the time is recorded when the guard drops.
    pub fn time(&self, controller: &str) -> StepTimer<'_> {
        StepTimer {
            metrics: self,
            controller: controller.to_owned(),
            started: Instant::now(),
        }
    }

    /// Counts a failed step.
    pub fn error(&self, controller: &str, category: crate::category::Category) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_owned(),
                category: category.label().to_owned(),
            })
            .inc();
    }

    /// Counts an idle health check.
    pub fn health_check(&self, changed: bool) {
        let result = if changed { "changed" } else { "unchanged" };
        self.health_checks
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Records a condition's current status (`True`, `False` or `Unknown`): 1 on that status,
    /// 0 on the other two, so every condition type keeps three stable series for alerts.
    pub fn condition(&self, type_: &str, status: &str) {
        for s in ["True", "False", "Unknown"] {
            self.condition
                .get_or_create(&ConditionLabels {
                    r#type: type_.to_owned(),
                    status: s.to_owned(),
                })
                .set(i64::from(s == status));
        }
    }

    /// Renders the OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Records a step's duration when dropped.
#[derive(Debug)]
pub struct StepTimer<'a> {
    metrics: &'a Metrics,
    controller: String,
    started: Instant,
}

impl Drop for StepTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .reconcile_duration
            .get_or_create(&ControllerLabel {
                controller: std::mem::take(&mut self.controller),
            })
            .observe(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_keeps_one_series_per_status() {
        let m = Metrics::new();
        m.condition("Degraded", "True");
        m.condition("Degraded", "False");
        let text = m.encode();
        assert!(text.contains(r#"etcd_operator_condition{type="Degraded",status="False"} 1"#));
        assert!(text.contains(r#"etcd_operator_condition{type="Degraded",status="True"} 0"#));
        assert!(text.contains(r#"etcd_operator_condition{type="Degraded",status="Unknown"} 0"#));
    }
}
