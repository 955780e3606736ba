//! Verification by restore: a backup counts only once it restored into a throwaway data dir
//! (with the restore tool of the cluster's etcd image: `etcdctl` for 3.4, `etcdutl` for 3.5+,
//! of that image's version, from the operator image's `/usr/local/lib/etcd/<version>/` when it
//! carries that build, else from the `--etcd-tools` directory itself), a throwaway one-member etcd started on
//! it (plain HTTP on two free loopback ports, nothing else reaches it), and that etcd answered
//! the marker key with the value written just before the snapshot. The etcd is stopped and the
//! directory removed by the caller whatever the result.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

use etcd_snapshot::tool::{Tool, tool_of_version};

use super::run::MARKER_KEY;
use crate::etcd_version::image_release;

/// How long the restore, and then the start until the marker reads back, may each take.
const STEP_LIMIT: Duration = Duration::from_secs(120);

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// The directory holding the etcd tools of `version`: the operator image keeps every supported
/// build in `<tools>/../lib/etcd/<version>/` (`scripts/build-images`), with `tools` itself
/// (`/usr/local/bin`) linking the Deployment's default one; another directory is used as it is.
pub fn tools_dir(tools: &Path, version: (u64, u64, u64)) -> PathBuf {
    let (a, b, c) = version;
    let versioned = tools.join(format!("../lib/etcd/{a}.{b}.{c}"));
    if versioned.join("etcd").is_file() {
        versioned
    } else {
        tools.to_path_buf()
    }
}

/// The restore tool of the cluster's etcd image: the version its tag names, else `declared`
/// (`spec.etcdImageVersion`, for a digest-only image), read as the version policy reads them.
pub fn restore_tool(image: &str, declared: &str) -> Result<Tool, String> {
    let release = image_release(image, declared)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "etcd image {image} names no version and spec.etcdImageVersion is empty: cannot tell which tool restores its snapshots"
            )
        })?;
    let v = release.version;
    let version = (u64::from(v.major), u64::from(v.minor), u64::from(v.patch));
    tool_of_version(version).ok_or_else(|| {
        format!("etcd image {image}: etcd {v} is not a version recovery knows (3.4 and later)")
    })
}

/// Restores `snapshot` under `work` and reads [`MARKER_KEY`] back; `Ok` says what proved it.
pub async fn restore_and_read(
    tools: &Path,
    image: &str,
    declared_version: &str,
    snapshot: &Path,
    work: &Path,
    marker: &str,
) -> Result<String, String> {
    let (tool, restore_bin, etcd_bin) = binaries(tools, image, declared_version)?;
    let dir = work.to_owned();
    tokio::task::spawn_blocking(move || etcd_snapshot::file::private_dir(&dir))
        .await
        .map_err(|e| format!("{}: {e}", work.display()))?
        .map_err(|e| format!("{}: {e}", work.display()))?;
    let member = Throwaway::new(work)?;
    let started = Instant::now();
    restore(&tool, &restore_bin, snapshot, &member).await?;
    let mut etcd = start_etcd(&etcd_bin, work, &member)?;
    let read = read_marker(&member.client, marker, &mut etcd).await;
    let _ = etcd.start_kill();
    let _ = etcd.wait().await;
    let (revision, version) = read.map_err(|e| with_log_tail(&e, work))?;
    Ok(format!(
        "restored with {} and started etcd {version}: {MARKER_KEY} = {marker} at revision {revision} ({} ms)",
        tool.binary,
        started.elapsed().as_millis()
    ))
}

/// The restore tool of `image` and the paths of it and of `etcd`, both of which must exist.
fn binaries(
    tools: &Path,
    image: &str,
    declared_version: &str,
) -> Result<(Tool, PathBuf, PathBuf), String> {
    let tool = restore_tool(image, declared_version)?;
    let tools = tools_dir(tools, tool.version);
    let restore_bin = tools.join(tool.binary);
    let etcd_bin = tools.join("etcd");
    for b in [&restore_bin, &etcd_bin] {
        if !b.is_file() {
            return Err(format!(
                "{} not found: the operator's --etcd-tools directory must hold etcd and {} of the cluster's etcd version ({image})",
                b.display(),
                tool.binary
            ));
        }
    }
    Ok((tool, restore_bin, etcd_bin))
}

/// The throwaway one-member etcd: its data dir and loopback URLs.
struct Throwaway {
    data: PathBuf,
    peer: String,
    client: String,
    cluster: String,
}

impl Throwaway {
    /// A member with its data under `work`, on two free loopback ports.
    fn new(work: &Path) -> Result<Self, String> {
        let data = work.join("data");
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let peer = format!("http://127.0.0.1:{peer_port}");
        let client = format!("http://127.0.0.1:{client_port}");
        let cluster = format!("verify={peer}");
        Ok(Self {
            data,
            peer,
            client,
            cluster,
        })
    }
}

/// Restores `snapshot` into the member's data dir with `tool`.
async fn restore(
    tool: &Tool,
    restore_bin: &Path,
    snapshot: &Path,
    member: &Throwaway,
) -> Result<(), String> {
    let mut restore = Command::new(restore_bin);
    restore
        .env("ETCDCTL_API", "3")
        .arg("snapshot")
        .arg("restore")
        .arg(snapshot)
        .arg(format!("--data-dir={}", member.data.display()))
        .arg("--name=verify")
        .arg(format!("--initial-cluster={}", member.cluster))
        .arg(format!("--initial-advertise-peer-urls={}", member.peer))
        .arg("--initial-cluster-token=etcd-backup-verify")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(STEP_LIMIT, restore.output())
        .await
        .map_err(|_| {
            format!(
                "{} snapshot restore: not done within {STEP_LIMIT:?}",
                tool.binary
            )
        })?
        .map_err(|e| format!("{}: {e}", restore_bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} snapshot restore failed ({}): {}",
            tool.binary,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Starts the throwaway etcd on the restored data dir, logging to `work/etcd.log`.
fn start_etcd(
    etcd_bin: &Path,
    work: &Path,
    member: &Throwaway,
) -> Result<tokio::process::Child, String> {
    let log = std::fs::File::create(work.join("etcd.log"))
        .map_err(|e| format!("{}: {e}", work.display()))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    Command::new(etcd_bin)
        .arg("--name=verify")
        .arg(format!("--data-dir={}", member.data.display()))
        .arg(format!("--listen-client-urls={}", member.client))
        .arg(format!("--advertise-client-urls={}", member.client))
        .arg(format!("--listen-peer-urls={}", member.peer))
        .arg(format!("--initial-advertise-peer-urls={}", member.peer))
        .arg(format!("--initial-cluster={}", member.cluster))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", etcd_bin.display()))
}

/// `e` with the last lines of the throwaway etcd's log under `work`.
fn with_log_tail(e: &str, work: &Path) -> String {
    let log = std::fs::read_to_string(work.join("etcd.log")).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(3).collect();
    format!(
        "{e} (etcd's last lines: {})",
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    )
}

/// Reads the marker from the throwaway etcd until it answers; its revision and version.
async fn read_marker(
    url: &str,
    marker: &str,
    etcd: &mut tokio::process::Child,
) -> Result<(i64, String), String> {
    let deadline = Instant::now() + STEP_LIMIT;
    let mut last = String::from("no answer yet");
    loop {
        if let Ok(Some(status)) = etcd.try_wait() {
            return Err(format!(
                "the restored etcd exited ({status}) before answering: {last}"
            ));
        }
        let attempt = async {
            let options = etcd_client::ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(1))
                .with_timeout(Duration::from_secs(2));
            let mut c = etcd_client::Client::connect([url], Some(options)).await?;
            let got = c.get(MARKER_KEY, None).await?;
            let status = c.status().await?;
            Ok::<_, etcd_client::Error>((got, status))
        };
        match attempt.await {
            Ok((got, status)) => {
                let value = got.kvs().first().map(|kv| kv.value().to_vec());
                return match value {
                    Some(v) if v == marker.as_bytes() => Ok((
                        got.header().map_or(0, |h| h.revision()),
                        status.version().to_owned(),
                    )),
                    Some(v) => Err(format!(
                        "the restored etcd answers {MARKER_KEY} = {:?}, expected {marker:?}: the snapshot predates its own marker",
                        String::from_utf8_lossy(&v)
                    )),
                    None => Err(format!("the restored etcd has no {MARKER_KEY}")),
                };
            }
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the restored etcd did not answer within {STEP_LIMIT:?}: {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_version_names_the_tool_of_an_image_without_one() {
        let digest = "registry.example/etcd@sha256:0123";
        assert!(restore_tool(digest, "").is_err());
        let t = restore_tool(digest, "3.5.16").unwrap();
        assert_eq!((t.binary, t.version), ("etcdutl", (3, 5, 16)));
        let t = restore_tool("etcd:3.4.23", "").unwrap();
        assert_eq!(t.binary, "etcdctl");
        let e = restore_tool("etcd:latest", "three").unwrap_err();
        assert!(e.contains("spec.etcdImageVersion"), "{e}");
    }
}
