//! A kubeconfig pointing at the stand-in (plain HTTP, no credentials), so binaries can be run
//! with `KUBECONFIG=<file>`. Written as JSON, which every kubeconfig reader accepts (YAML is a
//! superset of JSON), atomically (temp file + rename).

use std::path::Path;

use serde_json::{Value, json};

use crate::error::StandInError;

/// The kubeconfig document for a server URL and default namespace.
pub fn document(server: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "apiserver-standin", "cluster": {"server": server}}],
        "users": [{"name": "apiserver-standin", "user": {}}],
        "contexts": [{"name": "apiserver-standin",
            "context": {"cluster": "apiserver-standin", "user": "apiserver-standin", "namespace": namespace}}],
        "current-context": "apiserver-standin",
        "preferences": {},
    })
}

/// Writes the kubeconfig to `path`.
pub fn write(path: &Path, server: &str, namespace: &str) -> Result<(), StandInError> {
    let err = |source| StandInError::Kubeconfig {
        path: path.display().to_string(),
        source,
    };
    let text = serde_json::to_string_pretty(&document(server, namespace)).unwrap_or_default();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "kubeconfig".to_string());
    let tmp = path.with_file_name(format!(".{file_name}.tmp"));
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn kube_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        write(&path, "http://127.0.0.9:1234", "default").unwrap();
        let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("apiserver-standin"));
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("http://127.0.0.9:1234")
        );
    }
}
