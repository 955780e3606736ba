//! Locating the project's own binaries (`etcd-verify`, `etcd-installer`, `etcd-operator`): next
//! to the running executable (cargo puts all of a workspace's binaries in one target dir), or in
//! `ETCD_STATIC_OPERATOR_BIN_DIR`.

use std::path::PathBuf;

/// Directory holding the project's binaries.
pub fn bin_dir() -> std::io::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("ETCD_STATIC_OPERATOR_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the executable has no parent dir",
        )
    })?;
    // Test executables live in target/<profile>/deps; binaries one level up.
    Ok(if dir.ends_with("deps") {
        dir.parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.to_owned())
    } else {
        dir.to_owned()
    })
}

/// Path of one of the project's binaries, checked to exist.
pub fn binary(name: &str) -> std::io::Result<PathBuf> {
    let path = bin_dir()?.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} not found: build it with `cargo build --bins`",
                path.display()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    /// Every binary of the workspace, as an admin or a platform runs it.
    const BINARIES: [&str; 7] = [
        "etcd-operator",
        "etcd-installer",
        "etcd-verify",
        "etcd-recover",
        "kubelet-standin",
        "apiserver-standin",
        "sandbox",
    ];

    /// What `--version` must name: the commit this checkout is on (what `build/git-revision.rs`
    /// read when the binaries were built from it), or the revision a source-archive build was
    /// given; `unknown` outside a git checkout.
    fn expected_revision() -> String {
        if let Ok(r) = std::env::var("ETCD_STATIC_OPERATOR_REVISION") {
            return r.trim().to_owned();
        }
        match std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
        {
            Ok(out) if out.status.success() => {
                String::from_utf8(out.stdout).unwrap().trim().to_owned()
            }
            other => {
                eprintln!("not a git checkout ({other:?}): the binaries must say `unknown`");
                "unknown".to_owned()
            }
        }
    }

    #[test]
    fn every_binary_names_its_version_and_git_revision() {
        let want_revision = expected_revision();
        for name in BINARIES {
            let path = super::binary(name).expect("the workspace's binaries are built");
            let out = std::process::Command::new(&path)
                .arg("--version")
                .output()
                .expect("running --version");
            let text = String::from_utf8_lossy(&out.stdout);
            let want = format!("{name} {} (git {want_revision})", env!("CARGO_PKG_VERSION"));
            assert!(out.status.success(), "{name} --version: {out:?}");
            assert_eq!(
                text.trim(),
                want,
                "{} --version (rebuild the binaries at this commit)",
                path.display()
            );
        }
    }
}
