//! The `minority-recovery` scenario (#65, item 2): `etcd-recover` run on a node that only looks
//! like the last survivor must not split the cluster and lose what the others acknowledged.
//!
//! 1. Three voters under the write load, the API served from this etcd (the stand-in reaching
//!    every member, or the stacked control plane): it goes down with quorum below, and the
//!    operator with it.
//! 2. n1 powers off. n2 and n3 keep quorum (and the API) and acknowledge writes n1 never sees.
//! 3. n2's and n3's etcd freeze (`SIGSTOP`: a paused hypervisor, a hung storage path). From n1
//!    this is what a partition with n1 on the minority side looks like: they do not answer.
//! 4. n1 powers on; `etcd-verify` starts its etcd on its own, older data (no endpoint answers),
//!    which finds no quorum (and, as etcd 3.5 does then, serves no client). `etcd-recover status`
//!    there says `quorum: lost`.
//! 5. The admin runs `etcd-recover from-member` on n1: refused (exit 1), naming n2 and n3 and
//!    `--confirm-down`; the manifest is byte-identical and no recovery record is made. Before
//!    #65 it forced n1's older data into a one-member cluster: when n2 and n3 came back they were
//!    told they had been removed and stopped, and every write acknowledged in step 2 was lost.
//! 6. n2 and n3 resume (also when a step failed): quorum and the API are back, n1 catches up;
//!    three voters, every acknowledged write read back, `HashKV` equal.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::harness::Harness;
use super::runbook::{RECORD_DIR, Untouched, etcd_recover};
use crate::controlplane::ControlPlaneError;

const SETTLE: Duration = Duration::from_secs(240);
/// One `etcd-recover` command (its calls are bounded at 3 s each).
const COMMAND_DEADLINE: Duration = Duration::from_secs(120);
/// How long n1's etcd gets to start on its own data and find no leader.
const ALONE_DEADLINE: Duration = Duration::from_secs(120);
const FROZEN: [&str; 2] = ["n2", "n3"];

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

pub async fn minority_recovery(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.cp.stop_node("n1").await?;
    let n1_off = Instant::now();
    h.step("n1 powered off");
    h.first_write_after(n1_off, Duration::from_secs(60)).await?;
    h.step("n2 and n3 acknowledged writes n1 never saw");
    let pids = frozen_pids(h)?;
    signal_all(&pids, Signal::SIGSTOP)?;
    h.step(format!(
        "n2's and n3's etcd frozen (SIGSTOP, pids {pids:?}): from n1 a partition looks the same"
    ));
    let outcome = minority_side(h).await;
    let resumed = signal_all(&pids, Signal::SIGCONT);
    let resumed_at = Instant::now();
    outcome?;
    resumed?;
    h.step("n2's and n3's etcd resumed");
    h.first_write_after(resumed_at, SETTLE).await?;
    h.step("a write acknowledged again: quorum is back, and the API with it");
    h.wait_settled(3, SETTLE).await?;
    h.step("three voters again, n1 caught up on its own data");
    Ok(())
}

/// Steps 4 and 5: n1 back on its own data, and `from-member` refused there.
async fn minority_side(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.cp.restart_node("n1").await?;
    h.step("n1 powered on");
    let status = quorum_lost_on_n1(h).await?;
    h.step(format!(
        "etcd-recover status on n1:\n{}",
        super::runbook::excerpt(&status)
    ));
    let node = h.cp.node("n1")?;
    let root = node.root.clone();
    let before = Untouched::take(&root, &node.manifest_dir())?;
    let ran = etcd_recover(COMMAND_DEADLINE, &root, &["from-member"], &[]).await?;
    let reason = before.refused(
        "etcd-recover from-member on n1, the others frozen",
        &ran,
        1,
        "--confirm-down n2,n3",
        Vec::new(),
    )?;
    h.step(format!(
        "etcd-recover from-member on n1 with n2 and n3 frozen: exit 1 in {:.1}s, manifest byte-identical, no {RECORD_DIR}: {reason}",
        ran.took.as_secs_f64()
    ));
    Ok(())
}

/// Waits until n1's etcd runs again (started by `etcd-verify` on its own data) and
/// `etcd-recover status` there finds quorum lost; returns its output. A restarted etcd 3.5
/// serves no client until it has published itself through a quorum, so its own line is "no
/// answer" too, and its raft index is the commit index its WAL holds.
async fn quorum_lost_on_n1(h: &Harness) -> Result<String, ControlPlaneError> {
    let n1 = h.cp.node("n1")?;
    let root = n1.root.clone();
    let flag = format!("--listen-peer-urls=https://{}:2380", n1.ip());
    let deadline = Instant::now() + ALONE_DEADLINE;
    loop {
        let runs = super::restart_free::etcd_pid(&flag).is_some();
        let ran = etcd_recover(COMMAND_DEADLINE, &root, &["status"], &[]).await?;
        let wal = ran.stdout.contains("this node's data: commit index");
        if runs && wal && ran.code == Some(0) && ran.stdout.contains("quorum: lost") {
            return Ok(ran.stdout);
        }
        if Instant::now() > deadline {
            return Err(failed(format!(
                "n1's etcd should run again on its own data within {ALONE_DEADLINE:?} (running: {runs}); etcd-recover status said last:\n{}\netcd-verify's last decision: {}",
                ran.said(),
                super::unmounted_disk::newest_verify_line(&root.join("var/log/pods"))
                    .unwrap_or_else(|| "none logged".to_owned())
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The etcd process of each of [`FROZEN`].
fn frozen_pids(h: &Harness) -> Result<Vec<u32>, ControlPlaneError> {
    FROZEN
        .iter()
        .map(|n| {
            let ip = h.cp.node(n)?.ip();
            super::restart_free::etcd_pid(&format!("--listen-peer-urls=https://{ip}:2380"))
                .ok_or_else(|| failed(format!("no etcd process of {n} runs")))
        })
        .collect()
}

pub(super) fn signal_all(pids: &[u32], signal: Signal) -> Result<(), ControlPlaneError> {
    for pid in pids {
        let raw = i32::try_from(*pid).map_err(|e| failed(format!("pid {pid}: {e}")))?;
        kill(Pid::from_raw(raw), signal)
            .map_err(|e| failed(format!("{signal} to etcd pid {pid}: {e}")))?;
    }
    Ok(())
}
