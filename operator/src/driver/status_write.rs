//! The end of a pass: the EtcdCluster's status written when it changed (conditions with their
//! defaults and aggregates, members, node statuses, the controllers' status fields), the
//! barrier recorded for the next pass, and the payload status mirrored into a ClusterOperator
//! where the API serves one.

use super::cluster_operator;
use crate::api::{DefragmentationStatus, EtcdClusterStatus};
use crate::controllers::etcd_observer::member_status;
use crate::controllers::membership::remediation;
use crate::pass::{Pass, StatusDraft};
use crate::status::{Computed, ConditionType as C, Reason, merge, with_aggregates};

/// Writes status when it changed, and the barrier for the next pass.
pub(super) async fn write_status(p: &mut Pass<'_>) {
    let now = p.o.now;
    let stamp = crate::certs::format_time(now);
    // Members as last written unless this pass read etcd (it may have stopped before).
    let members = if p.o.etcd_read && p.o.etcd.error.is_none() {
        member_status::member_statuses(&p.o.etcd, &p.o.prev.members, &stamp)
    } else {
        p.o.prev.members.clone()
    };
    serving_expiry_metric(p, &members);
    let conds = with_aggregates(
        fill_defaults(std::mem::take(&mut p.conds)),
        &p.o.prev.conditions,
        now,
    );
    let remediations = remediation::settle_records(
        &p.o.spec.member_remediation,
        &p.status.remediations,
        &members,
        &p.o.by_node,
        &p.o.node_names(),
        now,
    );
    let draft = std::mem::take(&mut p.status);
    let status = EtcdClusterStatus {
        observed_generation: p.o.cluster.metadata.generation,
        conditions: merge(&p.o.prev.conditions, &conds, &stamp),
        members,
        remediations,
        ..drafted(draft.clone())
    };
    for c in &status.conditions {
        p.ctx.metrics.condition(&c.type_, &c.status);
    }
    p.st.written = Some(draft);
    if status != p.o.prev
        && let Err(e) = p.w.cluster_status(&p.o.cluster, &status).await
    {
        p.note(format!("could not write status: {e}"));
        p.ctx.metrics.error("status", e.category());
    }
    mirror_cluster_operator(p, &status).await;
    // Last: the status write itself is awaited too.
    p.st.awaited.append(&mut p.w.awaited);
}

/// The status sections of `draft`; conditions, members and remediations are the pass's own.
fn drafted(draft: StatusDraft) -> EtcdClusterStatus {
    EtcdClusterStatus {
        latest_available_revision: draft.latest,
        node_statuses: draft.node_statuses,
        defragmentation: (draft.defrag != DefragmentationStatus::default()).then_some(draft.defrag),
        corruption_check: draft.corruption,
        backup: draft.backup,
        certificates: draft.certificates,
        etcd_version: draft.etcd_version,
        quorum_guard: draft.quorum_guard,
        versions: draft.versions,
        related_objects: draft.related_objects,
        cluster_identity: draft.cluster_identity,
        ..EtcdClusterStatus::default()
    }
}

/// Mirrors the payload status into ClusterOperator `etcd` where the API serves the kind
/// (looked for again every [`cluster_operator::RECHECK`] while it is not).
async fn mirror_cluster_operator(p: &mut Pass<'_>, status: &EtcdClusterStatus) {
    let now = p.o.now;
    let served = match p.st.cluster_operator_api {
        Some((true, _)) => true,
        Some((false, asked)) if now - asked < cluster_operator::RECHECK => false,
        _ => {
            let served = cluster_operator::served(&p.ctx.client).await;
            p.st.cluster_operator_api = Some((served, now));
            served
        }
    };
    if !served {
        return;
    }
    match cluster_operator::mirror(&p.ctx.client, &cluster_operator::desired_status(status)).await {
        Ok(true) => p.note("ClusterOperator etcd status updated"),
        Ok(false) => {}
        Err(e) => {
            p.note(format!("could not mirror the status: {e}"));
            p.ctx
                .metrics
                .error("cluster-operator", crate::category::Category::Api);
            // The kind may have gone (its CRD deleted): look again next time.
            p.st.cluster_operator_api = None;
        }
    }
}

/// Every controller condition is present (False when its controller didn't report).
fn fill_defaults(mut conds: Vec<Computed>) -> Vec<Computed> {
    for t in C::CONTROLLERS.into_iter().chain([
        C::EtcdMembersProgressing,
        C::NodeInstallerProgressing,
        C::NodeInstallerDegraded,
        C::EtcdMembersDegraded,
        C::SpecDegraded,
    ]) {
        if !conds.iter().any(|c| c.type_ == t) {
            conds.push(Computed::new(t, false, Reason::AsExpected, ""));
        }
    }
    if !conds.iter().any(|c| c.type_ == C::Upgradeable) {
        conds.push(Computed::new(
            C::Upgradeable,
            false,
            Reason::Unknown,
            "etcd was not read in this pass",
        ));
    }
    conds
}

/// `etcd_operator_member_serving_certificate_expiry_timestamp_seconds`, from the members as
/// status shows them (a member down keeps the expiry last seen).
fn serving_expiry_metric(p: &Pass<'_>, members: &[crate::api::MemberStatus]) {
    let family = &p.ctx.metrics.serving_certificate_expiry;
    family.clear();
    for m in members.iter().filter(|m| !m.name.is_empty()) {
        if let Some(t) = crate::certs::parse_time(&m.serving_certificate_expiry) {
            let label = crate::metrics::MemberLabel {
                member: m.name.clone(),
            };
            family.get_or_create(&label).set(t.unix_timestamp());
        }
    }
}
