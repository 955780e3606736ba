//! This node's private keys, checked before the gate asks etcd anything: the key the revision
//! names (`ETCDCTL_KEY`, this member's peer key) must be readable by its owner only, and the
//! directory it lies in must hold no other member's key (a node holds only its own identity;
//! the installer lays down only this node's keys, so another member's key there means the
//! revision was laid down by something else, or by an installer from before that rule). Either
//! is a block naming the file; nothing else is read.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::config::VerifyConfig;

/// Checks the revision's key files (see the module docs).
pub fn check(config: &VerifyConfig) -> Result<(), String> {
    let Some(tls) = &config.tls else {
        return Ok(());
    };
    let others: Vec<String> = config
        .initial_cluster
        .iter()
        .map(|(name, _)| name.to_string())
        .filter(|n| *n != config.name)
        .collect();
    check_key(&tls.key, &config.name, &others)
}

/// Checks `key` (this member's, named `…-<own>.key`) and its directory.
pub fn check_key(key: &Path, own: &str, others: &[String]) -> Result<(), String> {
    let meta = std::fs::metadata(key).map_err(|e| format!("ETCDCTL_KEY {}: {e}", key.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "ETCDCTL_KEY {}: mode {mode:04o} lets others read this node's private key; it must be 0600",
            key.display()
        ));
    }
    let Some(dir) = key.parent() else {
        return Ok(());
    };
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let own_suffix = format!("-{own}.key");
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".key") && !n.ends_with(&own_suffix))
        .collect();
    names.sort();
    for name in names {
        if let Some(member) = others.iter().find(|m| name.ends_with(&format!("-{m}.key"))) {
            return Err(format!(
                "{}: another member's private key ({member}) lies beside this node's: a node holds only its own keys; refusing to start on this revision",
                dir.join(&name).display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, mode: u32) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, b"-----BEGIN PRIVATE KEY-----").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn own_keys_only_and_owner_readable() {
        let d = tempfile::tempdir().unwrap();
        let key = file(d.path(), "etcd-peer-n1.key", 0o600);
        file(d.path(), "etcd-serving-n1.key", 0o600);
        file(d.path(), "etcd-peer-n2.crt", 0o600);
        let others = ["n2".to_owned(), "x-n1".to_owned()];
        assert_eq!(check_key(&key, "n1", &others), Ok(()));

        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = check_key(&key, "n1", &others).unwrap_err();
        assert!(e.contains("mode 0644") && e.contains("must be 0600"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

        file(d.path(), "etcd-peer-n2.key", 0o600);
        let e = check_key(&key, "n1", &others).unwrap_err();
        assert!(e.contains("etcd-peer-n2.key") && e.contains("(n2)"), "{e}");
    }

    #[test]
    fn a_hyphenated_neighbour_is_told_apart() {
        let d = tempfile::tempdir().unwrap();
        let key = file(d.path(), "etcd-peer-x-n1.key", 0o600);
        // Node x-n1: n1's key beside it is foreign; its own never is.
        assert_eq!(check_key(&key, "x-n1", &["n1".to_owned()]), Ok(()));
        file(d.path(), "etcd-peer-n1.key", 0o600);
        let e = check_key(&key, "x-n1", &["n1".to_owned()]).unwrap_err();
        assert!(e.contains("etcd-peer-n1.key"), "{e}");
    }
}
