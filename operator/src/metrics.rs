//! The operator's Prometheus metrics, all under the `etcd_operator_` prefix, registered once in
//! [`Metrics::new`] and served on `/metrics`. Labels are static categories (never built from
//! Debug strings), so the series stay few and stable.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabel {
    pub rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberRoleLabels {
    pub role: String,
    pub healthy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlarmLabel {
    pub alarm: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberLabel {
    pub member: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberVersionLabels {
    pub member: String,
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabel {
    pub version: String,
}

/// A status condition of the `EtcdCluster`: its type and a status (`True`, `False`, `Unknown`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub r#type: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertLabels {
    pub secret_key: String,
    pub node: String,
}

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
    pub latest_revision: Gauge,
    pub node_current_revision: Family<NodeLabel, Gauge>,
    pub learner_age_seconds: Family<MemberLabel, Gauge>,
    pub learner_raft_index: Family<MemberLabel, Gauge>,
    pub learner_standby: Family<MemberLabel, Gauge>,
    pub desired_voters: Gauge,
    pub leader_raft_index: Gauge,
    pub certificate_expiry: Family<CertLabels, Gauge>,
    pub ca_expiry: Gauge,
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
            latest_revision: Gauge::default(),
            node_current_revision: Family::default(),
            learner_age_seconds: Family::default(),
            learner_raft_index: Family::default(),
            learner_standby: Family::default(),
            desired_voters: Gauge::default(),
            leader_raft_index: Gauge::default(),
            certificate_expiry: Family::default(),
            ca_expiry: Gauge::default(),
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

    /// Registers the reconcile-pass metrics: step durations, step errors and quorum-gate denials.
    fn register_reconcile_metrics(&self, registry: &mut Registry) {
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one controller step of a reconcile pass",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed controller steps by category",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "gate_denials",
            "Actions the quorum gate denied, by rule",
            self.gate_denials.clone(),
        );
        registry.register(
            "idle_health_checks",
            "Idle health checks of a settled cluster (one status call per member), by whether etcd had changed since the last pass",
            self.health_checks.clone(),
        );
    }

    /// Registers the membership metrics: membership changes, members and eligible nodes.
    fn register_membership_metrics(&self, registry: &mut Registry) {
        registry.register(
            "membership_changes",
            "etcd membership changes made, by action",
            self.membership_changes.clone(),
        );
        registry.register(
            "members",
            "etcd members by role and health",
            self.members.clone(),
        );
        registry.register(
            "control_plane_nodes",
            "Control-plane nodes eligible to run etcd",
            self.control_plane_nodes.clone(),
        );
    }

    /// Registers the static-pod rollout metrics: the latest revision and each node's revision.
    fn register_rollout_metrics(&self, registry: &mut Registry) {
        registry.register(
            "latest_revision",
            "The latest available static-pod revision",
            self.latest_revision.clone(),
        );
        registry.register(
            "node_current_revision",
            "The revision running Ready on each node",
            self.node_current_revision.clone(),
        );
    }

    /// Registers the learner and voter metrics: learner progress, desired voters, leader index.
    fn register_learner_metrics(&self, registry: &mut Registry) {
        registry.register(
            "learner_age_seconds",
            "Seconds since a pending learner was added",
            self.learner_age_seconds.clone(),
        );
        registry.register(
            "learner_raft_index",
            "Raft index of a pending learner (catch-up progress)",
            self.learner_raft_index.clone(),
        );
        registry.register(
            "learner_standby",
            "1 for a learner kept as a standby (even node count), 0 for one waiting to be promoted",
            self.learner_standby.clone(),
        );
        registry.register(
            "desired_voters",
            "Voters the odd-count policy moves to (up to the largest odd number <= eligible nodes, down to the odd count of the remaining nodes, never below 3 by shrinking)",
            self.desired_voters.clone(),
        );
        registry.register(
            "leader_raft_index",
            "Raft index of the etcd leader",
            self.leader_raft_index.clone(),
        );
    }

    /// Registers the certificate metrics: each certificate's and the CA's notAfter.
    fn register_certificate_metrics(&self, registry: &mut Registry) {
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "notAfter of each certificate in etcd-all-certs",
            self.certificate_expiry.clone(),
        );
        registry.register(
            "ca_expiry_timestamp_seconds",
            "notAfter of the etcd CA",
            self.ca_expiry.clone(),
        );
    }

    /// Registers the status metrics: leadership and the EtcdCluster conditions.
    fn register_status_metrics(&self, registry: &mut Registry) {
        registry.register(
            "is_leader",
            "1 when this operator instance holds the leader lease",
            self.is_leader.clone(),
        );
        registry.register(
            "condition",
            "EtcdCluster status conditions: 1 on the current status of each type, 0 on the others",
            self.condition.clone(),
        );
    }

    /// Registers the database and defragmentation metrics.
    fn register_maintenance_metrics(&self, registry: &mut Registry) {
        registry.register(
            "member_db_size_bytes",
            "Size of each member's database file, free pages included",
            self.member_db_size.clone(),
        );
        registry.register(
            "member_db_size_in_use_bytes",
            "Part of each member's database file that live data uses",
            self.member_db_size_in_use.clone(),
        );
        registry.register(
            "quota_backend_bytes",
            "etcd's backend quota as the spec sets it",
            self.quota_backend_bytes.clone(),
        );
        registry.register(
            "alarms",
            "Members with each etcd alarm raised (NOSPACE: etcd refuses every write but deletes)",
            self.alarms.clone(),
        );
        registry.register(
            "defragmentations",
            "Defragmentations of one member, by result (succeeded, failed, timed_out, interrupted)",
            self.defragmentations.clone(),
        );
        registry.register(
            "defrag_reclaimed_bytes",
            "Bytes given back to the filesystem by defragmentations",
            self.defrag_reclaimed_bytes.clone(),
        );
        registry.register(
            "defrag_last_success_timestamp_seconds",
            "When each member's last defragmentation succeeded",
            self.defrag_last_success.clone(),
        );
        registry.register(
            "defrag_in_progress",
            "1 while a member is being defragmented",
            self.defrag_in_progress.clone(),
        );
        registry.register(
            "corruption_checks",
            "Comparisons of every voter's HashKV, by result (consistent, divergent, inconclusive)",
            self.corruption_checks.clone(),
        );
        registry.register(
            "members_divergent",
            "Members the last corruption check found holding data that diverged from the majority's",
            self.members_divergent.clone(),
        );
        registry.register(
            "backup_enabled",
            "1 when spec.backup is set",
            self.backup_enabled.clone(),
        );
        registry.register(
            "backups",
            "Backups attempted, by result (succeeded, failed; a failed verification is a failure)",
            self.backups.clone(),
        );
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the last good backup (stored and, with verify, verified) was taken; 0: none since the operator started and none in status",
            self.backup_last_success.clone(),
        );
        registry.register(
            "backup_last_size_bytes",
            "Size of the last good backup's snapshot",
            self.backup_last_size.clone(),
        );
        registry.register(
            "backup_last_duration_seconds",
            "How long the last good backup took, verification included",
            self.backup_last_duration.clone(),
        );
        registry.register(
            "backup_consecutive_failures",
            "Failed backup attempts since the last good one",
            self.backup_consecutive_failures.clone(),
        );
        registry.register(
            "backup_max_interval_seconds",
            "The longest gap between two scheduled backups of spec.backup.schedule",
            self.backup_max_interval.clone(),
        );
        registry.register(
            "member_version_info",
            "1 for the etcd version each member runs (label version)",
            self.member_version.clone(),
        );
        registry.register(
            "cluster_version_info",
            "1 for the cluster version etcd reports (label version): the lowest minor any member runs",
            self.cluster_version.clone(),
        );
    }

    /// Registers the quorum guard metrics.
    fn register_guard_metrics(&self, registry: &mut Registry) {
        registry.register(
            "quorum_guards_expected",
            "Quorum guard pods the PodDisruptionBudget counts: one per selected control-plane node",
            self.quorum_guards_expected.clone(),
        );
        registry.register(
            "quorum_guards_ready",
            "Quorum guard pods that are Ready (their node's etcd answers /health)",
            self.quorum_guards_ready.clone(),
        );
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
    pub fn error(&self, controller: &str, category: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_owned(),
                category: category.to_owned(),
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
