//! The build script of every binary package (`build = "../build/git-revision.rs"` in its
//! `Cargo.toml`, one `../` more under `harness/`): sets `GIT_REVISION` for `--version`. The
//! revision is, first of all, `ETCD_STATIC_OPERATOR_REVISION` when set (a build from a source
//! archive, which has no `.git`); else the checkout's `git rev-parse --short=12 HEAD` (the commit
//! the build started from: edits not committed are not marked); else `unknown`. It reruns only
//! when HEAD moves or that variable changes, so the binaries of one commit are the same whatever
//! was built before.

use std::path::Path;
use std::process::Command;

const OVERRIDE: &str = "ETCD_STATIC_OPERATOR_REVISION";

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    out.status.success().then(|| text.trim().to_owned())
}

/// The files whose change means HEAD moved: HEAD itself, the branch it names and packed refs.
fn watch_head() {
    let (Some(dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let mut files = vec![
        Path::new(&dir).join("HEAD"),
        Path::new(&common).join("packed-refs"),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        files.push(Path::new(&common).join(branch));
    }
    // Only files that exist: cargo counts a missing one as changed on every build (a clone
    // whose refs are all loose has no packed-refs), which would relink every binary each time.
    // A ref that moves into packed-refs later removes its loose file, which cargo notices.
    for f in files.into_iter().filter(|f| f.exists()) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed={OVERRIDE}");
    let revision = match std::env::var(OVERRIDE) {
        Ok(r) if !r.trim().is_empty() => r.trim().to_owned(),
        _ => {
            watch_head();
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=GIT_REVISION={revision}");
}
