//! One installer per node at a time: an exclusive `flock` on a dot-file in the resource dir,
//! taken without blocking. A second installer is refused at once (the operator retries with
//! back-off); the kernel drops the lock when its holder exits or is killed, so a crashed
//! installer never wedges the next one. The holder writes its PID into the file, for the error
//! message of the one that is refused (and for tests to see who holds it).
//!
//! The lock file is opened without following a symlink and must be a regular file: otherwise a
//! symlink planted in the resource dir would have the installer truncate and chmod its target,
//! anywhere on the node (refused, exit 3).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Mode of the lock file (no secret in it; the installer's "other files" mode).
const LOCK_FILE_MODE: u32 = 0o644;

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another installer (pid {holder}) is running: {} is locked", path.display())]
    Held { path: PathBuf, holder: String },
    #[error("lock file {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("lock file {} is a symlink or not a regular file: refusing to write through it", path.display())]
    NotRegular { path: PathBuf },
}

/// The held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct InstallLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl InstallLock {
    /// Takes the lock on `path` (created 0644 if missing; it holds only a PID) without blocking.
    pub fn acquire(path: &Path) -> Result<Self, LockError> {
        let io_err = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(LOCK_FILE_MODE)
            .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC).bits())
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(Errno::ELOOP as i32) {
                    LockError::NotRegular {
                        path: path.to_path_buf(),
                    }
                } else {
                    io_err(e)
                }
            })?;
        if !file.metadata().map_err(io_err)?.file_type().is_file() {
            return Err(LockError::NotRegular {
                path: path.to_path_buf(),
            });
        }
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(LockError::Held {
                    path: path.to_path_buf(),
                    holder: if holder.is_empty() {
                        "unknown".into()
                    } else {
                        holder.into()
                    },
                });
            }
            Err((_, errno)) => return Err(io_err(io::Error::from(errno))),
        };
        lock.set_permissions(std::fs::Permissions::from_mode(LOCK_FILE_MODE))
            .map_err(io_err)?;
        lock.set_len(0).map_err(io_err)?;
        lock.rewind().map_err(io_err)?;
        writeln!(lock, "{}", std::process::id()).map_err(io_err)?;
        lock.sync_all().map_err(io_err)?;
        Ok(Self {
            _lock: lock,
            path: path.to_path_buf(),
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_drops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".lock");
        let first = InstallLock::acquire(&path).unwrap();
        match InstallLock::acquire(&path) {
            Err(LockError::Held { holder, .. }) => {
                assert_eq!(holder, std::process::id().to_string())
            }
            other => panic!("expected Held, got {other:?}"),
        }
        drop(first);
        InstallLock::acquire(&path).unwrap();
    }

    #[test]
    fn a_planted_symlink_or_fifo_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside-secret");
        std::fs::write(&outside, "precious\n").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
        let resources = dir.path().join("resources");
        std::fs::create_dir(&resources).unwrap();
        let path = resources.join(".etcd-pod-installer.lock");
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        match InstallLock::acquire(&path) {
            Err(LockError::NotRegular { .. }) => {}
            other => panic!("expected NotRegular, got {other:?}"),
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious\n");
        let mode = std::fs::metadata(&outside).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the target's mode must not change");

        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        match InstallLock::acquire(&path) {
            Err(LockError::NotRegular { .. }) => {}
            other => panic!("expected NotRegular for a FIFO, got {other:?}"),
        }
    }
}
