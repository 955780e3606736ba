//! The `unmounted-data-disk` scenario (#65, item 1): a one-node control plane whose data disk
//! does not mount at boot must not start a new, empty cluster on the empty mount point.
//!
//! 1. One node, its bootstrap manifest (the lone voter keeps it until an admin approves a
//!    restart), the write load running against it, the API served from its etcd (so the API is
//!    down while n1's etcd is, and its writes would land in whatever cluster n1 starts).
//! 2. n1 powers off; at boot its data disk is not mounted, so `/var/lib/etcd` is an empty
//!    directory (the disk's contents are moved aside, and an empty directory takes the mount
//!    point's place). `etcd-verify` must block (`DataDirLost`: the mark of its bootstrap, kept
//!    outside the data dir, shows that a cluster ran here), and nothing may appear in the empty
//!    mount point. Before #65 the only mark lived inside the data dir: etcd started a new, empty
//!    cluster there, the API's writes went into it, and when the disk came back they were lost.
//! 3. n1 powers off, the disk is mounted again (moved back), n1 powers on: etcd starts on its own
//!    data, every write acknowledged before is there.
//! 4. n2 and n3 join: three voters, every acknowledged write read back, `HashKV` equal.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;

const DEADLINE: Duration = Duration::from_secs(240);
/// How long `etcd-verify` gets to block on the empty mount point.
const BLOCK_DEADLINE: Duration = Duration::from_secs(90);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> ControlPlaneError {
    let what = format!("{what} {}", path.display());
    move |e| failed(format!("{what}: {e}"))
}

pub async fn unmounted_data_disk(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.wait_status("n1's member serves", DEADLINE, |s| {
        s.members.iter().any(|m| m.name == "n1" && m.healthy)
    })
    .await?;
    let data = h.cp.node("n1")?.data_dir();
    let disk = data.with_file_name("etcd.unmounted-disk");
    h.cp.stop_node("n1").await?;
    std::fs::rename(&data, &disk).map_err(io("moving the disk's contents to", &disk))?;
    std::fs::create_dir(&data).map_err(io("creating the empty mount point", &data))?;
    h.step("n1 powered off; at boot its data disk is not mounted: /var/lib/etcd is empty");
    h.cp.restart_node("n1").await?;
    h.step("n1 powered on");
    let blocked = wait_blocked(h).await?;
    h.step(format!(
        "etcd-verify blocks on the empty mount point: {blocked}"
    ));
    let appeared = entries(&data)?;
    if !appeared.is_empty() {
        return Err(failed(format!(
            "the empty mount point {} holds {appeared:?}: something started there",
            data.display()
        )));
    }
    h.cp.stop_node("n1").await?;
    std::fs::remove_dir(&data).map_err(io("removing the empty mount point", &data))?;
    std::fs::rename(&disk, &data).map_err(io("mounting the disk back at", &data))?;
    h.step("n1 powered off, its data disk mounted again");
    h.cp.restart_node("n1").await?;
    h.wait_status("n1's member serves again on its own data", DEADLINE, |s| {
        s.members.iter().any(|m| m.name == "n1" && m.healthy)
    })
    .await?;
    h.step("n1 powered on: etcd serves on its own data");
    for n in ["n2", "n3"] {
        h.cp.add_node(n).await?;
    }
    h.wait_settled(3, DEADLINE).await?;
    h.step("n2 and n3 joined: three voters");
    Ok(())
}

/// The names in `dir`.
fn entries(dir: &Path) -> Result<Vec<String>, ControlPlaneError> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map_err(io("listing", dir))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    out.sort();
    Ok(out)
}

/// Waits until n1's `etcd-verify` last said "data dir lost" (its init container's newest log
/// line); fails at once if anything appears in the empty data dir.
async fn wait_blocked(h: &Harness) -> Result<String, ControlPlaneError> {
    let node = h.cp.node("n1")?;
    let data = node.data_dir();
    let logs = node.root.join("var/log/pods");
    let until = Instant::now() + BLOCK_DEADLINE;
    loop {
        let last = newest_verify_line(&logs);
        if let Some(line) = &last
            && line.contains("\"decision\":\"block\"")
            && line.contains("data dir lost")
        {
            return Ok(line.clone());
        }
        let appeared = entries(&data)?;
        if !appeared.is_empty() || Instant::now() > until {
            return Err(failed(format!(
                "etcd-verify did not block on n1's empty mount point within {BLOCK_DEADLINE:?} (the data dir holds {appeared:?}); its last line: {last:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The last line of the newest log of an `etcd-verify` container under `logs`.
pub(super) fn newest_verify_line(logs: &Path) -> Option<String> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for pod in std::fs::read_dir(logs).ok()?.flatten() {
        let Ok(runs) = std::fs::read_dir(pod.path().join("etcd-verify")) else {
            continue;
        };
        for run in runs.flatten() {
            let t = run.metadata().and_then(|m| m.modified()).ok();
            if let Some(t) = t
                && newest.as_ref().is_none_or(|(seen, _)| t > *seen)
            {
                newest = Some((t, run.path()));
            }
        }
    }
    let text = std::fs::read_to_string(newest?.1).ok()?;
    text.lines()
        .rev()
        .find(|l| l.contains("\"decision\""))
        .map(str::to_owned)
}
