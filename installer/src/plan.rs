//! Pure planning: from the fetched ConfigMaps and Secrets of one revision, the exact tree of
//! directories and files (relative path, bytes, mode) to lay down, and the manifest to install.
//! No I/O here; every refusal that depends only on the revision's content happens here, before
//! the node is touched.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::keys;
use crate::manifest::{self, ManifestProblem};

/// Mode of every directory the installer creates.
pub const DIR_MODE: u32 = 0o755;
/// Mode of ConfigMap files and of the manifest.
pub const FILE_MODE: u32 = 0o644;
/// Mode of Secret files.
pub const SECRET_MODE: u32 = 0o600;

/// Which kind of object a resource came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    /// The sub-directory of the revision directory holding this kind.
    pub fn dir(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }

    /// Mode of the files of this kind.
    pub fn file_mode(self) -> u32 {
        match self {
            Kind::ConfigMap => FILE_MODE,
            Kind::Secret => SECRET_MODE,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        })
    }
}

/// One fetched ConfigMap or Secret of the revision, named without its `-<revision>` suffix,
/// with its data decoded to bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub kind: Kind,
    pub name: String,
    pub data: BTreeMap<String, Vec<u8>>,
}

/// What the installer was asked to install, with the resources that were found (missing
/// optional ones are simply absent).
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub node: &'a str,
    pub revision: u64,
    /// The pod / ConfigMap prefix (`etcd-pod`).
    pub pod: &'a str,
    pub resources: &'a [Resource],
    /// `--own-key-prefixes` (see [`crate::keys`]).
    pub own_key_prefixes: &'a [String],
}

/// One file to write, relative to the revision directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// Its directory, relative to the revision directory (empty for the root).
    pub dir: PathBuf,
    /// Its file name (a checked key).
    pub name: String,
    pub bytes: Vec<u8>,
    pub mode: u32,
}

impl PlannedFile {
    /// Its path relative to the revision directory.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }
}

/// The complete content of one revision directory plus the manifest to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// `etcd-pod-<revision>`.
    pub dir_name: String,
    /// Directories below the revision directory, parents before children (all [`DIR_MODE`]).
    pub dirs: Vec<PathBuf>,
    /// Files below the revision directory.
    pub files: Vec<PlannedFile>,
    /// `etcd-pod.yaml`: the manifest's file name, in the manifest dir and in the revision dir.
    pub manifest_name: String,
    /// This node's manifest, byte for byte as the ConfigMap holds it.
    pub manifest: Vec<u8>,
}

/// What is wrong with a data key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyProblem {
    Empty,
    PathSeparator,
    DotDot,
    LeadingDot,
    Nul,
    TooLong,
}

impl std::fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyProblem::Empty => "is empty",
            KeyProblem::PathSeparator => "contains a path separator",
            KeyProblem::DotDot => "contains '..'",
            KeyProblem::LeadingDot => "starts with a dot (hidden files are the installer's own)",
            KeyProblem::Nul => "contains a NUL byte",
            KeyProblem::TooLong => "is longer than 253 bytes",
        })
    }
}

/// Why a revision cannot be installed on this node (permanent: the content must change).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{kind} {name}-{revision}: key {key:?} {problem}")]
    HostileKey {
        kind: Kind,
        name: String,
        revision: u64,
        key: String,
        problem: KeyProblem,
    },
    #[error("configmap {configmap} has no key {key:?} for this node (keys: {available})")]
    NoManifestForNode {
        configmap: String,
        key: String,
        available: String,
    },
    #[error("configmap {configmap} was not fetched; it holds the manifests")]
    NoPodConfigMap { configmap: String },
    #[error("{configmap} key {key:?}: {problem}")]
    Manifest {
        configmap: String,
        key: String,
        problem: ManifestProblem,
    },
    #[error(
        "the manifest for this node names {secret}/{key}, another node's private key (a node gets only its own keys): refusing the revision"
    )]
    ForeignKey { secret: String, key: String },
    #[error("{kind} {name} is listed twice")]
    Duplicate { kind: Kind, name: String },
}

impl PlanError {
    /// A short static category, for the termination message and events.
    pub fn category(&self) -> &'static str {
        match self {
            PlanError::HostileKey { .. } => "HostileKey",
            PlanError::NoManifestForNode { .. } | PlanError::NoPodConfigMap { .. } => {
                "NoManifestForNode"
            }
            PlanError::Manifest {
                problem: ManifestProblem::ForeignNode { .. },
                ..
            } => "ManifestForAnotherNode",
            PlanError::Manifest { .. } => "InvalidManifest",
            PlanError::Duplicate { .. } => "Duplicate",
            PlanError::ForeignKey { .. } => "ForeignKey",
        }
    }
}

/// Checks that a ConfigMap or Secret key is a plain file name the installer may create.
///
/// Stricter than Kubernetes on purpose: besides separators and `.`/`..`, any `..` and any
/// leading dot is refused, because dot-prefixed names are the installer's own temp and staging
/// files (and the kubelet ignores them).
pub fn check_key(key: &str) -> Result<(), KeyProblem> {
    if key.is_empty() {
        Err(KeyProblem::Empty)
    } else if key.contains('/') || key.contains('\\') {
        Err(KeyProblem::PathSeparator)
    } else if key.contains('\0') {
        Err(KeyProblem::Nul)
    } else if key.contains("..") {
        Err(KeyProblem::DotDot)
    } else if key.starts_with('.') {
        Err(KeyProblem::LeadingDot)
    } else if key.len() > 253 {
        Err(KeyProblem::TooLong)
    } else {
        Ok(())
    }
}

/// The manifest key of `node` in the pod ConfigMap.
pub fn manifest_key(node: &str) -> String {
    format!("pod-{node}.yaml")
}

/// `etcd-pod-<revision>`.
pub fn revision_dir_name(pod: &str, revision: u64) -> String {
    format!("{pod}-{revision}")
}

/// The revision of a complete revision directory's name (`etcd-pod-7` → 7); `None` for anything
/// else, dot-prefixed staging directories included.
pub fn parse_revision_dir_name(pod: &str, name: &str) -> Option<u64> {
    let digits = name.strip_prefix(pod)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The name the revision directory is built under before it is renamed into place.
pub fn staging_dir_name(pod: &str, revision: u64) -> String {
    format!(".{pod}-{revision}.staging")
}

/// The name an older copy of the revision directory is moved to while being replaced.
pub fn old_dir_name(pod: &str, revision: u64) -> String {
    format!(".{pod}-{revision}.old")
}

/// Whether a resource-dir entry is leftover work of an earlier (crashed) run: a staging or old
/// directory of any revision. Never a revision directory (those have no leading dot).
pub fn is_leftover_work(pod: &str, name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|rest| rest.strip_prefix(pod))
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|rest| rest.ends_with(".staging") || rest.ends_with(".old"))
}

/// The lock file in the resource dir.
pub fn lock_file_name(pod: &str) -> String {
    format!(".{pod}-installer.lock")
}

/// The highest installed revision: the highest complete revision directory, or the revision the
/// current manifest declares, whichever is higher.
pub fn installed_revision<'a>(
    pod: &str,
    entry_dirs: impl IntoIterator<Item = &'a str>,
    manifest_revision: Option<u64>,
) -> Option<u64> {
    entry_dirs
        .into_iter()
        .filter_map(|name| parse_revision_dir_name(pod, name))
        .chain(manifest_revision)
        .max()
}

/// Computes the revision directory's content and the manifest for this node, refusing hostile
/// keys and a manifest that is missing or names another node.
pub fn plan(input: &PlanInput<'_>) -> Result<Plan, PlanError> {
    check_resources(input)?;
    let manifest = node_manifest(input)?;
    let manifest_name = format!("{}.yaml", input.pod);
    let ResourceFiles {
        dirs,
        mut files,
        withheld,
    } = resource_files(input);
    if let Some((secret, key)) = keys::named_in(&manifest, &withheld) {
        return Err(PlanError::ForeignKey {
            secret: secret.clone(),
            key: key.clone(),
        });
    }
    files.push(PlannedFile {
        dir: PathBuf::new(),
        name: manifest_name.clone(),
        bytes: manifest.clone(),
        mode: FILE_MODE,
    });
    Ok(Plan {
        dir_name: revision_dir_name(input.pod, input.revision),
        dirs,
        files,
        manifest_name,
        manifest,
    })
}

/// Refuses a resource listed twice and any key that is not a plain file name.
fn check_resources(input: &PlanInput<'_>) -> Result<(), PlanError> {
    let mut seen = std::collections::BTreeSet::new();
    for res in input.resources {
        if !seen.insert((res.kind.dir(), res.name.as_str())) {
            return Err(PlanError::Duplicate {
                kind: res.kind,
                name: res.name.clone(),
            });
        }
        for key in res.data.keys() {
            check_key(key).map_err(|problem| PlanError::HostileKey {
                kind: res.kind,
                name: res.name.clone(),
                revision: input.revision,
                key: key.clone(),
                problem,
            })?;
        }
    }
    Ok(())
}

/// This node's manifest from the pod ConfigMap, checked to be a new manifest for this node.
fn node_manifest(input: &PlanInput<'_>) -> Result<Vec<u8>, PlanError> {
    let pod_cm_name = format!("{}-{}", input.pod, input.revision);
    let pod_cm = input
        .resources
        .iter()
        .find(|r| r.kind == Kind::ConfigMap && r.name == input.pod)
        .ok_or_else(|| PlanError::NoPodConfigMap {
            configmap: pod_cm_name.clone(),
        })?;
    let key = manifest_key(input.node);
    let manifest = pod_cm
        .data
        .get(&key)
        .ok_or_else(|| PlanError::NoManifestForNode {
            configmap: pod_cm_name.clone(),
            key: key.clone(),
            available: pod_cm.data.keys().cloned().collect::<Vec<_>>().join(","),
        })?
        .clone();
    manifest::check_new(&manifest, input.node, input.revision).map_err(|problem| {
        PlanError::Manifest {
            configmap: pod_cm_name.clone(),
            key: key.clone(),
            problem,
        }
    })?;
    Ok(manifest)
}

/// The directories and files the resources lay down, and the Secret keys withheld from them.
struct ResourceFiles {
    dirs: Vec<PathBuf>,
    files: Vec<PlannedFile>,
    /// (Secret name, key) of other nodes' private keys.
    withheld: Vec<(String, String)>,
}

/// Lays the resources out by kind (ConfigMaps, then Secrets), withholding other nodes' keys.
fn resource_files(input: &PlanInput<'_>) -> ResourceFiles {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let mut withheld = Vec::new();
    for kind in [Kind::ConfigMap, Kind::Secret] {
        dirs.push(PathBuf::from(kind.dir()));
        for res in input.resources.iter().filter(|r| r.kind == kind) {
            let dir = PathBuf::from(kind.dir()).join(&res.name);
            for (key, bytes) in &res.data {
                if kind == Kind::Secret
                    && keys::scope(input.own_key_prefixes, input.node, key) == keys::Scope::Withheld
                {
                    withheld.push((res.name.clone(), key.clone()));
                    continue;
                }
                files.push(PlannedFile {
                    dir: dir.clone(),
                    name: key.clone(),
                    bytes: bytes.clone(),
                    mode: kind.file_mode(),
                });
            }
            dirs.push(dir);
        }
    }
    ResourceFiles {
        dirs,
        files,
        withheld,
    }
}

/// One entry of a directory tree as found on disk (symlinks are not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeEntry {
    Dir { mode: u32 },
    File { mode: u32, bytes: Vec<u8> },
    Other,
}

/// A directory tree: paths relative to its root (the root itself is `""`).
pub type Tree = BTreeMap<PathBuf, TreeEntry>;

impl Plan {
    /// The tree this plan lays down, root included.
    pub fn tree(&self) -> Tree {
        let mut tree = Tree::new();
        tree.insert(PathBuf::new(), TreeEntry::Dir { mode: DIR_MODE });
        for d in &self.dirs {
            tree.insert(d.clone(), TreeEntry::Dir { mode: DIR_MODE });
        }
        for f in &self.files {
            tree.insert(
                f.path(),
                TreeEntry::File {
                    mode: f.mode,
                    bytes: f.bytes.clone(),
                },
            );
        }
        tree
    }

    /// Whether an existing revision directory is exactly this plan (same entries, bytes, modes).
    pub fn matches(&self, existing: &Tree) -> bool {
        &self.tree() == existing
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
