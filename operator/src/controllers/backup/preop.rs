//! A verified backup taken *for* a disruptive operation, before its first disruptive step.
//!
//! The four operations that can lose data when they go wrong — an etcd upgrade, a CA rotation,
//! a planned shrink (the desired voter count went down; never the replacement of a failed
//! member) and a defragmentation — each ask [`decide`] before they start, when `spec.backup` is
//! configured. The reading is the safe one: a backup counts only when its snapshot was *taken
//! after the operation became due* (`since`), not merely a recent scheduled one, so the
//! recovery point holds everything written before the operation. `since` is kept in
//! `status.backup.preOperation` (one entry per [`Operation`]), so the need and its time survive
//! an operator restart; the backup controller treats an entry with no attempt since `since` as
//! an on-demand request (the same path as `spec.backup.request`). Decision (pure):
//! - no `spec.backup`, or the operation already under way: [`Gate::Proceed`] (nothing waits
//!   for a backup that will never come, and a half-done operation never waits mid-way);
//! - a good backup (verified when `spec.backup.verify`) taken at or after `since`: Proceed;
//! - a backup in flight: [`Gate::Wait`] ([`WaitReason::BackupInFlight`]);
//! - the last attempt, made at or after `since`, failed: Wait ([`WaitReason::BackupFailing`]; the backup
//!   controller's `BackupControllerDegraded` is True with reason `PreOperationBackupFailing`
//!   while a recorded need is held so, see [`held_by_failure`]) — the operation never proceeds
//!   without one;
//! - else [`Gate::RequestBackup`].
//!
//! **Whole seconds.** Status times have second precision (`taken_at` and the attempt times
//! are rounded down). So the need's time is rounded *up* to the next whole second
//! ([`need_time`]) and the backup taken for it starts no earlier than that ([`backup_due`]):
//! a backup recorded as taken at or after `since` was really taken after the need arose, and
//! the one taken for the need always counts for it (one backup per need, never a second).
//! Rounded down instead, a backup taken earlier in the need's second would count although it
//! misses what was written between it and the need.
//!
//! A defragmentation under `NOSPACE` never asks (see `defragmentation::waits_for_backup`): it is the
//! remedy for an outage, and etcd refuses writes meanwhile anyway.

use time::OffsetDateTime;

use crate::api::BackupStatus;
use crate::certs::parse_time;
use crate::events::EventReason;

/// A disruptive operation that takes a backup first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    EtcdUpgrade,
    CaRotation,
    PlannedShrink,
    Defrag,
}

impl Operation {
    pub const ALL: [Operation; 4] = [
        Operation::EtcdUpgrade,
        Operation::CaRotation,
        Operation::PlannedShrink,
        Operation::Defrag,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::EtcdUpgrade => "EtcdUpgrade",
            Operation::CaRotation => "CaRotation",
            Operation::PlannedShrink => "PlannedShrink",
            Operation::Defrag => "Defrag",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// As the operation reads in a sentence.
    pub fn human(self) -> &'static str {
        match self {
            Operation::EtcdUpgrade => "an etcd upgrade",
            Operation::CaRotation => "a CA rotation",
            Operation::PlannedShrink => "a planned shrink",
            Operation::Defrag => "a defragmentation",
        }
    }
}

/// Why an operation waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// The backup for it is being taken.
    BackupInFlight,
    /// An attempt since the need arose failed; the next is retried by the schedule's rule.
    BackupFailing,
}

/// What the operation does this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Proceed,
    RequestBackup,
    Wait(WaitReason),
}

/// The observed view [`decide`] reads.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// `spec.backup` is set.
    pub configured: bool,
    /// `spec.backup.verify`: only a restore-proved backup counts.
    pub verify: bool,
    /// The operation has taken its first disruptive step already.
    pub under_way: bool,
    /// When the operation became due.
    pub since: OffsetDateTime,
    pub status: Option<&'a BackupStatus>,
    pub now: OffsetDateTime,
}

/// When the good backup that counts was taken (see the module note on `verify`).
fn good_taken_at(status: &BackupStatus, verify: bool) -> Option<OffsetDateTime> {
    let success = status.last_success.as_ref()?;
    if verify {
        let verified = status.last_verified.as_ref()?;
        if verified.name != success.name {
            return None;
        }
    }
    parse_time(&success.taken_at)
}

pub fn decide(v: &View<'_>) -> Gate {
    if !v.configured || v.under_way {
        return Gate::Proceed;
    }
    let Some(status) = v.status else {
        return Gate::RequestBackup;
    };
    if good_taken_at(status, v.verify).is_some_and(|t| t >= v.since) {
        return Gate::Proceed;
    }
    if !status.in_progress.is_empty() {
        return Gate::Wait(WaitReason::BackupInFlight);
    }
    // The last attempt was made for the need (not one started before it and failed after).
    let attempted_since = parse_time(&status.last_attempt_time).is_some_and(|t| t >= v.since);
    let failed_since = status
        .last_failure
        .as_ref()
        .and_then(|f| parse_time(&f.time))
        .is_some_and(|t| t >= v.since);
    if attempted_since && failed_since && status.consecutive_failures > 0 {
        return Gate::Wait(WaitReason::BackupFailing);
    }
    Gate::RequestBackup
}

/// The time a need arising at `now` is recorded with: `now` rounded up to the next whole
/// second (see the module note on whole seconds).
pub fn need_time(now: OffsetDateTime) -> OffsetDateTime {
    let floor = now.replace_nanosecond(0).unwrap_or(now);
    if floor == now {
        now
    } else {
        floor + time::Duration::SECOND
    }
}

/// When `op` became due as `status.backup.preOperation` records it, else [`need_time`]`(now)`.
pub fn since(status: Option<&BackupStatus>, op: Operation, now: OffsetDateTime) -> OffsetDateTime {
    status
        .and_then(|s| s.pre_operation.iter().find(|r| r.operation == op.as_str()))
        .and_then(|r| parse_time(&r.since))
        .unwrap_or_else(|| need_time(now))
}

/// When the backup controller takes a backup for the recorded needs: the earliest `since` of a
/// need with no attempt at or after it (`None`: no need waits for an attempt). Never before
/// `since`, so that backup counts for the need ([`decide`] compares whole seconds).
pub fn backup_due(status: &BackupStatus) -> Option<OffsetDateTime> {
    let last = parse_time(&status.last_attempt_time);
    status
        .pre_operation
        .iter()
        .filter_map(|r| parse_time(&r.since))
        .filter(|since| last.is_none_or(|a| a < *since))
        .min()
}

/// The recorded needs an attempt taken for them failed on, with their `since` (what
/// `BackupControllerDegraded`, reason `PreOperationBackupFailing`, names). Pure.
pub fn held_by_failure(
    status: &BackupStatus,
    verify: bool,
    now: OffsetDateTime,
) -> Vec<(Operation, OffsetDateTime)> {
    status
        .pre_operation
        .iter()
        .filter_map(|r| Some((Operation::parse(&r.operation)?, parse_time(&r.since)?)))
        .filter(|(_, since)| {
            decide(&View {
                configured: true,
                verify,
                under_way: false,
                since: *since,
                status: Some(status),
                now,
            }) == Gate::Wait(WaitReason::BackupFailing)
        })
        .collect()
}

/// The one writer of a need (kept from the first due pass until [`done`]): asks [`decide`] for
/// `op` (started by `controller`), records the need in `status.backup.preOperation`, and says
/// why it waits in plan and, once, an Event. Returns whether the operation may take its first
/// disruptive step this pass.
pub async fn gate(
    p: &mut crate::pass::Pass<'_>,
    controller: crate::controller::ControllerName,
    op: Operation,
    under_way: bool,
) -> bool {
    let spec = p.o.spec.backup.clone();
    let now = p.o.now;
    let view = View {
        configured: spec.is_some(),
        verify: spec.as_ref().is_some_and(|b| b.verify),
        under_way,
        since: since(p.status.backup.as_ref(), op, now),
        status: p.status.backup.as_ref(),
        now,
    };
    let gate = decide(&view);
    let since = view.since;
    if gate == Gate::Proceed {
        // The need stays until [`done`]: every step of the operation counts from one backup.
        return true;
    }
    let status = p.status.backup.get_or_insert_with(Default::default);
    let fresh = !status
        .pre_operation
        .iter()
        .any(|r| r.operation == op.as_str());
    if fresh {
        status.pre_operation.push(crate::api::PreOperationNeed {
            operation: op.as_str().into(),
            since: crate::certs::format_time(since),
        });
        status
            .pre_operation
            .sort_by(|a, b| a.operation.cmp(&b.operation));
    }
    let line = format!("waiting for a verified backup before {}", op.human());
    let detail = match gate {
        Gate::Wait(WaitReason::BackupFailing) => format!("{line}: the backup failed"),
        Gate::Wait(WaitReason::BackupInFlight) => format!("{line}: it is being taken"),
        _ => format!("{line}: one is requested"),
    };
    p.next(controller, detail.clone());
    if fresh {
        p.event(EventReason::PreOperationBackup, detail).await;
    }
    false
}

/// Every pass (from status alone, so also one that stopped before the held operation's
/// controller): `BackupControllerDegraded` is True with reason `PreOperationBackupFailing` while
/// a recorded need is held by a failed backup ([`held_by_failure`]), and a warning Event says so
/// when it turns True.
pub async fn reconcile(p: &mut crate::pass::Pass<'_>) {
    use crate::status::{ConditionType as C, Reason};
    let Some(spec) = p.o.spec.backup.as_ref() else {
        return;
    };
    let Some(status) = p.status.backup.as_ref() else {
        return;
    };
    let held = held_by_failure(status, spec.verify, p.o.now);
    if held.is_empty() {
        return;
    }
    let ops: Vec<String> = held
        .iter()
        .map(|(op, since)| {
            format!(
                "{} (due since {})",
                op.human(),
                crate::certs::format_time(*since)
            )
        })
        .collect();
    let failure = status
        .last_failure
        .as_ref()
        .map(|f| format!("backup {} failed ({}): {}", f.name, f.reason, f.message))
        .unwrap_or_default();
    let message = format!(
        "held until a backup taken for it is good: {}; {failure}",
        ops.join(", ")
    );
    let reason = Reason::PreOperationBackupFailing;
    let was = p.o.prev.conditions.iter().any(|c| {
        c.type_ == C::BackupControllerDegraded.as_str()
            && c.status == "True"
            && c.reason == reason.as_str()
    });
    if !was {
        p.event(EventReason::PreOperationBackupFailing, message.clone())
            .await;
    }
    p.cond(C::BackupControllerDegraded, true, reason, message);
}

/// `op` has nothing left to do (its controller is idle): its need, if any, is cleared.
pub fn done(p: &mut crate::pass::Pass<'_>, op: Operation) {
    if let Some(s) = p.status.backup.as_mut() {
        s.pre_operation.retain(|r| r.operation != op.as_str());
    }
}

#[cfg(test)]
#[path = "preop_tests.rs"]
mod tests;
