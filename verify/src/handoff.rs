//! The hand-off between the gate in the init container and etcd's own container, so that the
//! gate holds on **every** start of etcd, not only on a new pod sandbox (#65).
//!
//! A kubelet runs init containers only when it creates a pod sandbox. When etcd's container
//! exits (a crash, an OOM kill, a failed liveness probe) it is restarted in place: no init
//! container runs again. A data dir that vanished under the running pod would then let etcd start
//! as the same started member with an empty log (etcd's no-WAL `existing` path), a voter that can
//! elect a leader missing committed writes.
//!
//! So etcd's container does not run `etcd` directly: its command is `etcd-verify exec-etcd --
//! etcd <flags>`, the binary the init container copied into a pod-scoped `emptyDir`
//! ([`install`]), since etcd's image does not carry it. On each start it:
//!
//! 1. takes the **ticket** the init container left with its `start` verdict ([`take_ticket`]):
//!    the first start after a passed gate, within `--ticket-max-age`, becomes etcd at once
//!    (the verdict is seconds old; asking again would double every start's wait when quorum is
//!    lost). Taking it removes it, so it serves one start only;
//! 2. otherwise runs the same gate as the init container, with the same env and files: a block
//!    exits 1 with the report in the container's termination message (the operator reads it
//!    there as it reads the init container's), and the kubelet restarts the container with its
//!    back-off, asking again each time;
//! 3. on `start`, replaces itself with etcd (`execvp`): same PID, signals go to etcd, and the
//!    termination message stays empty, so etcd's own failures fall back to its log.
//!
//! The binary is copied with the ticket's write, never over a file being run: the copy goes to a
//! temporary name and is renamed into place.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The copied binary's name in the hand-off directory.
pub const BINARY: &str = "etcd-verify";
/// The ticket's name in the hand-off directory.
pub const TICKET: &str = "start-ticket";

/// A hand-off that could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("cannot find this program's own executable: {0}")]
    OwnExecutable(std::io::Error),
    #[error("cannot install the gate for etcd's container at {path}: {source}")]
    Install {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Copies this executable to `dir/etcd-verify` (0755) and writes the ticket `dir/start-ticket`
/// holding `verdict` (the init container's report line). Both are written under a temporary name
/// and renamed, so etcd's container never sees half a file.
pub fn install(dir: &Path, verdict: &str) -> Result<(), HandoffError> {
    let own = std::env::current_exe().map_err(HandoffError::OwnExecutable)?;
    let binary = dir.join(BINARY);
    let staged = dir.join(format!(".{BINARY}.tmp"));
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HandoffError::Install { path, source }
    };
    std::fs::copy(&own, &staged).map_err(at(&staged))?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755))
        .map_err(at(&staged))?;
    std::fs::rename(&staged, &binary).map_err(at(&binary))?;
    let ticket = dir.join(TICKET);
    let staged = dir.join(format!(".{TICKET}.tmp"));
    std::fs::write(&staged, verdict).map_err(at(&staged))?;
    std::fs::rename(&staged, &ticket).map_err(at(&ticket))?;
    Ok(())
}

/// What [`take_ticket`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ticket {
    /// A ticket younger than the bound, now removed: this start needs no second look.
    Fresh { age: Duration },
    /// A ticket past the bound (removed too): the verdict is too old to act on.
    Stale { age: Duration },
    /// No ticket: a restart in place (or the first start of a pod whose init container
    /// predates the hand-off).
    Absent,
    /// A ticket that could not be read or removed (named): not trusted.
    Unusable(String),
}

/// Takes the ticket in `dir`: removes it, and says whether it was written within `max_age` of
/// `now`. A ticket is used once: whatever it says, it is gone afterwards (or reported unusable).
pub fn take_ticket(dir: &Path, max_age: Duration, now: SystemTime) -> Ticket {
    let path = dir.join(TICKET);
    let written = match std::fs::metadata(&path).and_then(|m| m.modified()) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ticket::Absent,
        Err(e) => return Ticket::Unusable(format!("{}: {e}", path.display())),
    };
    if let Err(e) = std::fs::remove_file(&path) {
        return Ticket::Unusable(format!("removing {}: {e}", path.display()));
    }
    // A ticket from the future (a clock stepped back) is not fresh.
    match now.duration_since(written) {
        Ok(age) if age <= max_age => Ticket::Fresh { age },
        Ok(age) => Ticket::Stale { age },
        Err(e) => Ticket::Stale { age: e.duration() },
    }
}

/// Replaces this process with `program` (looked up on `PATH`) and `args`; returns only on
/// failure.
pub fn exec(program: &OsString, args: &[OsString]) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(program).args(args).exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch_ticket(dir: &Path) -> SystemTime {
        std::fs::write(dir.join(TICKET), "{}").unwrap();
        std::fs::metadata(dir.join(TICKET))
            .unwrap()
            .modified()
            .unwrap()
    }

    #[test]
    fn a_ticket_serves_one_start_within_its_age() {
        let dir = tempfile::tempdir().unwrap();
        let written = touch_ticket(dir.path());
        let now = written + Duration::from_secs(5);
        assert_eq!(
            take_ticket(dir.path(), Duration::from_secs(60), now),
            Ticket::Fresh {
                age: Duration::from_secs(5)
            }
        );
        // Taken: the next start (a restart in place) finds none.
        assert_eq!(
            take_ticket(dir.path(), Duration::from_secs(60), now),
            Ticket::Absent
        );
    }

    #[test]
    fn an_old_or_future_ticket_is_not_fresh_and_is_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let written = touch_ticket(dir.path());
        let late = written + Duration::from_secs(61);
        assert_eq!(
            take_ticket(dir.path(), Duration::from_secs(60), late),
            Ticket::Stale {
                age: Duration::from_secs(61)
            }
        );
        assert!(!dir.path().join(TICKET).exists());
        let written = touch_ticket(dir.path());
        let before = written - Duration::from_secs(30);
        assert!(matches!(
            take_ticket(dir.path(), Duration::from_secs(60), before),
            Ticket::Stale { .. }
        ));
    }

    #[test]
    fn install_copies_this_executable_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "{\"decision\":\"start\"}").unwrap();
        let own = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let copied = dir.path().join(BINARY);
        assert_eq!(std::fs::read(&copied).unwrap(), own);
        let mode = std::fs::metadata(&copied).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(TICKET)).unwrap(),
            "{\"decision\":\"start\"}"
        );
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [BINARY, TICKET]);
    }

    #[test]
    fn install_into_a_missing_directory_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent");
        let e = install(&missing, "{}").unwrap_err().to_string();
        assert!(e.contains(&missing.display().to_string()), "{e}");
    }
}
