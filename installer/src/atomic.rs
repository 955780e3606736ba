//! Crash-safe file-system primitives: atomic file writes, directory fsync, reading a tree back,
//! and swapping a staged directory into place.
//!
//! A file lands atomically: it is written to a dot-prefixed temp file next to its final name,
//! fsynced, renamed over the final name, and the directory is fsynced. Readers (the kubelet,
//! which ignores dot files) see the old file or the new file, never a partial one.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{RenameFlags, renameat2};

use crate::plan::{Tree, TreeEntry};

/// Fsyncs a directory, so that renames and creations inside it are durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates one directory with exactly `mode` (whatever the umask).
pub fn make_dir(path: &Path, mode: u32) -> io::Result<()> {
    fs::create_dir(path)?;
    fs::set_permissions(path, Permissions::from_mode(mode))
}

/// Creates `path` and its missing parents with `mode`; existing directories are left alone.
pub fn ensure_dir_all(path: &Path, mode: u32) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        ensure_dir_all(parent, mode)?;
    }
    match make_dir(path, mode) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        other => other,
    }
}

/// The temp name used while writing `name` (dot-prefixed so the kubelet ignores it).
pub fn temp_name(name: &str) -> String {
    format!(".{name}.tmp-{}", std::process::id())
}

/// Writes `dir/name` atomically with exactly `mode`: temp file, fsync, rename, fsync `dir`.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    let tmp = dir.join(temp_name(name));
    let result = (|| {
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.set_permissions(Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, dir.join(name))?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes a directory tree; a missing one is fine.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    }
}

/// Reads a tree (entries, modes, file bytes) without following symlinks; `None` when `root`
/// does not exist.
pub fn read_tree(root: &Path) -> io::Result<Option<Tree>> {
    let meta = match fs::symlink_metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other?,
    };
    let mut tree = Tree::new();
    if !meta.is_dir() {
        tree.insert(Default::default(), TreeEntry::Other);
        return Ok(Some(tree));
    }
    let mut pending = vec![std::path::PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let path = root.join(&rel);
        let meta = fs::symlink_metadata(&path)?;
        let mode = meta.permissions().mode() & 0o7777;
        let entry = if meta.is_dir() {
            for child in fs::read_dir(&path)? {
                pending.push(rel.join(child?.file_name()));
            }
            TreeEntry::Dir { mode }
        } else if meta.is_file() {
            TreeEntry::File {
                mode,
                bytes: fs::read(&path)?,
            }
        } else {
            TreeEntry::Other
        };
        tree.insert(rel, entry);
    }
    Ok(Some(tree))
}

/// Atomically exchanges `parent/a` and `parent/b` (`renameat2(RENAME_EXCHANGE)`). `Ok(false)`
/// when the file system does not support it, so the caller can fall back.
pub fn exchange(parent: &Path, a: &str, b: &str) -> io::Result<bool> {
    let dir = File::open(parent)?;
    match renameat2(&dir, a, &dir, b, RenameFlags::RENAME_EXCHANGE) {
        Ok(()) => Ok(true),
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_file_sets_mode_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        write_file(dir.path(), "f", b"one", 0o600).unwrap();
        write_file(dir.path(), "f", b"two", 0o644).unwrap();
        assert_eq!(fs::read(dir.path().join("f")).unwrap(), b"two");
        let mode = fs::metadata(dir.path().join("f"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o644);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("f")]);
    }

    #[test]
    fn exchange_swaps_two_directories() {
        let dir = tempfile::tempdir().unwrap();
        make_dir(&dir.path().join("a"), 0o755).unwrap();
        make_dir(&dir.path().join("b"), 0o700).unwrap();
        write_file(&dir.path().join("a"), "in-a", b"", 0o644).unwrap();
        if exchange(dir.path(), "a", "b").unwrap() {
            assert!(dir.path().join("b/in-a").exists());
            assert!(!dir.path().join("a/in-a").exists());
        }
    }

    #[test]
    fn read_tree_reports_modes_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        make_dir(&root, 0o755).unwrap();
        make_dir(&root.join("s"), 0o700).unwrap();
        write_file(&root.join("s"), "k", b"v", 0o600).unwrap();
        let tree = read_tree(&root).unwrap().unwrap();
        assert_eq!(tree.len(), 3);
        assert_eq!(
            tree.get(Path::new("s/k")),
            Some(&TreeEntry::File {
                mode: 0o600,
                bytes: b"v".to_vec()
            })
        );
        assert_eq!(
            tree.get(Path::new("s")),
            Some(&TreeEntry::Dir { mode: 0o700 })
        );
        assert_eq!(read_tree(&dir.path().join("missing")).unwrap(), None);
        ensure_dir_all(&dir.path().join("x/y/z"), 0o755).unwrap();
        assert!(dir.path().join("x/y/z").is_dir());
    }
}
