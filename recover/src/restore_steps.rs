//! Acting on a `from-snapshot` plan, each step printed before it runs (see [`crate::restore`]):
//!
//! 1. Stop etcd (its manifest kept in the record dir).
//! 2. Copy the snapshot (and its record) into the record dir and check the copy's SHA-256: the
//!    file restored is the file verified.
//! 3. Move `<data-dir>/member` aside to `member-before-restore-<stamp>` (never deleted).
//! 4. Write the restore-phase manifest; wait until etcd answers on the restored data as its own
//!    leader, the only member.
//! 5. Stop it, move the restored `member` dir into place, start the normal one-member manifest
//!    and wait until it answers again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use membership::{EtcdClient, MemberId};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::act::{ActError, Layout, io};
use crate::pod::EtcdPod;
use crate::restore::{self, RestoreSpec};
use crate::snapshot::{self, Verified};
use crate::wait;

/// What `from-snapshot` left behind.
#[derive(Clone, Debug)]
pub struct Restored {
    pub record_dir: PathBuf,
    pub moved_aside: Option<PathBuf>,
    pub member_id: MemberId,
    pub raft_index: u64,
}

/// Everything `from-snapshot` acts with.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub current: &'a EtcdPod,
    pub snapshot: &'a Verified,
    pub layout: &'a Layout,
    pub client: &'a EtcdClient,
    pub tool: snapshot::Tool,
    /// How far to bump the revision (`None`: not bumped, as accepted).
    pub bump: Option<u64>,
    pub stamp: &'a str,
}

/// Runs the steps of the module docs.
pub async fn from_snapshot(
    i: &Inputs<'_>,
    deadline: Instant,
    say: &mut dyn FnMut(String),
) -> Result<Restored, ActError> {
    let (current, layout, stamp) = (i.current, i.layout, i.stamp);
    let member_id = restore::member_id_for(current, stamp)
        .ok_or_else(|| ActError::Failed("the restored member id came out as 0".into()))?;
    let container_data_dir = restore::container_data_dir(current)
        .ok_or_else(|| ActError::Failed("the etcd container has no ETCD_DATA_DIR".into()))?;
    let record_dir = layout.record_dir(stamp);
    layout
        .stop_etcd(&record_dir, &current.client_url, deadline, "1/5", say)
        .await?;
    let node_path = copy_snapshot(i, &record_dir, say)?;
    let moved_aside = move_member_aside(current, stamp, say)?;
    let spec = RestoreSpec {
        stamp: stamp.to_owned(),
        tool: i.tool.clone(),
        bump: i.bump,
        snapshot_node_path: node_path,
        member_id,
    };
    let header = format!(
        "etcd static pod written by etcd-recover from-snapshot at {stamp}.\nThe operator replaces it with its next revision once the API is back."
    );
    restore_and_lead(i, &spec, &container_data_dir, &header, deadline, say).await?;
    let raft_index = start_restored(i, member_id, &header, deadline, say).await?;
    Ok(Restored {
        record_dir,
        moved_aside,
        member_id,
        raft_index,
    })
}

/// Step 2: copies the snapshot (and its record) into `record_dir`, checks the copy, and returns
/// the copy's path as the node sees it.
fn copy_snapshot(
    i: &Inputs<'_>,
    record_dir: &Path,
    say: &mut dyn FnMut(String),
) -> Result<PathBuf, ActError> {
    let copy = record_dir.join("snapshot.db");
    say(format!(
        "2/5 copying the snapshot to {} and checking the copy's sha256",
        copy.display()
    ));
    copy_checked(&i.snapshot.path, &copy, &i.snapshot.sha256)?;
    let record = snapshot::record_path(&i.snapshot.path);
    if record.exists() {
        std::fs::copy(&record, snapshot::record_path(&copy)).map_err(io("copying", &record))?;
    }
    Ok(Path::new("/").join(
        copy.strip_prefix(&i.layout.root)
            .map_err(|_| ActError::Failed("the record dir is not below the node root".into()))?,
    ))
}

/// Step 3: moves `<data-dir>/member` aside to `member-before-restore-<stamp>`, returning where
/// it went (`None`: there was none).
fn move_member_aside(
    current: &EtcdPod,
    stamp: &str,
    say: &mut dyn FnMut(String),
) -> Result<Option<PathBuf>, ActError> {
    let member = current.data_dir.join("member");
    if !member.exists() {
        say("3/5 no data dir to move aside".into());
        return Ok(None);
    }
    let aside = current
        .data_dir
        .join(format!("member-before-restore-{stamp}"));
    say(format!(
        "3/5 moving {} aside to {} (kept; nothing is deleted)",
        member.display(),
        aside.display()
    ));
    std::fs::rename(&member, &aside).map_err(io("moving aside", &member))?;
    etcd_installer::atomic::fsync_dir(&current.data_dir)
        .map_err(io("syncing", &current.data_dir))?;
    Ok(Some(aside))
}

/// Step 4: writes the restore-phase manifest and waits until etcd leads on the restored data.
async fn restore_and_lead(
    i: &Inputs<'_>,
    spec: &RestoreSpec,
    container_data_dir: &Path,
    header: &str,
    deadline: Instant,
    say: &mut dyn FnMut(String),
) -> Result<(), ActError> {
    let (current, member_id) = (i.current, spec.member_id);
    say(format!(
        "4/5 restoring with the etcd image's {}{} into {}, then starting member {member_id} alone on it",
        i.tool.binary,
        match i.bump {
            Some(bump) => format!(" (revision bumped by {bump}, older revisions marked compacted)"),
            None => " (revision NOT bumped)".into(),
        },
        restore::restore_dir(&current.data_dir, i.stamp).display()
    ));
    i.layout.write_manifest(
        &restore::restore_phase(current, container_data_dir, spec),
        header,
    )?;
    let gone: BTreeSet<MemberId> = current.member_ids.iter().map(|(id, _)| id).collect();
    wait::leading(i.client, &current.client_url, member_id, &gone, deadline).await?;
    Ok(())
}

/// Step 5: stops etcd, moves the restored `member` dir into place, starts the normal
/// one-member manifest and returns the raft index it answers at.
async fn start_restored(
    i: &Inputs<'_>,
    member_id: MemberId,
    header: &str,
    deadline: Instant,
    say: &mut dyn FnMut(String),
) -> Result<u64, ActError> {
    let (current, layout, stamp) = (i.current, i.layout, i.stamp);
    let member = current.data_dir.join("member");
    say(format!(
        "5/5 moving the restored data into {} and starting etcd on it",
        member.display()
    ));
    layout.remove_manifest()?;
    wait::down(&current.client_url, deadline).await?;
    let restored_dir = restore::restore_dir(&current.data_dir, stamp);
    let restored = restored_dir.join("member");
    std::fs::rename(&restored, &member).map_err(io("moving into place", &restored))?;
    std::fs::remove_dir(&restored_dir).map_err(io("removing the empty", &restored_dir))?;
    etcd_installer::atomic::fsync_dir(&current.data_dir)
        .map_err(io("syncing", &current.data_dir))?;
    let normal = restore::restored_member_pod(
        current,
        member_id,
        stamp,
        &format!("from-snapshot {stamp}: one-member cluster, normal start"),
    );
    layout.write_manifest(&normal, header)?;
    let (_, _, raft_index) =
        wait::serving(i.client, &current.client_url, member_id, deadline).await?;
    say(format!(
        "    etcd answers as the only member {member_id} at raft index {raft_index}"
    ));
    Ok(raft_index)
}

/// Copies `from` to the new file `to` (fsynced) and checks its SHA-256 is `sha256`.
fn copy_checked(from: &Path, to: &Path, sha256: &str) -> Result<(), ActError> {
    std::fs::copy(from, to).map_err(io("copying", from))?;
    let mut file = std::fs::File::open(to).map_err(io("opening", to))?;
    file.sync_all().map_err(io("syncing", to))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(io("reading", to))?;
    let got = snapshot::hex(&hasher.finalize());
    if got != sha256 {
        return Err(ActError::Failed(format!(
            "the copy {} has sha256 {got}, the verified snapshot {sha256}: the source changed while it was copied",
            to.display()
        )));
    }
    Ok(())
}
