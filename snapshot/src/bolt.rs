//! A read-only look into an etcd snapshot's bbolt database: which members it lists, its latest
//! store revision and its raft (consistent) index, so recovery can say what a snapshot holds and
//! whether it comes from this cluster before restoring it.
//!
//! The format is bbolt's (little-endian on every platform etcd ships for): two meta pages at the
//! start (the valid one with the higher transaction id wins; FNV-1a 64 checksum), a B+tree of
//! branch and leaf pages per bucket, a bucket's value being its root page id (or, for a small
//! bucket, the page inline after it). etcd keeps members in bucket `members` (key: the id in hex,
//! value: JSON), keys in bucket `key` (key: 8-byte big-endian main revision, `_`, sub revision)
//! and the raft index in `meta`/`consistent_index` (8 bytes big-endian). Every read is bounded
//! and checked: a damaged file is an error, never a panic or a loop.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: u32 = 0xED0C_DAED;
const PAGE_HEADER: usize = 16;
const ELEMENT: usize = 16;
const BRANCH: u16 = 0x01;
const LEAF: u16 = 0x02;
const BUCKET_LEAF_FLAG: u32 = 0x01;
const BUCKET_HEADER: usize = 16;
/// Deeper trees than this are not a real etcd database.
const MAX_DEPTH: usize = 32;
/// Bound on one page (overflow included): etcd's values are at most a few MiB.
const MAX_PAGE_BYTES: u64 = 512 << 20;

/// Why the database could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BoltError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an etcd snapshot database: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

/// A member as the snapshot's `members` bucket lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotMember {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
}

/// What a snapshot database holds, in short.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contents {
    pub members: Vec<SnapshotMember>,
    /// The highest store revision a key was written or deleted at (0: no key ever).
    pub revision: i64,
    /// The raft index the store had applied (`meta`/`consistent_index`).
    pub consistent_index: u64,
}

struct Db<'a> {
    file: &'a File,
    path: &'a Path,
    page_size: u64,
    pages: u64,
}

/// One page's bytes (overflow included); elements index into them.
struct Page {
    flags: u16,
    count: usize,
    bytes: Vec<u8>,
}

enum Entry {
    Value(Vec<u8>, Vec<u8>),
    Bucket(Vec<u8>, Vec<u8>),
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Reads what [`Contents`] lists from the bbolt database at `path` (an etcd snapshot file,
/// its trailing integrity hash included or not).
pub fn read(path: &Path) -> Result<Contents, BoltError> {
    let file = File::open(path).map_err(|source| BoltError::Io {
        path: path.to_owned(),
        source,
    })?;
    let len = file
        .metadata()
        .map_err(|source| BoltError::Io {
            path: path.to_owned(),
            source,
        })?
        .len();
    let mut db = Db {
        file: &file,
        path,
        page_size: 4096,
        pages: 0,
    };
    let root = db.meta(len)?;
    let top = db.entries_of_bucket_root(root, &[], 0)?;
    let members = match find_bucket(&top, b"members") {
        Some(value) => db.bucket_entries(value)?,
        None => return Err(db.corrupt("no members bucket")),
    };
    let members = members
        .into_iter()
        .filter_map(|e| match e {
            Entry::Value(_, v) => Some(v),
            Entry::Bucket(..) => None,
        })
        .map(|v| parse_member(&v).ok_or_else(|| db.corrupt("a member record is not etcd's JSON")))
        .collect::<Result<Vec<_>, _>>()?;
    let revision = match find_bucket(&top, b"key") {
        Some(value) => db
            .last_key(value)?
            .and_then(|k| k.get(..8).and_then(|b| b.try_into().ok()))
            .map_or(0, i64::from_be_bytes),
        None => 0,
    };
    let consistent_index = match find_bucket(&top, b"meta") {
        Some(value) => db
            .bucket_entries(value)?
            .iter()
            .find_map(|e| match e {
                Entry::Value(k, v) if k == b"consistent_index" => v
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes),
                _ => None,
            })
            .unwrap_or(0),
        None => 0,
    };
    Ok(Contents {
        members,
        revision,
        consistent_index,
    })
}

fn find_bucket<'e>(entries: &'e [Entry], name: &[u8]) -> Option<&'e [u8]> {
    entries.iter().find_map(|e| match e {
        Entry::Bucket(k, v) if k == name => Some(v.as_slice()),
        _ => None,
    })
}

fn parse_member(json: &[u8]) -> Option<SnapshotMember> {
    #[derive(serde::Deserialize)]
    struct Raw {
        id: u64,
        #[serde(default, rename = "peerURLs")]
        peer_urls: Vec<String>,
        #[serde(default)]
        name: String,
    }
    let raw: Raw = serde_json::from_slice(json).ok()?;
    Some(SnapshotMember {
        id: raw.id,
        name: raw.name,
        peer_urls: raw.peer_urls,
    })
}

impl Db<'_> {
    fn corrupt(&self, reason: impl Into<String>) -> BoltError {
        BoltError::Corrupt {
            path: self.path.to_owned(),
            reason: reason.into(),
        }
    }

    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>, BoltError> {
        let mut buf = vec![0; len];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|source| BoltError::Io {
                path: self.path.to_owned(),
                source,
            })?;
        Ok(buf)
    }

    /// Picks the valid meta page with the highest txid; returns the root bucket's page id.
    fn meta(&mut self, len: u64) -> Result<u64, BoltError> {
        let first = self.read_at(0, PAGE_HEADER + 64)?;
        let page_size = u32_at(&first, PAGE_HEADER + 8).ok_or_else(|| self.corrupt("short"))?;
        if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(self.corrupt(format!("page size {page_size}")));
        }
        self.page_size = u64::from(page_size);
        let mut best: Option<(u64, u64, u64)> = None;
        for n in 0..2u64 {
            let b = self.read_at(n * self.page_size, PAGE_HEADER + 64)?;
            let m = &b[PAGE_HEADER..];
            let valid = u32_at(m, 0) == Some(MAGIC)
                && u32_at(m, 4) == Some(2)
                && u64_at(m, 56) == Some(fnv1a64(&m[..56]));
            if !valid {
                continue;
            }
            let (root, pages, txid) = (
                u64_at(m, 16).unwrap_or(0),
                u64_at(m, 40).unwrap_or(0),
                u64_at(m, 48).unwrap_or(0),
            );
            if best.is_none_or(|(_, _, t)| txid > t) {
                best = Some((root, pages, txid));
            }
        }
        let (root, pages, _) = best.ok_or_else(|| self.corrupt("no valid meta page"))?;
        if pages.saturating_mul(self.page_size) > len {
            return Err(self.corrupt(format!(
                "the meta page counts {pages} pages of {} bytes, the file has {len} bytes",
                self.page_size
            )));
        }
        self.pages = pages;
        Ok(root)
    }

    fn page(&self, id: u64) -> Result<Page, BoltError> {
        if id < 2 || id >= self.pages {
            return Err(self.corrupt(format!("page id {id} out of range")));
        }
        let header = self.read_at(id * self.page_size, PAGE_HEADER)?;
        let overflow = u64::from(u32_at(&header, 12).unwrap_or(0));
        let bytes_len = (overflow + 1) * self.page_size;
        if id + overflow >= self.pages || bytes_len > MAX_PAGE_BYTES {
            return Err(self.corrupt(format!("page {id} overflows the file")));
        }
        let bytes = self.read_at(id * self.page_size, bytes_len as usize)?;
        Ok(Page {
            flags: u16_at(&header, 8).unwrap_or(0),
            count: usize::from(u16_at(&header, 10).unwrap_or(0)),
            bytes,
        })
    }

    /// Every entry of the bucket whose 16-byte header (and inline page) is `value`.
    fn bucket_entries(&self, value: &[u8]) -> Result<Vec<Entry>, BoltError> {
        let root = u64_at(value, 0).ok_or_else(|| self.corrupt("short bucket header"))?;
        let inline = value.get(BUCKET_HEADER..).unwrap_or_default();
        self.entries_of_bucket_root(root, inline, 0)
    }

    /// The greatest key of the bucket whose header is `value`: the last element along the
    /// rightmost path (the `key` bucket can hold millions of revisions).
    fn last_key(&self, value: &[u8]) -> Result<Option<Vec<u8>>, BoltError> {
        let root = u64_at(value, 0).ok_or_else(|| self.corrupt("short bucket header"))?;
        let mut page = if root == 0 {
            let inline = value.get(BUCKET_HEADER..).unwrap_or_default();
            Page {
                flags: u16_at(inline, 8).unwrap_or(0),
                count: usize::from(u16_at(inline, 10).unwrap_or(0)),
                bytes: inline.to_vec(),
            }
        } else {
            self.page(root)?
        };
        for _ in 0..MAX_DEPTH {
            if page.count == 0 {
                return Ok(None);
            }
            let at = PAGE_HEADER + (page.count - 1) * ELEMENT;
            let short = || self.corrupt("the last element lies outside its page");
            match page.flags {
                BRANCH => page = self.page(u64_at(&page.bytes, at + 8).ok_or_else(short)?)?,
                LEAF => {
                    let pos = u32_at(&page.bytes, at + 4).ok_or_else(short)? as usize;
                    let ksize = u32_at(&page.bytes, at + 8).ok_or_else(short)? as usize;
                    let k0 = at + pos;
                    let key = page.bytes.get(k0..k0 + ksize).ok_or_else(short)?;
                    return Ok(Some(key.to_vec()));
                }
                other => {
                    return Err(self.corrupt(format!("a page of kind {other:#x} inside a tree")));
                }
            }
        }
        Err(self.corrupt("the tree is deeper than any etcd database"))
    }

    fn entries_of_bucket_root(
        &self,
        root: u64,
        inline: &[u8],
        depth: usize,
    ) -> Result<Vec<Entry>, BoltError> {
        if root == 0 {
            let page = Page {
                flags: u16_at(inline, 8).unwrap_or(0),
                count: usize::from(u16_at(inline, 10).unwrap_or(0)),
                bytes: inline.to_vec(),
            };
            let mut out = Vec::new();
            self.walk(&page, depth, &mut out)?;
            return Ok(out);
        }
        let mut out = Vec::new();
        self.walk(&self.page(root)?, depth, &mut out)?;
        Ok(out)
    }

    fn walk(&self, page: &Page, depth: usize, out: &mut Vec<Entry>) -> Result<(), BoltError> {
        if depth > MAX_DEPTH {
            return Err(self.corrupt("the tree is deeper than any etcd database"));
        }
        let b = &page.bytes;
        for i in 0..page.count {
            let at = PAGE_HEADER + i * ELEMENT;
            let short = || self.corrupt(format!("element {i} lies outside its page"));
            match page.flags {
                BRANCH => {
                    let child = u64_at(b, at + 8).ok_or_else(short)?;
                    self.walk(&self.page(child)?, depth + 1, out)?;
                }
                LEAF => {
                    let flags = u32_at(b, at).ok_or_else(short)?;
                    let pos = u32_at(b, at + 4).ok_or_else(short)? as usize;
                    let ksize = u32_at(b, at + 8).ok_or_else(short)? as usize;
                    let vsize = u32_at(b, at + 12).ok_or_else(short)? as usize;
                    let k0 = at.checked_add(pos).ok_or_else(short)?;
                    let key = b.get(k0..k0 + ksize).ok_or_else(short)?.to_vec();
                    let value = b
                        .get(k0 + ksize..k0 + ksize + vsize)
                        .ok_or_else(short)?
                        .to_vec();
                    out.push(if flags & BUCKET_LEAF_FLAG != 0 {
                        Entry::Bucket(key, value)
                    } else {
                        Entry::Value(key, value)
                    });
                }
                other => {
                    return Err(self.corrupt(format!("a page of kind {other:#x} inside a tree")));
                }
            }
        }
        Ok(())
    }
}
