//! A snapshot file: that it is whole, what it holds, and the record kept beside it.
//!
//! A snapshot etcd streams (`etcdctl snapshot save`, the Snapshot API) ends with the SHA-256 of
//! everything before it; [`verify`] recomputes it, so one flipped byte or a truncated copy is
//! refused before anything uses it. A record beside the snapshot (`<snapshot>.json`, [`Record`],
//! written by the operator's backups) must agree with the file's SHA-256 as a whole. Members,
//! latest revision and raft index come from the database itself ([`crate::bolt`]).

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::bolt::{self, Contents};

/// The trailing integrity hash etcd appends to a snapshot stream.
const HASH_LEN: u64 = 32;

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
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// The member the snapshot was streamed from, `<id hex>=<name>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_member: String,
    /// The key the operator wrote just before the snapshot, and its value: a restore of this
    /// snapshot must answer it (verification by restore).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub marker_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub marker_value: String,
    /// When a restore of it was started and answered the marker (RFC 3339); empty: not verified.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verified_at: String,
    /// How it was verified, or why verification failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verification: String,
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

/// Creates `dir` (and its parents) and restricts it to its owner (0700): a snapshot holds every
/// key of the cluster (on a stacked control plane, every Kubernetes Secret), so what is kept in
/// it, or staged in it, is never readable by other users of the machine, whatever the umask
/// (#65: local backups were world-readable under the default one).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
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
