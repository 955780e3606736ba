//! One run, as a short pipeline: check the installed revision (read-only) → fetch (API) → plan
//! (pure) → lay the plan down on disk under the lock → report.
//!
//! On disk, under the lock:
//!
//! ```text
//!   remove leftovers of crashed runs (.etcd-pod-N.staging, .etcd-pod-N.old, .etcd-pod.yaml.tmp-*)
//!   re-check the installed revision (refuse a downgrade)
//!   revision dir identical?  ── yes ──▶ keep it
//!        │ no
//!        ▼
//!   build .etcd-pod-N.staging (every file atomic, every dir fsynced)
//!   absent → rename into etcd-pod-N           present → RENAME_EXCHANGE, then delete the old copy
//!   fsync the resource dir
//!   manifest identical? ── yes ──▶ keep it (not even its mtime changes)
//!        │ no
//!        ▼
//!   with --approval-window: wait for the operator's approval on this pod (crate::approval)
//!   write <manifest-dir>/etcd-pod.yaml atomically (last, after everything it needs)
//! ```

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Client;

use crate::approval::{Approval, NotApproved};
use crate::args::Config;
use crate::atomic;
use crate::fetch::{self, FetchError};
use crate::hook::{Hook, HookFired};
use crate::lock::{InstallLock, LockError};
use crate::manifest;
use crate::plan::{self, DIR_MODE, FILE_MODE, Plan, PlanError, PlanInput};
use crate::report::{Outcome, Report};

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("refusing revision {revision}: {source}")]
    Plan {
        revision: u64,
        #[source]
        source: Box<PlanError>,
    },
    #[error(
        "refusing revision {requested}: revision {installed} is already installed ({evidence})"
    )]
    Downgrade {
        requested: u64,
        installed: u64,
        evidence: String,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("timed out after {0:?} ({1})")]
    Timeout(Duration, &'static str),
    #[error(transparent)]
    NotApproved(#[from] NotApproved),
    #[error(transparent)]
    Hook(#[from] HookFired),
}

impl InstallError {
    /// A short static category, for the termination message and events.
    pub fn category(&self) -> &'static str {
        match self {
            InstallError::Fetch(e) => e.category(),
            InstallError::Plan { source, .. } => source.category(),
            InstallError::Downgrade { .. } => "Downgrade",
            InstallError::Lock(LockError::Held { .. }) => "Busy",
            InstallError::Lock(LockError::NotRegular { .. }) => "UnsafeLockFile",
            InstallError::Lock(_) | InstallError::Io { .. } => "IoError",
            InstallError::Timeout(..) => "Timeout",
            InstallError::NotApproved(_) => "RestartNotApproved",
            InstallError::Hook(_) => "TestHook",
        }
    }

    /// How the run ended.
    pub fn outcome(&self) -> Outcome {
        match self {
            InstallError::Plan { .. } | InstallError::Downgrade { .. } => Outcome::Refused,
            InstallError::Fetch(FetchError::Conflict { .. }) => Outcome::Refused,
            InstallError::Lock(LockError::NotRegular { .. }) => Outcome::Refused,
            InstallError::Lock(LockError::Held { .. }) => Outcome::Busy,
            _ => Outcome::Failed,
        }
    }
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// What happened to the revision directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirChange {
    /// Already there with identical content.
    Kept,
    Created,
    /// There with other content; swapped for the new content.
    Replaced,
}

/// What happened to the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestChange {
    /// Already identical; not rewritten.
    Kept,
    /// Identical content, mode corrected.
    ModeFixed,
    Written,
}

/// A successful run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub dir: PathBuf,
    pub dir_change: DirChange,
    pub manifest: PathBuf,
    pub manifest_change: ManifestChange,
    pub files: usize,
}

impl Installed {
    /// Whether anything on disk changed.
    pub fn changed(&self) -> bool {
        self.dir_change != DirChange::Kept || self.manifest_change != ManifestChange::Kept
    }
}

/// The report for a run's result.
pub fn report(cfg: &Config, result: &Result<Installed, InstallError>) -> Report {
    let (outcome, reason, message) = match result {
        Ok(done) if done.changed() => (
            Outcome::Installed,
            "Installed",
            format!(
                "revision {} installed on node {}: {} ({:?}, {} files), manifest {} ({:?})",
                cfg.revision,
                cfg.node,
                done.dir.display(),
                done.dir_change,
                done.files,
                done.manifest.display(),
                done.manifest_change
            ),
        ),
        Ok(done) => (
            Outcome::Unchanged,
            "AlreadyInstalled",
            format!(
                "revision {} was already installed on node {}: {} and {} unchanged",
                cfg.revision,
                cfg.node,
                done.dir.display(),
                done.manifest.display()
            ),
        ),
        Err(e) => (e.outcome(), e.category(), e.to_string()),
    };
    Report {
        outcome,
        revision: cfg.revision,
        node: cfg.node.clone(),
        reason,
        message,
    }
}

/// Runs the whole install: read-only downgrade check, fetch, plan, disk.
pub async fn run(
    cfg: &Config,
    client: &Client,
    hook: Hook,
    approval: Option<&Approval>,
    deadline: tokio::time::Instant,
) -> Result<Installed, InstallError> {
    check_downgrade(cfg)?;
    let resources =
        fetch::fetch_all(client, &cfg.namespace, cfg.revision, &cfg.wanted, deadline).await?;
    let plan = plan::plan(&PlanInput {
        node: &cfg.node,
        revision: cfg.revision,
        pod: &cfg.pod,
        resources: &resources,
        own_key_prefixes: &cfg.own_key_prefixes,
    })
    .map_err(|source| InstallError::Plan {
        revision: cfg.revision,
        source: Box::new(source),
    })?;
    tracing::info!(
        files = plan.files.len(),
        dir = %plan.dir_name,
        "planned"
    );
    let deadline = deadline.into_std();
    if Instant::now() >= deadline {
        return Err(InstallError::Timeout(cfg.timeout, "before writing"));
    }
    install_on_disk(cfg, &plan, hook, deadline, approval.map(|a| (a, client))).await
}

/// The highest installed revision and where it was seen (read-only).
fn installed(cfg: &Config) -> Result<Option<(u64, String)>, InstallError> {
    let mut dirs = Vec::new();
    match fs::read_dir(&cfg.resource_dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("reading", &cfg.resource_dir)(e)),
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(io_err("reading", &cfg.resource_dir))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let is_dir = entry
                    .file_type()
                    .map_err(io_err("reading", &entry.path()))?
                    .is_dir();
                if is_dir && plan::parse_revision_dir_name(&cfg.pod, &name).is_some() {
                    dirs.push(name);
                }
            }
        }
    }
    let manifest_path = cfg.manifest_dir.join(format!("{}.yaml", cfg.pod));
    let manifest_rev = match fs::read(&manifest_path) {
        Ok(bytes) => manifest::installed_revision(&bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("reading", &manifest_path)(e)),
    };
    let Some(max) =
        plan::installed_revision(&cfg.pod, dirs.iter().map(String::as_str), manifest_rev)
    else {
        return Ok(None);
    };
    let evidence = if manifest_rev == Some(max) {
        format!("{} declares it", manifest_path.display())
    } else {
        format!(
            "directory {} exists",
            cfg.resource_dir
                .join(plan::revision_dir_name(&cfg.pod, max))
                .display()
        )
    };
    Ok(Some((max, evidence)))
}

/// Refuses a revision lower than the installed one.
fn check_downgrade(cfg: &Config) -> Result<(), InstallError> {
    match installed(cfg)? {
        Some((installed, evidence)) if installed > cfg.revision => Err(InstallError::Downgrade {
            requested: cfg.revision,
            installed,
            evidence,
        }),
        _ => Ok(()),
    }
}

/// Writes files atomically, counting them for the test hook.
struct Writer {
    hook: Hook,
    deadline: Instant,
    written: usize,
}

impl Writer {
    fn write(
        &mut self,
        dir: &Path,
        name: &str,
        bytes: &[u8],
        mode: u32,
    ) -> Result<(), InstallError> {
        atomic::write_file(dir, name, bytes, mode).map_err(io_err("writing", &dir.join(name)))?;
        self.written += 1;
        self.hook.after_file(self.written, self.deadline)?;
        Ok(())
    }
}

/// Lays the plan down on disk under the lock; a new or changed manifest waits for `approval`
/// (the lock held meanwhile: no other installer of this node writes in between).
pub async fn install_on_disk(
    cfg: &Config,
    plan: &Plan,
    hook: Hook,
    deadline: Instant,
    approval: Option<(&Approval, &Client)>,
) -> Result<Installed, InstallError> {
    let rd = &cfg.resource_dir;
    atomic::ensure_dir_all(rd, DIR_MODE).map_err(io_err("creating", rd))?;
    let lock = InstallLock::acquire(&rd.join(plan::lock_file_name(&cfg.pod)))?;
    tracing::debug!(lock = %lock.path().display(), "lock taken");
    remove_leftovers(cfg, plan)?;
    check_downgrade(cfg)?;

    let mut writer = Writer {
        hook,
        deadline,
        written: 0,
    };
    let dir_change = place_revision_dir(cfg, plan, &mut writer)?;
    writer.hook.before_manifest(deadline)?;
    let manifest_change = match manifest_state(cfg, plan)? {
        Manifest::Same { mode } => keep_manifest(cfg, plan, mode)?,
        Manifest::Differs => {
            if let Some((approval, client)) = approval {
                tracing::info!(window = ?approval.window, "waiting for the operator to approve the restart of etcd");
                let value = approval.wait(client).await?;
                tracing::info!(approved = %value, "restart approved");
            }
            write_manifest(cfg, plan, &mut writer)?
        }
    };
    drop(lock);
    Ok(Installed {
        dir: rd.join(&plan.dir_name),
        dir_change,
        manifest: cfg.manifest_dir.join(&plan.manifest_name),
        manifest_change,
        files: plan.files.len(),
    })
}

/// Removes what crashed runs left: staging and old revision dirs, manifest temp files.
fn remove_leftovers(cfg: &Config, plan: &Plan) -> Result<(), InstallError> {
    let rd = &cfg.resource_dir;
    let mut removed = false;
    for entry in fs::read_dir(rd).map_err(io_err("reading", rd))? {
        let entry = entry.map_err(io_err("reading", rd))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if plan::is_leftover_work(&cfg.pod, &name) {
            tracing::warn!(path = %entry.path().display(), "removing leftover of an interrupted run");
            atomic::remove_tree(&entry.path()).map_err(io_err("removing", &entry.path()))?;
            removed = true;
        }
    }
    if removed {
        atomic::fsync_dir(rd).map_err(io_err("syncing", rd))?;
    }
    let md = &cfg.manifest_dir;
    let temp_prefix = format!(".{}.tmp-", plan.manifest_name);
    match fs::read_dir(md) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("reading", md)(e)),
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(io_err("reading", md))?;
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&temp_prefix)
                {
                    tracing::warn!(path = %entry.path().display(), "removing leftover temp manifest");
                    fs::remove_file(entry.path()).map_err(io_err("removing", &entry.path()))?;
                }
            }
        }
    }
    Ok(())
}

/// Builds the revision's tree under `staging` (which must not exist), everything fsynced.
fn stage(plan: &Plan, staging: &Path, writer: &mut Writer) -> Result<(), InstallError> {
    atomic::make_dir(staging, DIR_MODE).map_err(io_err("creating", staging))?;
    for d in &plan.dirs {
        let path = staging.join(d);
        atomic::make_dir(&path, DIR_MODE).map_err(io_err("creating", &path))?;
    }
    for f in &plan.files {
        writer.write(&staging.join(&f.dir), &f.name, &f.bytes, f.mode)?;
    }
    for d in plan.dirs.iter().rev() {
        let path = staging.join(d);
        atomic::fsync_dir(&path).map_err(io_err("syncing", &path))?;
    }
    atomic::fsync_dir(staging).map_err(io_err("syncing", staging))
}

/// Puts the revision directory in place whole: kept when identical, else staged and renamed in.
fn place_revision_dir(
    cfg: &Config,
    plan: &Plan,
    writer: &mut Writer,
) -> Result<DirChange, InstallError> {
    let rd = &cfg.resource_dir;
    let target = rd.join(&plan.dir_name);
    let existing = atomic::read_tree(&target).map_err(io_err("reading", &target))?;
    if existing.as_ref().is_some_and(|tree| plan.matches(tree)) {
        tracing::info!(dir = %target.display(), "revision directory already in place and identical; kept");
        return Ok(DirChange::Kept);
    }
    let staging_name = plan::staging_dir_name(&cfg.pod, cfg.revision);
    let staging = rd.join(&staging_name);
    atomic::remove_tree(&staging).map_err(io_err("removing", &staging))?;
    if let Err(e) = stage(plan, &staging, writer) {
        if let Err(cleanup) = atomic::remove_tree(&staging) {
            tracing::warn!(path = %staging.display(), error = %cleanup, "could not remove the staging dir");
        }
        return Err(e);
    }
    let change = if existing.is_none() {
        fs::rename(&staging, &target).map_err(io_err("renaming into place", &target))?;
        atomic::fsync_dir(rd).map_err(io_err("syncing", rd))?;
        DirChange::Created
    } else {
        tracing::warn!(dir = %target.display(), "revision directory exists with other content; replacing it");
        let swapped = atomic::exchange(rd, &staging_name, &plan.dir_name)
            .map_err(io_err("exchanging", &target))?;
        let old = if swapped {
            staging
        } else {
            // No RENAME_EXCHANGE here: move the old copy aside, then the new one in.
            let old = rd.join(plan::old_dir_name(&cfg.pod, cfg.revision));
            atomic::remove_tree(&old).map_err(io_err("removing", &old))?;
            fs::rename(&target, &old).map_err(io_err("moving aside", &target))?;
            fs::rename(&staging, &target).map_err(io_err("renaming into place", &target))?;
            old
        };
        atomic::fsync_dir(rd).map_err(io_err("syncing", rd))?;
        atomic::remove_tree(&old).map_err(io_err("removing", &old))?;
        atomic::fsync_dir(rd).map_err(io_err("syncing", rd))?;
        DirChange::Replaced
    };
    tracing::info!(dir = %target.display(), files = plan.files.len(), ?change, "revision directory in place");
    Ok(change)
}

/// The manifest on disk against the plan's.
enum Manifest {
    /// Identical content, with this mode.
    Same { mode: u32 },
    /// Absent or different: writing it (re)starts etcd.
    Differs,
}

fn manifest_state(cfg: &Config, plan: &Plan) -> Result<Manifest, InstallError> {
    let path = cfg.manifest_dir.join(&plan.manifest_name);
    match fs::read(&path) {
        Ok(current) if current == plan.manifest => {
            let mode = fs::metadata(&path)
                .map_err(io_err("reading", &path))?
                .permissions()
                .mode()
                & 0o7777;
            Ok(Manifest::Same { mode })
        }
        Ok(_) => Ok(Manifest::Differs),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Manifest::Differs),
        Err(e) => Err(io_err("reading", &path)(e)),
    }
}

/// An identical manifest is left alone (the kubelet restarts the pod on a file change); only a
/// wrong mode is corrected.
fn keep_manifest(cfg: &Config, plan: &Plan, mode: u32) -> Result<ManifestChange, InstallError> {
    let path = cfg.manifest_dir.join(&plan.manifest_name);
    let change = if mode == FILE_MODE {
        ManifestChange::Kept
    } else {
        fs::set_permissions(&path, fs::Permissions::from_mode(FILE_MODE))
            .map_err(io_err("setting the mode of", &path))?;
        ManifestChange::ModeFixed
    };
    tracing::info!(manifest = %path.display(), ?change, "manifest in place");
    Ok(change)
}

/// Writes the manifest, last: this (re)starts etcd.
fn write_manifest(
    cfg: &Config,
    plan: &Plan,
    writer: &mut Writer,
) -> Result<ManifestChange, InstallError> {
    let md = &cfg.manifest_dir;
    atomic::ensure_dir_all(md, DIR_MODE).map_err(io_err("creating", md))?;
    writer.write(md, &plan.manifest_name, &plan.manifest, FILE_MODE)?;
    tracing::info!(manifest = %md.join(&plan.manifest_name).display(), change = ?ManifestChange::Written, "manifest in place");
    Ok(ManifestChange::Written)
}
