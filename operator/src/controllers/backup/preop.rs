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
//! - an attempt since `since` failed: Wait ([`WaitReason::BackupFailing`]; Degraded once
//!   [`FAILING_DEADLINE`] has passed since `since`) — the operation never proceeds without one;
//! - else [`Gate::RequestBackup`].

use time::OffsetDateTime;

use crate::api::BackupStatus;
use crate::certs::parse_time;

/// How long a failing pre-operation backup holds an operation before Degraded is set.
pub const FAILING_DEADLINE: time::Duration = time::Duration::minutes(30);

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
    BackupFailing { overdue: bool },
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::BackupInFlight => "PreOperationBackupInFlight",
            WaitReason::BackupFailing { .. } => "PreOperationBackupFailing",
        }
    }
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
    let failed_since = status
        .last_failure
        .as_ref()
        .and_then(|f| parse_time(&f.time))
        .is_some_and(|t| t >= v.since);
    if failed_since && status.consecutive_failures > 0 {
        return Gate::Wait(WaitReason::BackupFailing {
            overdue: v.now - v.since >= FAILING_DEADLINE,
        });
    }
    Gate::RequestBackup
}

/// When `op` became due as `status.backup.preOperation` records it, else `now`.
pub fn since(status: Option<&BackupStatus>, op: Operation, now: OffsetDateTime) -> OffsetDateTime {
    status
        .and_then(|s| s.pre_operation.iter().find(|r| r.operation == op.as_str()))
        .and_then(|r| parse_time(&r.since))
        .unwrap_or(now)
}

/// Whether a recorded need has had no attempt since it arose: the backup controller takes one
/// at once then.
pub fn wants_backup(status: &BackupStatus) -> bool {
    let last = parse_time(&status.last_attempt_time);
    status
        .pre_operation
        .iter()
        .filter_map(|r| parse_time(&r.since))
        .any(|since| last.is_none_or(|a| a < since))
}

/// The one writer (the need is kept from the first due pass until [`done`]): asks [`decide`] for `op` (started by `controller`), records or clears the
/// need in `status.backup.preOperation`, and says why it waits in plan and an Event. Returns
/// whether the operation may take its first disruptive step this pass.
pub async fn gate(
    p: &mut crate::pass::Pass<'_>,
    controller: crate::controllers::ControllerName,
    op: Operation,
    under_way: bool,
) -> bool {
    let spec = p.o.spec.backup.clone();
    let now = p.o.now;
    let view = View {
        configured: spec.is_some(),
        verify: spec.as_ref().is_some_and(|b| b.verify),
        under_way,
        since: since(p.backup.as_ref(), op, now),
        status: p.backup.as_ref(),
        now,
    };
    let gate = decide(&view);
    let since = view.since;
    if gate == Gate::Proceed {
        // The need stays until [`done`]: every step of the operation counts from one backup.
        return true;
    }
    let status = p.backup.get_or_insert_with(Default::default);
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
        Gate::Wait(WaitReason::BackupFailing { .. }) => format!("{line}: the backup failed"),
        Gate::Wait(WaitReason::BackupInFlight) => format!("{line}: it is being taken"),
        _ => format!("{line}: one is requested"),
    };
    p.next(controller, detail.clone());
    if let Gate::Wait(WaitReason::BackupFailing { overdue: true }) = gate {
        p.event(true, "PreOperationBackupFailing", detail).await;
    } else if fresh {
        p.event(false, "PreOperationBackup", detail).await;
    }
    false
}

/// `op` has nothing left to do (its controller is idle): its need, if any, is cleared.
pub fn done(p: &mut crate::pass::Pass<'_>, op: Operation) {
    if let Some(s) = p.backup.as_mut() {
        s.pre_operation.retain(|r| r.operation != op.as_str());
    }
}

#[cfg(test)]
#[path = "preop_tests.rs"]
mod tests;
