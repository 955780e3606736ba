//! The shared kas control plane (`../shared/kas/kas`, or `$KAS`): where its script is, its
//! binaries unpacked once per machine, and what a [`crate::TestApi::kas`] holds of a control
//! plane it started.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::TestApiError;

/// A kas control plane this process started, on an address it holds the lock of.
pub(crate) struct KasParts {
    pub(crate) script: PathBuf,
    pub(crate) ip: Ipv4Addr,
    pub(crate) _lock: std::fs::File,
    /// [`crate::service_ca::publish`], aborted on drop.
    pub(crate) publisher: Option<tokio::task::JoinHandle<()>>,
    /// kas's state directory (`DIR` of its script), once `kas up` named it.
    pub(crate) state: Option<PathBuf>,
}

/// kas's components, in the order its `down` stops them.
const COMPONENTS: [&str; 4] = [
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
];

impl KasParts {
    /// Stops the control plane and wipes its data. A test's API is thrown away with its data, so
    /// its components are killed first (kas's own `down` gives kube-apiserver a graceful
    /// shutdown of about 5 s, and the control plane about 9 s in all, at the end of every test
    /// that used it); `down` then finds them gone and wipes the data.
    pub(crate) fn down(&self) {
        if let Some(state) = &self.state {
            kill_components(&state.join("run"));
        }
        let _ = std::process::Command::new(&self.script)
            .args(["down", "--ip", &self.ip.to_string(), "--wipe"])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// SIGKILLs each component whose pid file in `run` names a live process of that component (a
/// pid the system gave to another program since is left alone), and waits up to 2 s for each
/// to be dead (gone, or a zombie: its sockets are closed; who reaps it is not ours to wait for).
fn kill_components(run: &Path) {
    for name in COMPONENTS {
        let Some(pid) = std::fs::read_to_string(run.join(format!("{name}.pid")))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let is_component = std::fs::read(proc_dir.join("cmdline")).is_ok_and(|c| {
            c.split(|b| *b == 0)
                .next()
                .is_some_and(|argv0| argv0.ends_with(name.as_bytes()))
        });
        if !is_component {
            continue;
        }
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while is_running(&proc_dir) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Whether the process of `/proc/<pid>` still runs: its state (the field after the command's
/// closing parenthesis in `stat`) is neither zombie nor dead.
fn is_running(proc_dir: &Path) -> bool {
    let Ok(stat) = std::fs::read_to_string(proc_dir.join("stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X' | 'x'))
}

impl Drop for KasParts {
    fn drop(&mut self) {
        if let Some(p) = self.publisher.take() {
            p.abort();
        }
        self.down();
    }
}

/// Which parts of the kas control plane to run besides kube-apiserver.
#[derive(Clone, Debug, Default)]
pub struct KasOptions {
    pub controller_manager: bool,
    pub scheduler: bool,
    /// Extra kube-apiserver flags (kas's `KAS_APISERVER_ARGS`), e.g. an audit log.
    pub apiserver_args: Vec<String>,
}

/// Where the kas script is: `$KAS`, else `shared/kas/kas` beside the repository.
pub fn kas_script() -> Option<PathBuf> {
    let path = std::env::var_os("KAS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/kas/kas"),
        PathBuf::from,
    );
    path.is_file().then_some(path)
}

/// The kas binaries (`kube-apiserver`, `kube-controller-manager`, `kube-scheduler`, `kubectl`),
/// unpacked once into a directory shared by every test on this machine (`<tmp>/kube-testapi-kas/
/// bin`, each file written whole under a lock); `None` where kas is not there.
pub fn kas_binaries() -> Result<Option<PathBuf>, TestApiError> {
    let Some(script) = kas_script() else {
        return Ok(None);
    };
    let io = |what: String| move |e| TestApiError::Io(what, e);
    let packed = script.parent().map(|d| d.join("bin")).unwrap_or_default();
    let dir = std::env::temp_dir().join("kube-testapi-kas");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(io(format!("creating {}", bin.display())))?;
    let lock_path = dir.join("unpack.lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(io(format!("creating {}", lock_path.display())))?;
    lock.lock()
        .map_err(io(format!("locking {}", lock_path.display())))?;
    for name in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
    ] {
        let xz = packed.join(format!("{name}.xz"));
        let target = bin.join(name);
        let fresh = match (std::fs::metadata(&xz), std::fs::metadata(&target)) {
            (Ok(x), Ok(t)) => t.modified().ok() >= x.modified().ok(),
            _ => false,
        };
        if !fresh {
            unpack(&xz, &target)?;
        }
    }
    Ok(Some(bin))
}

/// `xz -dc <xz> > <target>`, executable, renamed into place.
fn unpack(xz: &Path, target: &Path) -> Result<(), TestApiError> {
    let tmp = target.with_extension("unpacking");
    let out = std::fs::File::create(&tmp)
        .map_err(|e| TestApiError::Io(format!("creating {}", tmp.display()), e))?;
    let status = std::process::Command::new("xz")
        .arg("-dc")
        .arg(xz)
        .stdout(out)
        .status()
        .map_err(|e| TestApiError::Io(format!("running xz -dc {}", xz.display()), e))?;
    if !status.success() {
        return Err(TestApiError::Kas(
            format!("xz -dc {}", xz.display()),
            status.to_string(),
        ));
    }
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| TestApiError::Io(format!("chmod {}", tmp.display()), e))?;
    std::fs::rename(&tmp, target)
        .map_err(|e| TestApiError::Io(format!("placing {}", target.display()), e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_running_process_runs_and_a_reaped_or_zombie_one_does_not() {
        assert!(is_running(Path::new("/proc/self")));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let proc_dir = PathBuf::from(format!("/proc/{}", child.id()));
        // Not yet waited for: once it exits it stays a zombie until reaped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while is_running(&proc_dir) {
            assert!(
                std::time::Instant::now() < deadline,
                "{} still runs: {:?}",
                proc_dir.display(),
                std::fs::read_to_string(proc_dir.join("stat"))
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(proc_dir.exists(), "a zombie keeps its /proc entry");
        child.wait().unwrap();
        assert!(!is_running(&proc_dir));
    }

    #[test]
    fn only_a_live_process_of_the_component_named_in_its_pid_file_is_killed() {
        use std::os::unix::process::CommandExt;
        let run = tempfile::tempdir().unwrap();
        // A live process that is not kube-apiserver, under kube-apiserver's pid file, and one
        // that calls itself etcd (argv[0]) under etcd's.
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut etcd = std::process::Command::new("sleep")
            .arg0("/usr/bin/etcd")
            .arg("30")
            .spawn()
            .unwrap();
        // spawn can return before the child's exec has set its argv (seen under load: state R,
        // empty cmdline), and kill_components judges a process by its argv[0].
        let cmdline = format!("/proc/{}/cmdline", etcd.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !std::fs::read(&cmdline)
            .unwrap()
            .starts_with(b"/usr/bin/etcd\0")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never exec'd: {:?}",
                std::fs::read(&cmdline)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::write(
            run.path().join("kube-apiserver.pid"),
            other.id().to_string(),
        )
        .unwrap();
        std::fs::write(run.path().join("etcd.pid"), format!("{}\n", etcd.id())).unwrap();
        std::fs::write(run.path().join("kube-scheduler.pid"), "not a pid").unwrap();
        kill_components(run.path());
        // kill_components waits at most 2 s for the signal to land; on a loaded machine the
        // child may take longer to be reaped, so this waits on the exit itself, with a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut status = etcd.try_wait().unwrap();
        while status.is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            status = etcd.try_wait().unwrap();
        }
        if status.is_none() {
            etcd.kill().unwrap();
        }
        assert!(
            status.is_some_and(|s| std::os::unix::process::ExitStatusExt::signal(&s) == Some(9)),
            "etcd was not killed: {status:?}"
        );
        assert!(
            other.try_wait().unwrap().is_none(),
            "a process that is not the component was killed"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
