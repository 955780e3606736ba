//! The commands as the binary runs them: arguments in, lines printed, an [`Exit`] out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_verify::decide::DataDir;
use membership::EtcdClient;
use tokio::time::Instant;

use crate::act::{self, Layout};
use crate::plan::{self, Accept, Refusal, Survey};
use crate::pod::{self, EtcdPod};
use crate::probe;
use crate::snapshot::{self, Contents, LocalIdentity, Origin, Tool, Verified};
use crate::{restore, restore_steps};

pub use crate::from_member::{AddressArgs, from_member};

/// How a command ended (the process exit code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Done (or, with `--dry-run`, the plan may run).
    Ok = 0,
    /// Refused: acting could lose data or discard a working cluster. Nothing was changed.
    Refused = 1,
    /// Invalid input (flags, the manifest, TLS files). Nothing was changed.
    Invalid = 2,
    /// Failed while acting: the printed steps say how far it got.
    Failed = 3,
}

/// How a recovery command runs: what it accepts, whether it only prints its plan, and its bound.
#[derive(Clone, Debug)]
pub struct Options {
    pub accept: Accept,
    pub dry_run: bool,
    /// Bound on the whole recovery.
    pub timeout: Duration,
}

/// Where to find the node's etcd.
#[derive(Clone, Debug)]
pub struct Target {
    pub root: PathBuf,
    /// The manifest's host path (absolute, read below `root`).
    pub manifest: PathBuf,
    pub call_timeout: Duration,
}

impl Target {
    fn layout(&self) -> Result<Layout, String> {
        let manifest = pod::below_root(&self.root, &self.manifest).ok_or_else(|| {
            format!(
                "--manifest {}: must be an absolute path without '..'",
                self.manifest.display()
            )
        })?;
        Ok(Layout {
            root: self.root.clone(),
            manifest,
        })
    }

    fn read(&self) -> Result<(Layout, EtcdPod), String> {
        let layout = self.layout()?;
        let bytes = std::fs::read(&layout.manifest).map_err(|e| {
            let hint = if layout.records().is_dir() {
                format!(
                    "a recovery may have stopped midway: each one keeps the manifest it took out in {}/<time>/",
                    layout.records().display()
                )
            } else {
                "is this a control-plane node, and is --node-root right?".to_owned()
            };
            format!(
                "reading the etcd manifest {}: {e} ({hint})",
                layout.manifest.display()
            )
        })?;
        let pod = EtcdPod::read(&bytes, &layout.manifest, &self.root).map_err(|e| e.to_string())?;
        if pod::forces_new_cluster(&pod.pod) {
            return Err(format!(
                "{} still starts etcd with {}: a recovery did not finish; see the records in {}",
                layout.manifest.display(),
                pod::FORCE_NEW_CLUSTER,
                layout.records().display()
            ));
        }
        Ok((layout, pod))
    }
}

/// Prints `message` as invalid input.
pub(crate) fn invalid(out: &mut dyn FnMut(String), message: impl std::fmt::Display) -> Exit {
    out(format!("invalid input: {message}\nnothing was changed."));
    Exit::Invalid
}

pub(crate) fn refused(out: &mut dyn FnMut(String), refusal: &Refusal) -> Exit {
    out(format!("refused: {refusal}\nnothing was changed."));
    Exit::Refused
}

/// The node's manifest, read (invalid input when it cannot be).
pub(crate) fn read(
    target: &Target,
    out: &mut dyn FnMut(String),
) -> Result<(Layout, EtcdPod), Exit> {
    target.read().map_err(|e| invalid(out, e))
}

/// The survey, printed as a table.
pub(crate) async fn surveyed(
    target: &Target,
    pod: &EtcdPod,
    out: &mut dyn FnMut(String),
) -> Result<Survey, Exit> {
    let survey = probe::survey(pod, target.call_timeout)
        .await
        .map_err(|e| invalid(out, e))?;
    out(plan::table(&survey));
    Ok(survey)
}

/// A client for this node's etcd alone.
fn local_client(
    target: &Target,
    pod: &EtcdPod,
    out: &mut dyn FnMut(String),
) -> Result<EtcdClient, Exit> {
    probe::client(pod, vec![pod.client_url.clone()], target.call_timeout)
        .map_err(|e| invalid(out, e))
}

/// How acting ended: `done` says what was done, or the failure is printed.
pub(crate) fn ended<T>(
    out: &mut dyn FnMut(String),
    result: Result<T, act::ActError>,
    done: impl FnOnce(T) -> String,
) -> Exit {
    match result {
        Ok(v) => {
            out(format!(
                "{}\nNext: once the Kubernetes API answers, the operator adopts this member and adds the other control-plane nodes back as learners.",
                done(v)
            ));
            Exit::Ok
        }
        Err(e) => {
            out(format!("failed: {e}"));
            Exit::Failed
        }
    }
}

/// `status`: the survey, nothing changed.
pub async fn status(target: &Target, out: &mut dyn FnMut(String)) -> Exit {
    async {
        let (_, pod) = read(target, out)?;
        surveyed(target, &pod, out).await?;
        Ok(Exit::Ok)
    }
    .await
    .unwrap_or_else(|e| e)
}

/// `from-snapshot PATH`.
pub async fn from_snapshot(
    target: &Target,
    path: &Path,
    opts: Options,
    out: &mut dyn FnMut(String),
) -> Exit {
    let Options {
        accept,
        dry_run,
        timeout,
    } = opts;
    let deadline = Instant::now() + timeout;
    async {
        let (layout, pod) = read(target, out)?;
        out(format!(
            "etcd-recover from-snapshot {} on {} (manifest {}, data dir {})",
            path.display(),
            pod.name,
            layout.manifest.display(),
            pod.data_dir.display()
        ));
        let verified = snapshot::verify(path).map_err(|e| invalid(out, e))?;
        let c = &verified.contents;
        out(snapshot_line(&verified));
        let survey = surveyed(target, &pod, out).await?;
        let origin = snapshot::origin(c, verified.record.as_ref(), &local_identity(&pod, &survey));
        let tool = restore_tool(&pod).map_err(|e| invalid(out, e))?;
        let decided = plan::decide_from_snapshot(&survey, &origin, &tool, c, &accept)
            .map_err(|r| refused(out, &r))?;
        if let DataDir::Present(wal) = &survey.data_dir {
            out(format!(
                "WARNING: this node still holds etcd data (member {:x} of cluster {:x}): `from-member` would keep the writes made after the snapshot; from-snapshot moves that data aside",
                wal.member_id, wal.cluster_id
            ));
        }
        let stamp = stamp();
        snapshot_warnings(out, &origin, &tool, decided.bump);
        out(snapshot_plan(&pod, &layout, &stamp, &tool, decided.bump, &survey, c));
        if dry_run {
            out("dry run: nothing was changed.".into());
            return Ok(Exit::Ok);
        }
        let client = local_client(target, &pod, out)?;
        let inputs = restore_steps::Inputs {
            current: &pod,
            snapshot: &verified,
            layout: &layout,
            client: &client,
            tool,
            bump: decided.bump,
            stamp: &stamp,
        };
        let result = restore_steps::from_snapshot(&inputs, deadline, out).await;
        Ok(ended(out, result, |done| restored_line(&pod, done)))
    }
    .await
    .unwrap_or_else(|e| e)
}

/// The line describing the verified snapshot: size, hash, record, revision, index, members.
fn snapshot_line(verified: &Verified) -> String {
    let c = &verified.contents;
    format!(
        "snapshot: {} bytes, sha256 {} (integrity hash checked{}), store revision {}, raft index {}, members {}",
        verified.size,
        verified.sha256,
        if verified.record.is_some() {
            ", record beside it agrees"
        } else {
            "; no record beside it"
        },
        c.revision,
        c.consistent_index,
        c.members
            .iter()
            .map(|m| format!("{} ({:x})", m.name, m.id))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// This node's cluster and member ids: the manifest's member ids, plus the data dir's own
/// when it holds data.
fn local_identity(pod: &EtcdPod, survey: &Survey) -> LocalIdentity {
    let mut local = LocalIdentity {
        cluster_id: None,
        member_ids: pod.member_ids.iter().map(|(id, _)| id.get()).collect(),
    };
    if let DataDir::Present(wal) = &survey.data_dir {
        local.cluster_id = Some(wal.cluster_id);
        local.member_ids.insert(wal.member_id);
    }
    local
}

/// The restore tool of the etcd container's image.
fn restore_tool(pod: &EtcdPod) -> Result<Tool, String> {
    restore::etcd_image(pod)
        .ok_or_else(|| "the etcd container has no image".to_owned())
        .and_then(|image| snapshot::restore_tool(&image))
}

/// Prints the snapshot's origin, and the warning when the revision is not bumped.
fn snapshot_warnings(out: &mut dyn FnMut(String), origin: &Origin, tool: &Tool, bump: Option<u64>) {
    match origin {
        Origin::ThisCluster(why) => out(format!("origin: this cluster's ({why})")),
        Origin::OtherCluster(why) => out(format!(
            "WARNING (--force-other-cluster): the snapshot is another cluster's ({why})"
        )),
    }
    if bump.is_none() {
        out(format!(
            "WARNING (--accept-revisions-going-back): {} cannot bump the revision; once etcd serves, restart every kube-apiserver so no watch cache keeps revisions of the lost cluster (the operator relists its own caches when it sees the new cluster id)",
            tool.binary
        ));
    }
}

/// The `from-snapshot` plan, step by step.
fn snapshot_plan(
    pod: &EtcdPod,
    layout: &Layout,
    stamp: &str,
    tool: &Tool,
    bump: Option<u64>,
    survey: &Survey,
    contents: &Contents,
) -> String {
    format!(
        "plan: {} becomes a one-member cluster on the snapshot's data:\n  1. stop etcd (its manifest moves to {})\n  2. copy the snapshot there and check the copy\n  3. move {}/member aside to member-before-restore-{stamp}\n  4. restore with the etcd image's {}{} and start once on the restored data\n  5. move the restored data into place and start etcd normally\nthen the operator adds the other nodes back as learners once the API is back.",
        pod.name,
        layout.record_dir(stamp).display(),
        pod.data_dir.display(),
        tool.binary,
        bump.map_or(String::new(), |b| format!(
            ", the revision bumped by {b} (max(10^9, 1.2 x raft index {}))",
            plan::observed_raft_index(survey, contents)
        )),
    )
}

/// What a finished `from-snapshot` did and kept.
fn restored_line(pod: &EtcdPod, done: restore_steps::Restored) -> String {
    format!(
        "restored: {} is a one-member cluster (member {}) at raft index {}. Kept: the old manifest and the snapshot in {}{}.",
        pod.name,
        done.member_id,
        done.raft_index,
        done.record_dir.display(),
        done.moved_aside
            .map(|p| format!(", the data as it was in {}", p.display()))
            .unwrap_or_default()
    )
}

/// UTC `YYYYMMDDTHHMMSSZ`, for the names of what recovery keeps.
pub(crate) fn stamp() -> String {
    etcd_verify::datadir::stamp(time::OffsetDateTime::now_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(root: &Path) -> Target {
        Target {
            root: root.to_owned(),
            manifest: PathBuf::from("/etc/kubernetes/manifests/etcd-pod.yaml"),
            call_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_missing_manifest_points_at_a_recovery_that_stopped_midway() {
        let root = tempfile::tempdir().unwrap();
        let e = target(root.path()).read().unwrap_err();
        assert!(e.contains("is --node-root right?"), "{e}");
        std::fs::create_dir_all(root.path().join("var/lib/etcd-recovery/20261126T000000Z"))
            .unwrap();
        let e = target(root.path()).read().unwrap_err();
        assert!(e.contains("stopped midway"), "{e}");
    }

    #[test]
    fn a_manifest_still_forcing_a_new_cluster_is_not_recovered_again() {
        let root = tempfile::tempdir().unwrap();
        let golden = include_str!("../../operator/tests/golden/etcd-pod-master-1.yaml");
        let current = EtcdPod::read(golden.as_bytes(), Path::new("golden"), root.path()).unwrap();
        let id = membership::MemberId::new(0x1111).unwrap();
        let forced = pod::render(&pod::one_member(&current, id, true, "t"), "test").unwrap();
        let dir = root.path().join("etc/kubernetes/manifests");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("etcd-pod.yaml"), forced).unwrap();
        let e = target(root.path()).read().unwrap_err();
        assert!(e.contains("a recovery did not finish"), "{e}");
    }

    #[test]
    fn a_manifest_path_outside_the_root_is_invalid_input() {
        let root = tempfile::tempdir().unwrap();
        let mut t = target(root.path());
        t.manifest = PathBuf::from("relative/etcd-pod.yaml");
        assert!(t.read().unwrap_err().contains("--manifest"));
    }
}
