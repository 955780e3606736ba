//! The operator as local processes: `etcd-operator run`, one process per leader-election
//! identity, each with its own log file and its own metrics address. One instance
//! ([`DEFAULT_OPERATOR`], log `<dir>/operator.log`) is what every scenario runs; a second
//! identity (log `<dir>/operator-<identity>.log`) makes a standby that competes for the Lease.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_fixture::LoopbackAddr;
use kubelet_standin::images::ImageTable;

use super::{ControlPlaneError, LocalControlPlane, io};

/// The identity of the operator every scenario starts.
pub const DEFAULT_OPERATOR: &str = "sandbox-operator";

/// `--lease-duration` of every local operator process (the operator renews every third of it).
pub const OPERATOR_LEASE_DURATION: Duration = Duration::from_secs(6);

/// One `etcd-operator run` process (or the record of one that was stopped: its log stays).
#[derive(Debug)]
pub struct OperatorProcess {
    pub identity: String,
    pub metrics: SocketAddr,
    pub log_path: PathBuf,
    child: Option<Child>,
}

impl OperatorProcess {
    /// Whether the process was started and not stopped (it may have exited by itself).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// The process's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// SIGTERM, then SIGKILL after `grace`; with `grace` zero: SIGKILL (a crash).
    fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let signal = if grace.is_zero() {
            nix::sys::signal::Signal::SIGKILL
        } else {
            nix::sys::signal::Signal::SIGTERM
        };
        let _ = nix::sys::signal::kill(pid, signal);
        let started = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if started.elapsed() < grace + Duration::from_secs(1) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl LocalControlPlane {
    /// Starts the [`DEFAULT_OPERATOR`] (output in `<dir>/operator.log`); on the kas control plane
    /// it authenticates as the operator's ServiceAccount.
    pub fn start_operator(&mut self) -> Result<(), ControlPlaneError> {
        self.start_operator_named(DEFAULT_OPERATOR).map(|_| ())
    }

    /// Starts `etcd-operator run --identity <identity>` as a local process, with its own log
    /// file and metrics address (returned). Nothing happens if that identity runs already.
    pub fn start_operator_named(
        &mut self,
        identity: &str,
    ) -> Result<SocketAddr, ControlPlaneError> {
        if let Some(p) = self.operators.iter().find(|p| p.identity == identity)
            && p.running()
        {
            return Ok(p.metrics);
        }
        let addr = LoopbackAddr::acquire()?;
        let listen = SocketAddr::from((addr.ip(), 8443));
        let log_path = self.operator_log_path_of(identity);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io(format!("opening {}", log_path.display())))?;
        let err = log.try_clone().map_err(io("operator log"))?;
        let mut command = Command::new(self.bin_dir.join("etcd-operator"));
        if let Some(image) = &self.etcd_image {
            command.env("ETCD_IMAGE", image);
        }
        let child = command
            .arg("run")
            .arg("--listen")
            .arg(listen.to_string())
            .args(["--identity", identity])
            .arg("--lease-duration")
            .arg(format!("{}s", OPERATOR_LEASE_DURATION.as_secs()))
            .env(
                "KUBECONFIG",
                self.operator_kubeconfig
                    .as_deref()
                    .unwrap_or(self.api.kubeconfig()),
            )
            // The scenarios' operators log at info; ETCD_OPERATOR_LOG in the test's environment
            // (e.g. `etcd_operator=debug,kube_client=debug`) raises it to chase a failure.
            .env(
                "ETCD_OPERATOR_LOG",
                std::env::var("ETCD_OPERATOR_LOG").unwrap_or_else(|_| "info".into()),
            )
            // The local backup destination: on a real node a hostPath of the node the operator
            // runs on; here one directory of the control plane's. Verification restores with
            // the tools of the etcd build the starting image runs (the image table's).
            .env("ETCD_OPERATOR_BACKUP_DIR", self.backup_dir())
            .env("ETCD_OPERATOR_ETCD_TOOLS", self.etcd_tools()?)
            .env(
                "ETCD_OPERATOR_SCRATCH_DIR",
                self.dir.path().join("backup-scratch"),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(io(format!(
                "starting etcd-operator run --identity {identity}"
            )))?;
        let process = OperatorProcess {
            identity: identity.to_owned(),
            metrics: listen,
            log_path,
            child: Some(child),
        };
        match self.operators.iter_mut().find(|p| p.identity == identity) {
            Some(p) => *p = process,
            None => self.operators.push(process),
        }
        // The address reservation only guards against parallel tests; the port is ours now.
        drop(addr);
        Ok(listen)
    }

    /// The directory of the etcd build the starting etcd image runs (an untagged image: the
    /// default build), as the node agents' image table maps it.
    fn etcd_tools(&self) -> Result<PathBuf, ControlPlaneError> {
        let image = self.etcd_image.as_deref().unwrap_or("etcd");
        let etcd = ImageTable::standard(&self.bin_dir)
            .resolve(image, &["etcd".to_owned()], &[])
            .map_err(|e| ControlPlaneError::Failed(format!("the operator's etcd tools: {e}")))?
            .program;
        etcd.parent().map(Path::to_path_buf).ok_or_else(|| {
            ControlPlaneError::Failed(format!("{} has no directory", etcd.display()))
        })
    }

    /// Stops the [`DEFAULT_OPERATOR`]: SIGTERM, then SIGKILL after `grace`. With `grace` zero:
    /// SIGKILL (a crash).
    pub fn stop_operator(&mut self, grace: Duration) -> Result<(), ControlPlaneError> {
        self.stop_operator_named(DEFAULT_OPERATOR, grace)
    }

    /// Stops the operator process of `identity` (see [`LocalControlPlane::stop_operator`]).
    pub fn stop_operator_named(
        &mut self,
        identity: &str,
        grace: Duration,
    ) -> Result<(), ControlPlaneError> {
        let p = self
            .operators
            .iter_mut()
            .find(|p| p.identity == identity)
            .ok_or_else(|| ControlPlaneError::Failed(format!("no operator {identity}")))?;
        p.stop(grace);
        Ok(())
    }

    /// Stops every operator process (SIGTERM, then SIGKILL after `grace`).
    pub fn stop_operators(&mut self, grace: Duration) {
        for p in &mut self.operators {
            p.stop(grace);
        }
    }

    /// Every operator process started so far (running or stopped), in start order.
    pub fn operators(&self) -> &[OperatorProcess] {
        &self.operators
    }

    /// The operator process of `identity`.
    pub fn operator(&self, identity: &str) -> Option<&OperatorProcess> {
        self.operators.iter().find(|p| p.identity == identity)
    }

    /// The [`DEFAULT_OPERATOR`]'s metrics address, while it runs.
    pub fn operator_metrics(&self) -> Option<SocketAddr> {
        self.operator(DEFAULT_OPERATOR)
            .filter(|p| p.running())
            .map(|p| p.metrics)
    }

    /// The [`DEFAULT_OPERATOR`] process's pid, while it runs.
    pub fn operator_pid(&self) -> Option<u32> {
        self.operator(DEFAULT_OPERATOR)
            .and_then(OperatorProcess::pid)
    }

    /// The [`DEFAULT_OPERATOR`]'s log so far.
    pub fn operator_log(&self) -> String {
        std::fs::read_to_string(self.operator_log_path()).unwrap_or_default()
    }

    /// Where the [`DEFAULT_OPERATOR`] process logs.
    pub fn operator_log_path(&self) -> PathBuf {
        self.operator_log_path_of(DEFAULT_OPERATOR)
    }

    /// Where the operator process of `identity` logs: `operator.log` for the default one,
    /// `operator-<identity>.log` for any other.
    /// Where the operators write backups to the local destination.
    pub fn backup_dir(&self) -> PathBuf {
        self.dir.path().join("backups")
    }

    pub fn operator_log_path_of(&self, identity: &str) -> PathBuf {
        if identity == DEFAULT_OPERATOR {
            self.dir.path().join("operator.log")
        } else {
            self.dir.path().join(format!("operator-{identity}.log"))
        }
    }
}
