//! Carrying the defragmentation decision out: the defragmentation runs off the pass (a task
//! bounded by `timeoutSeconds`), its result is taken into `status.defragmentation` by the next
//! pass, and while it runs the membership and rollout controllers wait ([`holds`]).

use std::time::Instant;

use membership::{AlarmKind, ClientError, EtcdClient, FailureKind, MemberId};
use tokio::task::JoinHandle;

use super::{
    Due, INTERRUPTED, SUCCEEDED, Step, View, decide, failures, mib, request_done, waits_for_backup,
};
use crate::api::DefragRecord;
use crate::category::Category;
use crate::certs::format_time;
use crate::controller::{ControllerError, ControllerName};
use crate::etcd::DbSize;
use crate::events::EventReason;
use crate::metrics::{AlarmLabel, MemberLabel, ResultLabel};
use crate::pass::{Pass, denied_line};
use crate::retry::ErrorKind;
use crate::status::{ConditionType as C, Reason};
use crate::writer::etcd::{EtcdIntent, Made, Outcome, Task};

const NAME: ControllerName = ControllerName::Defrag;
/// How often a pass looks again while `NOSPACE` is raised.
const NOSPACE_REQUEUE: std::time::Duration = std::time::Duration::from_secs(2);

/// A defragmentation in flight.
#[derive(Debug)]
pub struct DefragRun {
    /// The record it will complete (`status.defragmentation.inProgress` meanwhile).
    pub record: DefragRecord,
    started: Instant,
    handle: JoinHandle<Result<DbSize, ClientError>>,
}

/// Takes a finished defragmentation into status; after an operator restart, closes the record
/// of one that was running as `Interrupted` once its member is healthy and caught up. `running`
/// is this controller's own state: the defragmentation it started and has not collected.
pub async fn collect(p: &mut Pass<'_>, running: &mut Option<DefragRun>) {
    if running.as_ref().is_some_and(|r| r.handle.is_finished()) {
        let Some(run) = running.take() else {
            return;
        };
        let elapsed = run.started.elapsed();
        let outcome = match run.handle.await {
            Ok(outcome) => outcome.map_err(|e| {
                let result = if is_timeout(&e) { "TimedOut" } else { "Failed" };
                (result, e.to_string())
            }),
            Err(e) => Err(("Failed", format!("the defragmentation task ended: {e}"))),
        };
        finish(p, run.record, outcome, elapsed).await;
        return;
    }
    if running.is_some() {
        return;
    }
    let Some(stale) = p.status.defrag.in_progress.clone() else {
        return;
    };
    let member =
        p.o.etcd
            .members
            .iter()
            .find(|m| m.id.to_string() == stale.member_id);
    let settled =
        member.is_none_or(|m| p.o.etcd.is_healthy(m.id)) && p.o.etcd.lagging_voter().is_none();
    if settled {
        let message = "the operator restarted while it ran; its outcome is unknown".to_owned();
        finish(
            p,
            stale,
            Err((INTERRUPTED, message)),
            std::time::Duration::ZERO,
        )
        .await;
    }
}

fn is_timeout(e: &ClientError) -> bool {
    e.failures().iter().any(|f| f.kind == FailureKind::Timeout)
}

/// Completes `record` with `outcome` (`Err((result, why))`).
async fn finish(
    p: &mut Pass<'_>,
    mut record: DefragRecord,
    outcome: Result<DbSize, (&'static str, String)>,
    elapsed: std::time::Duration,
) {
    let now = p.o.now;
    record.end_time = format_time(now);
    record.duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    let (result, warning) = match outcome {
        Ok(db) => {
            record.db_size_after = db.total;
            let reclaimed = (record.db_size_before - db.total).max(0);
            record.message = format!(
                "{} -> {} ({} in use); {} reclaimed in {} ms",
                mib(record.db_size_before),
                mib(db.total),
                mib(db.in_use),
                mib(reclaimed),
                record.duration_ms
            );
            p.ctx
                .metrics
                .defrag_reclaimed_bytes
                .inc_by(u64::try_from(reclaimed).unwrap_or(0));
            p.ctx
                .metrics
                .defrag_last_success
                .get_or_create(&MemberLabel {
                    member: record.member_id.clone(),
                })
                .set(now.unix_timestamp());
            (SUCCEEDED, false)
        }
        Err((result, why)) => {
            record.message = why;
            (result, true)
        }
    };
    record.result = result.to_owned();
    p.ctx
        .metrics
        .defragmentations
        .get_or_create(&ResultLabel {
            result: match result {
                SUCCEEDED => "succeeded",
                "TimedOut" => "timed_out",
                INTERRUPTED => "interrupted",
                _ => "failed",
            }
            .to_owned(),
        })
        .inc();
    p.ctx.metrics.defrag_in_progress.set(0);
    let line = format!(
        "defragmentation of {} ({}, trigger {}): {result}: {}",
        record.member_name, record.member_id, record.trigger, record.message
    );
    p.note(line.clone());
    let reason = if warning {
        EventReason::DefragmentationFailed
    } else {
        EventReason::Defragmented
    };
    p.event(reason, line).await;
    p.status.defrag.in_progress = None;
    p.status
        .defrag
        .members
        .retain(|r| r.member_name != record.member_name);
    p.status.defrag.members.push(record);
    p.status
        .defrag
        .members
        .sort_by(|a, b| a.member_name.cmp(&b.member_name));
    p.busy = true;
}

/// True while a defragmentation runs (or one of a previous operator is not accounted for):
/// membership changes and restarts wait for it, and the pass ends here.
pub fn holds(p: &mut Pass<'_>, running: Option<&DefragRun>) -> bool {
    let running = running.map(|r| r.record.member_name.clone()).or_else(|| {
        p.status
            .defrag
            .in_progress
            .as_ref()
            .map(|r| r.member_name.clone())
    });
    let Some(name) = running else {
        return false;
    };
    p.busy = true;
    p.next(
        ControllerName::Membership,
        format!("waits for the defragmentation of {name} to finish"),
    );
    p.cond(
        C::EtcdMembersProgressing,
        true,
        Reason::Defragmenting,
        format!("defragmenting {name}; membership changes and restarts wait"),
    );
    true
}

/// What is in flight elsewhere, from this pass's view: a busy controller, a corruption check
/// (`check_running`), a node the installer is moving, or a node not on the latest revision. Under
/// `NOSPACE` a node that is merely behind (no installer moving it: the gate holds it, as it holds
/// a lone voter of a 2-node control plane until an admin approves) is not waited for: the
/// defragmentation is then the remedy for an outage, and a roll that comes later waits for it.
fn unsettled(p: &Pass<'_>, check_running: bool) -> Option<String> {
    let nospace =
        p.o.etcd
            .preflight
            .alarms
            .iter()
            .any(|a| a.kind == AlarmKind::NoSpace);
    // Under NOSPACE the alarm itself holds every membership change but a learner's removal
    // (which ends its pass), so a busy membership step is one the gate denies until the alarm
    // is cleared: waiting for it was a deadlock (a node joining under NOSPACE, or the standby
    // renewed under it, held the defragmentation that clears the alarm; #65).
    if p.busy && !nospace {
        return Some("the membership change or rollout in flight is done".into());
    }
    if check_running {
        // Its HashKV calls would wait for a held member.
        return Some("the corruption check in flight is done".into());
    }
    p.status
        .node_statuses
        .iter()
        .find(|n| n.target_revision.is_some() || (!nospace && !n.runs(p.status.latest)))
        .map(|n| {
            format!(
                "node {} runs the latest revision {} (it runs {})",
                n.node_name, p.status.latest, n.current_revision
            )
        })
}

fn record_metrics(p: &Pass<'_>) {
    let m = &p.ctx.metrics;
    m.quota_backend_bytes
        .set(i64::try_from(p.o.spec.quota_bytes()).unwrap_or(i64::MAX));
    m.member_db_size.clear();
    m.member_db_size_in_use.clear();
    for (id, h) in &p.o.etcd.health {
        let Some(db) = h.db else { continue };
        let label = MemberLabel {
            member: id.to_string(),
        };
        m.member_db_size.get_or_create(&label).set(db.total);
        m.member_db_size_in_use.get_or_create(&label).set(db.in_use);
    }
    if p.o.etcd.preflight.alarms_unreadable.is_none() {
        for kind in ["NOSPACE", "CORRUPT"] {
            let n =
                p.o.etcd
                    .preflight
                    .alarms
                    .iter()
                    .filter(|a| a.kind.to_string() == kind)
                    .count();
            m.alarms
                .get_or_create(&AlarmLabel {
                    alarm: kind.to_owned(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

/// The last step of a pass: the next defragmentation, leadership move or disarm. `running`
/// receives the defragmentation started; `check_running`: a corruption check is in flight.
pub async fn reconcile(
    p: &mut Pass<'_>,
    running: &mut Option<DefragRun>,
    check_running: bool,
) -> Result<(), ControllerError> {
    record_metrics(p);
    let failed = failures(&p.status.defrag);
    p.cond(
        C::DefragControllerDegraded,
        !failed.is_empty(),
        if failed.is_empty() {
            Reason::AsExpected
        } else {
            Reason::DefragmentationFailed
        },
        failed.join("; "),
    );
    if !p.o.managed {
        p.next(NAME, "unmanaged: no defragmentation");
        return Ok(());
    }
    let unsettled = unsettled(p, check_running);
    let spec = p.o.spec.defragmentation.clone();
    let view = View {
        obs: &p.o.etcd,
        spec: &spec,
        status: &p.status.defrag,
        quota_bytes: p.o.spec.quota_bytes(),
        running: None,
        unsettled: unsettled.as_deref(),
        now: p.o.now,
    };
    let done = request_done(&view);
    let step = decide(&view);
    tracing::debug!(?step, "defragmentation decision");
    let nospace = view.nospace();
    if done {
        p.note(format!(
            "defragmentation request {:?} done on every voter",
            spec.request
        ));
        p.status.defrag.handled_request = spec.request.clone();
    }
    if nospace {
        let message = match &step {
            Step::AdminMustDelete(m) => m.clone(),
            Step::Disarm(_) => "NOSPACE: the databases are back under the quota; disarming".into(),
            _ => "NOSPACE: etcd refuses every write but deletes; the operator defragments the members one at a time and then disarms the alarm".into(),
        };
        p.cond(C::EtcdMembersDegraded, true, Reason::NoSpace, message);
        // Not settled: the admin's delete and the API server's compaction change no health
        // print, so the pass comes back by itself to see the space freed.
        p.report.requeue_after = p.report.requeue_after.min(NOSPACE_REQUEUE);
    }
    let backup_first = waits_for_backup(&step, nospace);
    let limits = (spec.request.as_str(), spec.timeout_seconds);
    act(p, running, step, limits, backup_first).await
}

use crate::controllers::backup::preop::{self, Operation};

async fn act(
    p: &mut Pass<'_>,
    running: &mut Option<DefragRun>,
    step: Step,
    (request, timeout_seconds): (&str, u32),
    backup_first: bool,
) -> Result<(), ControllerError> {
    // In a plan, or without a client, the etcd writer does nothing (and no failure is
    // forgotten).
    let done = match step {
        Step::Idle(why) => {
            preop::done(p, Operation::Defrag);
            p.next(NAME, why);
            true
        }
        Step::Wait(why) => {
            p.busy = true;
            p.next(NAME, why);
            true
        }
        Step::Denied(d) => {
            p.next(NAME, denied_line(&d));
            true
        }
        Step::AdminMustDelete(m) => {
            p.next(NAME, m);
            true
        }
        Step::MoveLeader { .. } | Step::Defragment(_)
            if backup_first && !preop::gate(p, NAME, Operation::Defrag, false).await =>
        {
            p.busy = true;
            true
        }
        Step::MoveLeader {
            leader_url,
            from,
            to,
        } => move_leader(p, leader_url, from, to).await?,
        Step::Disarm(ids) => disarm(p, ids).await?,
        Step::Defragment(due) => match start(p, &due, request, timeout_seconds).await {
            Some(run) => {
                *running = Some(run);
                true
            }
            None => false,
        },
    };
    if done {
        p.st.failures.remove(&NAME);
    }
    Ok(())
}

fn etcd_error(e: ClientError) -> ControllerError {
    ControllerError::new(NAME, ErrorKind::Transient, Category::Etcd, e.to_string())
}

/// Hands leadership from `from` to `to` before `from` is defragmented; false when etcd was not
/// asked (a plan, no client).
async fn move_leader(
    p: &mut Pass<'_>,
    leader_url: membership::MemberUrl,
    from: MemberId,
    to: MemberId,
) -> Result<bool, ControllerError> {
    p.next(
        NAME,
        format!("move leadership from {from} to {to}, then defragment {from}"),
    );
    let intent = EtcdIntent::MoveLeader { leader_url, to };
    if !made(p.change_etcd(&intent).await)? {
        return Ok(false);
    }
    let line = format!("moved etcd leadership from {from} to {to} before defragmenting {from}");
    p.note(line.clone());
    p.event(EventReason::LeaderMoved, line).await;
    p.busy = true;
    Ok(true)
}

/// Whether etcd made the change (not a plan, a client); its refusal is the error.
fn made(answer: Result<Outcome<Made>, ClientError>) -> Result<bool, ControllerError> {
    Ok(matches!(answer.map_err(etcd_error)?, Outcome::Made(_)))
}

/// Disarms the `NOSPACE` alarm of each member in `ids`; false when etcd was not asked.
async fn disarm(p: &mut Pass<'_>, ids: Vec<MemberId>) -> Result<bool, ControllerError> {
    let names: Vec<String> = ids.iter().map(MemberId::to_string).collect();
    p.next(
        NAME,
        format!("disarm NOSPACE of member(s) {}", names.join(", ")),
    );
    let mut all = true;
    for id in ids {
        if !made(p.change_etcd(&EtcdIntent::DisarmNoSpace { id }).await)? {
            all = false;
            continue;
        }
        let line = format!(
            "disarmed the NOSPACE alarm of member {id}: every voter's database is back under the quota"
        );
        p.note(line.clone());
        p.event(EventReason::NoSpaceAlarmDisarmed, line).await;
    }
    p.busy |= all;
    Ok(all)
}

/// Starts defragmenting `due` off the pass (the record is kept in status until it ends);
/// `None` when the etcd writer gives it no client (a plan, etcd not reached).
async fn start(
    p: &mut Pass<'_>,
    due: &Due,
    request: &str,
    timeout_seconds: u32,
) -> Option<DefragRun> {
    p.next(NAME, format!("defragment {}", due.describe()));
    let Outcome::Made(client) = p.start_etcd(Task::Defragment, &due.describe()) else {
        return None;
    };
    let record = DefragRecord {
        member_name: due.name.clone(),
        member_id: due.id.to_string(),
        trigger: due.trigger.as_str().to_owned(),
        request: if p.status.defrag.handled_request == request {
            String::new()
        } else {
            request.to_owned()
        },
        start_time: format_time(p.o.now),
        revision: due.revision,
        db_size_before: due.db.total,
        ..DefragRecord::default()
    };
    let limit = std::time::Duration::from_secs(u64::from(timeout_seconds));
    let handle = tokio::spawn(defragment(client, due.url.clone(), limit));
    let line = format!("defragmenting {}", due.describe());
    p.note(line.clone());
    p.event(EventReason::Defragmenting, line.clone()).await;
    p.cond(C::EtcdMembersProgressing, true, Reason::Defragmenting, line);
    p.ctx.metrics.defrag_in_progress.set(1);
    p.status.defrag.in_progress = Some(record.clone());
    p.busy = true;
    Some(DefragRun {
        record,
        started: Instant::now(),
        handle,
    })
}

/// The task: defragment, then read the member's new database size.
async fn defragment(
    client: std::sync::Arc<EtcdClient>,
    url: membership::MemberUrl,
    limit: std::time::Duration,
) -> Result<DbSize, ClientError> {
    client.defragment(&url, limit).await?;
    let s = client.status_of(&url).await?;
    Ok(DbSize {
        total: s.db_size,
        in_use: s.db_size_in_use,
    })
}
