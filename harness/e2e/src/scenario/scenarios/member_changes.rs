//! The membership-change scenarios: a member whose data dir was destroyed (at a reboot, then under
//! its running etcd, restarted in place), a node deleted and
//! another added, a standby learner beside three voters and its promotion when a voter's node
//! goes, a member an admin removed behind the operator's back, and an unhealthy member replaced
//! after its data was damaged.

use std::time::{Duration, Instant};

use membership::EtcdRefusal;

use super::{SETTLE, failed};
use crate::controlplane::ControlPlaneError;
use crate::scenario::harness::{Harness, member_ids, member_of};

pub(super) async fn data_loss(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let old = member_of(&before, "n2").ok_or_else(|| failed("n2 has no member"))?;
    h.cp.stop_node("n2").await?;
    let data = h.cp.node("n2")?.data_dir();
    std::fs::remove_dir_all(&data)
        .map_err(|e| failed(format!("wiping {}: {e}", data.display())))?;
    h.step(format!(
        "n2 stopped and its data dir {} destroyed (member {old})",
        data.display()
    ));
    h.cp.restart_node("n2").await?;
    h.step("n2 restarted with no data");
    rejoins_as_new_member(h, "n2", &old, "n2's old member removed").await?;
    data_lost_under_running_etcd(h, "n3").await
}

/// The second act of `data-loss` (#65 item 2): `node`'s data dir vanishes under its running etcd
/// (a disk that failed and came back empty, an `rm -rf` by mistake) and etcd then dies. The
/// kubelet restarts the container in place, in the same pod sandbox, so no init container runs.
/// etcd must not start again as the same started member on the empty data dir: etcd's no-WAL
/// `existing` path would rejoin it as that voter with an empty log, which can vote for a
/// candidate missing committed writes. Its member is replaced instead, as after a reboot.
async fn data_lost_under_running_etcd(
    h: &mut Harness,
    node: &str,
) -> Result<(), ControlPlaneError> {
    let old = member_of(&h.status().await, node)
        .ok_or_else(|| failed(format!("{node} has no member")))?;
    let flag = format!("--listen-peer-urls=https://{}:2380", h.cp.node(node)?.ip());
    let pid = crate::scenario::restart_free::etcd_pid(&flag)
        .ok_or_else(|| failed(format!("no etcd process of {node} runs")))?;
    let member_dir = h.cp.node(node)?.data_dir().join("member");
    std::fs::remove_dir_all(&member_dir)
        .map_err(|e| failed(format!("removing {}: {e}", member_dir.display())))?;
    crate::scenario::minority_recovery::signal_all(&[pid], nix::sys::signal::Signal::SIGKILL)?;
    h.step(format!(
        "{node}'s {} removed under its running etcd, which then died (SIGKILL, pid {pid}): \
         its container restarts in place (member {old})",
        member_dir.display()
    ));
    // Either the old member goes (the gate held and the operator replaced it), or etcd started
    // again on the emptied data dir as that member: the second ends the story at once.
    let restarted = std::cell::Cell::new(None);
    h.wait_status(&format!("{node}'s old member removed"), SETTLE, |s| {
        if let Some(p) = crate::scenario::restart_free::etcd_pid(&flag)
            && p != pid
            && member_dir.join("wal").exists()
            && member_ids(s).contains(&old)
        {
            restarted.set(Some(p));
            return true;
        }
        !member_ids(s).contains(&old)
    })
    .await?;
    if let Some(p) = restarted.get() {
        return Err(failed(format!(
            "{node}'s etcd restarted in place (pid {p}) on the emptied data dir as started member \
             {old}: it rejoined with an empty log, and nothing gated that start"
        )));
    }
    // Removed because the gate in etcd's container reported the lost data dir, not by some
    // other path (remediation, a stale revision).
    let events =
        crate::scenario::failover_audit::cluster_events(&h.cp, &["MemberWithLostDataRemoved"])
            .await
            .map_err(failed)?;
    let Some(event) = events.iter().find(|e| e.note.contains(&old)) else {
        return Err(failed(format!(
            "no MemberWithLostDataRemoved Event names member {old}: {events:?}"
        )));
    };
    h.step(format!(
        "the gate held the restart in place (DataDirLost): {}",
        event.note
    ));
    rejoins_as_new_member(h, node, &old, &format!("{node}'s old member gone")).await
}

/// Waits until `old`, `node`'s member before, is gone from status (the wait named `gone`), then
/// until three voters settle with `node` back under a new member id.
async fn rejoins_as_new_member(
    h: &mut Harness,
    node: &str,
    old: &str,
    gone: &str,
) -> Result<(), ControlPlaneError> {
    h.wait_status(gone, SETTLE, |s| !member_ids(s).contains(old))
        .await?;
    let s = h.wait_settled(3, SETTLE).await?;
    let new = member_of(&s, node)
        .ok_or_else(|| failed(format!("{node} has no member after recovery")))?;
    if new == old {
        return Err(failed(format!("{node} kept its old member id {old}")));
    }
    h.step(format!("{node} rejoined as member {new}"));
    Ok(())
}

pub(super) async fn node_replacement(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let old = member_of(&h.status().await, "n3").ok_or_else(|| failed("n3 has no member"))?;
    h.cp.delete_node("n3").await?;
    h.step(format!("node n3 deleted (member {old})"));
    h.wait_status("n3's member removed", SETTLE, |s| {
        !member_ids(s).contains(&old)
    })
    .await?;
    h.cp.add_node("n4").await?;
    h.step("node n4 added");
    let s = h.wait_settled(3, SETTLE).await?;
    if member_of(&s, "n4").is_none() {
        return Err(failed("n4 is not a member"));
    }
    Ok(())
}

/// The standby learner of an even node: n4 joins as a learner and stays one beside three voters;
/// when n1 is deleted, n1's member goes and n4 is promoted.
pub(super) async fn odd_voters(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.cp.add_node("n4").await?;
    h.step("node n4 added (4 nodes)");
    let s = h
        .wait_status(
            "n4 a started, healthy standby learner beside 3 healthy voters",
            SETTLE,
            |s| standby_of(s, "n4") && healthy_voters(s) == 3,
        )
        .await?;
    let n4 = member_of(&s, "n4").ok_or_else(|| failed("n4 has no member"))?;
    h.step(format!("n4 is standby learner {n4}; 3 voters"));
    let progressing = s
        .conditions
        .iter()
        .find(|c| c.type_ == "EtcdMembersProgressing")
        .map(|c| (c.status.clone(), c.message.clone()))
        .unwrap_or_default();
    if progressing.0 != "False" || !progressing.1.contains("standby") {
        return Err(failed(format!(
            "EtcdMembersProgressing should be False and name the standby: {progressing:?}"
        )));
    }
    // Hold for a while: the standby must not be promoted nor the status churn to Degraded.
    let hold = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < hold {
        let s = h.status().await;
        if !standby_of(&s, "n4") || s.members.iter().filter(|m| m.role == "Voter").count() != 3 {
            return Err(failed(format!(
                "the standby did not stay a standby: {}",
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    h.step("n4 stayed a standby for 10 s with 3 voters");
    let n1 = member_of(&s, "n1").ok_or_else(|| failed("n1 has no member"))?;
    h.cp.delete_node("n1").await?;
    h.step(format!("node n1 deleted (voter {n1})"));
    let s = h.wait_settled(3, SETTLE).await?;
    if member_of(&s, "n4").as_deref() != Some(n4.as_str()) {
        return Err(failed(format!(
            "n4 should have been promoted as member {n4}, status shows {:?}",
            member_of(&s, "n4")
        )));
    }
    h.step(format!("n4's standby {n4} promoted: 3 voters n2, n3, n4"));
    Ok(())
}

/// `etcdctl member remove` of a running member (n2): its etcd exits, and the operator brings
/// the node back as a new member by itself.
pub(super) async fn member_removed_externally(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let old = member_of(&h.status().await, "n2").ok_or_else(|| failed("n2 has no member"))?;
    let id: membership::MemberId = old
        .parse()
        .map_err(|e| failed(format!("member id {old}: {e}")))?;
    let etcd = h.etcd().await?;
    // etcd refuses a removal for a few seconds after a member (re)connected ("unhealthy
    // cluster"); an admin retries, and so does this.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match etcd.remove(id).await {
            Ok(()) => break,
            Err(e)
                if e.refused(EtcdRefusal::UnhealthyCluster)
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(failed(format!("removing {old} as an admin would: {e}"))),
        }
    }
    h.step(format!(
        "n2's running member {old} removed from outside the operator"
    ));
    rejoins_as_new_member(h, "n2", &old, "the operator sees the removal").await
}

/// n2's WAL becomes unreadable: etcd-verify keeps its etcd from starting, the member stays
/// unhealthy, and after spec.memberRemediation.unhealthySeconds the operator replaces it.
pub(super) async fn unhealthy_member_replaced(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.patch_spec(serde_json::json!({"memberRemediation": {"unhealthySeconds": 15}}))
        .await?;
    h.step("spec.memberRemediation.unhealthySeconds set to 15");
    let old = member_of(&h.status().await, "n2").ok_or_else(|| failed("n2 has no member"))?;
    h.cp.stop_node("n2").await?;
    let wal_dir = h.cp.node("n2")?.data_dir().join("member").join("wal");
    let mut damaged = 0;
    for entry in std::fs::read_dir(&wal_dir)
        .map_err(|e| failed(format!("{}: {e}", wal_dir.display())))?
        .flatten()
    {
        if entry.path().extension().is_some_and(|x| x == "wal") {
            std::fs::write(entry.path(), vec![0xa5_u8; 4096])
                .map_err(|e| failed(format!("{}: {e}", entry.path().display())))?;
            damaged += 1;
        }
    }
    if damaged == 0 {
        return Err(failed(format!("no WAL file in {}", wal_dir.display())));
    }
    h.step(format!(
        "n2 stopped and its {damaged} WAL file(s) overwritten (member {old})"
    ));
    h.cp.restart_node("n2").await?;
    h.step("n2 restarted on the unreadable WAL");
    let unhealthy_at = unobserved_time_does_not_count(h, &old).await?;
    // cluster-etcd-operator#1688: there a dead member kept changing the endpoints, each change
    // was a new revision, and the member's removal waited for a stable revision. Here no
    // revision may be published while the dead member is still listed.
    let listed_at = std::cell::Cell::new(unhealthy_at);
    h.wait_status("n2's unhealthy member replaced", SETTLE, |s| {
        let listed = member_ids(s).contains(&old);
        if listed {
            listed_at.set(listed_at.get().max(s.latest_available_revision));
        }
        !listed
    })
    .await?;
    if listed_at.get() != unhealthy_at {
        return Err(failed(format!(
            "revision {} was published while unhealthy member {old} was still listed (revision \
             {unhealthy_at} when it went unhealthy): a dead member churns revisions",
            listed_at.get()
        )));
    }
    h.step(format!(
        "member {old} removed by remediation; no revision published while it was listed \
         unhealthy (latest stayed {unhealthy_at})"
    ));
    let s = h.wait_settled(3, SETTLE).await?;
    let new = member_of(&s, "n2").ok_or_else(|| failed("n2 has no member after recovery"))?;
    let record = s
        .remediations
        .iter()
        .find(|r| r.node_name == "n2")
        .ok_or_else(|| failed("status.remediations has no record for n2"))?;
    if record.attempts != 1 || record.last_member_id != old {
        return Err(failed(format!(
            "expected one attempt on member {old}, status shows {record:?}"
        )));
    }
    h.step(format!(
        "n2 rejoined as member {new}; status.remediations records attempt {} on {old}",
        record.attempts
    ));
    let between = revisions_without_own_member(h, "n2")?;
    if between.is_empty() {
        return Err(failed(
            "n2 never ran a revision without its removed member before its learner was added \
             (a power loss in between could have started the removed member)",
        ));
    }
    h.step(format!(
        "before the learner add, n2 ran revision(s) {between:?}, which list no member for n2"
    ));
    Ok(())
}

/// #65: the operator is down for longer than `unhealthySeconds` (15) while n2's member is
/// unhealthy: that time nobody observed does not count. For the first 10 s after it starts again
/// the member stays (before, its first pass found it "unhealthy for" past the policy from the
/// old status and removed it at once).
/// Returns the latest revision when the member was first seen unhealthy.
async fn unobserved_time_does_not_count(
    h: &mut Harness,
    old: &str,
) -> Result<i64, ControlPlaneError> {
    let s = h
        .wait_status("n2's member unhealthy", SETTLE, |s| {
            s.members.iter().any(|m| m.id == old && !m.healthy)
        })
        .await?;
    h.cp.stop_operator(Duration::from_secs(5))?;
    let down = Instant::now();
    // The outage itself is the fault: its length, not a wait for some state.
    tokio::time::sleep(Duration::from_secs(20)).await;
    h.cp.start_operator()?;
    let started = Instant::now();
    h.step(format!(
        "operator down for {:.0}s while n2's member was unhealthy, started again",
        down.elapsed().as_secs_f64()
    ));
    while started.elapsed() < Duration::from_secs(10) {
        if !member_ids(&h.status().await).contains(old) {
            return Err(failed(format!(
                "member {old} removed {:.1}s after the operator started: the unobserved outage counted as unhealthy time",
                started.elapsed().as_secs_f64()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    h.step("for 10s after the operator started again, the member stayed (its clock restarted)");
    Ok(s.latest_available_revision)
}

/// The revisions the installer laid down on `node` (each `etcd-pod-<N>/etcd-pod.yaml` there)
/// whose `ETCD_MEMBER_IDS` names no member for the node's peer URL: what a node whose member
/// was removed runs until a learner is added for it.
fn revisions_without_own_member(h: &Harness, node: &str) -> Result<Vec<i64>, ControlPlaneError> {
    let sim = h.cp.node(node)?;
    let own = etcd_operator::podspec::NodeTarget::new(node, sim.ip())
        .peer_url()
        .map_err(|e| failed(format!("{node}'s peer URL: {e}")))?;
    let dir = sim.root.join("etc/kubernetes/static-pod-resources");
    let entries =
        std::fs::read_dir(&dir).map_err(|e| failed(format!("listing {}: {e}", dir.display())))?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(revision) = name
            .strip_prefix("etcd-pod-")
            .and_then(|n| n.parse::<i64>().ok())
        else {
            continue;
        };
        let path = entry.path().join("etcd-pod.yaml");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
        let pod = etcd_operator::podspec::parse_pod(&text)
            .map_err(|e| failed(format!("{}: {e}", path.display())))?;
        let ids = etcd_operator::observed::objects::etcd_env(&pod, "ETCD_MEMBER_IDS")
            .ok_or_else(|| failed(format!("{} has no ETCD_MEMBER_IDS", path.display())))?;
        let ids = membership::MemberIds::parse(&ids)
            .map_err(|e| failed(format!("{}: {e}", path.display())))?;
        if ids.id_for_url(&own).is_none() {
            out.push(revision);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn standby_of(s: &etcd_operator::api::EtcdClusterStatus, node: &str) -> bool {
    s.members
        .iter()
        .any(|m| m.name == node && m.role == "Learner" && m.started && m.healthy)
}

fn healthy_voters(s: &etcd_operator::api::EtcdClusterStatus) -> usize {
    s.members
        .iter()
        .filter(|m| m.role == "Voter" && m.healthy)
        .count()
}
