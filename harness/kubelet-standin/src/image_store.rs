//! The node's local image store for the runc runtime: OCI image layouts, found by reference or
//! digest, each unpacked once per digest into a root filesystem that containers share read-only.
//!
//! The store is a directory `scripts/build-images` wrote (`--out`): one OCI image layout per
//! image and `images.json` naming each image (`etcd:3.5.16`) with its manifest digest. No
//! registry can be reached here, so the store is what a node has pre-loaded: an image that is
//! not in it behaves like one that cannot be pulled ([`StoreError::NotFound`], which the agent
//! reports as `ErrImagePull`, then `ImagePullBackOff`).
//!
//! A reference matches an image when its repository's last path component equals the stored
//! name's and, with a digest (`...@sha256:...`), the digest equals the stored manifest digest
//! (the tag is then ignored, as a runtime ignores it); without one, the tag (default `latest`)
//! equals the stored tag. So `registry.example/platform/etcd:3.5.16` and
//! `etcd-static-operator/etcd:3.5.16` both find `etcd:3.5.16`, and `etcd:3.5.9` finds nothing.
//!
//! Unpacking runs `umoci raw unpack` (a Debian package, installed by `scripts/install-deps`)
//! into a temporary directory beside the cache entry and renames it into place, so a half
//! unpacked tree is never used and agents sharing one cache need no lock: the first rename wins
//! and the others drop their copy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Why an image could not be found, read or unpacked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("reading image store {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("image store {path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("image {image:?} is not in the node's image store (it has: {available})")]
    NotFound { image: String, available: String },
    #[error("unpacking image {image:?} with umoci failed: {detail}")]
    Unpack { image: String, detail: String },
}

/// What the image's config says about how to run it (OCI image config `config`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ImageConfig {
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub entrypoint: Vec<String>,
    #[serde(default)]
    pub cmd: Vec<String>,
    #[serde(default)]
    pub working_dir: String,
}

/// One image of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredImage {
    /// `etcd` of `etcd:3.5.16`.
    pub name: String,
    pub tag: String,
    /// The manifest digest (`sha256:...`).
    pub digest: String,
    /// The OCI image layout directory.
    pub layout: PathBuf,
    pub config: ImageConfig,
}

impl StoredImage {
    /// `name:tag@digest`, for messages and container status.
    pub fn reference(&self) -> String {
        format!("{}:{}@{}", self.name, self.tag, self.digest)
    }
}

/// A parsed image reference: its repository's last path component, tag and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference<'a> {
    pub name: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

impl<'a> Reference<'a> {
    /// `registry:5000/a/etcd:3.5.16@sha256:..` → `etcd`, `3.5.16`, `sha256:..`.
    pub fn parse(image: &'a str) -> Self {
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, Some(d)),
            None => (image, None),
        };
        let last = rest.rsplit('/').next().unwrap_or(rest);
        let (name, tag) = match last.split_once(':') {
            Some((n, t)) => (n, Some(t)),
            None => (last, None),
        };
        Reference { name, tag, digest }
    }

    fn matches(&self, image: &StoredImage) -> bool {
        self.name == image.name
            && match self.digest {
                Some(d) => d == image.digest,
                None => self.tag.unwrap_or("latest") == image.tag,
            }
    }
}

/// `images.json` as `scripts/build-images` writes it (only what the store reads).
#[derive(Debug, Deserialize)]
struct ImagesJson {
    images: Vec<ImagesJsonEntry>,
}

#[derive(Debug, Deserialize)]
struct ImagesJsonEntry {
    image: String,
    digest: String,
}

#[derive(Debug, Deserialize)]
struct Descriptor {
    digest: String,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    config: Descriptor,
}

#[derive(Debug, Deserialize)]
struct ConfigBlob {
    #[serde(default)]
    config: ImageConfig,
}

/// The node's images and where their unpacked root filesystems live.
#[derive(Debug, Clone)]
pub struct ImageStore {
    images: Vec<StoredImage>,
    cache: PathBuf,
    umoci: PathBuf,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, StoreError> {
    let bytes = std::fs::read(path).map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| StoreError::Json {
        path: path.to_path_buf(),
        source,
    })
}

fn blob_path(layout: &Path, digest: &str) -> PathBuf {
    let (algo, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
    layout.join("blobs").join(algo).join(hex)
}

impl ImageStore {
    /// Opens the store `dir` (`images.json` and one layout per image, named `name-tag`); the
    /// unpacked root filesystems go under `cache`.
    pub fn open(dir: &Path, cache: &Path, umoci: &Path) -> Result<Self, StoreError> {
        let index: ImagesJson = read_json(&dir.join("images.json"))?;
        let mut images = Vec::new();
        for entry in index.images {
            let (name, tag) = entry
                .image
                .rsplit_once(':')
                .unwrap_or((entry.image.as_str(), "latest"));
            let layout = dir.join(format!("{name}-{tag}"));
            let manifest: Manifest = read_json(&blob_path(&layout, &entry.digest))?;
            let config: ConfigBlob = read_json(&blob_path(&layout, &manifest.config.digest))?;
            images.push(StoredImage {
                name: name.to_owned(),
                tag: tag.to_owned(),
                digest: entry.digest,
                layout,
                config: config.config,
            });
        }
        Ok(ImageStore {
            images,
            cache: cache.to_path_buf(),
            umoci: umoci.to_path_buf(),
        })
    }

    /// The stored images.
    pub fn images(&self) -> &[StoredImage] {
        &self.images
    }

    /// The image `image` names.
    pub fn lookup(&self, image: &str) -> Result<&StoredImage, StoreError> {
        let wanted = Reference::parse(image);
        self.images
            .iter()
            .find(|i| wanted.matches(i))
            .ok_or_else(|| StoreError::NotFound {
                image: image.to_owned(),
                available: self
                    .images
                    .iter()
                    .map(|i| format!("{}:{}", i.name, i.tag))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The image's root filesystem, unpacked on first use.
    pub async fn rootfs(&self, image: &StoredImage) -> Result<PathBuf, StoreError> {
        let hex = image.digest.trim_start_matches("sha256:");
        let dir = self.cache.join(hex);
        if dir.is_dir() {
            return Ok(dir);
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        std::fs::create_dir_all(&self.cache).map_err(io(&self.cache))?;
        let tmp = self
            .cache
            .join(format!(".unpack-{hex}-{}-{}", std::process::id(), unique()));
        let out = tokio::process::Command::new(&self.umoci)
            .args(["raw", "unpack", "--rootless=false", "--image"])
            .arg(format!("{}:{}", image.layout.display(), image.tag))
            .arg(&tmp)
            .output()
            .await;
        let failed = |detail: String| StoreError::Unpack {
            image: image.reference(),
            detail,
        };
        let out = out.map_err(|e| failed(format!("running {}: {e}", self.umoci.display())))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(failed(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        if std::fs::rename(&tmp, &dir).is_err() && dir.is_dir() {
            // Another agent unpacked the same digest first.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(failed(format!("{} did not appear", dir.display())))
        }
    }
}

/// A number unique within this process (temporary directory names).
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The user an image config names: `uid`, `uid:gid`, or a name looked up in the root
/// filesystem's `/etc/passwd` (and a group name in `/etc/group`). Empty means root.
pub fn image_user(user: &str, rootfs: &Path) -> Option<(u32, u32)> {
    if user.is_empty() {
        return Some((0, 0));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    let (uid, primary) = match u.parse::<u32>() {
        Ok(uid) => (uid, id_entry(&passwd, |f| f[2] == u).map(|f| f[3])),
        Err(_) => {
            let f = id_entry(&passwd, |f| f[0] == u)?;
            (f[2].parse().ok()?, Some(f[3]))
        }
    };
    let gid = match g {
        None => primary.and_then(|g| g.parse().ok()).unwrap_or(0),
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => {
                let group = std::fs::read_to_string(rootfs.join("etc/group")).unwrap_or_default();
                id_entry(&group, |f| f[0] == g)?[2].parse().ok()?
            }
        },
    };
    Some((uid, gid))
}

/// The first `/etc/passwd`- or `/etc/group`-style line (at least four fields) `pick` accepts.
fn id_entry(file: &str, pick: impl Fn(&[&str]) -> bool) -> Option<Vec<&str>> {
    file.lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 4 && pick(f))
}

/// The image config's `Env` as pairs (entries without `=` are dropped, as runtimes do).
pub fn image_env(config: &ImageConfig) -> BTreeMap<String, String> {
    config
        .env
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn stored(name: &str, tag: &str, digest: &str) -> StoredImage {
        StoredImage {
            name: name.into(),
            tag: tag.into(),
            digest: digest.into(),
            layout: PathBuf::from("/s"),
            config: ImageConfig::default(),
        }
    }

    fn store() -> ImageStore {
        ImageStore {
            images: vec![
                stored("etcd", "3.5.16", "sha256:aa"),
                stored("etcd-static-operator", "0.1.0", "sha256:bb"),
            ],
            cache: PathBuf::from("/c"),
            umoci: PathBuf::from("umoci"),
        }
    }

    #[test]
    fn references_match_by_last_component_and_tag_or_digest() {
        let s = store();
        for (image, want) in [
            ("etcd-static-operator/etcd:3.5.16", Some("sha256:aa")),
            (
                "registry.example:5000/platform/etcd:3.5.16",
                Some("sha256:aa"),
            ),
            ("etcd-static-operator/etcd:9.9@sha256:aa", Some("sha256:aa")),
            (
                "etcd-static-operator/etcd-static-operator:0.1.0",
                Some("sha256:bb"),
            ),
            ("etcd:3.5.9", None),
            ("etcd", None),
            ("etcd@sha256:bb", None),
            ("other/busybox:1", None),
        ] {
            let got = s.lookup(image).ok().map(|i| i.digest.as_str());
            assert_eq!(got, want, "{image}");
        }
        let err = s.lookup("etcd:3.5.9").unwrap_err().to_string();
        assert!(
            err.contains("etcd:3.5.16, etcd-static-operator:0.1.0"),
            "{err}"
        );
    }

    #[test]
    fn image_users_are_numeric_or_looked_up() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("etc/group"),
            "root:x:0:\nnonroot:x:65532:\n",
        )
        .unwrap();
        let r = dir.path();
        assert_eq!(image_user("", r), Some((0, 0)));
        assert_eq!(image_user("65532:65532", r), Some((65532, 65532)));
        assert_eq!(image_user("65532", r), Some((65532, 65532)));
        assert_eq!(image_user("1000", r), Some((1000, 0)));
        assert_eq!(image_user("nonroot", r), Some((65532, 65532)));
        assert_eq!(image_user("nonroot:root", r), Some((65532, 0)));
        assert_eq!(image_user("nobody", r), None);
    }
}
