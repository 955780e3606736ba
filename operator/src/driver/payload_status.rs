//! Payload status: what the operator reports upward, the way a platform's payload operator does,
//! so an upgrade orchestrator can ask "is it safe to go on?".
//!
//! Inputs: the risks the quorum guard holds drains for ([`quorum_guard::risks`]), the members'
//! health and versions, where an etcd version change stands (`status.etcdVersion`). Decision
//! (pure): the `Upgradeable` condition ([`upgradeable`]): False, with the reason, while a
//! membership change, a revision rollout, an etcd version change or a quorum risk (a member down,
//! etcd not answering) is in flight, and (reason `BackupNotReady`) while backups are configured
//! and `BackupReady` is False ([`super::backup::ready`]): an upgrade waits for a recent verified
//! backup; `status.versions` ([`versions`]): the operator's own and the
//! etcd version every member runs, moved only once all run it (what an orchestrator waits for);
//! `status.relatedObjects` ([`related_objects`]). Writes nothing itself: the status carries them,
//! and [`super::cluster_operator`] mirrors them into a ClusterOperator where the API has one.
//! Restores and CA rotations (issues 15 and 17) will hold `Upgradeable` the same way.

use crate::api::{EtcdVersionStatus, OperandVersion, RelatedObject};
use crate::controllers::quorum_guard::{self, Risk, RiskKind};
use crate::etcd::EtcdObservation;
use crate::pass::Pass;
use crate::podspec::STATIC_POD_NAMESPACE;
use crate::status::{ConditionType as C, Reason};

/// The operator's version, as `status.versions` reports it.
pub const OPERATOR_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `Upgradeable`: its status, reason and message.
pub fn upgradeable(
    risks: &[Risk],
    unhealthy: &[String],
    version: Option<&EtcdVersionStatus>,
) -> (bool, Reason, String) {
    let mut why: Vec<(Reason, String)> = Vec::new();
    for r in risks {
        let reason = match r.kind {
            RiskKind::EtcdUnreachable => Reason::EtcdUnreachable,
            RiskKind::MembershipChange => Reason::MembershipChanging,
            RiskKind::MemberDown => Reason::QuorumAtRisk,
            RiskKind::Rollout => Reason::RevisionRollingOut,
            RiskKind::BackupNotReady => Reason::BackupNotReady,
        };
        why.push((reason, r.text.clone()));
    }
    for name in unhealthy {
        let text = format!("member {name} is down");
        if !why.iter().any(|(_, t)| t.starts_with(&text)) {
            why.push((Reason::QuorumAtRisk, text));
        }
    }
    if let Some(v) =
        version.filter(|v| crate::controllers::etcd_observer::version_report::in_flight(v))
    {
        why.push((
            Reason::EtcdVersionChanging,
            format!("the etcd version change is {}: {}", v.state, v.message),
        ));
    }
    match why.first() {
        None => (
            true,
            Reason::AsExpected,
            "no membership change, rollout, etcd version change or quorum risk is in flight; \
             backups are ready or not configured"
                .to_owned(),
        ),
        Some((reason, _)) => (
            false,
            *reason,
            why.iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

/// `status.versions`: the operator's, and the etcd version once every started member runs the
/// same one (else the one reported before).
pub fn versions(obs: &EtcdObservation, prev: &[OperandVersion]) -> Vec<OperandVersion> {
    let started: Vec<Option<&str>> = obs
        .members
        .iter()
        .filter(|m| m.is_started())
        .map(|m| obs.health.get(&m.id).and_then(|h| h.version.as_deref()))
        .collect();
    let all_same = match started.first() {
        Some(Some(first)) if started.iter().all(|v| *v == Some(*first)) => Some(*first),
        _ => None,
    };
    let etcd = all_same.map(str::to_owned).or_else(|| {
        prev.iter()
            .find(|v| v.name == "etcd")
            .map(|v| v.version.clone())
    });
    let mut out = vec![OperandVersion {
        name: "operator".into(),
        version: OPERATOR_VERSION.into(),
    }];
    if let Some(version) = etcd {
        out.push(OperandVersion {
            name: "etcd".into(),
            version,
        });
    }
    out
}

/// What debug tooling should collect: the namespaces, the EtcdCluster, the guards' budget.
pub fn related_objects(operator_namespace: &str) -> Vec<RelatedObject> {
    let o = |group: &str, resource: &str, namespace: &str, name: &str| RelatedObject {
        group: group.into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
    };
    vec![
        o("", "namespaces", "", STATIC_POD_NAMESPACE),
        o("", "namespaces", "", operator_namespace),
        o(crate::api::GROUP, "etcdclusters", "", crate::api::SINGLETON),
        o(
            "policy",
            "poddisruptionbudgets",
            STATIC_POD_NAMESPACE,
            quorum_guard::GUARD_PDB,
        ),
    ]
}

/// Sets `Upgradeable`, `status.versions` and `status.relatedObjects` for this pass. `backup`:
/// the risk `BackupReady` is, if any (after every other risk: it names the reason last).
pub fn reconcile(p: &mut Pass<'_>, backup: Option<&Risk>) {
    let guards = quorum_guard::guard_pods(&p.inputs.pods);
    let mut risks = quorum_guard::risks(&p.o, &guards);
    risks.extend(backup.cloned());
    let unhealthy: Vec<String> =
        p.o.etcd
            .members
            .iter()
            .filter(|m| m.is_started() && !p.o.etcd.is_healthy(m.id))
            .map(|m| m.name.clone())
            .collect();
    let (status, reason, message) = upgradeable(&risks, &unhealthy, p.status.etcd_version.as_ref());
    p.cond(C::Upgradeable, status, reason, message);
    p.status.versions = versions(&p.o.etcd, &p.o.prev.versions);
    p.status.related_objects = related_objects(&p.ctx.config.operator_namespace);
}

#[cfg(test)]
#[path = "payload_status_tests.rs"]
mod tests;
