//! The `scale-down` scenario: five voters go down to three, and the admin chooses which members
//! go. The admin annotates two Nodes `etcd.static-operator.io/remove-member` (Cluster API's
//! `delete-machine` plays the same part): the etcd leader's node, and a node the odd-voter policy
//! would not pick by itself (it takes the last node by name). The operator removes exactly those
//! two members, one at a time through the quorum gate, the leader last and only after handing
//! its leadership off; the three other members keep their ids (nothing is replaced), and the
//! chosen nodes get no member again while they carry the annotation.

use std::time::{Duration, Instant};

use etcd_operator::api::EtcdClusterStatus;
use etcd_operator::observed::objects::REMOVE_MEMBER_ANNOTATION;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::harness::{Harness, member_of};
use crate::controlplane::ControlPlaneError;

const SETTLE: Duration = Duration::from_secs(240);
/// How long the chosen nodes must stay without a member after the scale-down.
const HOLD: Duration = Duration::from_secs(10);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// The leader's node, and the first of n2..n4 that is not it (never n5: the policy's own pick).
fn choose(s: &EtcdClusterStatus) -> Result<[String; 2], ControlPlaneError> {
    let leader = s
        .members
        .iter()
        .find(|m| m.leader)
        .map(|m| m.name.clone())
        .ok_or_else(|| failed("no member is the leader"))?;
    let other = ["n2", "n3", "n4"]
        .into_iter()
        .find(|n| *n != leader)
        .unwrap_or("n2");
    Ok([leader, other.to_owned()])
}

/// The member id of `node` in `s`.
fn member_id_of(s: &EtcdClusterStatus, node: &str) -> Result<String, ControlPlaneError> {
    member_of(s, node).ok_or_else(|| failed(format!("{node} has no member")))
}

async fn annotate(h: &mut Harness, node: &str) -> Result<(), ControlPlaneError> {
    let nodes: Api<Node> = Api::all(h.cp.client());
    let why = format!("scale-down: {node} leaves the control plane");
    let patch =
        serde_json::json!({ "metadata": { "annotations": { REMOVE_MEMBER_ANNOTATION: why } } });
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    h.step(format!("Node {node} annotated {REMOVE_MEMBER_ANNOTATION}"));
    Ok(())
}

/// Only the kept nodes have members and node statuses: three healthy voters on the latest
/// revision, each with the id it had before.
fn scaled_down(s: &EtcdClusterStatus, kept: &[(String, String)]) -> bool {
    let voters = s
        .members
        .iter()
        .filter(|m| m.role == "Voter" && m.healthy && m.started)
        .count();
    voters == 3
        && s.members.len() == 3
        && crate::view::settled(s, 3)
        && s.node_statuses
            .iter()
            .all(|n| kept.iter().any(|(node, _)| *node == n.node_name))
        && kept
            .iter()
            .all(|(node, id)| member_of(s, node).as_deref() == Some(id.as_str()))
}

pub async fn scale_down(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.cp.add_node("n4").await?;
    h.cp.add_node("n5").await?;
    h.step("nodes n4 and n5 added (5 nodes)");
    let s0 = h.wait_settled(5, SETTLE).await?;
    let chosen = choose(&s0)?;
    let kept: Vec<(String, String)> = s0
        .members
        .iter()
        .filter(|m| !chosen.contains(&m.name))
        .map(|m| (m.name.clone(), m.id.clone()))
        .collect();
    h.step(format!(
        "5 voters; the admin chooses {} (the leader) and {} to go",
        chosen[0], chosen[1]
    ));
    for node in &chosen {
        annotate(h, node).await?;
    }
    h.wait_status(
        "3 healthy voters on the latest revision, the kept nodes' members unchanged",
        SETTLE,
        |s| scaled_down(s, &kept),
    )
    .await?;
    h.step(format!(
        "members of {} and {} removed; {} keep their members",
        chosen[0],
        chosen[1],
        kept.iter()
            .map(|(n, id)| format!("{n} ({id})"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let leader_id = member_id_of(&s0, &chosen[0])?;
    let handed_off = h.cp.operators().iter().any(|p| {
        p.log()
            .contains(&format!("before removing member {leader_id}"))
    });
    if !handed_off {
        return Err(failed(format!(
            "no operator log line says leadership was moved off {leader_id} before its removal"
        )));
    }
    h.step(format!(
        "leadership was handed off {} ({leader_id}) before its removal",
        chosen[0]
    ));
    let until = Instant::now() + HOLD;
    while Instant::now() < until {
        let s = h.status().await;
        if !scaled_down(&s, &kept) {
            return Err(failed(format!(
                "the scale-down did not hold: {}",
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    h.step(format!(
        "for {}s the chosen nodes got no member again",
        HOLD.as_secs()
    ));
    Ok(())
}
