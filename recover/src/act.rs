//! Acting on a [`Plan`]: the steps of `from-member`, each printed before it runs, each waiting
//! on what etcd or the node shows (with a deadline, naming what was last seen).
//!
//! 1. Stop etcd: the manifest moves out of the manifests dir into the recovery record dir
//!    (`<root>/var/lib/etcd-recovery/<stamp>/`), so the kubelet stops the pod; wait until its
//!    client port refuses connections.
//! 2. Copy `<data-dir>/member` to `<data-dir>/member-before-recovery-<stamp>` (never deleted).
//! 3. Write the one-member manifest with `--force-new-cluster` (atomically), wait until etcd
//!    answers as the only member and its own leader.
//! 4. Write it again without the flag (a restart must never force again: it would drop members
//!    the operator adds later), wait until etcd went down and answers again as this member with
//!    a leader (not necessarily itself: the operator may have added a member meanwhile).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use membership::{EtcdClient, MemberId, MemberUrl};
use tokio::time::Instant;

use crate::plan::Plan;
use crate::pod::{self, EtcdPod};
use crate::readdress::{Move, Moved};
use crate::wait;

/// Where the node keeps its files.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The node's `/` (a sandbox node's root dir; `/` on a real node).
    pub root: PathBuf,
    /// The etcd static-pod manifest the kubelet runs (host path below `root`).
    pub manifest: PathBuf,
}

impl Layout {
    /// `<root>/var/lib/etcd-recovery`: one directory per recovery.
    pub fn records(&self) -> PathBuf {
        self.root.join("var/lib/etcd-recovery")
    }

    /// `<records>/<stamp>`: the manifest taken out (and the snapshot restored).
    pub fn record_dir(&self, stamp: &str) -> PathBuf {
        self.records().join(stamp)
    }

    fn manifest_dir(&self) -> Result<&Path, ActError> {
        self.manifest.parent().ok_or_else(|| ActError::Io {
            action: "locating the directory of",
            path: self.manifest.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        })
    }

    fn manifest_name(&self) -> String {
        self.manifest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "etcd-pod.yaml".into())
    }

    /// Writes `pod` as the node's etcd manifest, atomically.
    pub fn write_manifest(&self, pod: &Pod, header: &str) -> Result<(), ActError> {
        let text = pod::render(pod, header).map_err(|e| ActError::Failed(e.to_string()))?;
        let dir = self.manifest_dir()?;
        etcd_installer::atomic::write_file(dir, &self.manifest_name(), text.as_bytes(), 0o600)
            .map_err(io("writing", &self.manifest))
    }

    /// Whether the node's manifest still starts etcd with `--force-new-cluster` (a missing or
    /// unreadable one does not).
    pub fn still_forces(&self) -> Result<bool, ActError> {
        let bytes = match std::fs::read(&self.manifest) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io("reading", &self.manifest)(e)),
        };
        Ok(etcd_installer::manifest::parse(&bytes)
            .map(|p| pod::forces_new_cluster(&p))
            .unwrap_or(false))
    }

    /// Removes the node's etcd manifest (one recovery wrote), so the kubelet stops the pod.
    pub fn remove_manifest(&self) -> Result<(), ActError> {
        std::fs::remove_file(&self.manifest).map_err(io("removing", &self.manifest))?;
        let dir = self.manifest_dir()?;
        etcd_installer::atomic::fsync_dir(dir).map_err(io("syncing", dir))
    }

    /// Stops etcd (step `step`, printed): the manifest is copied into `record_dir` and removed
    /// from the manifests dir (a copy, since the two may be on different file systems); waits
    /// until `url` refuses connections.
    pub async fn stop_etcd(
        &self,
        record_dir: &Path,
        url: &MemberUrl,
        deadline: Instant,
        step: &str,
        say: &mut dyn FnMut(String),
    ) -> Result<PathBuf, ActError> {
        say(format!(
            "{step} stopping etcd: moving {} into {}",
            self.manifest.display(),
            record_dir.display()
        ));
        etcd_installer::atomic::ensure_dir_all(record_dir, 0o700)
            .map_err(io("creating", record_dir))?;
        let kept = record_dir.join(self.manifest_name());
        let bytes = std::fs::read(&self.manifest).map_err(io("reading", &self.manifest))?;
        etcd_installer::atomic::write_file(record_dir, &self.manifest_name(), &bytes, 0o600)
            .map_err(io("keeping", &kept))?;
        self.remove_manifest()?;
        wait::down(url, deadline).await?;
        say(format!("    etcd stopped: {url} refuses connections"));
        Ok(kept)
    }
}

/// Why acting stopped; what was done so far is in the printed steps.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("timed out after {waited:?} waiting for {what}; last seen: {last}")]
    Timeout {
        what: String,
        waited: Duration,
        last: String,
    },
    #[error("{0}")]
    Failed(String),
}

pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ActError {
    let path = path.to_owned();
    move |source| ActError::Io {
        action,
        path,
        source,
    }
}

/// What `from-member` left behind.
#[derive(Clone, Debug)]
pub struct Done {
    pub record_dir: PathBuf,
    pub data_copy: PathBuf,
    pub raft_index: u64,
}

/// What `from-member` acts on: the node's pod as it is, and, with `--address`, the move.
#[derive(Debug)]
pub struct Subject<'a> {
    pub current: &'a EtcdPod,
    /// The move (`None`: the member stays where it is).
    pub moving: Option<Moving<'a>>,
    pub call_timeout: Duration,
}

/// `from-member --address`: the pod at the new address with its TLS dirs, and the move.
#[derive(Debug)]
pub struct Moving<'a> {
    pub moved: Moved,
    pub mv: &'a Move,
}

impl Subject<'_> {
    /// The pod recovery starts: at the new address when moving.
    fn target(&self) -> &EtcdPod {
        self.moving.as_ref().map_or(self.current, |m| &m.moved.pod)
    }
}

/// Runs the steps of the module docs. `say` prints one step.
pub async fn from_member(
    subject: &Subject<'_>,
    plan: &Plan,
    layout: &Layout,
    stamp: &str,
    deadline: Instant,
    say: &mut dyn FnMut(String),
) -> Result<Done, ActError> {
    let (current, target) = (subject.current, subject.target());
    let total = if subject.moving.is_some() { 5 } else { 4 };
    let mut step = 0;
    let mut next = || {
        step += 1;
        format!("{step}/{total}")
    };
    let record_dir = layout.record_dir(stamp);
    layout
        .stop_etcd(&record_dir, &target.client_url, deadline, &next(), say)
        .await?;

    let data_copy = copy_data(current, stamp, &next(), say)?;
    if let Some(moving) = &subject.moving {
        move_files(current, moving, &next(), say)?;
    }
    let client = crate::probe::client(
        target,
        vec![target.client_url.clone()],
        subject.call_timeout,
    )
    .map_err(|e| ActError::Failed(e.to_string()))?;

    let header = format!(
        "etcd static pod written by etcd-recover from-member at {stamp}.\nThe operator replaces it with its next revision once the API is back."
    );
    let forced = pod::one_member(
        target,
        plan.member_id,
        true,
        &format!("from-member {stamp}: first start with --force-new-cluster"),
    );
    say(format!(
        "{} starting etcd once with {}: member {} alone in cluster {:x}",
        next(),
        pod::FORCE_NEW_CLUSTER,
        plan.member_id,
        plan.cluster_id
    ));
    layout.write_manifest(&forced, &header)?;
    let gone: BTreeSet<MemberId> = current
        .member_ids
        .iter()
        .map(|(id, _)| id)
        .filter(|id| *id != plan.member_id)
        .collect();
    let index = wait::leading(&client, &target.client_url, plan.member_id, &gone, deadline).await?;
    say(format!(
        "    etcd answers as its own leader, every other member dropped, at raft index {index}"
    ));
    own_peer_url(&client, target, plan.member_id, say).await?;

    let normal = pod::one_member(
        target,
        plan.member_id,
        false,
        &format!("from-member {stamp}: one-member cluster, normal start"),
    );
    say(format!(
        "{} restarting etcd without {} (a later restart must not force again)",
        next(),
        pod::FORCE_NEW_CLUSTER
    ));
    // Once etcd served in step 3 the API can come back, and the operator's installer may
    // already have replaced the forced manifest with a revision of its own: then that start
    // drops the flag, and this one is not needed.
    if layout.still_forces()? {
        layout.write_manifest(&normal, &header)?;
        wait::down(&target.client_url, deadline).await?;
    } else {
        say("    the operator already replaced the forced manifest with its own revision".into());
    }
    let (leader, members, raft_index) =
        wait::serving(&client, &target.client_url, plan.member_id, deadline).await?;
    say(format!(
        "    etcd restarted and answers as member {} with leader {leader:x} ({members} member(s)) at raft index {raft_index}",
        plan.member_id
    ));
    Ok(Done {
        record_dir,
        data_copy,
        raft_index,
    })
}

/// Copies `<data dir>/member` aside (step `step`), never to be deleted; returns the copy.
fn copy_data(
    current: &EtcdPod,
    stamp: &str,
    step: &str,
    say: &mut dyn FnMut(String),
) -> Result<PathBuf, ActError> {
    let member = current.data_dir.join("member");
    let data_copy = current
        .data_dir
        .join(format!("member-before-recovery-{stamp}"));
    say(format!(
        "{step} copying {} to {} (kept; nothing is deleted)",
        member.display(),
        data_copy.display()
    ));
    copy_tree(&member, &data_copy)?;
    Ok(data_copy)
}

/// The move's files (step `step`): the TLS files copied beside the recovery record and this
/// node's certificates issued there for the new address.
fn move_files(
    current: &EtcdPod,
    moving: &Moving<'_>,
    step: &str,
    say: &mut dyn FnMut(String),
) -> Result<(), ActError> {
    let (mv, to) = (moving.mv, &moving.moved.tls_to);
    say(format!(
        "{step} moving to {}: the TLS files copied to {}, {}'s certificates issued there for {} by {}",
        mv.ip,
        to.display(),
        current.name,
        mv.ip,
        mv.signer.subject()
    ));
    let issued = crate::readdress::prepare(
        &moving.moved,
        &current.name,
        mv,
        time::OffsetDateTime::now_utc(),
    )?;
    for f in issued {
        say(format!("    issued {}", f.display()));
    }
    Ok(())
}

/// Moves member `id`'s peer URL to the target's, when etcd kept another one (it keeps the
/// one it had across `--force-new-cluster`): `MemberUpdate`, which one member commits alone.
async fn own_peer_url(
    client: &EtcdClient,
    target: &EtcdPod,
    id: MemberId,
    say: &mut dyn FnMut(String),
) -> Result<(), ActError> {
    let list = client
        .member_list_at(&target.client_url)
        .await
        .map_err(|e| ActError::Failed(format!("listing the members: {e}")))?;
    let Some(own) = list.iter().find(|m| m.id == id) else {
        return Err(ActError::Failed(format!(
            "member {id} is not in its own member list"
        )));
    };
    if own.peer_urls.len() == 1 && own.peer_urls.contains(&target.peer_url) {
        return Ok(());
    }
    client
        .update_peer_url(id, &target.peer_url)
        .await
        .map_err(|e| {
            ActError::Failed(format!(
                "moving member {id}'s peer URL to {}: {e}",
                target.peer_url
            ))
        })?;
    say(format!(
        "    member {id}'s peer URL moved from {} to {} (MemberUpdate)",
        own.peer_urls
            .iter()
            .map(MemberUrl::as_str)
            .collect::<Vec<_>>()
            .join(","),
        target.peer_url
    ));
    Ok(())
}

/// Copies the tree at `from` to the new directory `to` (files fsynced), refusing to overwrite.
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), ActError> {
    std::fs::create_dir(to).map_err(io("creating", to))?;
    let entries = std::fs::read_dir(from).map_err(io("reading", from))?;
    for entry in entries {
        let entry = entry.map_err(io("reading", from))?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(io("inspecting", &source))?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target).map_err(io("copying", &source))?;
            std::fs::File::open(&target)
                .and_then(|f| f.sync_all())
                .map_err(io("syncing", &target))?;
        }
    }
    etcd_installer::atomic::fsync_dir(to).map_err(io("syncing", to))
}
