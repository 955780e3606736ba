//! The data dir on disk: what it holds (from etcd's WAL) and how it is archived. Archiving renames
//! `<data-dir>/member` to `<data-dir>/member-archived-<UTC timestamp>` and fsyncs the data dir;
//! nothing is ever deleted.

use std::path::{Path, PathBuf};

use crate::decide::DataDir;
use crate::wal;

/// Why the data dir could not be inspected or archived.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Looks at `<data_dir>/member`.
pub fn inspect(data_dir: &Path) -> Result<DataDir, DataDirError> {
    let member = data_dir.join("member");
    match std::fs::symlink_metadata(&member) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DataDir::Absent),
        Err(source) => {
            return Err(DataDirError::Io {
                action: "inspecting",
                path: member,
                source,
            });
        }
        Ok(_) => {}
    }
    Ok(match wal::read_identity(&member.join("wal")) {
        Ok(identity) => DataDir::Present(identity),
        Err(e) => DataDir::Unreadable(e.to_string()),
    })
}

/// `YYYYMMDDTHHMMSSZ` (UTC), the stamp in the names of what is kept aside.
pub fn stamp(now: time::OffsetDateTime) -> String {
    let now = now.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

/// Renames `<data_dir>/member` aside; returns the new path.
pub fn archive(data_dir: &Path, now: time::OffsetDateTime) -> Result<PathBuf, DataDirError> {
    let member = data_dir.join("member");
    let stamp = stamp(now);
    let mut target = data_dir.join(format!("member-archived-{stamp}"));
    let mut n = 1;
    while target.exists() {
        target = data_dir.join(format!("member-archived-{stamp}-{n}"));
        n += 1;
    }
    std::fs::rename(&member, &target).map_err(|source| DataDirError::Io {
        action: "archiving",
        path: member.clone(),
        source,
    })?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| DataDirError::Io {
            action: "syncing",
            path: data_dir.to_owned(),
            source,
        })?;
    Ok(target)
}

/// The mark a bootstrap leaves in the data dir, beside `member`, when `etcd-verify` lets the
/// bootstrap manifest start a new cluster.
pub const BOOTSTRAP_MARK: &str = "bootstrapped-by-etcd-verify";

/// What shows that a member ran here before (used when `<data_dir>/member` is gone): the
/// bootstrap mark kept in `state_dir`, outside the data dir (an unmounted data disk leaves an
/// empty mount point, where no mark is; #65), else the one in the data dir, else the newest
/// kept-aside `member-archived-*`. Unreadable: nothing shown.
pub fn earlier(data_dir: &Path, state_dir: Option<&Path>) -> Option<String> {
    for dir in state_dir.into_iter().chain([data_dir]) {
        let mark = dir.join(BOOTSTRAP_MARK);
        if let Ok(text) = std::fs::read_to_string(&mark) {
            return Some(format!("{}: {}", mark.display(), text.trim()));
        }
    }
    let mut archived: Vec<String> = std::fs::read_dir(data_dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("member-archived-"))
        .collect();
    archived.sort();
    archived
        .pop()
        .map(|n| format!("kept aside: {}", data_dir.join(n).display()))
}

/// Leaves the bootstrap mark in `dir` (the data dir, or the state dir beside it; atomically: a
/// dot-file written, synced and renamed, the dir synced), naming the cluster token and the
/// member the bootstrap makes.
pub fn mark_bootstrap(dir: &Path, text: &str) -> Result<(), DataDirError> {
    let data_dir = dir;
    let io = |action: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| DataDirError::Io {
            action,
            path,
            source,
        }
    };
    std::fs::create_dir_all(data_dir).map_err(io("creating", data_dir))?;
    let tmp = data_dir.join(format!(".{BOOTSTRAP_MARK}.tmp"));
    let mark = data_dir.join(BOOTSTRAP_MARK);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(io("writing", &tmp))?;
        f.write_all(text.as_bytes()).map_err(io("writing", &tmp))?;
        f.sync_all().map_err(io("syncing", &tmp))?;
    }
    std::fs::rename(&tmp, &mark).map_err(io("renaming", &mark))?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing", data_dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_renames_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let now = time::OffsetDateTime::from_unix_timestamp(1_795_000_000).unwrap();
        for round in 0..2 {
            std::fs::create_dir_all(dir.path().join("member/wal")).unwrap();
            std::fs::write(dir.path().join("member/wal/x"), format!("{round}")).unwrap();
            let target = archive(dir.path(), now).unwrap();
            assert!(!dir.path().join("member").exists());
            assert_eq!(
                std::fs::read_to_string(target.join("wal/x")).unwrap(),
                format!("{round}")
            );
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "member-archived-20261118T110640Z",
                "member-archived-20261118T110640Z-1"
            ]
        );
    }

    /// #65: the data disk is not mounted, so the data dir is an empty mount point; the mark
    /// kept in the state dir still shows that this node bootstrapped a cluster.
    #[test]
    fn the_mark_outside_the_data_dir_survives_an_unmounted_disk() {
        let disk = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        for dir in [disk.path(), state.path()] {
            mark_bootstrap(dir, "cluster token t, member 1\n").unwrap();
        }
        assert!(earlier(disk.path(), Some(state.path())).is_some());
        let empty_mount_point = tempfile::tempdir().unwrap();
        let seen = earlier(empty_mount_point.path(), Some(state.path())).unwrap();
        assert!(
            seen.contains(&state.path().display().to_string()) && seen.contains("token t"),
            "{seen}"
        );
        assert_eq!(earlier(empty_mount_point.path(), None), None);
    }

    #[test]
    fn inspect_tells_absent_from_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(inspect(dir.path()).unwrap(), DataDir::Absent);
        std::fs::create_dir_all(dir.path().join("member")).unwrap();
        assert!(matches!(
            inspect(dir.path()).unwrap(),
            DataDir::Unreadable(_)
        ));
    }
}
