//! Remediation of a member that stays unhealthy on a node that still exists (etcd crash-looping,
//! an unreadable WAL, a disk gone bad): after `spec.memberRemediation.unhealthySeconds` it is
//! replaced through the gated remove → learner path, like Cluster API's control plane remediates
//! a machine. Each node's attempts are counted in `status.remediations`; a further attempt waits
//! `retryPeriodSeconds`, doubled for each earlier attempt, and stops at `maxRetries` (then only
//! a Degraded condition asks for an admin). The count starts again once the node's member has
//! been healthy for `minHealthySeconds`. Pure: everything is decided from the observation, the
//! previous status and `now`.

use crate::certs::parse_time;
use std::collections::BTreeMap;

use crate::certs::format_time;
use crate::status::{Computed, ConditionType, Reason};
use membership::MemberId;
use time::{Duration, OffsetDateTime};

use crate::api::{MemberRemediation, MemberStatus, RemediationStatus};

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

/// Every started member that is unhealthy, with its node (by `by_node`: node → member) and
/// assessment, sorted by node. `skip` holds members whose unhealthiness is planned (their node
/// is being rolled). The unhealthy time comes from the member's `lastTransitionTime` in the
/// previous status (it moves when health changes).
pub fn candidates(
    policy: &MemberRemediation,
    members: &[MemberStatus],
    by_node: &BTreeMap<String, MemberId>,
    records: &[RemediationStatus],
    skip: &[MemberId],
    now: OffsetDateTime,
) -> Vec<Candidate> {
    by_node
        .iter()
        .filter(|(_, id)| !skip.contains(id))
        .filter_map(|(node, id)| {
            let m = members.iter().find(|m| m.id == id.to_string())?;
            if m.healthy || !m.started {
                return None;
            }
            let since = parse_time(&m.last_transition_time).unwrap_or(now);
            let record = records.iter().find(|r| r.node_name == *node);
            Some(Candidate {
                node: node.clone(),
                member: *id,
                since,
                assessment: assess(policy, record, since, now),
            })
        })
        .collect()
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
        }),
    }
    records.sort_by(|a, b| a.node_name.cmp(&b.node_name));
}

/// Remediation as status shows it: an exhausted node is Degraded (an admin must look); a member
/// waiting for its time or backing off is a line in the plan. Returns the condition and the
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
