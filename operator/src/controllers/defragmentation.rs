//! Defragmentation: gives members' free database pages back to the filesystem, and clears the
//! `NOSPACE` alarm once the space is back.
//!
//! Inputs: each voter's database size and the part in use (from its status), the leader, the
//! raised alarms, `spec.defragmentation`, the quota, each member's last defragmentation
//! (`status.defragmentation`) and whether a membership change or rollout is in flight.
//! Decision ([`decide`], pure): a voter is due when the `NOSPACE` alarm is raised and a
//! defragmentation frees a tenth of its file, when a new `spec.defragmentation.request` has not
//! reached it yet, or (automatic mode) when its file is at least `minDbSizeMib` and
//! `minFragmentedPercent` of it is free. One voter at a time, followers first; the leader last,
//! after its leadership is handed to the most advanced healthy voter; each through the quorum
//! gate (rule 8: every voter healthy, no rollout, quorum kept without it; a learner in the
//! cluster holds nothing back, #65), and only
//! once every voter has applied what the leader committed (the one defragmented before has caught
//! up). With the alarm raised and nothing left to free, the alarm is disarmed when every voter's
//! file is back under 90% of the quota; otherwise `EtcdMembersDegraded` says plainly that an
//! admin must delete data. Writes: the defragmentation (run off the pass, bounded by
//! `timeoutSeconds`; the membership and rollout controllers wait while it runs), MoveLeader, the
//! alarm disarm, `status.defragmentation`, Events `Defragmented` / `DefragmentationFailed` /
//! `NoSpaceAlarmDisarmed`, metrics. A failed or timed-out defragmentation sets
//! `DefragControllerDegraded` and the member is not tried again for `retryAfterSeconds`. It never
//! defragments two members at once, a learner (etcd refuses the call on one), or the only voter
//! unless `NOSPACE` already refuses writes; it never compacts or deletes data (compaction is the
//! API server's). Under `NOSPACE` a standby learner over the disarm line is renewed instead
//! ([`standby_due`], carried out by membership as a removal; its node joins again after
//! [`rejoin_wait`]), and the disarm waits for it.

use crate::certs::parse_time;
use membership::{Action, AlarmKind, Denial, MemberId, MemberUrl, Verdict, gate};
use time::OffsetDateTime;

use crate::api::{DefragRecord, Defragmentation, DefragmentationStatus};
use crate::etcd::{DbSize, EtcdObservation};

mod run;
mod standby;
pub use run::{DefragRun, collect, holds, reconcile};
pub use standby::{REJOIN_AFTER_ENTRIES, StandbyDue, rejoin_wait, standby_due, standby_due_in};

/// Under `NOSPACE` a defragmentation is worth it when it frees at least this share of the file.
const NOSPACE_MIN_FREE_PERCENT: u32 = 10;
/// The alarm is disarmed only when every voter's file is under this share of the quota.
const DISARM_BELOW_PERCENT: u64 = 90;
/// Under `NOSPACE`, a voter still over the disarm line is tried again this often, or ten times
/// as long as its last defragmentation took if that is longer (a multi-GiB store is not held
/// over and over while an admin works).
const NOSPACE_RETRY: time::Duration = time::Duration::seconds(60);

/// `DefragRecord::result` of a defragmentation that finished.
pub const SUCCEEDED: &str = "Succeeded";
/// `DefragRecord::result` of one the operator lost track of (it restarted while it ran).
pub const INTERRUPTED: &str = "Interrupted";

/// Why a member is defragmented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Threshold,
    Request,
    NoSpace,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Threshold => "Threshold",
            Trigger::Request => "Request",
            Trigger::NoSpace => "NoSpace",
        }
    }
}

/// A voter due for defragmentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    pub id: MemberId,
    pub name: String,
    pub url: MemberUrl,
    pub trigger: Trigger,
    pub db: DbSize,
    pub revision: i64,
}

impl Due {
    /// "n2 (id, trigger Threshold): file 200.0 MiB, 150.0 MiB free".
    pub fn describe(&self) -> String {
        format!(
            "{} ({}, trigger {}): file {}, {} free",
            self.name,
            self.id,
            self.trigger.as_str(),
            mib(self.db.total),
            mib(self.db.free())
        )
    }
}

/// What the controller does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing is due (why, for the plan).
    Idle(String),
    /// Something must finish or settle first.
    Wait(String),
    /// The quorum gate refuses.
    Denied(Denial),
    /// The due voter leads: hand leadership to `to` first.
    MoveLeader {
        leader_url: MemberUrl,
        from: MemberId,
        to: MemberId,
    },
    Defragment(Due),
    /// Every voter is back under the disarm line: disarm these members' `NOSPACE`.
    Disarm(Vec<MemberId>),
    /// `NOSPACE` stays: defragmenting cannot free enough (the condition's message).
    AdminMustDelete(String),
}

/// What [`decide`] decides from.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub obs: &'a EtcdObservation,
    pub spec: &'a Defragmentation,
    pub status: &'a DefragmentationStatus,
    pub quota_bytes: u64,
    /// The member being defragmented now, if any.
    pub running: Option<&'a str>,
    /// Why the rest of the cluster is not settled (a membership change or rollout in flight).
    pub unsettled: Option<&'a str>,
    pub now: OffsetDateTime,
}

/// `n` bytes in MiB, one decimal.
pub fn mib(n: i64) -> String {
    format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
}

impl View<'_> {
    fn nospace(&self) -> bool {
        self.obs
            .preflight
            .alarms
            .iter()
            .any(|a| a.kind == AlarmKind::NoSpace)
    }

    fn last(&self, name: &str) -> Option<&DefragRecord> {
        self.status.members.iter().find(|r| r.member_name == name)
    }

    /// The member's last defragmentation failed and its retry time has not come.
    fn backing_off(&self, name: &str) -> Option<String> {
        let r = self.last(name)?;
        // An interrupted run's outcome is unknown, not a failure: it may be tried again.
        if r.result == SUCCEEDED || r.result.is_empty() || r.result == INTERRUPTED {
            return None;
        }
        let end = parse_time(&r.end_time)?;
        let retry = end + time::Duration::seconds(i64::from(self.spec.retry_after_seconds));
        (retry > self.now).then(|| {
            format!(
                "{name}: last defragmentation {} ({}); next try in {}s",
                r.result,
                r.message,
                (retry - self.now).whole_seconds()
            )
        })
    }

    /// The file size the alarm is disarmed under.
    fn disarm_line(&self) -> i64 {
        i64::try_from(self.quota_bytes.saturating_mul(DISARM_BELOW_PERCENT) / 100)
            .unwrap_or(i64::MAX)
    }

    /// Under `NOSPACE`: whether defragmenting `name` now may give space back. Its reported
    /// free pages say so; but pages freed by a compaction stay pending (not counted as free)
    /// until the next write transaction, and under `NOSPACE` there may be none. So a voter whose
    /// file is still over the disarm line is also due when it was not defragmented during this
    /// alarm yet, when keys were deleted since (its store revision moved), or a minute (at least
    /// ten times its last run) after its last try (a compaction since then may have freed what
    /// the revision does not show).
    fn nospace_due(&self, name: &str, db: DbSize, revision: Option<i64>) -> bool {
        if db.free() >= 1 << 20 && db.fragmented_percent() >= NOSPACE_MIN_FREE_PERCENT {
            return true;
        }
        if db.total < self.disarm_line() {
            return false;
        }
        let Some(last) = self
            .last(name)
            .filter(|r| r.trigger == Trigger::NoSpace.as_str())
        else {
            return true;
        };
        let since = parse_time(&last.end_time);
        revision.is_some_and(|r| r > last.revision)
            || since.is_none_or(|t| {
                let took = i64::try_from(last.duration_ms).unwrap_or(i64::MAX);
                let retry =
                    NOSPACE_RETRY.max(time::Duration::milliseconds(took.saturating_mul(10)));
                self.now - t >= retry
            })
    }

    /// Why `name` (with database `db`) is due, if it is.
    fn trigger(&self, name: &str, db: DbSize, revision: Option<i64>) -> Option<Trigger> {
        if self.nospace() && self.nospace_due(name, db, revision) {
            return Some(Trigger::NoSpace);
        }
        let request = &self.spec.request;
        if !request.is_empty()
            && *request != self.status.handled_request
            && self
                .last(name)
                .is_none_or(|r| r.request != *request || r.result != SUCCEEDED)
        {
            return Some(Trigger::Request);
        }
        let big = db.total >= i64::from(self.spec.min_db_size_mib) << 20;
        (self.spec.automatic && big && db.fragmented_percent() >= self.spec.min_fragmented_percent)
            .then_some(Trigger::Threshold)
    }

    /// The started voters with their client URL, database and store revision. Learners are
    /// left out: etcd refuses `Defragment` on a learner ("rpc not supported for learner"), and
    /// a learner never holds a voter's defragmentation or the disarm back.
    fn voters(&self) -> Vec<(MemberId, &str, &MemberUrl, DbSize, Option<i64>)> {
        let mut out: Vec<_> = self
            .obs
            .started_voters()
            .filter_map(|m| {
                let h = self.obs.health.get(&m.id)?;
                let db = h.db?;
                Some((
                    m.id,
                    m.name.as_str(),
                    m.client_urls.first()?,
                    db,
                    h.revision,
                ))
            })
            .collect();
        out.sort_by(|a, b| a.1.cmp(b.1));
        out
    }
}

/// The next step.
pub fn decide(v: &View<'_>) -> Step {
    if let Some(name) = v.running {
        return Step::Wait(format!("defragmenting {name}"));
    }
    let mut waiting = Vec::new();
    let mut due: Vec<Due> = Vec::new();
    for (id, name, url, db, revision) in v.voters() {
        let Some(trigger) = v.trigger(name, db, revision) else {
            continue;
        };
        if let Some(why) = v.backing_off(name) {
            waiting.push(why);
            continue;
        }
        due.push(Due {
            id,
            name: name.to_owned(),
            url: url.clone(),
            trigger,
            db,
            revision: revision.unwrap_or(0),
        });
    }
    let nospace = v.nospace();
    if due.is_empty() {
        if nospace && waiting.is_empty() {
            return after_nospace(v);
        }
        return Step::Idle(if waiting.is_empty() {
            "no member is due for defragmentation".into()
        } else {
            waiting.join("; ")
        });
    }
    if let Some(why) = v.unsettled {
        return Step::Wait(format!("waiting until {why}"));
    }
    if let Some((_, why)) = v.obs.lagging_voter() {
        return Step::Wait(why);
    }
    // Followers first, the leader last.
    due.sort_by_key(|d| (Some(d.id) == v.obs.leader, d.name.clone()));
    let Some(next) = due.into_iter().next() else {
        return Step::Idle("no member is due for defragmentation".into());
    };
    let action = Action::Defragment {
        id: next.id,
        nospace,
    };
    if let Verdict::Deny(d) = gate(&v.obs.cluster_view(), &action) {
        return Step::Denied(d);
    }
    if Some(next.id) == v.obs.leader && v.voters().len() > 1 {
        return match v.obs.leadership_handover(Some(next.id)) {
            Some((leader_url, to)) => Step::MoveLeader {
                leader_url,
                from: next.id,
                to,
            },
            None => Step::Wait(format!(
                "{} leads and no healthy voter can take over",
                next.name
            )),
        };
    }
    Step::Defragment(next)
}

/// Whether `step` first waits for a backup taken for it (with `spec.backup`,
/// [`crate::controllers::backup::preop`]): a defragmentation, or the leadership move before one
/// — but never while `NOSPACE` is raised: then the defragmentation is the remedy for an outage
/// (etcd refuses writes), and nothing may hold it.
pub fn waits_for_backup(step: &Step, nospace: bool) -> bool {
    match step {
        Step::Defragment(due) => !nospace && due.trigger != Trigger::NoSpace,
        Step::MoveLeader { .. } => !nospace,
        Step::Idle(_)
        | Step::Wait(_)
        | Step::Denied(_)
        | Step::Disarm(_)
        | Step::AdminMustDelete(_) => false,
    }
}

/// `NOSPACE` is raised and nothing is left to free by defragmenting: disarm, or say what an admin
/// must do.
fn after_nospace(v: &View<'_>) -> Step {
    let line = v.disarm_line();
    let over: Vec<String> = v
        .voters()
        .into_iter()
        .filter(|(_, _, _, db, _)| db.total >= line)
        .map(|(_, name, _, db, _)| {
            format!(
                "{name}: file {}, live data {}",
                mib(db.total),
                mib(db.in_use)
            )
        })
        .collect();
    if over.is_empty() {
        if let Some(standby) = standby_due(v) {
            return Step::Wait(format!(
                "disarming after the standby learner {} is renewed: its file {} would raise NOSPACE again",
                standby.name,
                mib(standby.db.total)
            ));
        }
        let alarmed: Vec<MemberId> = v
            .obs
            .preflight
            .alarms
            .iter()
            .filter(|a| a.kind == AlarmKind::NoSpace)
            .map(|a| a.member)
            .collect();
        return Step::Disarm(alarmed);
    }
    Step::AdminMustDelete(format!(
        "NOSPACE: etcd refuses every write but deletes; defragmenting cannot bring the database under {DISARM_BELOW_PERCENT}% of the {} quota ({}). An admin must delete data (the API server compacts every 5 minutes, or compact now); the operator then defragments and disarms the alarm. Or raise spec.backendQuotaGib.",
        mib(i64::try_from(v.quota_bytes).unwrap_or(i64::MAX)),
        over.join("; ")
    ))
}

/// True when every voter has been defragmented for `spec.defragmentation.request` (it is then
/// recorded as handled).
pub fn request_done(v: &View<'_>) -> bool {
    let request = &v.spec.request;
    !request.is_empty()
        && *request != v.status.handled_request
        && v.voters().iter().all(|(_, name, _, _, _)| {
            v.last(name)
                .is_some_and(|r| r.request == *request && r.result == SUCCEEDED)
        })
}

/// The members whose last defragmentation failed, for `DefragControllerDegraded`.
pub fn failures(status: &DefragmentationStatus) -> Vec<String> {
    status
        .members
        .iter()
        .filter(|r| !r.result.is_empty() && r.result != SUCCEEDED && r.result != INTERRUPTED)
        .map(|r| {
            format!(
                "defragmenting {} {} at {}: {}",
                r.member_name, r.result, r.end_time, r.message
            )
        })
        .collect()
}

#[cfg(test)]
#[path = "defragmentation_tests.rs"]
mod tests;
