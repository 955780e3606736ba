//! Static pods: reading the node's manifest directory and deciding what to run.
//!
//! The stand-in polls the directory (bounded latency = the poll interval) and reads every
//! candidate file on each poll; a change of content (including a new file renamed into
//! place over an old one) changes the file's hash. Dot files and files not ending in
//! `.yaml`, `.yml` or `.json` are ignored (installers write dot-prefixed temp files and
//! rename them). A file that does not parse counts as absent, as in the kubelet.
//!
//! I/O is only in [`scan_dir`]; [`desired_pods`] and [`diff`] are pure.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

/// Why the manifest directory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading manifest directory {dir}: {source}")]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {file}: {message}")]
    Parse { file: PathBuf, message: String },
    #[error("{file}: {message}")]
    Invalid { file: PathBuf, message: String },
}

/// Namespace + name of a pod (for static pods: the mirror pod's name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// FNV-1a 64-bit over the bytes, as 16 lowercase hex digits (a change detector, not crypto).
pub fn content_hash(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Whether a directory entry is a manifest candidate.
pub fn is_manifest_name(name: &str) -> bool {
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// Parses one manifest (YAML or JSON) with strict booleans, so `yes`/`on` stay strings.
pub fn parse_manifest(file: &Path, text: &str) -> Result<Pod, ManifestError> {
    let options = serde_saphyr::options! { strict_booleans: true };
    let pod: Pod =
        serde_saphyr::from_str_with_options(text, options).map_err(|e| ManifestError::Parse {
            file: file.to_path_buf(),
            message: e.to_string(),
        })?;
    if pod.metadata.name.as_deref().unwrap_or("").is_empty() {
        return Err(ManifestError::Invalid {
            file: file.to_path_buf(),
            message: "metadata.name is empty".into(),
        });
    }
    if pod.spec.as_ref().is_none_or(|s| s.containers.is_empty()) {
        return Err(ManifestError::Invalid {
            file: file.to_path_buf(),
            message: "spec.containers is empty".into(),
        });
    }
    Ok(pod)
}

/// A manifest file as read from disk.
#[derive(Debug, Clone)]
pub struct ScannedFile {
    pub path: PathBuf,
    pub text: String,
}

/// Reads every manifest candidate in `dir`, sorted by file name. A missing directory is empty.
pub fn scan_dir(dir: &Path) -> Result<Vec<ScannedFile>, ManifestError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ManifestError::ReadDir {
                dir: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_manifest_name(&name) {
            continue;
        }
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        // A file can vanish between listing and reading (rename over it): skip it this round.
        if let Ok(text) = std::fs::read_to_string(&path) {
            files.push(ScannedFile { path, text });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// A static pod the node should run.
#[derive(Debug, Clone)]
pub struct StaticPod {
    pub key: PodKey,
    pub hash: String,
    pub file: PathBuf,
    /// The pod as the mirror pod will show it (name `<name>-<node>`, defaults applied).
    pub pod: Pod,
}

/// Turns scanned files into the set of static pods (pure). Files that don't parse and later
/// duplicates of a pod name are reported in the second element and otherwise ignored.
pub fn desired_pods(
    node: &str,
    files: &[ScannedFile],
) -> (BTreeMap<PodKey, StaticPod>, Vec<ManifestError>) {
    let mut pods = BTreeMap::new();
    let mut errors = Vec::new();
    for f in files {
        let mut pod = match parse_manifest(&f.path, &f.text) {
            Ok(p) => p,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let hash = content_hash(&[node.as_bytes(), f.text.as_bytes()]);
        let base = pod.metadata.name.clone().unwrap_or_default();
        let name = format!("{base}-{node}");
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        pod.metadata.name = Some(name.clone());
        pod.metadata.namespace = Some(namespace.clone());
        pod.metadata.uid = Some(hash.clone());
        let ann = pod
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        ann.insert("kubernetes.io/config.hash".into(), hash.clone());
        ann.insert("kubernetes.io/config.mirror".into(), hash.clone());
        ann.insert("kubernetes.io/config.source".into(), "file".into());
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = Some(node.to_string());
            spec.host_network = Some(true);
            spec.restart_policy.get_or_insert_with(|| "Always".into());
        }
        pod.status = None;
        let key = PodKey { namespace, name };
        if pods.contains_key(&key) {
            errors.push(ManifestError::Invalid {
                file: f.path.clone(),
                message: format!("duplicate static pod {key}, ignored"),
            });
            continue;
        }
        pods.insert(
            key.clone(),
            StaticPod {
                key,
                hash,
                file: f.path.clone(),
                pod,
            },
        );
    }
    (pods, errors)
}

/// What to do to go from the running set (key → hash) to the desired set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Start(PodKey),
    /// Content changed: stop the old pod, start the new one.
    Restart(PodKey),
    Stop(PodKey),
}

/// Pure diff of running vs desired static pods.
pub fn diff(
    running: &BTreeMap<PodKey, String>,
    desired: &BTreeMap<PodKey, StaticPod>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for (key, hash) in running {
        match desired.get(key) {
            None => changes.push(Change::Stop(key.clone())),
            Some(d) if &d.hash != hash => changes.push(Change::Restart(key.clone())),
            Some(_) => {}
        }
    }
    for key in desired.keys() {
        if !running.contains_key(key) {
            changes.push(Change::Start(key.clone()));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: openshift-etcd
spec:
  containers:
  - name: etcd
    image: quay.io/coreos/etcd:v3.4
    env:
    - name: FLAG
      value: yes
    - name: OTHER
      value: on
"#;

    fn file(name: &str, text: &str) -> ScannedFile {
        ScannedFile {
            path: PathBuf::from(format!("/m/{name}")),
            text: text.into(),
        }
    }

    #[test]
    fn names_filter() {
        assert!(is_manifest_name("etcd-pod.yaml"));
        assert!(is_manifest_name("x.json"));
        assert!(!is_manifest_name(".etcd-pod.yaml.tmp"));
        assert!(!is_manifest_name(".etcd-pod.yaml"));
        assert!(!is_manifest_name("etcd-pod.yaml.bak"));
        assert!(!is_manifest_name("README"));
    }

    #[test]
    fn parse_keeps_yes_on_as_strings_and_sets_mirror_fields() {
        let (pods, errs) = desired_pods("n1", &[file("etcd.yaml", POD)]);
        assert!(errs.is_empty(), "{errs:?}");
        let p = pods.values().next().unwrap();
        assert_eq!(p.key.to_string(), "openshift-etcd/etcd-n1");
        let env = p.pod.spec.as_ref().unwrap().containers[0]
            .env
            .clone()
            .unwrap();
        assert_eq!(env[0].value.as_deref(), Some("yes"));
        assert_eq!(env[1].value.as_deref(), Some("on"));
        let ann = p.pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann["kubernetes.io/config.mirror"], p.hash);
        assert_eq!(ann["kubernetes.io/config.source"], "file");
        assert_eq!(
            p.pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some("n1")
        );
    }

    #[test]
    fn diff_starts_restarts_and_stops() {
        let (d1, _) = desired_pods("n1", &[file("etcd.yaml", POD)]);
        let running: BTreeMap<_, _> = d1
            .values()
            .map(|p| (p.key.clone(), p.hash.clone()))
            .collect();
        assert!(diff(&running, &d1).is_empty());
        let (d2, _) = desired_pods("n1", &[file("etcd.yaml", &POD.replace("v3.4", "v3.5"))]);
        assert!(matches!(diff(&running, &d2)[..], [Change::Restart(_)]));
        let (d3, errs) = desired_pods("n1", &[file("etcd.yaml", "not: [valid")]);
        assert_eq!(errs.len(), 1);
        assert!(matches!(diff(&running, &d3)[..], [Change::Stop(_)]));
        assert!(matches!(
            diff(&BTreeMap::new(), &d1)[..],
            [Change::Start(_)]
        ));
        // Same pod name in two files: the first (by file name) wins.
        let (d4, errs) = desired_pods("n1", &[file("a.yaml", POD), file("b.yaml", POD)]);
        assert_eq!(d4.len(), 1);
        assert_eq!(errs.len(), 1);
    }
}
