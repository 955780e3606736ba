//! The `survivor-reboot` scenario (#65, item 1): a survivor of a member removal reboots while the
//! operator cannot act, and must come back as plain etcd would.
//!
//! 1. n3's machine dies and its Node is deleted (what `docs/runbooks/EtcdMemberDown.md` tells an
//!    admin to do); the operator removes its member. Two voters remain, and neither is restarted
//!    for a new revision (the quorum gate restarts no healthy voter of two), so a survivor that
//!    was moved to a revision listing n3 (n1, rolled once three voters existed; n2 stayed on an
//!    equivalent one) still lists n3's removed member: checked on disk, or the window closed.
//! 2. The API is served from this etcd (the stand-in reaching every member, or the stacked
//!    control plane's kube-apiservers): a survivor's reboot loses quorum, the API goes down with
//!    it, and the operator, running, can render nothing: what brings the cluster back is only
//!    what each node does by itself.
//! 3. n1 powers off and on (no drain); its etcd must start again on its own data, on the
//!    revision that still lists the removed member. Then the same for n2. Before #65 the first
//!    reboot blocked for good (`etcd-verify`: "stale or forged revision: <n3's id> is in
//!    ETCD_MEMBER_IDS but not a live member"), where plain etcd restarts from its WAL and ignores
//!    the list.
//! 4. A write goes through both survivors (quorum is back, and the API with it), and a
//!    replacement node n4 joins: three voters, every acknowledged write read back, `HashKV` equal.
//!
//! The other windows of the same story (an unstarted learner, a started one, promoted but the
//! survivor not yet rolled) are searched by the model check
//! (`the_checker_finds_a_survivor_of_a_removal_stuck_after_its_reboot` and every shipped-rule
//! search: no quorum loss short of a total outage needs an admin) and by `etcd-verify`'s table
//! (`a_survivor_of_a_removal_restarts_on_its_own_data_in_every_window`).

use std::time::{Duration, Instant};

use super::harness::{Harness, member_ids, member_of};
use crate::controlplane::ControlPlaneError;

const SETTLE: Duration = Duration::from_secs(240);
/// How long the survivors get to write together again after both reboots.
const QUORUM_DEADLINE: Duration = Duration::from_secs(60);
const MANIFEST: &str = "etcd-pod.yaml";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

pub async fn survivor_reboot(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let gone = member_of(&h.status().await, "n3").ok_or_else(|| failed("n3 has no member"))?;
    h.cp.delete_node("n3").await?;
    h.step(format!(
        "n3's machine died and its Node was deleted (member {gone})"
    ));
    h.wait_status("n3's member removed", SETTLE, |s| {
        !member_ids(s).contains(&gone)
    })
    .await?;
    h.step(format!(
        "the operator removed member {gone}; two voters remain"
    ));
    let mut listing = Vec::new();
    for n in ["n1", "n2"] {
        if lists(h, n, &gone)? {
            listing.push(n);
        }
    }
    if listing.is_empty() {
        return Err(failed(format!(
            "the window closed: no survivor's manifest lists the removed member {gone}, so their reboots test nothing"
        )));
    }
    h.step(format!(
        "{} still list(s) the removed member {gone} in ETCD_MEMBER_IDS (no healthy voter of two restarts)",
        listing.join(", ")
    ));
    for n in ["n1", "n2"] {
        if let Err(e) =
            super::restart_free::reboot(h, &[n], "a power cycle, no drain, quorum lost").await
        {
            return Err(failed(format!(
                "{e}\n{n}'s etcd-verify said last:\n{}",
                verify_log_tail(h, n)
            )));
        }
    }
    quorum_back(h).await?;
    h.cp.add_node("n4").await?;
    h.step("replacement node n4 added");
    let s = h.wait_settled(3, SETTLE).await?;
    if member_of(&s, "n4").is_none() {
        return Err(failed("n4 is not a member after the replacement"));
    }
    Ok(())
}

/// Whether `node`'s etcd manifest lists member `id` in `ETCD_MEMBER_IDS`.
fn lists(h: &Harness, node: &str, id: &str) -> Result<bool, ControlPlaneError> {
    let path = h.cp.node(node)?.manifest_dir().join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
    let ids = text
        .split("name: ETCD_MEMBER_IDS")
        .nth(1)
        .and_then(|rest| rest.lines().find(|l| l.contains("value:")))
        .ok_or_else(|| failed(format!("{} has no ETCD_MEMBER_IDS", path.display())))?;
    Ok(ids.contains(&format!("{id}=")))
}

/// A write through the two survivors succeeds (each of them runs, and they have quorum).
async fn quorum_back(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let until = Instant::now() + QUORUM_DEADLINE;
    let etcd = h.etcd().await?;
    loop {
        match etcd
            .put("/scenario/survivor-reboot", b"quorum".to_vec())
            .await
        {
            Ok(rev) => {
                h.step(format!(
                    "a write committed on the two survivors (revision {rev}): quorum is back by itself"
                ));
                return Ok(());
            }
            Err(e) if Instant::now() > until => {
                return Err(failed(format!(
                    "no write committed within {QUORUM_DEADLINE:?} after both survivors rebooted: {e}"
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The last decision line of `node`'s `etcd-verify`, for a failure message.
fn verify_log_tail(h: &Harness, node: &str) -> String {
    h.cp.node(node).map_or_else(
        |e| e.to_string(),
        |n| {
            super::unmounted_disk::newest_verify_line(&n.root.join("var/log/pods"))
                .unwrap_or_else(|| "no etcd-verify log".to_owned())
        },
    )
}
