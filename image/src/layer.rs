//! One layer from one directory tree: a gzip-compressed tar whose bytes depend only on the
//! tree's paths, file contents, symlink targets and executable bits. Entries come in byte order
//! of their paths (parents before children), owned by 0:0, all stamped with `epoch`; regular
//! files are 0755 when any executable bit is set and 0644 otherwise, directories 0755. Device
//! files, sockets and FIFOs are refused: an image has no use for them. Hard links are stored
//! as separate files (a layer's size, never its meaning, differs).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flate2::{Compression, GzBuilder};
use tar::{EntryType, Header};

use crate::digest::{HashingWriter, Sha256Digest};
use crate::{ImageError, io};

/// A layer blob as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// Digest of the compressed blob (its name under `blobs/sha256/`).
    pub digest: Sha256Digest,
    /// Digest of the uncompressed tar (the config's `rootfs.diff_ids`).
    pub diff_id: Sha256Digest,
    /// Size of the compressed blob.
    pub size: u64,
}

/// What an entry of the tree is, as the layer stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Dir,
    File { executable: bool, len: u64 },
    Symlink(PathBuf),
}

/// Every entry under `root`, as (path relative to `root`, kind), parents first, siblings in byte
/// order.
fn entries(root: &Path) -> Result<Vec<(String, PathBuf, Kind)>, ImageError> {
    let mut out = Vec::new();
    walk(root, "", &mut out)?;
    Ok(out)
}

/// The regular files under `root`, as (path relative to `root`, path, length), in the order
/// of [`entries`] (what an `oci-archive` of a layout holds).
pub(crate) fn regular_files(root: &Path) -> Result<Vec<(String, PathBuf, u64)>, ImageError> {
    Ok(entries(root)?
        .into_iter()
        .filter_map(|(rel, path, kind)| match kind {
            Kind::File { len, .. } => Some((rel, path, len)),
            Kind::Dir | Kind::Symlink(_) => None,
        })
        .collect())
}

fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, PathBuf, Kind)>) -> Result<(), ImageError> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        names.push(e.map_err(io(dir))?.file_name());
    }
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let name = name.to_str().ok_or_else(|| ImageError::NotUtf8 {
            path: path.display().to_string(),
        })?;
        let rel = if rel.is_empty() {
            name.to_owned()
        } else {
            format!("{rel}/{name}")
        };
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let t = meta.file_type();
        let kind = if t.is_symlink() {
            Kind::Symlink(std::fs::read_link(&path).map_err(io(&path))?)
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File {
                executable: meta.permissions().mode() & 0o111 != 0,
                len: meta.len(),
            }
        } else {
            return Err(ImageError::Unsupported {
                path: path.display().to_string(),
                what: "a device, socket or FIFO",
            });
        };
        let is_dir = kind == Kind::Dir;
        out.push((rel.clone(), path.clone(), kind));
        if is_dir {
            walk(&path, &rel, out)?;
        }
    }
    Ok(())
}

fn header(kind: &Kind, epoch: u64) -> Header {
    let mut h = Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(epoch);
    let (entry_type, mode, size) = match kind {
        Kind::Dir => (EntryType::Directory, 0o755, 0),
        Kind::File { executable, len } => (
            EntryType::Regular,
            if *executable { 0o755 } else { 0o644 },
            *len,
        ),
        Kind::Symlink(_) => (EntryType::Symlink, 0o777, 0),
    };
    h.set_entry_type(entry_type);
    h.set_mode(mode);
    h.set_size(size);
    h
}

/// Writes the layer of the tree at `root` into `blobs` (the layout's `blobs/sha256`), named by
/// its digest.
pub fn write_layer(root: &Path, epoch: u64, blobs: &Path) -> Result<Layer, ImageError> {
    let tmp = blobs.join(".layer.tmp");
    let file = File::create(&tmp).map_err(io(&tmp))?;
    let gz = GzBuilder::new()
        .mtime(0)
        .write(HashingWriter::new(file), Compression::new(6));
    let mut tar = tar::Builder::new(HashingWriter::new(gz));
    tar.follow_symlinks(false);
    for (rel, path, kind) in entries(root)? {
        let mut h = header(&kind, epoch);
        match &kind {
            Kind::Dir => tar.append_data(&mut h, format!("{rel}/"), std::io::empty()),
            Kind::File { .. } => {
                let f = File::open(&path).map_err(io(&path))?;
                tar.append_data(&mut h, &rel, f)
            }
            Kind::Symlink(target) => tar.append_link(&mut h, &rel, target),
        }
        .map_err(io(&path))?;
    }
    let (gz, diff_id, _) = tar.into_inner().map_err(io(&tmp))?.finish();
    let (file, digest, size) = gz.finish().map_err(io(&tmp))?.finish();
    file.sync_all().map_err(io(&tmp))?;
    let blob = blobs.join(digest.hex());
    std::fs::rename(&tmp, &blob).map_err(io(&blob))?;
    Ok(Layer {
        digest,
        diff_id,
        size,
    })
}

/// Writes `bytes` as a blob named by its digest; returns the digest and size.
pub fn write_blob(bytes: &[u8], blobs: &Path) -> Result<(Sha256Digest, u64), ImageError> {
    let digest = Sha256Digest::of(bytes);
    let path = blobs.join(digest.hex());
    let mut f = File::create(&path).map_err(io(&path))?;
    f.write_all(bytes).map_err(io(&path))?;
    Ok((digest, bytes.len() as u64))
}
