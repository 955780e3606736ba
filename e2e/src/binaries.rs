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
