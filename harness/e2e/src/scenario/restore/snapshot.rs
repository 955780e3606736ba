//! The etcd tools the restore scenarios run outside the operator: `etcdctl snapshot save` with
//! the operator's client certificate, `etcdutl snapshot status`, a throwaway cluster's snapshot,
//! and `etcd-recover from-snapshot` on inputs it must refuse.

use std::path::{Path, PathBuf};

use etcd_fixture::{ClusterSpec, EtcdCluster};
use kubelet_standin::images::DEFAULT_ETCD_BUILD;

use super::{ETCDCTL_DEADLINE, NODES, RECOVER_DEADLINE, TARGET, failed};
use crate::controlplane::{ControlPlaneError, OPERATOR_NS};
use crate::scenario::harness::Harness;
use crate::scenario::runbook::{RECORD_DIR, Ran, Untouched, etcd_recover, run};

/// Client TLS files for `etcdctl`.
pub(super) struct Tls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Tls {
    fn args(&self) -> [String; 3] {
        [
            format!("--cacert={}", self.ca.display()),
            format!("--cert={}", self.cert.display()),
            format!("--key={}", self.key.display()),
        ]
    }
}

/// The operator's client certificate (as `h.etcd()` uses it) written to files in `dir`.
pub(super) async fn write_tls(h: &Harness, dir: &Path) -> Result<Tls, ControlPlaneError> {
    let pem = crate::scenario::load::operator_tls(&h.cp.client(), OPERATOR_NS)
        .await
        .map_err(|e| failed(format!("the operator's client certificate: {e}")))?;
    let write = |name: &str, bytes: &[u8]| -> Result<PathBuf, ControlPlaneError> {
        let path = dir.join(name);
        std::fs::write(&path, bytes)
            .map_err(|e| failed(format!("writing {}: {e}", path.display())))?;
        Ok(path)
    };
    Ok(Tls {
        ca: write("ca.crt", &pem.ca)?,
        cert: write("client.crt", &pem.cert)?,
        key: write("client.key", &pem.key)?,
    })
}

/// `tool` (`etcdctl`, `etcdutl`) of the default etcd build with `args`; fails unless it exits 0.
async fn etcd_tool(tool: &str, args: &[&str]) -> Result<Ran, ControlPlaneError> {
    let binary = Path::new(DEFAULT_ETCD_BUILD.dir).join(tool);
    let ran = run(
        ETCDCTL_DEADLINE,
        &binary,
        args,
        &[("ETCDCTL_API", "3".to_owned())],
    )
    .await?;
    if ran.code != Some(0) {
        return Err(failed(format!(
            "{} {} exited {:?}:\n{}",
            binary.display(),
            args.join(" "),
            ran.code,
            ran.said()
        )));
    }
    Ok(ran)
}

/// `etcdctl snapshot save` from `endpoint` into `file`.
pub(super) async fn save_snapshot(
    endpoint: &str,
    tls: Option<&Tls>,
    file: &Path,
) -> Result<Ran, ControlPlaneError> {
    let mut args: Vec<String> = vec![
        format!("--endpoints={endpoint}"),
        "--command-timeout=30s".into(),
    ];
    if let Some(t) = tls {
        args.extend(t.args());
    }
    args.extend(["snapshot".into(), "save".into(), file.display().to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    etcd_tool("etcdctl", &refs).await
}

/// The store revision of the snapshot `file` (`etcdutl snapshot status -w json`).
pub(super) async fn snapshot_revision(file: &Path) -> Result<i64, ControlPlaneError> {
    let path = file.display().to_string();
    let ran = etcd_tool("etcdutl", &["snapshot", "status", &path, "-w", "json"]).await?;
    let json: serde_json::Value = serde_json::from_str(ran.stdout.trim()).map_err(|e| {
        failed(format!(
            "etcdutl snapshot status {path}: not JSON ({e}):\n{}",
            ran.said()
        ))
    })?;
    json.get("revision")
        .and_then(serde_json::Value::as_i64)
        .ok_or_else(|| {
            failed(format!(
                "etcdutl snapshot status {path}: no revision in {json}"
            ))
        })
}

/// `etcd-recover from-snapshot <snapshot>` on [`TARGET`] (`snapshot`: a file or an `s3://`
/// URL; `env`: the bucket's settings). No `--accept-revisions-going-back`: the image's
/// `etcdutl` bumps the revision.
pub(super) async fn from_snapshot(
    h: &Harness,
    snapshot: &str,
    env: &[(&'static str, String)],
) -> Result<Ran, ControlPlaneError> {
    // Every other node's data is gone and its etcd-verify keeps etcd down: the admin confirms
    // them down (#65: recovery refuses a voter that neither answers nor is named).
    let down = super::super::runbook::confirm_down_but(&NODES, TARGET);
    etcd_recover(
        RECOVER_DEADLINE,
        &h.cp.node(TARGET)?.root,
        &["from-snapshot", snapshot, "--confirm-down", &down],
        env,
    )
    .await
}

/// Runs `from-snapshot` on a snapshot it must not restore: exit `code`, output naming `says`,
/// nothing changed on [`TARGET`].
pub(super) async fn must_refuse(
    h: &mut Harness,
    what: &str,
    snapshot: &Path,
    code: i32,
    says: &str,
) -> Result<(), ControlPlaneError> {
    let node = h.cp.node(TARGET)?;
    let before = Untouched::take(&node.root, &node.manifest_dir())?;
    let ran = from_snapshot(h, &snapshot.display().to_string(), &[]).await?;
    let reason = before.refused(
        &format!("etcd-recover from-snapshot ({what}) on {TARGET}"),
        &ran,
        code,
        says,
        Vec::new(),
    )?;
    h.step(format!(
        "etcd-recover from-snapshot ({what}) on {TARGET}: exit {code} in {:.1}s, manifest byte-identical, no {RECORD_DIR}: {reason}",
        ran.took.as_secs_f64()
    ));
    Ok(())
}

/// A snapshot of a throwaway one-member etcd (another cluster), saved into `file`.
pub(super) async fn other_cluster_snapshot(file: &Path) -> Result<String, ControlPlaneError> {
    let other = EtcdCluster::start(ClusterSpec::plain(1).with_token("restore-other-cluster"))
        .await
        .map_err(|e| failed(format!("starting a throwaway etcd: {e}")))?;
    let client = other
        .client()
        .map_err(|e| failed(format!("a client of the throwaway etcd: {e}")))?;
    client
        .put("/other-cluster", b"not this cluster's".to_vec())
        .await
        .map_err(|e| failed(format!("writing to the throwaway etcd: {e}")))?;
    let url = other
        .client_url("n1")
        .map_err(|e| failed(format!("the throwaway etcd's URL: {e}")))?;
    let id = other
        .member_id("n1")
        .map_err(|e| failed(format!("the throwaway etcd's member id: {e}")))?;
    save_snapshot(&url.to_string(), None, file).await?;
    Ok(format!("member {id} at {url}"))
}

/// The value after `key ` on the first line of `text` that holds it (`store revision 123,` ->
/// `123`).
pub(super) fn figure_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(key)? + key.len();
    text.get(at..)?
        .split(|c: char| c.is_whitespace() || c == ',' || c == ')')
        .find(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::figure_after;

    #[test]
    fn figures_from_etcd_recover_output() {
        let out = "snapshot: 123 bytes, sha256 ab (integrity hash checked; no record beside it), store revision 4567, raft index 89, members n1 (1)\nrestored: n1 is a one-member cluster (member 8e9e05c52164694d) at raft index 5.";
        assert_eq!(figure_after(out, "store revision "), Some("4567"));
        assert_eq!(
            figure_after(out, "one-member cluster (member "),
            Some("8e9e05c52164694d")
        );
        assert_eq!(figure_after(out, "absent "), None);
    }
}
