//! The `dangling-learner` scenario: an admin runs the first half of a manual scale-up,
//! `etcdctl member add --learner` with a peer URL that no control-plane node has, and never
//! starts etcd for it. etcd 3.4 allows one learner, so that member would block every scale-up and
//! replacement. The operator counts it (`etcd_operator_members_without_node`, alert
//! `EtcdMemberWithoutNode`) and removes it (`MemberOfGoneNodeRemoved`); a fourth node added
//! meanwhile then joins as the standby learner, and the voters keep their ids.

use std::time::{Duration, Instant};

use membership::{EtcdRefusal, MemberUrl};

use super::failover_audit::cluster_events;
use super::harness::{Harness, member_ids};
use crate::controlplane::ControlPlaneError;

const SETTLE: Duration = Duration::from_secs(240);
/// The dangling learner's peer URL: an address no node has (port 1 refuses every dial at once).
const NOWHERE: &str = "https://127.0.0.1:1";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

pub async fn dangling_learner(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let voters = member_ids(&h.status().await);
    let etcd = h.etcd().await?;
    let url: MemberUrl = NOWHERE
        .parse()
        .map_err(|e| failed(format!("{NOWHERE}: {e}")))?;
    // etcd refuses a learner add for a few seconds after a member (re)connected ("unhealthy
    // cluster"); an admin retries, and so does this.
    let deadline = Instant::now() + Duration::from_secs(60);
    let dangling = loop {
        match etcd.add_learner(&url).await {
            Ok(m) => break m.id,
            Err(e) if e.refused(EtcdRefusal::UnhealthyCluster) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(failed(format!("adding a learner as an admin would: {e}"))),
        }
    };
    h.step(format!(
        "an admin added learner {dangling} at {NOWHERE} (no node) and never started it"
    ));
    h.cp.add_node("n4").await?;
    h.step("node n4 added: it needs the one learner slot");
    let s = h
        .wait_status(
            "the dangling learner gone, n4 the standby learner beside 3 voters",
            SETTLE,
            |s| {
                crate::view::settled_with_standby(s, 3, 1)
                    && !member_ids(s).contains(&dangling.to_string())
            },
        )
        .await?;
    let listed = etcd
        .member_list()
        .await
        .map_err(|e| failed(format!("member list: {e}")))?;
    if listed.members.iter().any(|m| m.id == dangling) {
        return Err(failed(format!("etcd still lists {dangling}")));
    }
    if !voters.is_subset(&member_ids(&s)) {
        return Err(failed(format!(
            "a voter was replaced: {:?} (voters were {voters:?})",
            member_ids(&s)
        )));
    }
    let events = cluster_events(&h.cp, &["MemberOfGoneNodeRemoved"])
        .await
        .map_err(failed)?;
    if events.is_empty() {
        return Err(failed("no MemberOfGoneNodeRemoved Event"));
    }
    h.step(format!(
        "learner {dangling} removed (MemberOfGoneNodeRemoved); n4 joined as the standby, the voters kept"
    ));
    Ok(())
}
