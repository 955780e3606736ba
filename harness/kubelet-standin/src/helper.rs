//! `kubelet-standin exec-container`: how one container process is started (the container
//! runtime stand-in's namespace part). No `unsafe` and no `pre_exec`: the namespace work
//! happens in this small single-threaded helper, which the agent spawns in a new process group.
//!
//! ```text
//! agent ──spawn (own process group)──► exec-container   (stage 1, "shim")
//!                                        PR_SET_PDEATHSIG=SIGKILL
//!                                        unshare(CLONE_NEWNS | CLONE_NEWPID)
//!                                        mounts::setup_mounts, chdir(workingDir)
//!                                        block SIGTERM/SIGINT/SIGHUP/SIGQUIT
//!                                        spawn /proc/self/exe exec-init ──► stage 2 = PID 1
//!                                        wait, exit with its code (128+N if signalled)
//!                                                                        PR_SET_PDEATHSIG=SIGKILL
//!                                                                        unblock signals
//!                                                                        execv(program)
//! ```
//!
//! Why two stages: a process cannot move itself into a new PID namespace, only its children.
//! The program runs as **PID 1 of its own PID namespace**, like in a real container: when it
//! exits the kernel kills every other process of the container, and if the agent dies (even
//! by SIGKILL) the shim and then the program get SIGKILL through the parent-death signal, which
//! takes the whole namespace down. The shim blocks the termination signals the agent sends to
//! the process group, so it outlives the program's graceful shutdown and reports its real exit
//! code. As PID 1, a program without a SIGTERM handler ignores SIGTERM (as in Kubernetes) and
//! is SIGKILLed after the grace period.
//!
//! With `--join <shim pid>` (exec probes) stage 1 enters the running container's mount
//! namespace and its PID namespace (for its child) instead of creating new ones, so the probe
//! command sees exactly the container's files and dies with the container.

use std::ffi::CString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::MsFlags;
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::signal::{SigSet, Signal};

use crate::mounts::{BindMount, MountError, setup_mounts};

/// Errors of the helper (printed to the container log; exit code 127).
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error("{op}: {source}")]
    Sys {
        op: &'static str,
        source: nix::Error,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("argument contains a NUL byte")]
    Nul,
}

fn sys(op: &'static str) -> impl FnOnce(nix::Error) -> HelperError {
    move |source| HelperError::Sys { op, source }
}

/// What `exec-container` was asked to do.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    pub binds: Vec<BindMount>,
    pub staging: PathBuf,
    pub workdir: Option<PathBuf>,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub die_with_parent: bool,
    /// Passed on to stage 2, which writes there why `execv` failed.
    pub error_file: Option<PathBuf>,
    /// Join the namespaces of this running container shim instead of creating new ones.
    pub join: Option<i32>,
    /// Stage 2 mounts a `/proc` of the new PID namespace (in the new mount namespace) first.
    pub mount_proc: bool,
}

/// The signals the agent sends to a container's process group to stop it.
fn termination_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        set.add(s);
    }
    set
}

/// Stage 1: namespaces, mounts, then run stage 2 as PID 1 and return its exit code.
/// Must run in a single-threaded process (unshare of the mount namespace needs that).
pub fn run_container(spec: &ExecSpec) -> Result<i32, HelperError> {
    if spec.die_with_parent {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(sys("prctl(PR_SET_PDEATHSIG)"))?;
    }
    match spec.join {
        Some(pid) => join_container(pid)?,
        None => {
            unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID).map_err(sys("unshare"))?;
            setup_mounts(&spec.staging, &spec.binds)?;
        }
    }
    if let Some(dir) = &spec.workdir {
        std::fs::create_dir_all(dir).map_err(|source| HelperError::Io {
            op: "mkdir",
            path: dir.clone(),
            source,
        })?;
        std::env::set_current_dir(dir).map_err(|source| HelperError::Io {
            op: "chdir",
            path: dir.clone(),
            source,
        })?;
    }
    termination_signals()
        .thread_block()
        .map_err(sys("block signals"))?;
    // /proc/self/exe names this very binary whatever the new mounts hide.
    let mut init = Command::new("/proc/self/exe");
    init.arg("exec-init");
    if let Some(f) = &spec.error_file {
        init.arg("--error-file").arg(f);
    }
    if spec.mount_proc && spec.join.is_none() {
        init.arg("--mount-proc");
    }
    let status = init
        .arg("--")
        .arg(&spec.program)
        .args(&spec.args)
        .status()
        .map_err(|source| HelperError::Io {
            op: "spawn",
            path: spec.program.clone(),
            source,
        })?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 255,
    })
}

/// Enters the mount namespace of container shim `pid` and makes our children join its PID
/// namespace (so they die with the container).
fn join_container(pid: i32) -> Result<(), HelperError> {
    let open = |what: &str| {
        let path = PathBuf::from(format!("/proc/{pid}/ns/{what}"));
        std::fs::File::open(&path).map_err(|source| HelperError::Io {
            op: "open",
            path,
            source,
        })
    };
    let mnt = open("mnt")?;
    let pid_ns = open("pid_for_children")?;
    setns(&mnt, CloneFlags::CLONE_NEWNS).map_err(sys("setns(mnt)"))?;
    setns(&pid_ns, CloneFlags::CLONE_NEWPID).map_err(sys("setns(pid)"))?;
    // The old working directory belongs to the old mount namespace.
    std::env::set_current_dir("/").map_err(|source| HelperError::Io {
        op: "chdir",
        path: PathBuf::from("/"),
        source,
    })
}

/// Stage 2 (PID 1 of the container): parent-death signal, default signal mask, exec.
pub fn exec_init(
    program: &Path,
    args: &[String],
    mount_proc: bool,
) -> Result<std::convert::Infallible, HelperError> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(sys("prctl(PR_SET_PDEATHSIG)"))?;
    if mount_proc {
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        nix::mount::mount(Some("proc"), "/proc", Some("proc"), flags, None::<&str>)
            .map_err(sys("mount /proc"))?;
    }
    termination_signals()
        .thread_unblock()
        .map_err(sys("unblock signals"))?;
    let program_c =
        CString::new(program.as_os_str().as_encoded_bytes()).map_err(|_| HelperError::Nul)?;
    let mut argv = vec![program_c.clone()];
    for a in args {
        argv.push(CString::new(a.as_bytes()).map_err(|_| HelperError::Nul)?);
    }
    nix::unistd::execv(&program_c, &argv).map_err(|source| HelperError::Io {
        op: "exec",
        path: program.to_path_buf(),
        source: std::io::Error::from(source),
    })
}
