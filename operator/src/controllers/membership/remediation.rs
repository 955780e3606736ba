//! Remediation of a member that stays unhealthy on a node that still exists (etcd crash-looping,
//! an unreadable WAL, a disk gone bad): after `spec.memberRemediation.unhealthySeconds` it is
//! replaced through the gated remove → learner path, like Cluster API's control plane remediates
//! a machine. Each node's attempts are counted in `status.remediations`; a further attempt waits
//! `retryPeriodSeconds`, doubled for each earlier attempt, and stops at `maxRetries` (then only
//! a Degraded condition asks for an admin). The count starts again once the node's member has
//! been healthy for `minHealthySeconds`.
//!
//! Three things stop a replacement that is otherwise due:
//! - **no second signal** (#65): "unhealthy" is the operator's own status call, over a path
//!   etcd's peers do not use; the member is replaced only when the quorum guard on its node,
//!   probing that etcd's `/health` from the node, is not Ready either ([`GuardSignal`]). A guard
//!   that is Ready, or none at all, holds it: no outcome is worse than plain etcd, which never
//!   removes a member by itself.
//! - **held by the admin**: the member's node is cordoned or drained (`spec.unschedulable`),
//!   NotReady, or annotated [`ETCD_STOPPED_ANNOTATION`]. An admin at work on the node is not
//!   answered with a full resync; the node's record says why (`heldByAdmin`), and once the hold
//!   ends the unhealthy time counts again from then (`lastHeldTime`), not from when it went down.
//! - **a replacement in flight** (Cluster API KCP's rule: no remediation while a previous one is
//!   in a transitional state): a member added for a node that has not started, a learner not
//!   yet promoted while the voters are below the target, or a node whose member remediation
//!   removed and which has no member yet. Only another node's replacement waits for it: the
//!   node's own retries keep their back-off.
//!
//! Pure: everything is decided from the observation, the previous status and `now`.

use std::collections::BTreeMap;

use membership::MemberId;
use time::{Duration, OffsetDateTime};

use crate::api::{MemberRemediation, MemberStatus, RemediationStatus};
use crate::certs::{format_time, parse_time};
use crate::observed::objects::{ControlPlaneNode, ETCD_STOPPED_ANNOTATION};
use crate::status::{Computed, ConditionType, Reason};

/// Longest wait between two attempts on one node, whatever the doubling gives.
const MAX_RETRY_WAIT: Duration = Duration::hours(24);

/// Where one unhealthy member stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assessment {
    /// Not unhealthy long enough yet; due at the given time.
    Waiting { due: OffsetDateTime },
    /// An earlier attempt on its node was too recent; the next may start at the given time.
    BackingOff {
        until: OffsetDateTime,
        attempts: u32,
    },
    /// `maxRetries` attempts were made: an admin must look.
    Exhausted { attempts: u32 },
    /// Replace it now (this is attempt `attempt`).
    Due {
        attempt: u32,
        unhealthy_for: Duration,
    },
    /// Remediation is turned off (`unhealthySeconds: 0`).
    Disabled,
    /// Its node is held by the admin: not replaced while the hold lasts.
    Held { hold: Hold },
    /// Due, but another node's replacement is still in flight (described): one at a time.
    AwaitingReplacement { in_flight: String },
    /// Due by the operator's own status calls, but the second signal does not confirm it (#65):
    /// the node's quorum guard, which probes that etcd's `/health` from the node itself, reports
    /// it healthy, or there is no guard there to ask. A member the operator cannot reach while its
    /// peers can is not removed.
    Unconfirmed { why: String },
}

/// What the node's quorum guard pod says of its etcd: the second signal remediation needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardSignal {
    /// Ready: etcd's `/health` answers on the node.
    Healthy,
    /// Not Ready: etcd's `/health` fails on the node too.
    Unhealthy,
}

/// What an admin did to a node that holds remediation of its member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Annotated [`ETCD_STOPPED_ANNOTATION`]; its value (the admin's reason).
    EtcdStopped(String),
    /// Cordoned or drained (`spec.unschedulable`).
    Cordoned,
    /// Its `Ready` condition is not `True` (maintenance, a reboot): a replacement could not
    /// join there anyway, only a member would be lost.
    NotReady,
}

impl Hold {
    /// The node's hold, if any (the annotation first: it carries the admin's reason).
    pub fn of(node: &ControlPlaneNode) -> Option<Hold> {
        if let Some(why) = &node.etcd_stopped {
            Some(Hold::EtcdStopped(why.clone()))
        } else if node.unschedulable {
            Some(Hold::Cordoned)
        } else {
            (!node.ready).then_some(Hold::NotReady)
        }
    }

    /// "node n2 is cordoned (spec.unschedulable)" and the like.
    pub fn describe(&self, node: &str) -> String {
        match self {
            Hold::EtcdStopped(why) => {
                format!("node {node} is etcd-stopped ({ETCD_STOPPED_ANNOTATION}: {why})")
            }
            Hold::Cordoned => format!("node {node} is cordoned (spec.unschedulable)"),
            Hold::NotReady => format!("node {node} is NotReady"),
        }
    }
}

/// One member that is unhealthy, as remediation sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub node: String,
    pub member: MemberId,
    pub since: OffsetDateTime,
    pub assessment: Assessment,
}

fn seconds(s: u32) -> Duration {
    Duration::seconds(i64::from(s))
}

/// The wait after `attempts` earlier attempts: `retryPeriod × 2^(attempts-1)`, at most a day.
pub fn retry_wait(policy: &MemberRemediation, attempts: u32) -> Duration {
    let factor = 1_i64 << attempts.saturating_sub(1).min(20);
    seconds(policy.retry_period_seconds)
        .checked_mul(i32::try_from(factor).unwrap_or(i32::MAX))
        .unwrap_or(MAX_RETRY_WAIT)
        .min(MAX_RETRY_WAIT)
}

/// Assesses one member unhealthy since `since` on `node`, given the node's record.
pub fn assess(
    policy: &MemberRemediation,
    record: Option<&RemediationStatus>,
    since: OffsetDateTime,
    now: OffsetDateTime,
) -> Assessment {
    if policy.unhealthy_seconds == 0 {
        return Assessment::Disabled;
    }
    let due = since + seconds(policy.unhealthy_seconds);
    if now < due {
        return Assessment::Waiting { due };
    }
    let attempts = record.map_or(0, |r| r.attempts);
    if attempts >= policy.max_retries {
        return Assessment::Exhausted { attempts };
    }
    if let Some(last) = record.and_then(|r| parse_time(&r.last_attempt_time)) {
        let until = last + retry_wait(policy, attempts);
        if now < until {
            return Assessment::BackingOff { until, attempts };
        }
    }
    Assessment::Due {
        attempt: attempts + 1,
        unhealthy_for: now - since,
    }
}

/// What remediation decides from.
#[derive(Clone, Debug)]
pub struct RemediationInput<'a> {
    pub policy: &'a MemberRemediation,
    /// `status.members` as of this pass.
    pub members: &'a [MemberStatus],
    /// The selected control-plane nodes (cordoning, readiness, the etcd-stopped annotation).
    pub nodes: &'a [ControlPlaneNode],
    /// Node → its member.
    pub by_node: &'a BTreeMap<String, MemberId>,
    /// The remediation records of the previous status (and this pass's attempt).
    pub records: &'a [RemediationStatus],
    /// Members whose unhealthiness is planned (their node is being rolled).
    pub skip: &'a [MemberId],
    /// The odd-voter policy's voter target: a started learner is a replacement in flight while
    /// the voters are below it, a standby otherwise.
    pub voter_target: usize,
    /// Since when this operator has watched etcd without a gap ([`Observer`]): unhealthy time
    /// before it was seen by nobody, so it does not count.
    pub observing_since: OffsetDateTime,
    /// Each node's quorum guard (absent: no guard pod there, or it is being deleted).
    pub guards: &'a BTreeMap<String, GuardSignal>,
    pub now: OffsetDateTime,
}

/// How long the operator may go without observing etcd before its unhealthy clocks restart: three
/// resyncs (a settled cluster still gets a whole pass every `RESYNC`, 60 s), so only an outage
/// of the operator or its API, or a new observer, restarts them.
pub const OBSERVATION_GAP: Duration = Duration::seconds(180);

/// Whether this operator watched etcd without a gap, and since when (#65). A member's unhealthy
/// time used to count from its `lastTransitionTime` in status, whoever wrote it and however long
/// ago: after an operator or API outage, or with a new leader whose clock is ahead, the first
/// pass could find a voter "unhealthy for" longer than the policy allows on one failed status
/// call, and remove it. The clock now starts no earlier than this observer's first pass, and
/// again after any gap longer than [`OBSERVATION_GAP`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observer {
    pub since: Option<OffsetDateTime>,
    pub last: Option<OffsetDateTime>,
}

impl Observer {
    /// Records an observation of etcd at `now` (each pass's etcd-observer step); returns since
    /// when observation has been unbroken.
    pub fn observe(&mut self, now: OffsetDateTime) -> OffsetDateTime {
        let unbroken = self
            .last
            .is_some_and(|last| now >= last && now - last <= OBSERVATION_GAP);
        let since = match self.since {
            Some(since) if unbroken => since,
            _ => now,
        };
        self.since = Some(since);
        self.last = Some(now);
        since
    }
}

/// Every started member that is unhealthy, with its node and assessment, sorted by node. The
/// unhealthy time counts from the member's `lastTransitionTime` in the previous status (it moves
/// when health changes), or from the end of an admin's hold on its node, or from when this
/// operator's unbroken observation began, whichever is latest.
pub fn candidates(input: &RemediationInput<'_>) -> Vec<Candidate> {
    input
        .by_node
        .iter()
        .filter(|(_, id)| !input.skip.contains(id))
        .filter_map(|(node, id)| {
            let m = input.members.iter().find(|m| m.id == id.to_string())?;
            if m.healthy || !m.started {
                return None;
            }
            let record = input.records.iter().find(|r| r.node_name == *node);
            let went = parse_time(&m.last_transition_time).unwrap_or(input.now);
            let held_until = record.and_then(|r| parse_time(&r.last_held_time));
            let since = held_until
                .map_or(went, |h| h.max(went))
                .max(input.observing_since);
            let hold = input
                .nodes
                .iter()
                .find(|n| n.target.name == *node)
                .and_then(Hold::of);
            let assessment = match hold {
                Some(hold) if input.policy.unhealthy_seconds != 0 => Assessment::Held { hold },
                _ => assess(input.policy, record, since, input.now),
            };
            let assessment = match assessment {
                Assessment::Due { .. } => confirmed(input, node).and_then(|()| {
                    in_flight(input, node).map_or(Ok(assessment), |in_flight| {
                        Err(Assessment::AwaitingReplacement { in_flight })
                    })
                }),
                other => Ok(other),
            }
            .unwrap_or_else(|held| held);
            Some(Candidate {
                node: node.clone(),
                member: *id,
                since,
                assessment,
            })
        })
        .collect()
}

/// The second signal (#65): the operator's own status calls can fail on a path etcd's peers do
/// not use, so a member is replaced only when the quorum guard on its node, probing etcd's
/// `/health` there, reports it unhealthy too.
fn confirmed(input: &RemediationInput<'_>, node: &str) -> Result<(), Assessment> {
    let why = match input.guards.get(node) {
        Some(GuardSignal::Unhealthy) => return Ok(()),
        Some(GuardSignal::Healthy) => format!(
            "the quorum guard on {node} reports its etcd healthy (/health answers on the node)"
        ),
        None => format!("no quorum guard runs on {node} to confirm it"),
    };
    Err(Assessment::Unconfirmed { why })
}

/// A replacement in flight on a node other than `except`, described: a member that has not
/// started, a learner not yet promoted while the voters are below the target, or a node whose
/// member remediation removed and which has no member yet.
pub fn in_flight(input: &RemediationInput<'_>, except: &str) -> Option<String> {
    let node_of = |id: &str| {
        input
            .by_node
            .iter()
            .find(|(_, m)| m.to_string() == id)
            .map(|(n, _)| n.as_str())
    };
    let voters = input.members.iter().filter(|m| m.role != "Learner").count();
    let member = input
        .members
        .iter()
        .filter(|m| node_of(&m.id) != Some(except))
        .find_map(|m| {
            let node = node_of(&m.id).unwrap_or("a node not selected");
            if !m.started {
                Some(format!(
                    "member {} added for {node} has not started yet",
                    m.id
                ))
            } else if m.role == "Learner" && voters < input.voter_target {
                Some(format!("learner {} ({node}) is not promoted yet", m.id))
            } else {
                None
            }
        });
    member.or_else(|| {
        input
            .records
            .iter()
            .filter(|r| r.node_name != except && r.attempts > 0 && !r.last_member_id.is_empty())
            .filter(|r| input.nodes.iter().any(|n| n.target.name == r.node_name))
            .find(|r| !input.by_node.contains_key(&r.node_name))
            .map(|r| {
                format!(
                    "remediation removed member {} of {} at {} and the node has no member yet",
                    r.last_member_id, r.node_name, r.last_attempt_time
                )
            })
    })
}

/// The records after this pass: a node's count starts again once its member has been healthy
/// for `minHealthySeconds`; records of nodes that are gone are dropped. Sorted by node.
pub fn settle_records(
    policy: &MemberRemediation,
    records: &[RemediationStatus],
    members: &[MemberStatus],
    by_node: &BTreeMap<String, MemberId>,
    nodes: &[String],
    now: OffsetDateTime,
) -> Vec<RemediationStatus> {
    let mut out: Vec<RemediationStatus> = records
        .iter()
        .filter(|r| nodes.contains(&r.node_name))
        .filter(|r| {
            let healthy_since = by_node
                .get(&r.node_name)
                .and_then(|id| members.iter().find(|m| m.id == id.to_string()))
                .filter(|m| m.healthy)
                .and_then(|m| parse_time(&m.last_transition_time));
            healthy_since.is_none_or(|t| now - t < seconds(policy.min_healthy_seconds))
        })
        .cloned()
        .collect();
    out.sort_by(|a, b| a.node_name.cmp(&b.node_name));
    out
}

/// The record after an attempt on `node` replacing `member`.
pub fn record_attempt(
    records: &mut Vec<RemediationStatus>,
    node: &str,
    member: MemberId,
    reason: &str,
    now: &str,
) {
    match records.iter_mut().find(|r| r.node_name == node) {
        Some(r) => {
            r.attempts += 1;
            r.last_attempt_time = now.to_owned();
            r.last_member_id = member.to_string();
            r.last_reason = reason.to_owned();
        }
        None => records.push(RemediationStatus {
            node_name: node.to_owned(),
            attempts: 1,
            last_attempt_time: now.to_owned(),
            last_member_id: member.to_string(),
            last_reason: reason.to_owned(),
            ..Default::default()
        }),
    }
    records.sort_by(|a, b| a.node_name.cmp(&b.node_name));
}

/// The records after this pass's holds: each held candidate's node says why and when (a record
/// with no attempt is made for it if it has none); every other record's hold is cleared, its
/// `lastHeldTime` kept (the unhealthy time counts from it).
pub fn record_holds(records: &mut Vec<RemediationStatus>, candidates: &[Candidate], now: &str) {
    for r in records.iter_mut() {
        r.held_by_admin.clear();
    }
    for c in candidates {
        let Assessment::Held { hold } = &c.assessment else {
            continue;
        };
        let held_by_admin = hold.describe(&c.node);
        match records.iter_mut().find(|r| r.node_name == c.node) {
            Some(r) => {
                r.held_by_admin = held_by_admin;
                r.last_held_time = now.to_owned();
            }
            None => records.push(RemediationStatus {
                node_name: c.node.clone(),
                held_by_admin,
                last_held_time: now.to_owned(),
                ..Default::default()
            }),
        }
    }
    records.sort_by(|a, b| a.node_name.cmp(&b.node_name));
}

/// Remediation as status shows it: an exhausted node is Degraded (an admin must look); a member
/// waiting for its time, backing off, held by the admin or waiting for a replacement in flight is
/// a line in the plan (a hold is also in the node's record, see [`record_holds`]). Returns the condition and the
/// plan lines.
pub fn conditions(candidates: &[Candidate]) -> (Computed, Vec<String>) {
    let mut exhausted = Vec::new();
    let mut lines = Vec::new();
    for c in candidates {
        let line = match &c.assessment {
            Assessment::Waiting { due } => format!(
                "member {} of {} unhealthy since {}; replaced at {} unless it recovers",
                c.member,
                c.node,
                format_time(c.since),
                format_time(*due)
            ),
            Assessment::BackingOff { until, attempts } => format!(
                "member {} of {} still unhealthy after {attempts} replacement(s); next attempt not before {}",
                c.member,
                c.node,
                format_time(*until)
            ),
            Assessment::Exhausted { attempts } => {
                let line = format!(
                    "member {} of {} is still unhealthy after {attempts} replacement(s) (spec.memberRemediation.maxRetries); the operator stops replacing it: look at the node (disk, etcd logs, etcd-verify's report)",
                    c.member, c.node
                );
                exhausted.push(line.clone());
                line
            }
            Assessment::Due { .. } => continue,
            Assessment::Disabled => format!(
                "member {} of {} is unhealthy; remediation is off (spec.memberRemediation.unhealthySeconds: 0)",
                c.member, c.node
            ),
            Assessment::Held { hold } => format!(
                "member {} of {} is unhealthy and held by the admin: {}; it is not replaced while the hold lasts, and its unhealthy time counts again from when the hold ends",
                c.member,
                c.node,
                hold.describe(&c.node)
            ),
            Assessment::Unconfirmed { why } => format!(
                "member {} of {} is unhealthy to the operator since {} but is not replaced: {why}; a replacement needs the node's own view to agree",
                c.member,
                c.node,
                format_time(c.since)
            ),
            Assessment::AwaitingReplacement { in_flight } => format!(
                "member {} of {} is due for replacement (unhealthy since {}) and waits: {in_flight}; one replacement at a time",
                c.member,
                c.node,
                format_time(c.since)
            ),
        };
        lines.push(line);
    }
    let cond = Computed::from_problems(
        ConditionType::EtcdMembersDegraded,
        Reason::RemediationExhausted,
        &exhausted,
    );
    (cond, lines)
}

#[cfg(test)]
#[path = "remediation_tests.rs"]
mod tests;
