//! Reading static-pod manifests (pure): which node a manifest is for and which revision it
//! declares.
//!
//! A manifest names its node in `spec.nodeName` (when set) and in the `ETCD_NAME` env var of its
//! containers (the static-pod env contract: `ETCD_NAME` = node name). It declares its revision in
//! the `revision` label or annotation and in `ETCD_STATIC_POD_REVISION`.

use k8s_openapi::api::core::v1::{Container, Pod};

/// The env var that carries the revision in the etcd static pod.
pub const REVISION_ENV: &str = "ETCD_STATIC_POD_REVISION";
/// The env var that carries the member (= node) name.
pub const NAME_ENV: &str = "ETCD_NAME";
/// The label and annotation key that carries the revision.
pub const REVISION_KEY: &str = "revision";

/// What is wrong with a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestProblem {
    #[error("not valid UTF-8")]
    NotUtf8,
    #[error("not a valid Pod: {0}")]
    Parse(String),
    #[error("kind is {0:?}, not Pod")]
    NotAPod(String),
    #[error("it is for another node: {field} is {found:?}, this node is {node:?}")]
    ForeignNode {
        field: String,
        found: String,
        node: String,
    },
    #[error("it declares revision {found:?} in {field}, but this is revision {expected}")]
    RevisionMismatch {
        field: String,
        found: String,
        expected: u64,
    },
}

/// Parses a manifest (YAML or JSON) with strict booleans.
pub fn parse(bytes: &[u8]) -> Result<Pod, ManifestProblem> {
    let text = std::str::from_utf8(bytes).map_err(|_| ManifestProblem::NotUtf8)?;
    let options = serde_saphyr::options! { strict_booleans: true };
    let value: serde_json::Value = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| ManifestProblem::Parse(e.to_string()))?;
    if let Some(kind) = value.get("kind").and_then(|k| k.as_str())
        && kind != "Pod"
    {
        return Err(ManifestProblem::NotAPod(kind.to_owned()));
    }
    serde_json::from_value(value).map_err(|e| ManifestProblem::Parse(e.to_string()))
}

fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    })
}

/// Every literal value of env var `name` in the pod's containers, with where it was found.
fn env_values<'a>(pod: &'a Pod, name: &'a str) -> impl Iterator<Item = (String, &'a str)> + 'a {
    containers(pod).flat_map(move |c| {
        c.env
            .iter()
            .flatten()
            .filter(move |e| e.name == name)
            .filter_map(move |e| {
                e.value
                    .as_deref()
                    .map(|v| (format!("container {} env {name}", c.name), v))
            })
    })
}

/// Every place the manifest declares its revision, with the raw value.
fn revision_fields(pod: &Pod) -> Vec<(String, String)> {
    let mut found = Vec::new();
    if let Some(v) = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_KEY))
    {
        found.push((format!("label {REVISION_KEY}"), v.clone()));
    }
    if let Some(v) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION_KEY))
    {
        found.push((format!("annotation {REVISION_KEY}"), v.clone()));
    }
    found.extend(env_values(pod, REVISION_ENV).map(|(f, v)| (f, v.to_owned())));
    found
}

/// Checks a manifest about to be installed: it parses as a Pod, names no other node, and any
/// revision it declares is `revision`.
pub fn check_new(bytes: &[u8], node: &str, revision: u64) -> Result<(), ManifestProblem> {
    let pod = parse(bytes)?;
    let spec_node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .map(|n| ("spec.nodeName".to_owned(), n));
    for (field, found) in spec_node.into_iter().chain(env_values(&pod, NAME_ENV)) {
        if found != node {
            return Err(ManifestProblem::ForeignNode {
                field,
                found: found.to_owned(),
                node: node.to_owned(),
            });
        }
    }
    for (field, found) in revision_fields(&pod) {
        if found.parse::<u64>().ok() != Some(revision) {
            return Err(ManifestProblem::RevisionMismatch {
                field,
                found,
                expected: revision,
            });
        }
    }
    Ok(())
}

/// The revision an installed manifest declares (the highest, if it declares several); `None`
/// when it does not parse or declares none.
pub fn installed_revision(bytes: &[u8]) -> Option<u64> {
    let pod = parse(bytes).ok()?;
    revision_fields(&pod)
        .into_iter()
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: etcd
  labels: {revision: "4"}
spec:
  initContainers:
  - name: verify
    image: etcd-verify
    env: [{name: ETCD_NAME, value: n1}]
  containers:
  - name: etcd
    image: etcd
    env:
    - {name: ETCD_NAME, value: n1}
    - {name: ETCD_STATIC_POD_REVISION, value: "4"}
    - {name: FLAG, value: yes}
"#;

    #[test]
    fn accepts_its_own_manifest() {
        assert_eq!(check_new(POD.as_bytes(), "n1", 4), Ok(()));
        assert_eq!(installed_revision(POD.as_bytes()), Some(4));
    }

    #[test]
    fn refuses_another_nodes_manifest() {
        let err = check_new(POD.as_bytes(), "n2", 4).unwrap_err();
        assert!(matches!(err, ManifestProblem::ForeignNode { .. }), "{err}");
        let pinned = POD.replace("spec:\n", "spec:\n  nodeName: n9\n");
        let err = check_new(pinned.as_bytes(), "n1", 4).unwrap_err();
        assert_eq!(
            err,
            ManifestProblem::ForeignNode {
                field: "spec.nodeName".into(),
                found: "n9".into(),
                node: "n1".into()
            }
        );
        let init_only = POD.replacen("value: n1}", "value: n7}", 1);
        assert!(matches!(
            check_new(init_only.as_bytes(), "n1", 4),
            Err(ManifestProblem::ForeignNode { .. })
        ));
    }

    #[test]
    fn refuses_a_revision_mismatch_and_garbage() {
        assert!(matches!(
            check_new(POD.as_bytes(), "n1", 5),
            Err(ManifestProblem::RevisionMismatch { .. })
        ));
        assert!(matches!(
            check_new(b"kind: ConfigMap\n", "n1", 5),
            Err(ManifestProblem::NotAPod(_))
        ));
        assert!(matches!(
            check_new(b"{{{", "n1", 5),
            Err(ManifestProblem::Parse(_))
        ));
        assert!(matches!(
            check_new(&[0xff, 0xfe], "n1", 5),
            Err(ManifestProblem::NotUtf8)
        ));
        assert_eq!(installed_revision(b"{{{"), None);
    }

    #[test]
    fn a_manifest_without_node_or_revision_is_accepted() {
        let bare = "kind: Pod\nmetadata: {name: etcd}\nspec: {containers: [{name: etcd}]}\n";
        assert_eq!(check_new(bare.as_bytes(), "n1", 1), Ok(()));
        assert_eq!(installed_revision(bare.as_bytes()), None);
    }
}
