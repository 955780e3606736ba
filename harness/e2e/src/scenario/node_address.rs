//! The `node-address-change` scenario: under write load, node n2 comes back on another address
//! (its old one retired: a stale etcd cannot bind it, a dial to it is closed). The operator
//! re-issues n2's certificates for the new address, moves member n2 there with `MemberUpdate`
//! and rolls a revision carrying the new URL, n2 first. n2 rejoins as the same member on its own
//! data (nothing archived, no learner, no snapshot sent), and the published endpoints follow.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use etcd_operator::certs::inspect_certs;
use etcd_operator::controllers::host_endpoints::ENDPOINTS_CONFIGMAP;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::failover_audit::cluster_events;
use super::harness::{Harness, member_of};
use crate::controlplane::{ControlPlaneError, STATIC_NS, wait_for};

const NODE: &str = "n2";
/// A move, then a rollout of three nodes.
const DEADLINE: Duration = Duration::from_secs(240);
const MOVED: &str = "MemberPeerURLMoved";
/// Membership changes other than the move: none may happen.
const REPLACING: [&str; 8] = [
    "MemberAddedAsLearner",
    "MemberPromoted",
    "UnstartedLearnerRemoved",
    "MemberOfGoneNodeRemoved",
    "MemberWithLostDataRemoved",
    "UnhealthyMemberReplaced",
    "VoterRemovedForOddCount",
    "DivergentMemberReplaced",
];

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn at(url: &str, ip: IpAddr) -> bool {
    url.contains(&format!("//{ip}:"))
}

pub async fn node_address_change(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let id = member_of(&before, NODE).ok_or_else(|| failed(format!("{NODE} has no member")))?;
    let revision = before.latest_available_revision;
    let changes_before = count_events(h, &REPLACING).await?;
    let old_ip = h.cp.node(NODE)?.ip();
    let started = Instant::now();
    let retired = h.cp.change_node_addresses(&[NODE]).await?;
    let new_ip = h.cp.node(NODE)?.ip();
    h.step(format!(
        "{NODE} came back on {new_ip}; {old_ip} is retired (held, nothing can listen there)"
    ));
    let moved = h
        .wait_status(&format!("member {id} moved to {new_ip}"), DEADLINE, |s| {
            s.members
                .iter()
                .any(|m| m.id == id && at(&m.peer_url, new_ip))
        })
        .await?;
    let moved_after = started.elapsed();
    let s = h.wait_settled_after(3, revision, DEADLINE).await?;
    let took = started.elapsed();
    if member_of(&s, NODE).as_deref() != Some(id.as_str()) || s.members.len() != 3 {
        return Err(failed(format!(
            "{NODE} should still be member {id}: {}",
            super::harness::describe_members(&s)
        )));
    }
    if let Some(m) = s.members.iter().find(|m| at(&m.peer_url, old_ip)) {
        return Err(failed(format!("member {} still has {}", m.id, m.peer_url)));
    }
    own_data_kept(h)?;
    let moves = cluster_events(&h.cp, &[MOVED]).await.map_err(failed)?;
    let changes_after = count_events(h, &REPLACING).await?;
    if moves.len() != 1
        || moves[0].count != 1
        || !moves[0].note.contains(&new_ip.to_string())
        || changes_after != changes_before
    {
        return Err(failed(format!(
            "expected one {MOVED} Event naming {new_ip} and no other membership change ({changes_before} before, {changes_after} after): {moves:?}"
        )));
    }
    endpoints_follow(h, &id, new_ip, old_ip).await?;
    super::endpoints::every_node_published(h).await?;
    certificates_follow(h, new_ip, old_ip).await?;
    drop(retired);
    h.step(format!(
        "{NODE} moved {old_ip} → {new_ip} as the same member {id}: peer URL moved after {:.1}s (revision {} then), every node on revision {} after {:.1}s; nothing archived on {NODE}, endpoints and certificates follow",
        moved_after.as_secs_f64(),
        moved.latest_available_revision,
        s.latest_available_revision,
        took.as_secs_f64()
    ));
    Ok(())
}

async fn count_events(h: &Harness, reasons: &[&str]) -> Result<i32, ControlPlaneError> {
    let events = cluster_events(&h.cp, reasons).await.map_err(failed)?;
    Ok(events.iter().map(|e| e.count).sum())
}

/// etcd-verify archived nothing on the node: it restarted on its own data dir.
fn own_data_kept(h: &Harness) -> Result<(), ControlPlaneError> {
    let dir = h.cp.node(NODE)?.data_dir();
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| ControlPlaneError::Io(format!("reading {}", dir.display()), e))?;
    let archived: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("member-archived"))
        .collect();
    if archived.is_empty() {
        Ok(())
    } else {
        Err(failed(format!(
            "{NODE}'s data dir was archived ({archived:?}): it did not restart on its own data"
        )))
    }
}

/// `etcd-endpoints` lists the member at its new client address (it advertises it on start).
async fn endpoints_follow(
    h: &mut Harness,
    id: &str,
    new_ip: IpAddr,
    old_ip: IpAddr,
) -> Result<(), ControlPlaneError> {
    let api: Api<ConfigMap> = Api::namespaced(h.cp.client(), STATIC_NS);
    let what = format!("{ENDPOINTS_CONFIGMAP} to follow {NODE} to {new_ip}");
    wait_for(Duration::from_secs(30), &what, || async {
        let data = api
            .get_opt(ENDPOINTS_CONFIGMAP)
            .await
            .map_err(|e| format!("reading {ENDPOINTS_CONFIGMAP}: {e}"))?
            .and_then(|c| c.data)
            .unwrap_or_default();
        let ours = data.get(id).cloned().unwrap_or_default();
        let stale = data.values().any(|v| v.starts_with(&format!("{old_ip}:")));
        if ours == format!("{new_ip}:2379") && !stale {
            Ok(())
        } else {
            Err(format!("{data:?}"))
        }
    })
    .await
}

/// Every certificate of the node names its new address and not the old one.
async fn certificates_follow(
    h: &Harness,
    new_ip: IpAddr,
    old_ip: IpAddr,
) -> Result<(), ControlPlaneError> {
    let ca = h.signer().await?;
    let metrics = h.signer_of(etcd_operator::certs::CaRole::Metrics).await?;
    let all = h.secret_data_of(STATIC_NS, "etcd-all-certs").await?;
    let signers = etcd_operator::certs::Signers {
        etcd: &ca,
        metrics: &metrics,
    };
    let infos = inspect_certs(signers, &all);
    let ours: Vec<_> = infos
        .iter()
        .filter(|i| i.node.as_deref() == Some(NODE))
        .collect();
    let wrong: Vec<String> = ours
        .iter()
        .filter(|i| !i.ip_addresses.contains(&new_ip) || i.ip_addresses.contains(&old_ip))
        .map(|i| format!("{} {:?}", i.secret_key, i.ip_addresses))
        .collect();
    if ours.len() != 3 || !wrong.is_empty() {
        return Err(failed(format!(
            "{NODE}'s certificates should name {new_ip} and not {old_ip}: {} found, wrong: {wrong:?}",
            ours.len()
        )));
    }
    Ok(())
}
