//! etcd observer: reads etcd once per pass and says how its members are.
//!
//! Inputs: the operator's client identity (from the certificate signer), the client URLs last
//! seen plus every control-plane node's, `etcd-verify`'s reports on the etcd pods. Reads the
//! member list, each member's status, the alarms ([`crate::etcd::observe`]). Decision
//! ([`member_conditions`], pure): `EtcdMembersAvailable` (quorate or not), `EtcdMembersDegraded`
//! (unhealthy members that are not a planned restart, raised alarms, a node's etcd held by
//! `etcd-verify`), `EtcdMembersProgressing` for planned restarts. Writes nothing; metrics of
//! members by role and health. When no member answers, the pass stops here: nothing else can be
//! decided without etcd.

use std::collections::{BTreeMap, BTreeSet};

use membership::{ClusterView, MemberId, MemberUrl};

use super::cert_signer::Issued;
use crate::controller::{ControllerName, Flow};
use crate::etcd::{self, EtcdObservation};
use crate::metrics::{MemberRoleLabels, Metrics};
use crate::pass::Pass;
use crate::status::{Computed, ConditionType as C, Reason};

pub mod cluster_token;
pub mod member_status;
pub mod version_report;

const NAME: ControllerName = ControllerName::EtcdObserver;

/// Runs the observer; [`Flow::Stop`] when etcd could not be read. `known` is the observer's own
/// state: the client URLs of the members it last saw, to find etcd next time.
pub async fn reconcile(p: &mut Pass<'_>, issued: &Issued, known: &mut BTreeSet<String>) -> Flow {
    let obs = {
        let _t = p.ctx.metrics.time(NAME.as_str());
        let mut endpoints: BTreeSet<String> = known.clone();
        endpoints.extend(
            p.o.nodes
                .iter()
                .filter_map(|n| n.target.client_url().ok().map(|u| u.to_string())),
        );
        let endpoints: Vec<MemberUrl> = endpoints.iter().filter_map(|e| e.parse().ok()).collect();
        match p
            .st
            .etcd
            .client(endpoints, &issued.tls, p.ctx.config.etcd_timeout)
        {
            Ok(client) => etcd::observe(client).await,
            Err(e) => EtcdObservation {
                error: Some(e.to_string()),
                ..Default::default()
            },
        }
    };
    p.o.with_etcd(obs);
    if let Some(why) = crate::history::replaced(p.st.cluster_id, p.o.etcd.cluster_id) {
        p.report = crate::history::relist(p.ctx, p.st, p.inputs, why);
        return Flow::Stop;
    }
    if p.o.etcd.cluster_id.is_some() {
        p.st.cluster_id = p.o.etcd.cluster_id;
    }
    let mut conds = member_conditions(&p.o.etcd, &p.o.restarting());
    let blocked = blocked_by_verify(p);
    conds.push(Computed::from_problems(
        C::EtcdMembersDegraded,
        Reason::BlockedByVerify,
        &blocked,
    ));
    p.conds.extend(conds);
    let summary = match &p.o.etcd.error {
        Some(e) => format!("unreachable: {e}"),
        None => p.o.etcd.cluster_view().health_summary(),
    };
    p.next(NAME, summary);
    for b in blocked {
        p.next(NAME, b);
    }
    if p.o.etcd.error.is_none() {
        *known =
            p.o.etcd
                .members
                .iter()
                .flat_map(|m| m.client_urls.iter().map(ToString::to_string))
                .collect();
    }
    record_members(&p.ctx.metrics, &p.o.etcd);
    if p.o.etcd.error.is_some() {
        p.note("etcd not reachable; nothing else can be decided");
        return Flow::Stop;
    }
    Flow::Continue
}

/// Nodes whose etcd `etcd-verify` holds back, with its reason.
fn blocked_by_verify(p: &Pass<'_>) -> Vec<String> {
    p.o.pods
        .iter()
        .filter_map(|(node, (pod, _))| {
            Some(format!(
                "{node}: etcd-verify blocks etcd: {}",
                pod.blocked.as_ref()?
            ))
        })
        .collect()
}

/// Member conditions. A member whose node is being rolled (`restarting`: member id → its node
/// and the revision it moves to) and is down is a planned restart, reported as progress rather
/// than degradation.
pub fn member_conditions(
    obs: &EtcdObservation,
    restarting: &BTreeMap<MemberId, (String, i64)>,
) -> Vec<Computed> {
    if let Some(e) = &obs.error {
        return vec![
            Computed::new(
                C::EtcdMembersAvailable,
                false,
                Reason::EtcdUnreachable,
                format!("no etcd member answered: {e}"),
            ),
            Computed::new(
                C::EtcdObserverDegraded,
                true,
                Reason::EtcdUnreachable,
                e.clone(),
            ),
        ];
    }
    let view = obs.cluster_view();
    let voters = membership::voters(&obs.members);
    let healthy = view
        .members
        .iter()
        .filter(|m| !m.member.is_learner && m.healthy)
        .count();
    let quorate = membership::is_quorate(healthy, voters);
    let unhealthy = unhealthy(obs, &view, restarting);
    let alarms: Vec<String> = obs
        .preflight
        .alarms
        .iter()
        .map(|a| format!("alarm {a} is raised; membership changes wait until it is cleared"))
        .collect();
    let mut out = vec![
        Computed::new(
            C::EtcdMembersAvailable,
            quorate,
            if quorate {
                Reason::Quorate
            } else {
                Reason::NotQuorate
            },
            view.health_summary(),
        ),
        Computed::from_problems(C::EtcdMembersDegraded, Reason::UnhealthyMembers, &unhealthy),
        Computed::from_problems(C::EtcdMembersDegraded, Reason::AlarmRaised, &alarms),
        Computed::new(C::EtcdObserverDegraded, false, Reason::AsExpected, ""),
    ];
    let planned = planned_restarts(&view, restarting);
    if !planned.is_empty() {
        out.push(Computed::new(
            C::EtcdMembersProgressing,
            true,
            Reason::PlannedRestart,
            planned.join("; "),
        ));
    }
    out
}

/// Started members that are down and not a planned restart, with etcd's answer.
fn unhealthy(
    obs: &EtcdObservation,
    view: &ClusterView,
    restarting: &BTreeMap<MemberId, (String, i64)>,
) -> Vec<String> {
    view.members
        .iter()
        .filter(|m| !m.healthy && m.member.is_started() && !restarting.contains_key(&m.member.id))
        .map(|m| {
            let why = obs
                .health
                .get(&m.member.id)
                .and_then(|h| h.error.clone())
                .unwrap_or_default();
            format!("{} ({}): {why}", m.member.name, m.member.id)
        })
        .collect()
}

/// Members down because their node is being rolled.
fn planned_restarts(
    view: &ClusterView,
    restarting: &BTreeMap<MemberId, (String, i64)>,
) -> Vec<String> {
    view.members
        .iter()
        .filter(|m| !m.healthy)
        .filter_map(|m| {
            let (node, target) = restarting.get(&m.member.id)?;
            Some(if m.member.is_started() {
                format!("{node} restarting for revision {target}")
            } else {
                format!(
                    "{node} starting member {} for revision {target}",
                    m.member.id
                )
            })
        })
        .collect()
}

fn record_members(metrics: &Metrics, obs: &EtcdObservation) {
    metrics.members.clear();
    for m in &obs.members {
        let healthy = obs.is_healthy(m.id);
        metrics
            .members
            .get_or_create(&MemberRoleLabels {
                role: if m.is_learner { "learner" } else { "voter" }.to_owned(),
                healthy: healthy.to_string(),
            })
            .inc();
    }
    if let Some(idx) = obs.leader_raft_index() {
        metrics
            .leader_raft_index
            .set(i64::try_from(idx).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
#[path = "etcd_observer_tests.rs"]
mod tests;
