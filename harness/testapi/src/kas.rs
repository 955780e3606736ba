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
}

impl KasParts {
    pub(crate) fn down(&self) {
        let _ = std::process::Command::new(&self.script)
            .args(["down", "--ip", &self.ip.to_string(), "--wipe"])
            .stdout(std::process::Stdio::null())
            .status();
    }
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
