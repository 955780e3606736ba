//! Corruption check: whether every voter holds the same data.
//!
//! Inputs: `spec.corruptionCheck`, the last check (`status.corruptionCheck`), the voters and
//! their store revisions, whether a defragmentation runs. Decision ([`next_due`], [`divergent`],
//! [`condition`], pure): a check is due `intervalSeconds` after the last one ended, and runs off
//! the pass: every started voter's `HashKV` at one revision all of them applied (the lowest
//! current one), compared with [`membership::compare_hashes`] (the majority's hash wins). Writes:
//! `status.corruptionCheck`, Events `MembersDivergent` / `MembersConsistent` when the result
//! changes, metrics. A divergent member sets `EtcdMembersDegraded` (`MembersDivergent`) naming
//! it; with `replaceMinority` the membership controller replaces it through the gated
//! remove → learner path (its node's `etcd-verify` archives the old data dir). It never changes
//! membership itself, never names a member without a majority against it, and never checks
//! while a defragmentation holds a member.

use crate::certs::parse_time;
use crate::events::EventReason;
use std::sync::Arc;
use std::time::Duration;

use membership::{EtcdClient, HashVerdict, MemberHash, MemberId, MemberUrl, compare_hashes};
use time::OffsetDateTime;
use tokio::task::JoinHandle;

use crate::api::{CorruptionCheck, CorruptionCheckStatus, DivergentMember};
use crate::certs::format_time;
use crate::etcd::EtcdObservation;
use crate::metrics::ResultLabel;
use crate::pass::Pass;
use crate::status::{Computed, ConditionType as C, Reason};
use crate::writer::etcd::{Outcome, Task};

use crate::controller::ControllerName;

const NAME: ControllerName = ControllerName::CorruptionCheck;
/// How long one member may take to hash its store.
const HASH_LIMIT: Duration = Duration::from_secs(60);
/// Attempts at a comparable set of answers (a compaction being applied makes them not
/// comparable for a moment).
const ATTEMPTS: usize = 5;

pub const CONSISTENT: &str = "Consistent";
pub const DIVERGENT: &str = "Divergent";
pub const INCONCLUSIVE: &str = "Inconclusive";

/// A check in flight.
#[derive(Debug)]
pub struct CheckRun {
    handle: JoinHandle<CorruptionCheckStatus>,
}

/// When the next check is due: at once if there was none, or if a voter healthy now was not
/// compared by the last one (it was down or joined since); else an interval after the last.
pub fn next_due(
    spec: &CorruptionCheck,
    last: Option<&CorruptionCheckStatus>,
    voters: &[&str],
) -> Option<OffsetDateTime> {
    if spec.interval_seconds == 0 {
        return None;
    }
    // (An inconclusive check waits its interval: asking again at once could loop.)
    let missed = |l: &CorruptionCheckStatus| {
        l.result != INCONCLUSIVE
            && voters
                .iter()
                .any(|v| !l.checked_members.iter().any(|c| c == v))
    };
    if last.is_some_and(missed) {
        return Some(OffsetDateTime::UNIX_EPOCH);
    }
    let last = last.and_then(|l| parse_time(&l.last_check_time));
    Some(last.map_or(OffsetDateTime::UNIX_EPOCH, |t| {
        t + time::Duration::seconds(i64::from(spec.interval_seconds))
    }))
}

/// The members the last conclusive check found outvoted by the majority (an inconclusive check
/// keeps them: not being able to compare is no evidence of repair) that are still members.
pub fn divergent(last: Option<&CorruptionCheckStatus>, obs: &EtcdObservation) -> Vec<MemberId> {
    last.map(|l| {
        l.divergent_members
            .iter()
            .filter_map(|d| obs.members.iter().find(|m| m.id.to_string() == d.id))
            .map(|m| m.id)
            .collect()
    })
    .unwrap_or_default()
}

/// `EtcdMembersDegraded` while a member found divergent is still a member.
pub fn condition(
    last: Option<&CorruptionCheckStatus>,
    obs: &EtcdObservation,
    replace: bool,
) -> Option<Computed> {
    let last = last?;
    let ids = divergent(Some(last), obs);
    if ids.is_empty() {
        return None;
    }
    let names: Vec<String> = last
        .divergent_members
        .iter()
        .filter(|d| ids.iter().any(|id| id.to_string() == d.id))
        .map(|d| format!("{} ({})", d.name, d.id))
        .collect();
    let what = if replace {
        "replaceMinority is on: it is replaced through the quorum gate"
    } else {
        "replaceMinority is off: replace it (runbook EtcdMembersDivergent) or set spec.corruptionCheck.replaceMinority"
    };
    Some(Computed::new(
        C::EtcdMembersDegraded,
        true,
        Reason::MembersDivergent,
        format!(
            "{} hold(s) data that diverged from the majority (last check: {} at revision {}: {}); {what}",
            names.join(", "),
            last.result,
            last.revision,
            last.message
        ),
    ))
}

/// Takes a finished check into status (after the observer). `running` is this controller's own
/// state: the check it started and has not collected.
pub async fn collect(p: &mut Pass<'_>, running: &mut Option<CheckRun>) {
    if !running.as_ref().is_some_and(|r| r.handle.is_finished()) {
        return;
    }
    let Some(run) = running.take() else {
        return;
    };
    let result = match run.handle.await {
        Ok(r) => r,
        Err(e) => CorruptionCheckStatus {
            last_check_time: format_time(p.o.now),
            result: INCONCLUSIVE.into(),
            message: format!("the check task ended: {e}"),
            ..Default::default()
        },
    };
    let m = &p.ctx.metrics;
    m.corruption_checks
        .get_or_create(&ResultLabel {
            result: result.result.to_lowercase(),
        })
        .inc();
    let mut result = result;
    if result.result == INCONCLUSIVE
        && let Some(previous) = p.status.corruption.as_ref()
    {
        result.divergent_members = previous.divergent_members.clone();
    }
    m.members_divergent
        .set(i64::try_from(result.divergent_members.len()).unwrap_or(i64::MAX));
    let before = p.status.corruption.as_ref().map(|c| c.result.clone());
    let line = format!(
        "corruption check at revision {}: {}{}",
        result.revision,
        result.result,
        if result.message.is_empty() {
            String::new()
        } else {
            format!(": {}", result.message)
        }
    );
    p.note(line.clone());
    let changed = before.as_deref() != Some(result.result.as_str());
    if result.result == DIVERGENT {
        p.event(EventReason::MembersDivergent, line).await;
    } else if changed && result.result == CONSISTENT && before.as_deref() == Some(DIVERGENT) {
        p.event(EventReason::MembersConsistent, line).await;
    }
    p.status.corruption = Some(result);
}

/// Starts a check when one is due (the last step of a pass) into `running`; none starts while
/// a defragmentation runs (`defrag_running`).
pub fn reconcile(p: &mut Pass<'_>, running: &mut Option<CheckRun>, defrag_running: bool) {
    if let Some(c) = condition(
        p.status.corruption.as_ref(),
        &p.o.etcd,
        p.o.spec.corruption_check.replace_minority,
    ) {
        p.conds.push(c);
    }
    if running.is_some() {
        p.next(NAME, "checking");
        return;
    }
    let voters: Vec<Voter> =
        p.o.etcd
            .started_voters()
            .filter_map(|m| {
                let h = p.o.etcd.health.get(&m.id).filter(|h| h.healthy)?;
                Some(Voter {
                    id: m.id,
                    name: m.name.clone(),
                    url: m.client_urls.first()?.clone(),
                    revision: h.revision?,
                })
            })
            .collect();
    let names: Vec<&str> = voters.iter().map(|v| v.name.as_str()).collect();
    let Some(due) = next_due(
        &p.o.spec.corruption_check,
        p.status.corruption.as_ref(),
        &names,
    ) else {
        p.next(NAME, "off (spec.corruptionCheck.intervalSeconds is 0)");
        return;
    };
    if p.not_yet(NAME, due, "next check") {
        return;
    }
    if voters.len() < 2 || defrag_running {
        p.next(
            NAME,
            "due; waiting for two healthy voters and no defragmentation",
        );
        return;
    }
    p.next(
        NAME,
        format!("compare the HashKV of {} voters", voters.len()),
    );
    let subject = format!("of {} voters", voters.len());
    let Outcome::Made(client) = p.start_etcd(Task::CompareHashKv, &subject) else {
        return;
    };
    let handle = tokio::spawn(check(client, voters));
    *running = Some(CheckRun { handle });
    p.busy = true;
}

/// One voter to ask.
#[derive(Clone, Debug)]
struct Voter {
    id: MemberId,
    name: String,
    url: MemberUrl,
    /// Its store revision when last observed.
    revision: i64,
}

/// The check: every voter's hash at the lowest revision they all applied, compared (asked again
/// at a fresh revision while a compaction makes the answers not comparable).
async fn check(client: Arc<EtcdClient>, mut voters: Vec<Voter>) -> CorruptionCheckStatus {
    let mut last = String::new();
    let mut revision = 0;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            for v in &mut voters {
                if let Ok(s) = client.status_of(&v.url).await {
                    v.revision = s.revision;
                }
            }
        }
        revision = voters.iter().map(|v| v.revision).min().unwrap_or(0);
        let mut answers = Vec::new();
        let mut errors = Vec::new();
        for v in &voters {
            match client.hash_kv_within(&v.url, revision, HASH_LIMIT).await {
                Ok(h) => answers.push(MemberHash {
                    name: v.name.clone(),
                    endpoint: v.url.to_string(),
                    hash: h.hash,
                    compact_revision: h.compact_revision,
                }),
                Err(e) => errors.push(format!("{}: {e}", v.name)),
            }
        }
        if !errors.is_empty() {
            last = format!("not every voter answered: {}", errors.join("; "));
            continue;
        }
        let (result, divergent, message) = match compare_hashes(&answers) {
            HashVerdict::Equal => (CONSISTENT, Vec::new(), String::new()),
            HashVerdict::Diverged(d) => {
                let divergent = voters
                    .iter()
                    .filter(|v| d.minority.contains(&v.name))
                    .map(|v| DivergentMember {
                        name: v.name.clone(),
                        id: v.id.to_string(),
                    })
                    .collect();
                (DIVERGENT, divergent, d.message)
            }
            HashVerdict::NotComparable => {
                last = "a compaction was being applied (compact revisions differ)".into();
                continue;
            }
        };
        return CorruptionCheckStatus {
            last_check_time: format_time(OffsetDateTime::now_utc()),
            revision,
            checked_members: voters.iter().map(|v| v.name.clone()).collect(),
            result: result.to_owned(),
            divergent_members: divergent,
            message,
        };
    }
    CorruptionCheckStatus {
        last_check_time: format_time(OffsetDateTime::now_utc()),
        revision,
        result: INCONCLUSIVE.into(),
        checked_members: Vec::new(),
        divergent_members: Vec::new(),
        message: last,
    }
}

#[cfg(test)]
#[path = "corruption_check_tests.rs"]
mod tests;
