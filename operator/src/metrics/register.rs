//! Registration of the operator's metrics, family by family: each `register_*` method puts one
//! group (reconcile passes, membership, rollout, learners, certificates, status, maintenance,
//! quorum guards) with its name and help text into the registry [`Metrics::new`] builds.

use prometheus_client::registry::Registry;

use super::Metrics;

impl Metrics {
    /// Registers the reconcile-pass metrics: step durations, step errors and quorum-gate denials.
    pub(super) fn register_reconcile_metrics(&self, registry: &mut Registry) {
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
            "spec_unreadable",
            "1 while the EtcdCluster cannot be decoded and the operator holds every action",
            self.spec_unreadable.clone(),
        );
        registry.register(
            "spec_unreadable_generations",
            "Generations of the EtcdCluster the operator could not decode",
            self.spec_unreadable_generations.clone(),
        );
        registry.register(
            "idle_health_checks",
            "Idle health checks of a settled cluster (one status call per member), by whether etcd had changed since the last pass",
            self.health_checks.clone(),
        );
    }

    /// Registers the membership metrics: membership changes, members and eligible nodes.
    pub(super) fn register_membership_metrics(&self, registry: &mut Registry) {
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
    pub(super) fn register_rollout_metrics(&self, registry: &mut Registry) {
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
        registry.register(
            "node_equivalent_revision",
            "The latest revision when the node's running revision is equivalent to it (lacks only members added since; 0: not equivalent)",
            self.node_equivalent_revision.clone(),
        );
    }

    /// Registers the learner and voter metrics: learner progress, desired voters, leader index.
    pub(super) fn register_learner_metrics(&self, registry: &mut Registry) {
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
            "members_without_node",
            "etcd members whose peer URL is the address of no selected control-plane node (added behind the operator's back, or left by a node that is gone); the operator removes them through the quorum gate",
            self.members_without_node.clone(),
        );
        registry.register(
            "leader_raft_index",
            "Raft index of the etcd leader",
            self.leader_raft_index.clone(),
        );
    }

    /// Registers the certificate metrics: each certificate's and the CA's notAfter.
    pub(super) fn register_certificate_metrics(&self, registry: &mut Registry) {
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
        registry.register(
            "consumer_reload_pending",
            "1 while the consumer (spec.clients) has not picked up its Secret: a reload Restart consumer's pods not all started since the Secret was written (a CA rotation waits for it; after a renewal it still presents the certificate of before)",
            self.consumer_reload_pending.clone(),
        );
        registry.register(
            "member_serving_certificate_expiry_timestamp_seconds",
            "notAfter of the client certificate each member serves, read from a TLS handshake with it: what the node runs, which lags the latest revision until the node restarts into it",
            self.serving_certificate_expiry.clone(),
        );
        registry.register(
            "lone_voter_restart_pending_revision",
            "The revision waiting to be installed on a lone voter's node (a control plane of one or two voters) until an admin approves the outage of its restart (spec.loneVoterRestart.approvedRevision); 0 when none waits",
            self.lone_voter_restart_pending.clone(),
        );
    }

    /// Registers the status metrics: leadership and the EtcdCluster conditions.
    pub(super) fn register_status_metrics(&self, registry: &mut Registry) {
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

    /// Registers the database, defragmentation, corruption check, backup and version metrics.
    pub(super) fn register_maintenance_metrics(&self, registry: &mut Registry) {
        self.register_database_metrics(registry);
        self.register_defrag_metrics(registry);
        self.register_corruption_metrics(registry);
        self.register_backup_metrics(registry);
        self.register_version_metrics(registry);
    }

    /// Registers the database metrics: sizes, the backend quota and alarms.
    fn register_database_metrics(&self, registry: &mut Registry) {
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
    }

    /// Registers the defragmentation metrics.
    fn register_defrag_metrics(&self, registry: &mut Registry) {
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
    }

    /// Registers the corruption check metrics.
    fn register_corruption_metrics(&self, registry: &mut Registry) {
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
    }

    /// Registers the backup metrics.
    fn register_backup_metrics(&self, registry: &mut Registry) {
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
    }

    /// Registers the etcd version metrics of the members and the cluster.
    fn register_version_metrics(&self, registry: &mut Registry) {
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
    pub(super) fn register_guard_metrics(&self, registry: &mut Registry) {
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
}
