//! Lays the render's output down as one step, so an admin never finds half of it.
//!
//! Every file is written into a new, private staging directory beside the output dir
//! (`.<name>.staging-<pid>`, created with `mkdir`, which fails rather than reuse anything
//! planted there), each created exclusively (`O_EXCL|O_NOFOLLOW`) with its final mode, fsynced.
//! Then the staging dir becomes the output dir in one rename: a first render renames it into
//! place; a re-render exchanges the two atomically (`renameat2(RENAME_EXCHANGE)`) and keeps the
//! previous output as `<name>.replaced-<UTC>` (nothing is deleted but an empty dir). On any error (a full disk
//! included) the staging dir is removed and a previous output stays exactly as it was.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use etcd_installer::atomic::{exchange, fsync_dir};
use time::OffsetDateTime;

use super::{BootstrapError, OutFile};

/// Writes `files` as the contents of `dir` (see the module docs). Returns where a previous
/// output was moved, if there was one.
pub fn write_dir(
    dir: &Path,
    files: &[OutFile],
    now: OffsetDateTime,
) -> Result<Option<PathBuf>, BootstrapError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| BootstrapError::Io { path, source }
    };
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            io(dir)(std::io::Error::other(
                "the output dir needs a final path component",
            ))
        })?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    let staging_name = format!(".{name}.staging-{}", std::process::id());
    let staging = parent.join(&staging_name);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(io(&staging))?;
    let staged = stage(&staging, files).and_then(|()| {
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755))
            .map_err(io(&staging))
    });
    if let Err(e) = staged {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    swap_in(&parent, &staging_name, &name, now)
}

/// Writes every file under `staging`, each created exclusively with its mode, then fsyncs.
fn stage(staging: &Path, files: &[OutFile]) -> Result<(), BootstrapError> {
    let mut dirs = vec![staging.to_owned()];
    for file in files {
        let path = staging.join(&file.path);
        let io = |source| BootstrapError::Io {
            path: path.clone(),
            source,
        };
        let parent = path.parent().unwrap_or(staging);
        if !dirs.iter().any(|d| d == parent) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(io)?;
            dirs.push(parent.to_owned());
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(file.mode)
            .custom_flags(nix_flags())
            .open(&path)
            .map_err(io)?;
        out.set_permissions(std::fs::Permissions::from_mode(file.mode))
            .map_err(io)?;
        out.write_all(&file.bytes).map_err(io)?;
        out.sync_all().map_err(io)?;
    }
    for d in dirs.iter().rev() {
        fsync_dir(d).map_err(|source| BootstrapError::Io {
            path: d.clone(),
            source,
        })?;
    }
    Ok(())
}

fn nix_flags() -> i32 {
    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC).bits()
}

/// Makes `parent/staging` the output `parent/name`; a previous output is kept beside it. The
/// staging dir is removed when it could not be swapped in; once the exchange happened it holds
/// the previous output and is never removed.
fn swap_in(
    parent: &Path,
    staging: &str,
    name: &str,
    now: OffsetDateTime,
) -> Result<Option<PathBuf>, BootstrapError> {
    let io = |path: PathBuf| move |source| BootstrapError::Io { path, source };
    let target = parent.join(name);
    let previous = match std::fs::symlink_metadata(&target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(target)(e)),
        Ok(_) => {
            let stamp = format!(
                "{name}.replaced-{:04}{:02}{:02}T{:02}{:02}{:02}Z",
                now.year(),
                u8::from(now.month()),
                now.day(),
                now.hour(),
                now.minute(),
                now.second()
            );
            let mut kept = parent.join(&stamp);
            let mut n = 1;
            while std::fs::symlink_metadata(&kept).is_ok() {
                kept = parent.join(format!("{stamp}-{n}"));
                n += 1;
            }
            Some(kept)
        }
    };
    let swapped = match &previous {
        None => std::fs::rename(parent.join(staging), &target).map_err(io(target.clone())),
        Some(_) => match exchange(parent, staging, name) {
            Ok(true) => Ok(()),
            Ok(false) => Err(io(target.clone())(std::io::Error::other(
                "this file system cannot exchange two directories atomically",
            ))),
            Err(e) => Err(io(target.clone())(e)),
        },
    };
    if let Err(e) = swapped {
        let _ = std::fs::remove_dir_all(parent.join(staging));
        return Err(e);
    }
    let previous = match previous {
        // The staging name now holds the previous output: an empty dir (made by hand before
        // the first render) goes; anything else is kept under its dated name.
        Some(_) if std::fs::remove_dir(parent.join(staging)).is_ok() => None,
        Some(kept) => {
            std::fs::rename(parent.join(staging), &kept).map_err(io(kept.clone()))?;
            Some(kept)
        }
        None => None,
    };
    fsync_dir(parent).map_err(io(parent.to_owned()))?;
    Ok(previous)
}
