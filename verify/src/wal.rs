//! Reads the member id and cluster id out of an etcd data dir's write-ahead log, the way etcd
//! itself learns them on restart, so a data dir is identified by its own contents (no side file).
//!
//! WAL layout (etcd 3.4, `<data-dir>/member/wal/<seq>-<index>.wal`): a sequence of frames, each an
//! 8-byte little-endian length word followed by a protobuf `walpb.Record` and padding. The low 56
//! bits of the word are the record length; when the top bit is set, bits 56-58 give the padding
//! length. A zero word marks preallocated, unused space. Every WAL file starts with a CRC record
//! and a metadata record (`type = 1`) whose data is `etcdserverpb.Metadata { NodeID = 1;
//! ClusterID = 2 }`.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Identity of a data dir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalIdentity {
    pub member_id: u64,
    pub cluster_id: u64,
}

/// Why the WAL could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: no .wal files")]
    NoWalFiles(PathBuf),
    #[error("{path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

const METADATA_RECORD: u64 = 1;
/// Metadata is the second record of a file; give up well after that.
const MAX_RECORDS: usize = 64;
const MAX_RECORD_BYTES: u64 = 16 << 20;

/// Reads the identity from the oldest WAL file under `wal_dir`.
pub fn read_identity(wal_dir: &Path) -> Result<WalIdentity, WalError> {
    let files = wal_files(wal_dir)?;
    let first = files
        .first()
        .ok_or_else(|| WalError::NoWalFiles(wal_dir.to_owned()))?;
    let mut bytes = Vec::new();
    open_regular(first)
        .and_then(|f| f.take(MAX_RECORD_BYTES).read_to_end(&mut bytes))
        .map_err(|source| WalError::Io {
            path: first.clone(),
            source,
        })?;
    identity_from_bytes(&bytes).map_err(|reason| WalError::Corrupt {
        path: first.clone(),
        reason,
    })
}

/// Opens `path` for reading only if it is a regular file: without following a symlink, and
/// without blocking (opening a FIFO for reading waits for a writer forever), then checks the type
/// of what was opened.
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOFOLLOW;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::other(format!(
            "not a regular file ({kind:?})"
        )));
    }
    Ok(file)
}

/// Finds the metadata record in the bytes of a WAL file.
pub fn identity_from_bytes(bytes: &[u8]) -> Result<WalIdentity, String> {
    for record in Frames::new(bytes).take(MAX_RECORDS) {
        let Some(record) = record? else {
            return Err("WAL has no metadata record".into());
        };
        let fields = decode_fields(record)?;
        if field_varint(&fields, 1) == Some(METADATA_RECORD) {
            let meta = decode_fields(record_data(&fields).ok_or("metadata record has no data")?)?;
            return Ok(WalIdentity {
                member_id: field_varint(&meta, 1).ok_or("metadata has no NodeID")?,
                cluster_id: field_varint(&meta, 2).ok_or("metadata has no ClusterID")?,
            });
        }
    }
    Err(format!(
        "no metadata record in the first {MAX_RECORDS} records"
    ))
}

/// The last raft hard state a data dir's WAL holds: the commit index etcd restarts from (and
/// the one `--force-new-cluster` keeps: it drops every entry past it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalCommit {
    pub term: u64,
    pub commit: u64,
}

const STATE_RECORD: u64 = 3;

/// Reads the last hard state of every WAL file under `wal_dir`, oldest file first, each up to
/// its preallocated tail or a torn last record (where etcd stops reading too).
pub fn read_commit(wal_dir: &Path) -> Result<WalCommit, WalError> {
    let mut last = None;
    for file in wal_files(wal_dir)? {
        let mut bytes = Vec::new();
        open_regular(&file)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|source| WalError::Io {
                path: file.clone(),
                source,
            })?;
        let corrupt = |reason| WalError::Corrupt {
            path: file.clone(),
            reason,
        };
        if let Some(state) = commit_from_bytes(&bytes).map_err(corrupt)? {
            last = Some(state);
        }
    }
    last.ok_or_else(|| WalError::Corrupt {
        path: wal_dir.to_owned(),
        reason: "no raft hard state in any WAL file".into(),
    })
}

/// The last hard state in the bytes of one WAL file, if it has one.
pub fn commit_from_bytes(bytes: &[u8]) -> Result<Option<WalCommit>, String> {
    let mut last = None;
    for record in Frames::new(bytes) {
        let record = match record {
            Ok(Some(r)) => r,
            // The preallocated tail, or a record torn by a crash: etcd reads no further.
            Ok(None) | Err(_) => break,
        };
        let Ok(fields) = decode_fields(record) else {
            break;
        };
        if field_varint(&fields, 1) != Some(STATE_RECORD) {
            continue;
        }
        let state = decode_fields(record_data(&fields).unwrap_or_default())?;
        last = Some(WalCommit {
            term: field_varint(&state, 1).unwrap_or(0),
            commit: field_varint(&state, 3).unwrap_or(0),
        });
    }
    Ok(last)
}

/// The `.wal` files under `wal_dir`, oldest first.
fn wal_files(wal_dir: &Path) -> Result<Vec<PathBuf>, WalError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(wal_dir)
        .map_err(|source| WalError::Io {
            path: wal_dir.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(WalError::NoWalFiles(wal_dir.to_owned()));
    }
    Ok(files)
}

/// The `data` field (3) of a `walpb.Record`.
fn record_data<'a>(fields: &[(u64, Field<'a>)]) -> Option<&'a [u8]> {
    fields.iter().find_map(|(n, v)| match (n, v) {
        (3, Field::Bytes(b)) => Some(*b),
        _ => None,
    })
}

/// The records of a WAL file, in order: `Ok(None)` at the first zero length word (preallocated
/// space), an error for a frame that does not fit, nothing after either.
struct Frames<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Frames<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            pos: 0,
            done: false,
        }
    }

    fn next_frame(&mut self) -> Result<Option<&'a [u8]>, String> {
        let pos = self.pos;
        let word = pos
            .checked_add(8)
            .and_then(|end| self.bytes.get(pos..end))
            .ok_or("WAL ends before its metadata record")?;
        let word = u64::from_le_bytes(word.try_into().map_err(|_| "short length word")?);
        if word == 0 {
            return Ok(None);
        }
        let len =
            usize::try_from(word & 0x00ff_ffff_ffff_ffff).map_err(|_| "record length overflows")?;
        let pad = if word & (1 << 63) != 0 {
            (word >> 56) & 0x7
        } else {
            0
        };
        let start = pos + 8;
        let record = start
            .checked_add(len)
            .and_then(|end| self.bytes.get(start..end))
            .ok_or_else(|| format!("record at byte {pos} is truncated ({len} bytes)"))?;
        self.pos = usize::try_from(pad)
            .ok()
            .and_then(|pad| start.checked_add(len)?.checked_add(pad))
            .ok_or("record length overflows")?;
        Ok(Some(record))
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Option<&'a [u8]>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let frame = self.next_frame();
        self.done = !matches!(frame, Ok(Some(_)));
        Some(frame)
    }
}

#[derive(Debug)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Other,
}

fn decode_varint(bytes: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint longer than 10 bytes".into())
}

/// Decodes the top-level fields of a protobuf message (only what WAL records use).
fn decode_fields(bytes: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < bytes.len() {
        let key = decode_varint(bytes, &mut pos)?;
        let (number, wire) = (key >> 3, key & 7);
        let field = match wire {
            0 => Field::Varint(decode_varint(bytes, &mut pos)?),
            2 => {
                let len = usize::try_from(decode_varint(bytes, &mut pos)?)
                    .map_err(|_| "length overflows")?;
                let end = pos.checked_add(len).ok_or("bytes field length overflows")?;
                let b = bytes.get(pos..end).ok_or("truncated bytes field")?;
                pos = end;
                Field::Bytes(b)
            }
            1 => {
                pos += 8;
                Field::Other
            }
            5 => {
                pos += 4;
                Field::Other
            }
            w => return Err(format!("unsupported protobuf wire type {w}")),
        };
        out.push((number, field));
    }
    Ok(out)
}

fn field_varint(fields: &[(u64, Field<'_>)], number: u64) -> Option<u64> {
    fields.iter().find_map(|(n, f)| match f {
        Field::Varint(v) if *n == number => Some(*v),
        _ => None,
    })
}

#[cfg(test)]
mod tests;
