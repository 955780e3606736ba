//! Checking a snapshot before it is restored: that it is whole, what it holds, which cluster it
//! comes from, and which tool of the etcd image restores it.
//!
//! * **Integrity.** A snapshot etcd streams (`etcdctl snapshot save`, the Snapshot API) ends
//!   with the SHA-256 of everything before it; [`verify`] recomputes it, so one flipped byte or a
//!   truncated copy is refused before anything changes. A record beside the snapshot
//!   (`<snapshot>.json`, [`Record`], written by the operator's backups) must agree with the
//!   file's SHA-256 as a whole.
//! * **Contents.** Members, latest revision and raft index come from the database itself
//!   ([`crate::bolt`]).
//! * **Origin** ([`origin`], pure). A snapshot is this cluster's when its record names this
//!   node's cluster id, or when one of its members is a member this node knows (its revision's
//!   `ETCD_MEMBER_IDS`, its data dir's member). Otherwise restoring it replaces this cluster's
//!   data with another cluster's: refused unless `--force-other-cluster`.
//! * **Tool** ([`restore_tool`], pure). etcd 3.4 restores with `etcdctl snapshot restore`, 3.5
//!   and later with `etcdutl`. Only `etcdutl` from 3.5.10 (the backport of etcd PR 16029) and
//!   3.6 can bump the store revision and mark the old ones compacted, so watchers (the API
//!   server's watch cache, every informer) never see revisions go back; with an older image
//!   recovery refuses unless `--accept-revisions-going-back`.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::bolt::{self, Contents};

/// The trailing integrity hash etcd appends to a snapshot stream.
const HASH_LEN: u64 = 32;

/// How far a bumping restore moves the store revision: far past anything clients can have seen
/// since the snapshot (a billion writes), as etcd's own restore documentation suggests.
pub const REVISION_BUMP: u64 = 1_000_000_000;

/// What is wrong with a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: its integrity hash does not match its contents (a flipped byte, a truncated copy, or a database file copied from a data dir rather than a snapshot): refusing to restore it"
    )]
    Integrity { path: PathBuf },
    #[error("{path}: {size} bytes is too short to be an etcd snapshot")]
    TooShort { path: PathBuf, size: u64 },
    #[error("{path}: {reason}")]
    Record { path: PathBuf, reason: String },
    #[error("{0}")]
    Database(#[from] bolt::BoltError),
}

/// The record kept beside a snapshot (`<snapshot>.json`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// SHA-256 of the whole snapshot file, lowercase hex.
    pub sha256: String,
    /// The store revision the snapshot was taken at.
    pub revision: i64,
    /// The cluster id, lowercase hex.
    pub cluster_id: String,
    /// The members at the time, `<id hex>=<name>`.
    #[serde(default)]
    pub members: Vec<String>,
    #[serde(default)]
    pub etcd_version: String,
    /// RFC 3339.
    #[serde(default)]
    pub taken_at: String,
}

/// A snapshot that passed [`verify`].
#[derive(Clone, Debug)]
pub struct Verified {
    pub path: PathBuf,
    pub size: u64,
    /// SHA-256 of the whole file, lowercase hex.
    pub sha256: String,
    pub contents: Contents,
    pub record: Option<Record>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let path = path.to_owned();
    move |source| SnapshotError::Io { path, source }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The path of the record beside `snapshot`.
pub fn record_path(snapshot: &Path) -> PathBuf {
    let mut name = snapshot.as_os_str().to_owned();
    name.push(".json");
    PathBuf::from(name)
}

/// Checks the snapshot at `path` (see the module docs).
pub fn verify(path: &Path) -> Result<Verified, SnapshotError> {
    let mut file = std::fs::File::open(path).map_err(io(path))?;
    let size = file.metadata().map_err(io(path))?.len();
    if size <= HASH_LEN + 4096 {
        return Err(SnapshotError::TooShort {
            path: path.to_owned(),
            size,
        });
    }
    let mut body = Sha256::new();
    let mut whole = Sha256::new();
    let mut remaining = size - HASH_LEN;
    let mut buf = vec![0u8; 1 << 20];
    while remaining > 0 {
        let want = usize::try_from(remaining.min(buf.len() as u64)).unwrap_or(buf.len());
        let chunk = buf.get_mut(..want).unwrap_or_default();
        file.read_exact(chunk).map_err(io(path))?;
        body.update(&*chunk);
        whole.update(&*chunk);
        remaining -= want as u64;
    }
    let mut trailer = [0u8; HASH_LEN as usize];
    file.read_exact(&mut trailer).map_err(io(path))?;
    whole.update(trailer);
    if body.finalize().as_slice() != trailer {
        return Err(SnapshotError::Integrity {
            path: path.to_owned(),
        });
    }
    let sha256 = hex(whole.finalize().as_slice());
    let record = read_record(path, &sha256)?;
    let contents = bolt::read(path)?;
    Ok(Verified {
        path: path.to_owned(),
        size,
        sha256,
        contents,
        record,
    })
}

fn read_record(snapshot: &Path, sha256: &str) -> Result<Option<Record>, SnapshotError> {
    let path = record_path(snapshot);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    let bad = |reason: String| SnapshotError::Record {
        path: path.clone(),
        reason,
    };
    let record: Record =
        serde_json::from_slice(&text).map_err(|e| bad(format!("not a snapshot record: {e}")))?;
    if !record.sha256.eq_ignore_ascii_case(sha256) {
        return Err(bad(format!(
            "records sha256 {} but the snapshot's is {sha256}: the snapshot is not the one recorded",
            record.sha256
        )));
    }
    Ok(Some(record))
}

/// What this node knows of its own cluster.
#[derive(Clone, Debug, Default)]
pub struct LocalIdentity {
    /// From the data dir's WAL, when there is one.
    pub cluster_id: Option<u64>,
    /// The revision's `ETCD_MEMBER_IDS` and the data dir's member.
    pub member_ids: BTreeSet<u64>,
}

/// Whether a snapshot comes from this cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    ThisCluster(String),
    OtherCluster(String),
}

/// Decides [`Origin`] (see the module docs).
pub fn origin(contents: &Contents, record: Option<&Record>, local: &LocalIdentity) -> Origin {
    if let (Some(r), Some(local_id)) = (record, local.cluster_id) {
        let recorded = u64::from_str_radix(&r.cluster_id, 16).ok();
        return if recorded == Some(local_id) {
            Origin::ThisCluster(format!("its record names this cluster, {local_id:x}"))
        } else {
            Origin::OtherCluster(format!(
                "its record names cluster {}, this node's data is cluster {local_id:x}",
                r.cluster_id
            ))
        };
    }
    let shared: Vec<String> = contents
        .members
        .iter()
        .filter(|m| local.member_ids.contains(&m.id))
        .map(|m| format!("{:x}", m.id))
        .collect();
    if shared.is_empty() {
        Origin::OtherCluster(format!(
            "none of its members ({}) is a member this node knows ({})",
            contents
                .members
                .iter()
                .map(|m| format!("{:x}", m.id))
                .collect::<Vec<_>>()
                .join(", "),
            local
                .member_ids
                .iter()
                .map(|id| format!("{id:x}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        Origin::ThisCluster(format!("it lists member(s) {}", shared.join(", ")))
    }
}

/// The etcd image's restore tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tool {
    /// `etcdctl` (3.4) or `etcdutl` (3.5+).
    pub binary: &'static str,
    /// Whether it takes `--bump-revision` and `--mark-compacted`.
    pub bumps_revision: bool,
    /// The version read from the image tag.
    pub version: (u64, u64, u64),
}

/// The tool of the etcd image `image` (by its tag's version).
pub fn restore_tool(image: &str) -> Result<Tool, String> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let tag = last
        .split_once(':')
        .map(|(_, t)| t)
        .ok_or_else(|| format!("image {image:?} has no tag: cannot tell its etcd version"))?;
    let core = tag.trim_start_matches('v');
    let core = core.split(['-', '+']).next().unwrap_or(core);
    let parts: Vec<u64> = core
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("image {image:?}: tag {tag:?} is not an etcd version"))?;
    let version = match parts.as_slice() {
        [a, b, c] => (*a, *b, *c),
        _ => {
            return Err(format!(
                "image {image:?}: tag {tag:?} is not an etcd version x.y.z"
            ));
        }
    };
    Ok(match version {
        (3, 4, _) => Tool {
            binary: "etcdctl",
            bumps_revision: false,
            version,
        },
        (3, 5, patch) => Tool {
            binary: "etcdutl",
            bumps_revision: patch >= 10,
            version,
        },
        (3, minor, _) if minor >= 6 => Tool {
            binary: "etcdutl",
            bumps_revision: true,
            version,
        },
        _ => {
            return Err(format!(
                "image {image:?}: etcd {core} is not a version recovery knows (3.4 and later)"
            ));
        }
    })
}
