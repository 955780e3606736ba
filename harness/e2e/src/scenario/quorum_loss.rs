//! The `quorum-loss` scenario: node-local disaster recovery with `etcd-recover`, as the runbook
//! `docs/runbooks/quorum-loss.md` tells an admin to run it.
//!
//! 1. Bad input first: `etcd-recover from-member` on n1 while quorum is healthy is refused (exit
//!    1, "quorum is healthy"), n1's manifest stays byte-identical and no recovery record dir is
//!    made.
//! 2. n1 is the survivor: leadership is moved to it first, so it holds every acknowledged write
//!    (and the API, served from n1's member as in a real control plane, comes back with it). The
//!    other two nodes stop, their data dirs are wiped and their node agents start again:
//!    `etcd-verify` keeps their etcd down (a started member whose data is gone), so quorum is
//!    lost for good, and the API is down.
//! 3. Once the survivor's etcd names no leader (`from-member` refuses while one is known), every
//!    `sh scenario` block of the runbook runs on the survivor, literally and in order.
//! 4. The operator adopts the one-member cluster and adds the other two nodes back as new
//!    members: 3 voters, the survivor with its member id.
//!
//! The report's `rto_s` is the time from quorum loss to the first write the write load got
//! acknowledged afterwards; `rpo_writes` is the acknowledged writes lost (read back at the end).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_operator::api::EtcdClusterStatus;
use membership::{EtcdClient, MemberUrl};

use super::api_recovery::ApiAcrossRecovery;
use super::harness::{Harness, Recovery, describe_members, member_of, members_of};
use super::runbook::{
    RECORD_DIR, SCENARIO_INFO, Untouched, etcd_recover, excerpt, run, scenario_blocks,
};
use crate::controlplane::ControlPlaneError;

const SETTLE: Duration = Duration::from_secs(240);
/// How long the survivor's etcd gets to notice that it lost its followers.
const NO_LEADER_DEADLINE: Duration = Duration::from_secs(60);
/// One command of the runbook (`from-member` bounds itself at 300 s by default).
const COMMAND_DEADLINE: Duration = Duration::from_secs(360);
/// How long the write load gets, once the cluster settled, to have a write acknowledged.
const FIRST_WRITE_DEADLINE: Duration = Duration::from_secs(60);
/// The runbook whose `sh scenario` blocks the scenario runs.
const RUNBOOK: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/runbooks/quorum-loss.md"
);
const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// The node that keeps its data: the API's etcd endpoint, made the leader first.
const SURVIVOR: &str = "n1";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

pub(super) fn client_url(h: &Harness, node: &str) -> Result<MemberUrl, ControlPlaneError> {
    let ip = h.cp.node(node)?.ip();
    format!("https://{ip}:2379")
        .parse()
        .map_err(|e| failed(format!("the client URL of {node}: {e}")))
}

/// Quorum loss: both other nodes stop and their data goes; returns when quorum was lost.
async fn lose_quorum(h: &mut Harness, others: &[&str]) -> Result<Instant, ControlPlaneError> {
    let mut lost_at = Instant::now();
    for (i, n) in others.iter().enumerate() {
        let stopping = Instant::now();
        h.cp.stop_node(n).await?;
        if i + 1 == others.len() {
            lost_at = Instant::now();
        }
        h.step(format!(
            "{n} stopped (took {:.1}s){}",
            stopping.elapsed().as_secs_f64(),
            if i + 1 == others.len() {
                ": quorum lost"
            } else {
                ""
            }
        ));
    }
    for n in others {
        let data = h.cp.node(n)?.data_dir();
        std::fs::remove_dir_all(&data)
            .map_err(|e| failed(format!("wiping {}: {e}", data.display())))?;
        h.cp.restart_node(n).await?;
        h.step(format!(
            "{n}'s data dir {} wiped, its node agent restarted (etcd-verify keeps its etcd down)",
            data.display()
        ));
    }
    Ok(lost_at)
}

/// Waits for 3 voters again, the survivor with its member id and the others with new ones.
async fn wait_three_voters(
    h: &mut Harness,
    survivor: &str,
    ids_before: &[(&str, String)],
) -> Result<(EtcdClusterStatus, Instant), ControlPlaneError> {
    let (old_a, old_b): (Vec<_>, Vec<_>) = ids_before.iter().partition(|(n, _)| *n == survivor);
    let survivor_id = old_a.first().map(|(_, id)| id.clone()).unwrap_or_default();
    let lost_ids: Vec<String> = old_b.iter().map(|(_, id)| id.clone()).collect();
    let s = h
        .wait_status(
            "the operator shows the one-member cluster: the lost members are gone from the status",
            SETTLE,
            |s| s.members.iter().all(|m| !lost_ids.contains(&m.id)) && !s.members.is_empty(),
        )
        .await?;
    h.step(format!(
        "status members: {}; conditions: {}",
        describe_members(&s),
        s.conditions
            .iter()
            .filter(|c| c.status == "True")
            .map(|c| format!("{}={} ({})", c.type_, c.status, c.message))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    let s = h.wait_settled(3, SETTLE).await?;
    let settled_at = Instant::now();
    let kept = member_of(&s, survivor);
    if kept.as_deref() != Some(survivor_id.as_str()) {
        return Err(failed(format!(
            "{survivor} should have kept member {survivor_id}, the status shows {kept:?}"
        )));
    }
    for (n, old) in &old_b {
        let new = member_of(&s, n).ok_or_else(|| failed(format!("{n} has no member")))?;
        if &new == old {
            return Err(failed(format!(
                "{n} kept its member id {old} though its data was wiped"
            )));
        }
    }
    h.step(format!(
        "3 voters again: {} (the survivor {survivor} kept {survivor_id}; before: {})",
        describe_members(&s),
        ids_before
            .iter()
            .map(|(n, id)| format!("{n}={id}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok((s, settled_at))
}

pub async fn quorum_loss(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.recovery = Some(Recovery::default());
    refused_while_healthy(h).await?;
    let api = ApiAcrossRecovery::start(h).await?;

    let before = h.status().await;
    let ids_before = members_of(&before, &NODES)?;
    let etcd = h.etcd().await?;
    let term = lead_from_survivor(h, &etcd).await?;
    let survivor = SURVIVOR;
    let others: Vec<&str> = NODES.into_iter().filter(|n| *n != survivor).collect();
    h.step(format!(
        "{survivor} leads (term {term}): it is the survivor; {} will lose their data",
        others.join(" and ")
    ));

    // Quorum loss: both other nodes stop; their data goes.
    let lost_at = lose_quorum(h, &others).await?;

    let survivor_url = client_url(h, survivor)?;
    let no_leader_at = wait_no_leader(h, &etcd, &survivor_url, term).await?;

    let runbook_started = Instant::now();
    run_runbook(h, survivor).await?;
    let runbook_done = Instant::now();

    let (s, settled_at) = wait_three_voters(h, survivor, &ids_before).await?;

    // RTO: the first write acknowledged once no write could be (the survivor named no leader);
    // an answer that came between the loss and then was a put committed before the loss.
    let first = h
        .first_write_after(no_leader_at, FIRST_WRITE_DEADLINE)
        .await?;
    let stragglers = match h.load.as_ref() {
        Some(load) => load.acknowledged_between(lost_at, no_leader_at).await,
        None => 0,
    };
    let rto = first.duration_since(lost_at);
    let api_rto_s = match api {
        Some(api) => Some(Box::pin(api.after(h, lost_at, None)).await?),
        None => None,
    };
    h.recovery = Some(Recovery {
        rto_s: Some(rto.as_secs_f64()),
        api_rto_s,
    });
    let since_loss = |at: Instant| at.duration_since(lost_at).as_secs_f64();
    h.step(format!(
        "RTO {:.1}s. After quorum loss: no leader +{:.1}s, runbook +{:.1}s..+{:.1}s, first write acknowledged +{:.1}s, 3 voters +{:.1}s (the operator took {:.1}s after the runbook; revision {} before, {} after); {stragglers} put(s) committed before the loss were answered after it",
        rto.as_secs_f64(),
        since_loss(no_leader_at),
        since_loss(runbook_started),
        since_loss(runbook_done),
        since_loss(first),
        since_loss(settled_at),
        settled_at.duration_since(runbook_done).as_secs_f64(),
        before.latest_available_revision,
        s.latest_available_revision,
    ));
    Ok(())
}

/// Copies of the data dir a recovery would have made (`member-before-recovery-*`).
fn data_copies(data_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data_dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("member-before-recovery")
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// `from-member` on n1 while quorum is healthy: refused, nothing changed.
async fn refused_while_healthy(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let node = h.cp.node("n1")?;
    let (root, data_dir) = (node.root.clone(), node.data_dir());
    let before = Untouched::take(&root, &node.manifest_dir())?;
    let ran = etcd_recover(COMMAND_DEADLINE, &root, &["from-member"], &[]).await?;
    let copies = data_copies(&data_dir);
    let also = if copies.is_empty() {
        Vec::new()
    } else {
        vec![format!("it copied the data dir: {copies:?}")]
    };
    let reason = before.refused(
        "etcd-recover from-member on n1 with a healthy quorum",
        &ran,
        1,
        "quorum is healthy",
        also,
    )?;
    h.step(format!(
        "etcd-recover from-member on n1 with a healthy quorum: exit 1 in {:.1}s, manifest byte-identical, no {RECORD_DIR} nor data copy: {reason}",
        ran.took.as_secs_f64(),
    ));
    Ok(())
}

/// The node of `nodes` whose member leads now, its member id and term, asked of each node's
/// etcd.
pub(super) async fn find_leader(
    h: &Harness,
    etcd: &EtcdClient,
    nodes: &[&'static str],
) -> Result<(&'static str, u64, u64), ControlPlaneError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = Vec::new();
        for &n in nodes {
            let url = client_url(h, n)?;
            match etcd.status_of(&url).await {
                Ok(st) if !st.is_learner && st.leader != 0 && st.leader == st.member_id => {
                    return Ok((n, st.member_id, st.raft_term));
                }
                Ok(st) => seen.push(format!(
                    "{n}: member {:x}, leader {:x}, term {}",
                    st.member_id, st.leader, st.raft_term
                )),
                Err(e) => seen.push(format!("{n}: {e}")),
            }
        }
        if Instant::now() > deadline {
            return Err(failed(format!(
                "no member said it leads within 30s; last seen: {}",
                seen.join("; ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Makes [`SURVIVOR`]'s member the leader (it then holds every acknowledged write) and returns
/// its term. The API stand-in serves from that member only, so it must be the one that
/// survives.
async fn lead_from_survivor(h: &mut Harness, etcd: &EtcdClient) -> Result<u64, ControlPlaneError> {
    let (leader, leader_id, term) = find_leader(h, etcd, &NODES).await?;
    if leader == SURVIVOR {
        return Ok(term);
    }
    let target = etcd
        .status_of(&client_url(h, SURVIVOR)?)
        .await
        .map_err(|e| failed(format!("{SURVIVOR}'s status: {e}")))?
        .member_id;
    let target = membership::MemberId::new(target)
        .ok_or_else(|| failed(format!("{SURVIVOR} reports member id 0")))?;
    etcd.move_leader(&client_url(h, leader)?, target)
        .await
        .map_err(|e| {
            failed(format!(
                "moving leadership from {leader} ({leader_id:x}) to {SURVIVOR}: {e}"
            ))
        })?;
    let (now, _, term) = find_leader(h, etcd, &NODES).await?;
    if now != SURVIVOR {
        return Err(failed(format!(
            "leadership moved from {leader} to {SURVIVOR}, but {now} leads"
        )));
    }
    h.step(format!(
        "leadership moved from {leader} to {SURVIVOR} (term {term})"
    ));
    Ok(term)
}

/// Waits until the survivor's etcd names no leader; returns when it was first seen so.
async fn wait_no_leader(
    h: &mut Harness,
    etcd: &EtcdClient,
    url: &MemberUrl,
    term: u64,
) -> Result<Instant, ControlPlaneError> {
    let started = Instant::now();
    loop {
        let last = match etcd.status_of(url).await {
            Ok(st) if st.leader == 0 => {
                let at = Instant::now();
                h.step(format!(
                    "the survivor's etcd names no leader (after {:.1}s; term {} -> {}, raft index {})",
                    started.elapsed().as_secs_f64(),
                    term,
                    st.raft_term,
                    st.raft_index
                ));
                return Ok(at);
            }
            Ok(st) => format!(
                "member {:x} names leader {:x} (term {}, raft index {})",
                st.member_id, st.leader, st.raft_term, st.raft_index
            ),
            Err(e) => e.to_string(),
        };
        if started.elapsed() > NO_LEADER_DEADLINE {
            return Err(failed(format!(
                "the survivor's etcd at {url} still did not name no leader after {NO_LEADER_DEADLINE:?}; last seen: {last}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every `sh scenario` block of the runbook, each line with `bash -c` on the survivor.
async fn run_runbook(h: &mut Harness, survivor: &str) -> Result<(), ControlPlaneError> {
    let path = PathBuf::from(RUNBOOK);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| failed(format!("reading the runbook {}: {e}", path.display())))?;
    let blocks = scenario_blocks(&text);
    let commands: usize = blocks.iter().map(Vec::len).sum();
    if commands == 0 {
        return Err(failed(format!(
            "the runbook {} has no ```{SCENARIO_INFO} block with a command",
            path.display()
        )));
    }
    let root = h.cp.node(survivor)?.root.display().to_string();
    let bin =
        crate::binaries::bin_dir().map_err(|e| failed(format!("the project's bin dir: {e}")))?;
    let path_var = match std::env::var_os("PATH") {
        Some(p) => format!("{}:{}", bin.display(), p.to_string_lossy()),
        None => bin.display().to_string(),
    };
    h.step(format!(
        "runbook {}: {} block(s), {commands} command(s), run on {survivor} (ETCD_RECOVER_NODE_ROOT={root})",
        path.display(),
        blocks.len()
    ));
    let envs = [("ETCD_RECOVER_NODE_ROOT", root), ("PATH", path_var)];
    for (b, block) in blocks.iter().enumerate() {
        for line in block {
            let script = format!("set -euo pipefail\n{line}");
            let ran = run(COMMAND_DEADLINE, Path::new("bash"), &["-c", &script], &envs).await?;
            if ran.code != Some(0) {
                return Err(failed(format!(
                    "runbook block {}/{}: `{line}` exited {:?} after {:.1}s:\n{}",
                    b + 1,
                    blocks.len(),
                    ran.code,
                    ran.took.as_secs_f64(),
                    ran.said()
                )));
            }
            h.step(format!(
                "runbook block {}/{}: `{line}` (exit 0, {:.1}s):\n{}",
                b + 1,
                blocks.len(),
                ran.took.as_secs_f64(),
                excerpt(&ran.stdout)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_runbook_has_scenario_blocks() {
        let text = std::fs::read_to_string(RUNBOOK).unwrap_or_default();
        let blocks = scenario_blocks(&text);
        assert!(!blocks.is_empty(), "{RUNBOOK} has no sh scenario block");
        assert!(
            blocks
                .iter()
                .flatten()
                .any(|l| l == "etcd-recover from-member --confirm-down n2,n3")
        );
    }
}
