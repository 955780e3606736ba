//! What the controllers call on a [`Pass`]: report lines and plan entries, conditions, the
//! back-off check of a controller that failed before, Events, the membership-change and
//! quorum-gate metrics, changes to etcd through the pass's etcd writer, and the plan line of a
//! refused step ([`denied_line`]).

use std::sync::Arc;
use std::time::Duration;

use ::membership::{ClientError, Denial, EtcdClient};
use time::OffsetDateTime;

use super::{Pass, PlanEntry};
use crate::category::Category;
use crate::controller::ControllerName;
use crate::events::EventReason;
use crate::metrics::{ActionLabel, RuleLabel};
use crate::status::{Computed, ConditionType as C, Reason};
use crate::writer::etcd::{EtcdIntent, Made, Outcome, Task};

impl Pass<'_> {
    /// The quorum gate's view: etcd as observed, with the kube-apiservers listed this pass.
    pub fn cluster_view(&self) -> membership::ClusterView {
        let mut view = self.o.etcd.cluster_view();
        view.api_servers = self.api_servers.clone();
        view.control_plane = self.control_plane.clone();
        view.outage_approved = self.o.spec.lone_voter_restart.approves(self.status.latest);
        view
    }

    /// A line of what the pass did, logged as it happens (its timestamp is when it happened,
    /// which the bench's step analysis reads) and kept for the report.
    pub fn note(&mut self, line: impl Into<String>) {
        self.report.say(self.ctx, line.into());
    }

    /// Whether time-driven work of `controller` (`what`) is due at `due` still lies ahead: if so
    /// the plan says in how long, and a whole pass comes back for it on time.
    pub fn not_yet(&mut self, controller: ControllerName, due: OffsetDateTime, what: &str) -> bool {
        if self.o.now >= due {
            return false;
        }
        let wait = due - self.o.now;
        self.next(controller, format!("{what} in {}s", wait.whole_seconds()));
        let wait = Duration::from_secs(u64::try_from(wait.whole_seconds()).unwrap_or(0) + 1);
        self.report.requeue_after = self.report.requeue_after.min(wait);
        self.report.full_pass_within =
            Some(self.report.full_pass_within.map_or(wait, |w| w.min(wait)));
        true
    }

    /// `controller`'s next action, as `plan` shows it.
    pub fn next(&mut self, controller: ControllerName, next: impl Into<String>) {
        self.report.plan.push(PlanEntry {
            controller: controller.as_str().to_owned(),
            next: next.into(),
        });
    }

    /// A condition as this pass computed it.
    pub fn cond(&mut self, type_: C, status: bool, reason: Reason, message: impl Into<String>) {
        self.conds
            .push(Computed::new(type_, status, reason, message));
    }

    /// `controller` ran to the end: its Degraded condition is False.
    pub fn succeeded(&mut self, controller: ControllerName) {
        self.st.failures.remove(&controller);
        self.cond(controller.degraded(), false, Reason::AsExpected, "");
    }

    /// True while `controller` backs off from a transient error: its Degraded condition stays
    /// as the error set it, the plan says when it runs again, and the pass comes back then.
    pub fn waits(&mut self, controller: ControllerName) -> bool {
        let Some(backoff) = self.st.failures.get(&controller).cloned() else {
            return false;
        };
        let Some(left) = backoff.remaining(self.o.now) else {
            return false;
        };
        let (category, message) = backoff.last.unwrap_or((Category::Unknown, String::new()));
        self.cond(
            controller.degraded(),
            true,
            Reason::Failed(category),
            message,
        );
        self.next(
            controller,
            format!(
                "backing off after {} failure(s); next try in {} ms",
                backoff.failures,
                left.as_millis()
            ),
        );
        self.report.requeue_after = self.report.requeue_after.min(left);
        true
    }

    /// The etcd image nodes run: the spec's, else the operator's `ETCD_IMAGE`.
    pub fn etcd_image(&self) -> String {
        self.o
            .spec
            .etcd_image
            .clone()
            .unwrap_or_else(|| self.ctx.config.images.etcd.clone())
    }

    /// An Event on the EtcdCluster, queued for publishing (not in a plan; a failure to
    /// publish is logged).
    pub async fn event(&self, reason: EventReason, note: String) {
        if !self.ctx.plan_only {
            let object = kube::Resource::object_ref(&self.o.cluster, &());
            self.ctx.events.publish(object, reason, note);
        }
    }

    /// Counts an etcd membership change by action.
    pub fn count_change(&self, action: &str) {
        let label = ActionLabel {
            action: action.to_owned(),
        };
        self.ctx
            .metrics
            .membership_changes
            .get_or_create(&label)
            .inc();
    }

    /// The quorum gate refused `what`: counted per rule, shown as progress on `condition`.
    pub fn denied(&mut self, condition: C, what: String, denial: &Denial) {
        self.ctx
            .metrics
            .gate_denials
            .get_or_create(&RuleLabel {
                rule: denial.rule.category().to_owned(),
            })
            .inc();
        self.cond(
            condition,
            true,
            Reason::WaitingForQuorumGate,
            format!("{what}: {denial}"),
        );
        self.note(format!("gate: {what}: {denial}"));
    }

    /// Makes `intent` through the pass's etcd writer (nothing in a plan or without a
    /// connection: see [`Outcome`]).
    pub async fn change_etcd(&mut self, intent: &EtcdIntent) -> Result<Outcome<Made>, ClientError> {
        self.ew.apply(&self.st.etcd, intent).await
    }

    /// The client to run `task` on `subject` with off the pass (none in a plan or without a
    /// connection).
    pub fn start_etcd(&mut self, task: Task, subject: &str) -> Outcome<Arc<EtcdClient>> {
        self.ew.start(&self.st.etcd, task, subject)
    }

    /// Before `member` (the leader, else nothing happens) is restarted or removed, hands
    /// leadership to the healthy voter with the highest raft index, so the change costs no
    /// election. A failure is logged and the change goes on: etcd also hands leadership over
    /// when it is stopped gracefully, and holds an election when its leader is removed.
    pub async fn move_leadership_off(
        &mut self,
        member: Option<::membership::MemberId>,
        before: &str,
    ) {
        let (Some((leader_url, to)), Some(leader)) =
            (self.o.etcd.leadership_handover(member), self.o.etcd.leader)
        else {
            return;
        };
        match self
            .change_etcd(&EtcdIntent::MoveLeader { leader_url, to })
            .await
        {
            Ok(Outcome::Made(_)) => {
                let note = format!("moved etcd leadership from {leader} to {to} before {before}");
                self.note(note.clone());
                self.event(EventReason::LeaderMoved, note).await;
            }
            Ok(Outcome::Planned | Outcome::NoClient) => {}
            Err(e) => {
                tracing::warn!(error = %e, before, "could not move leadership off the leader")
            }
        }
    }
}

/// The plan line of a refused step.
pub fn denied_line(denial: &Denial) -> String {
    format!(
        "blocked by the quorum gate: {denial} [{}]",
        denial.rule.category()
    )
}
