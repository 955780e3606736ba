//! The admin's way out when the gate is wrong (#65): a file on the node that lets etcd start
//! once as plain etcd would, where the gate blocks and the Kubernetes API (served from this
//! etcd) is down, so no revision can be rendered to fix it.
//!
//! The admin writes why into `<state dir>/start-anyway` (`/var/lib/etcd-verify/start-anyway`
//! on the node; the runbooks `StaleRevision` and `DataDirLost` sections name it). On its next
//! look, a gate that would wait or block instead decides ([`overridden`], pure):
//!
//! | the gate's verdict | data dir | with the file |
//! |---|---|---|
//! | start | any | start (the file is left for a run that needs it) |
//! | invalid input, TLS failure, unusable data dir | any | unchanged: fix the input, the certificates or the disk |
//! | any other wait or block | holds a member | start on it, as etcd restarts from its WAL |
//! | data dir lost, on the bootstrap render | absent | start a new, empty cluster (what the earlier one held is given up) |
//! | any other | absent or unreadable | unchanged: etcd would rejoin with an empty log and could lose committed writes; recover with `etcd-recover` |
//!
//! The file is used once: it is renamed to `start-anyway.used-<UTC time>` before etcd may
//! start, so the next start meets the gate again. The start's report names the file and the
//! reason (`VerifyReport::overridden`), and so do the log and the termination message.

use std::path::{Path, PathBuf};

use membership::{BlockCode, MemberId};

use crate::config::VerifyConfig;
use crate::decide::{DataDir, Decision};

/// The override's file name in the state dir.
pub const FILE: &str = "start-anyway";
/// The most of the file that is read (the reason is for people, one line).
const MAX_BYTES: u64 = 4096;

/// An override the admin left, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    pub path: PathBuf,
    /// The file's first non-empty line.
    pub reason: String,
}

impl Override {
    /// What the report records: the file and its reason.
    pub fn record(&self) -> String {
        format!("{}: {}", self.path.display(), self.reason)
    }
}

/// Reads `<state_dir>/start-anyway`, if there is one. A file without a reason is an error: the
/// record must say why the gate was passed.
pub fn read(state_dir: &Path) -> Result<Option<Override>, String> {
    use std::io::Read;
    let path = state_dir.join(FILE);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    let mut text = String::new();
    file.take(MAX_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    let reason = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or_else(|| {
            format!(
                "{} is empty: write why etcd must start past the gate into it (one line, kept in the report)",
                path.display()
            )
        })?
        .to_owned();
    Ok(Some(Override { path, reason }))
}

/// Renames the file to `start-anyway.used-<stamp>` so that it serves one start only.
pub fn consume(o: &Override, stamp: &str) -> Result<PathBuf, String> {
    let used = o.path.with_file_name(format!("{FILE}.used-{stamp}"));
    std::fs::rename(&o.path, &used).map_err(|e| {
        format!(
            "could not set the override {} aside as {}: {e}",
            o.path.display(),
            used.display()
        )
    })?;
    Ok(used)
}

/// The decision with the admin's override applied (see the module table): `Ok(Some(start))`
/// where it lets etcd start, `Ok(None)` where the gate's decision already starts, `Err(why)`
/// where the override cannot apply.
pub fn overridden(
    config: &VerifyConfig,
    data: &DataDir,
    gate: &Decision,
    o: &Override,
) -> Result<Option<Decision>, String> {
    let (code, said) = match gate {
        Decision::Start { .. } => return Ok(None),
        Decision::Wait { code, reason, .. } | Decision::Block { code, reason, .. } => {
            (*code, reason)
        }
    };
    if matches!(
        code,
        BlockCode::InvalidInput | BlockCode::TlsFailure | BlockCode::DataDirUnusable
    ) {
        return Err(format!(
            "{} does not apply to {code:?}: fix what the gate names",
            o.path.display()
        ));
    }
    let prefix = format!("admin override ({})", o.record());
    match data {
        DataDir::Present(wal) => Ok(Some(Decision::Start {
            reason: format!(
                "{prefix}: starting on the data dir's own member {:x} as plain etcd would, past the gate's {code:?}: {said}",
                wal.member_id
            ),
            member_id: MemberId::new(wal.member_id),
            archive: None,
        })),
        DataDir::Absent if code == BlockCode::DataDirLost && config.is_first_bootstrap() => {
            Ok(Some(Decision::Start {
                reason: format!(
                    "{prefix}: bootstrapping a new, empty cluster; what the earlier one held is given up (the gate said: {said})"
                ),
                member_id: None,
                archive: None,
            }))
        }
        DataDir::Absent | DataDir::Unreadable(_) => Err(format!(
            "{} cannot start a member without readable data on a revision of an existing cluster (etcd would rejoin with an empty log and could lose committed writes): recover with etcd-recover (docs/runbooks/quorum-loss.md)",
            o.path.display()
        )),
    }
}
