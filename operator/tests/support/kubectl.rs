//! `kubectl kustomize` for the manifest tests: kubectl on PATH, or the kas control plane's
//! (xz-compressed in `../shared/kas/bin`, as `scripts/test` finds it, or beside `$KAS`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A kubectl binary; the kas one is unpacked into `dir`. `None` when neither exists.
pub fn kubectl(dir: &Path) -> Option<PathBuf> {
    if let Some(k) = on_path("kubectl") {
        return Some(k);
    }
    let kas_dir = std::env::var_os("KAS")
        .map(PathBuf::from)
        .and_then(|k| k.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kas"));
    let xz = kas_dir.join("bin/kubectl.xz");
    let out = Command::new("xz").arg("-dc").arg(&xz).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let path = dir.join("kubectl");
    std::fs::write(&path, out.stdout).ok()?;
    let mut perms = std::fs::metadata(&path).ok()?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).ok()?;
    Some(path)
}

/// `kubectl kustomize <kustomization>`'s output, or why it failed. `None` (said loudly) when no
/// kubectl can be found.
pub fn kustomize(kustomization: &Path, scratch: &Path) -> Option<Result<String, String>> {
    let Some(kubectl) = kubectl(scratch) else {
        eprintln!("SKIPPED: no kubectl on PATH and no ../shared/kas/bin/kubectl.xz");
        return None;
    };
    let out = match Command::new(&kubectl)
        .arg("kustomize")
        .arg(kustomization)
        .output()
    {
        Ok(out) => out,
        Err(e) => return Some(Err(format!("{}: {e}", kubectl.display()))),
    };
    Some(if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kubectl kustomize {}: {}",
            kustomization.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}
