//! Restart-free learner adds (#36): a learner add restarts no healthy voter, and the failure
//! cases of leaving the voters on the revision made before it: a voter rebooting on it while the
//! learner runs, during a promotion and after; the whole control plane powered off and on right
//! after the add; a forged manifest that omits the live learner, which starts on a voter's node
//! (its member restarts from its own data) and blocks on the learner's own node.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_operator::api::EtcdClusterStatus;

use super::harness::{Harness, member_ids, member_of};
use crate::controlplane::ControlPlaneError;
use crate::view::settled_with_standby;

const SETTLE: Duration = Duration::from_secs(240);
const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
const MANIFEST: &str = "etcd-pod.yaml";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// What shows that a node's etcd was not restarted: its manifest's bytes and its etcd process
/// (pid and start time in clock ticks since boot, from `/proc`; etcd's own
/// `process_start_time_seconds` is no use here: inside the stand-in kubelet's container it
/// reads the same for every start).
#[derive(Clone, Debug, PartialEq)]
struct Running {
    manifest: Vec<u8>,
    started: String,
}

async fn running(h: &Harness, node: &str) -> Result<Running, ControlPlaneError> {
    let n = h.cp.node(node)?;
    let path = n.manifest_dir().join(MANIFEST);
    let manifest =
        std::fs::read(&path).map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
    let started = etcd_process(&format!("--listen-peer-urls=https://{}:2380", n.ip()))
        .ok_or_else(|| failed(format!("no etcd process of {node} runs")))?;
    Ok(Running { manifest, started })
}

/// `<pid>@<start time>` of the etcd process whose command line has `flag`.
fn etcd_process(flag: &str) -> Option<String> {
    let pid = etcd_pid(flag)?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the command name's closing parenthesis.
    let after = stat.rsplit_once(')')?.1;
    let start = after.split_whitespace().nth(19)?;
    Some(format!("{pid}@{start}"))
}

/// The pid of the etcd process whose command line has `flag`.
pub(super) fn etcd_pid(flag: &str) -> Option<u32> {
    let procs = std::fs::read_dir("/proc").ok()?;
    procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let is_etcd = args.first().is_some_and(|a| a.ends_with(b"etcd"));
            is_etcd && args.contains(&flag.as_bytes())
        })
}

async fn voters_running(h: &Harness) -> Result<BTreeMap<String, Running>, ControlPlaneError> {
    let mut out = BTreeMap::new();
    for n in VOTERS {
        out.insert(n.to_owned(), running(h, n).await?);
    }
    Ok(out)
}

/// Every voter's node is equivalent to the latest revision, or runs it.
fn voters_equivalent(s: &EtcdClusterStatus) -> Vec<String> {
    s.node_statuses
        .iter()
        .filter(|n| VOTERS.contains(&n.node_name.as_str()))
        .map(|n| {
            format!(
                "{} r{} (equivalent to {:?})",
                n.node_name, n.current_revision, n.equivalent_to_revision
            )
        })
        .collect()
}

/// Powers `nodes` off, then on again, and waits until each one's etcd runs anew.
pub(super) async fn reboot(
    h: &mut Harness,
    nodes: &[&str],
    why: &str,
) -> Result<(), ControlPlaneError> {
    let mut before = Vec::new();
    for n in nodes {
        before.push(running(h, n).await?.started);
    }
    for n in nodes {
        h.cp.stop_node(n).await?;
    }
    h.step(format!("{} powered off ({why})", nodes.join(", ")));
    for n in nodes {
        h.cp.restart_node(n).await?;
    }
    h.step(format!("{} powered on", nodes.join(", ")));
    for (n, was) in nodes.iter().zip(&before) {
        restarted(h, n, was, "after the reboot").await?;
    }
    Ok(())
}

pub async fn restart_free_learner_add(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let ids: Vec<Option<String>> = VOTERS.iter().map(|n| member_of(&before, n)).collect();
    let baseline = voters_running(h).await?;
    h.cp.add_node("n4").await?;
    h.step("node n4 added (a standby learner beside 3 voters)");
    let s = h
        .wait_status(
            "n4 a started standby learner, the rollout done",
            SETTLE,
            |s| {
                settled_with_standby(s, 3, 1)
                    && s.latest_available_revision > before.latest_available_revision
            },
        )
        .await?;
    no_voter_restarted(h, &baseline, &s).await?;
    plan_says_equivalent(h).await?;

    let why = "a voter on the revision before the learner, while it runs";
    reboot(h, &["n2"], why).await?;
    h.wait_status("n2 back beside the standby learner", SETTLE, |s| {
        settled_with_standby(s, 3, 1)
    })
    .await?;
    let why = "the whole control plane, right after the learner add";
    reboot(h, &["n1", "n2", "n3", "n4"], why).await?;
    let s = h
        .wait_status("3 voters and the standby back by themselves", SETTLE, |s| {
            settled_with_standby(s, 3, 1)
        })
        .await?;
    same_voters(&s, &ids)?;

    forged_without_the_learner(h).await?;

    h.cp.add_node("n5").await?;
    h.step("node n5 added (5 voters to come: two promotions)");
    h.wait_status("n5's learner listed", SETTLE, |s| {
        member_of(s, "n5").is_some()
    })
    .await?;
    let why = "a voter on an older revision during the promotions";
    reboot(h, &["n3"], why).await?;
    let s = h.wait_settled(5, SETTLE).await?;
    same_voters(&s, &ids)?;
    let why = "a voter on an older revision after the promotions";
    reboot(h, &["n1"], why).await?;
    let s = h.wait_settled(5, SETTLE).await?;
    same_voters(&s, &ids)?;
    h.step(format!(
        "5 voters, the first three on their own revisions: {}",
        voters_equivalent(&s).join(", ")
    ));
    Ok(())
}

/// After the learner add: every voter's manifest and etcd process as before, and its status
/// equivalent to the latest revision.
async fn no_voter_restarted(
    h: &mut Harness,
    baseline: &BTreeMap<String, Running>,
    s: &EtcdClusterStatus,
) -> Result<(), ControlPlaneError> {
    let after = voters_running(h).await?;
    for (node, was) in baseline {
        let now = &after[node];
        if now.manifest != was.manifest || now.started != was.started {
            let (a, b) = (
                String::from_utf8_lossy(&was.manifest),
                String::from_utf8_lossy(&now.manifest),
            );
            let changed: Vec<String> = a
                .lines()
                .zip(b.lines())
                .filter(|(x, y)| x != y)
                .map(|(x, y)| format!("{x:?} -> {y:?}"))
                .take(6)
                .collect();
            return Err(failed(format!(
                "{node} was restarted by the learner add: etcd process {} then {}; manifest lines changed: {changed:?}; {}",
                was.started,
                now.started,
                voters_equivalent(s).join(", ")
            )));
        }
    }
    let latest = s.latest_available_revision;
    let equivalent = s
        .node_statuses
        .iter()
        .filter(|n| VOTERS.contains(&n.node_name.as_str()))
        .all(|n| n.current_revision < latest && n.equivalent_to_revision == Some(latest));
    if !equivalent {
        return Err(failed(format!(
            "the voters' status should say equivalent to revision {latest}: {}",
            voters_equivalent(s).join(", ")
        )));
    }
    h.step(format!(
        "no voter restarted (manifests byte-identical, the same etcd processes); {}",
        voters_equivalent(s).join(", ")
    ));
    Ok(())
}

async fn plan_says_equivalent(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let plan = h.plan().await?;
    let line = plan
        .lines()
        .find(|l| l.contains("n1 runs revision") && l.contains("equivalent to revision"));
    let Some(line) = line else {
        return Err(failed(format!(
            "etcd-operator plan does not say n1 is equivalent:\n{plan}"
        )));
    };
    h.step(format!("plan: {}", line.trim()));
    Ok(())
}

fn same_voters(s: &EtcdClusterStatus, ids: &[Option<String>]) -> Result<(), ControlPlaneError> {
    let now: Vec<Option<String>> = VOTERS.iter().map(|n| member_of(s, n)).collect();
    if now != ids {
        return Err(failed(format!(
            "the voters' member ids changed: {ids:?} -> {now:?} (members {:?})",
            member_ids(s)
        )));
    }
    Ok(())
}

/// Forged manifests that omit the live learner: on n2, a voter with its data, its manifest
/// (made before the learner, so without it) changed as no revision of the operator's is, which
/// etcd starts on; on n4, the learner itself, its manifest without its own member id in
/// `ETCD_MEMBER_IDS`, which `etcd-verify` blocks. Both are put back as the operator wrote them.
async fn forged_without_the_learner(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let s = h.status().await;
    let learner = member_of(&s, "n4").ok_or_else(|| failed("n4 has no member"))?;
    let entry = format!("{learner}=https://{}:2380", h.cp.node("n4")?.ip());
    let n2_before = running(h, "n2").await?.started;
    let mut originals = Vec::new();
    for node in ["n2", "n4"] {
        let path = h.cp.node(node)?.manifest_dir().join(MANIFEST);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
        let forged = if node == "n4" {
            without_entry(&text, &entry)
        } else {
            forged_voter(&text, &entry)
        }
        .ok_or_else(|| failed(format!("{node}'s manifest cannot be forged: {entry}")))?;
        replace_file(&path, &forged)?;
        originals.push((path, text));
    }
    h.step(format!(
        "forged manifests without the live learner {learner} on n2 (a voter) and n4 (the learner)"
    ));
    h.wait_status("n4 blocked by etcd-verify (stale or forged)", SETTLE, |s| {
        s.conditions.iter().any(|c| {
            c.status == "True" && c.message.contains("n4") && c.message.contains("stale or forged")
        })
    })
    .await?;
    restarted(h, "n2", &n2_before, "on its forged manifest").await?;
    for (path, text) in &originals {
        replace_file(path, text)?;
    }
    h.step("n2's and n4's manifests put back as the operator wrote them");
    h.wait_status("3 voters and the standby healthy again", SETTLE, |s| {
        settled_with_standby(s, 3, 1)
    })
    .await?;
    Ok(())
}

/// `text` with `entry` taken out of the comma-separated lists it is in (`None`: it is in none).
fn without_entry(text: &str, entry: &str) -> Option<String> {
    let forged = text
        .replace(&format!(",{entry}"), "")
        .replace(&format!("{entry},"), "");
    (forged != text).then_some(forged)
}

/// A voter's manifest, made before the learner (`entry` in no list), with a redeployment reason
/// no revision has (`None`: it lists the learner, so it is no manifest from before it).
fn forged_voter(text: &str, entry: &str) -> Option<String> {
    if text.contains(entry) {
        return None;
    }
    let reason = "etcd.static-operator.io/force-redeployment-reason:";
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.find(reason) {
            Some(at) => format!("{}{reason} \"forged\"", &l[..at]),
            None => l.to_owned(),
        })
        .collect();
    Some(lines.join("\n") + "\n")
}

/// Waits until `node`'s etcd runs a process other than `before` (the etcd
/// is another process: `etcd-verify` let it start).
async fn restarted(
    h: &mut Harness,
    node: &str,
    before: &str,
    how: &str,
) -> Result<(), ControlPlaneError> {
    let until = std::time::Instant::now() + SETTLE;
    loop {
        let seen = running(h, node).await.map(|r| r.started);
        if let Ok(started) = &seen
            && started != before
        {
            h.step(format!(
                "{node}'s etcd started again {how} (process started {before}, now {started})"
            ));
            return Ok(());
        }
        if std::time::Instant::now() > until {
            return Err(failed(format!(
                "{node}'s etcd did not start again {how} within {SETTLE:?}: last seen {seen:?}\n{}",
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn replace_file(path: &std::path::Path, text: &str) -> Result<(), ControlPlaneError> {
    let tmp = path.with_file_name(".etcd-pod.yaml.scenario");
    std::fs::write(&tmp, text).map_err(|e| failed(format!("writing {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(|e| failed(format!("renaming to {}: {e}", path.display())))
}
