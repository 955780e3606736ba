//! Container processes (the container runtime stand-in's process part).
//!
//! A container is one process tree started through the agent's own `exec-container` helper
//! (see [`crate::helper`]) in a **new process group** whose id is the shim's PID; the program
//! runs as PID 1 of its own PID namespace below the shim. Stopping sends SIGTERM to the whole
//! group, waits up to the grace period, then SIGKILLs the container's PID 1 (which takes the
//! PID namespace down) and finally the group. When the program exits by itself the kernel
//! kills the rest of its PID namespace, and the agent SIGKILLs what is left of the group, as
//! a runtime tears down a container whose main process ended. stdout and stderr go to the
//! container's log file. The helper sets `PR_SET_PDEATHSIG` at both stages, so even an agent
//! killed with SIGKILL leaves no running process behind.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::mounts::{BindMount, MountError};

/// Errors starting a container process.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error("opening log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("spawning {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("spawned process has no pid")]
    NoPid,
}

/// Everything needed to start one container process.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The `kubelet-standin` binary (its `exec-container` subcommand does the mounts).
    pub helper: PathBuf,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub binds: Vec<BindMount>,
    pub staging: PathBuf,
    pub working_dir: Option<PathBuf>,
    pub log_path: Option<PathBuf>,
    /// Host file where the helper writes why it could not start the program (the container's
    /// termination message file), so the reason shows in the container status.
    pub error_file: Option<PathBuf>,
    /// Enter the mount and PID namespaces of this running container shim (by PID) instead of
    /// creating new ones (`binds` and `staging` are then unused): exec probes run inside
    /// their container, as the kubelet runs them.
    pub join: Option<i32>,
    /// Mount a `/proc` of the container's own PID namespace before the program starts (the
    /// runc runtime: `runc run` reads `/proc` for its own children).
    pub mount_proc: bool,
}

impl Launch {
    /// The helper's argument vector (without the helper itself).
    pub fn helper_args(&self) -> Result<Vec<String>, MountError> {
        let mut a = vec!["exec-container".to_string(), "--die-with-parent".into()];
        a.push("--staging".into());
        a.push(self.staging.display().to_string());
        for b in &self.binds {
            a.push("--bind".into());
            a.push(b.to_arg()?);
        }
        if let Some(pid) = self.join {
            a.push("--join".into());
            a.push(pid.to_string());
        }
        if self.mount_proc {
            a.push("--mount-proc".into());
        }
        if let Some(f) = &self.error_file {
            a.push("--error-file".into());
            a.push(f.display().to_string());
        }
        if let Some(w) = &self.working_dir {
            a.push("--workdir".into());
            a.push(w.display().to_string());
        }
        a.push("--".into());
        a.push(self.program.display().to_string());
        a.extend(self.args.iter().cloned());
        Ok(a)
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Exit code; 128 + signal number when killed by a signal (as runtimes report it).
    pub code: i32,
    pub signal: Option<i32>,
}

impl Exit {
    fn from_status(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit { code, signal: None },
            (None, Some(sig)) => Exit {
                code: 128 + sig,
                signal: Some(sig),
            },
            (None, None) => Exit {
                code: 255,
                signal: None,
            },
        }
    }
}

/// A running container process (group leader).
#[derive(Debug)]
pub struct Process {
    child: Child,
    pid: i32,
    pub started: Instant,
    pub started_at: Timestamp,
}

fn log_stdio(path: &Option<PathBuf>) -> Result<(Stdio, Stdio), RunnerError> {
    let Some(path) = path else {
        return Ok((Stdio::null(), Stdio::null()));
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| RunnerError::Log {
            path: path.clone(),
            source,
        })?;
    }
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| RunnerError::Log {
                path: path.clone(),
                source,
            })
    };
    Ok((Stdio::from(open()?), Stdio::from(open()?)))
}

/// A request to the spawner thread.
struct SpawnRequest {
    cmd: Command,
    runtime: tokio::runtime::Handle,
    reply: tokio::sync::oneshot::Sender<std::io::Result<Child>>,
}

/// The process-wide spawner thread. Container shims are spawned from this one long-lived
/// thread because `PR_SET_PDEATHSIG` fires when the *thread* that forked exits: a tokio
/// worker or blocking thread can go away (idle blocking threads, `block_in_place`) while the
/// agent lives on, and that would kill its containers. This thread never exits, so the signal
/// fires only when the agent's process dies.
fn spawner() -> Option<&'static std::sync::mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Option<std::sync::mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<SpawnRequest>();
            std::thread::Builder::new()
                .name("kubelet-standin-spawner".into())
                .spawn(move || {
                    for mut req in rx {
                        let _guard = req.runtime.enter();
                        let _ = req.reply.send(req.cmd.spawn());
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

async fn spawn_from_spawner(cmd: Command, program: &std::path::Path) -> Result<Child, RunnerError> {
    let err = |source| RunnerError::Spawn {
        program: program.to_path_buf(),
        source,
    };
    let gone = || {
        err(std::io::Error::other(
            "kubelet-standin spawner thread is gone",
        ))
    };
    let (reply, rx) = tokio::sync::oneshot::channel();
    let req = SpawnRequest {
        cmd,
        runtime: tokio::runtime::Handle::current(),
        reply,
    };
    spawner().ok_or_else(gone)?.send(req).map_err(|_| gone())?;
    rx.await.map_err(|_| gone())?.map_err(err)
}

impl Process {
    /// Starts the container process in its own process group.
    pub async fn spawn(launch: &Launch) -> Result<Self, RunnerError> {
        let (out, err) = log_stdio(&launch.log_path)?;
        let mut cmd = Command::new(&launch.helper);
        cmd.args(launch.helper_args()?)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(true);
        let child = spawn_from_spawner(cmd, &launch.helper).await?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or(RunnerError::NoPid)?;
        Ok(Process {
            child,
            pid,
            started: Instant::now(),
            started_at: Timestamp::now(),
        })
    }

    /// PID of the main process (= process group id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn signal_group(&self, sig: Signal) {
        // ESRCH (group already gone) is the normal case after the leader exited.
        let _ = killpg(Pid::from_raw(self.pid), sig);
    }

    /// Waits for the main process to exit, then kills whatever is left of its group.
    pub async fn wait(&mut self) -> Exit {
        let exit = match self.child.wait().await {
            Ok(status) => Exit::from_status(status),
            Err(_) => Exit {
                code: 255,
                signal: None,
            },
        };
        self.signal_group(Signal::SIGKILL);
        exit
    }

    /// The container's PID 1 (the helper shim's only child), if started.
    fn container_init(&self) -> Option<i32> {
        let path = format!("/proc/{0}/task/{0}/children", self.pid);
        std::fs::read_to_string(path)
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// SIGTERM to the group; after `grace`, SIGKILL to the container's PID 1 (the kernel then
    /// kills its whole PID namespace and the shim reaps it, so nothing is left as an orphan),
    /// then SIGKILL to whatever remains of the group. Returns how the container ended.
    pub async fn stop(&mut self, grace: Duration) -> Exit {
        self.signal_group(Signal::SIGTERM);
        if let Ok(Ok(status)) = tokio::time::timeout(grace, self.child.wait()).await {
            self.signal_group(Signal::SIGKILL);
            return Exit::from_status(status);
        }
        if let Some(init) = self.container_init() {
            let _ = nix::sys::signal::kill(Pid::from_raw(init), Signal::SIGKILL);
            if let Ok(Ok(status)) =
                tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await
            {
                self.signal_group(Signal::SIGKILL);
                return Exit::from_status(status);
            }
        }
        self.signal_group(Signal::SIGKILL);
        self.wait().await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn helper_args_shape() {
        let l = Launch {
            helper: "/bin/kubelet-standin".into(),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "echo $(X)".into()],
            env: vec![],
            binds: vec![BindMount {
                source: "/r/var/lib/etcd".into(),
                target: "/var/lib/etcd".into(),
                read_only: false,
            }],
            staging: "/r/run/staging".into(),
            working_dir: None,
            log_path: None,
            error_file: None,
            join: None,
            mount_proc: false,
        };
        assert_eq!(
            l.helper_args().unwrap(),
            [
                "exec-container",
                "--die-with-parent",
                "--staging",
                "/r/run/staging",
                "--bind",
                "/r/var/lib/etcd:/var/lib/etcd",
                "--",
                "/bin/sh",
                "-c",
                "echo $(X)"
            ]
        );
    }
}
