//! Where backups live: a directory (on a control-plane node) or an S3-compatible bucket, behind
//! one interface ([`Store`]) over the `object_store` crate.
//!
//! Every write lands whole or not at all: a directory gets a staging file renamed into place
//! (a full disk leaves no partial snapshot behind, the staging file is removed), a bucket gets a
//! multipart upload that only becomes an object when it completes. Reads into a file go to a
//! temporary name beside it first. A backup is three objects named by [`BackupName`]: the
//! snapshot, its record (`<snapshot>.json`, as `etcd-recover` expects beside a file) and the
//! static-pod resources of the revision it was taken under.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::buffered::BufWriter;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The prefix every backup's name starts with.
pub const BACKUP_PREFIX: &str = "etcd-backup-";

/// Where backups go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// A directory of the machine this runs on.
    Local { dir: PathBuf },
    /// An S3-compatible bucket.
    S3(S3Config),
}

/// An S3-compatible bucket and how to reach it.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// `https://…` (or `http://…`, e.g. a server on loopback).
    pub endpoint: String,
    pub bucket: String,
    /// Objects go below this prefix (no leading or trailing `/` needed).
    pub prefix: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

/// What went wrong with a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{store}: {reason}")]
    Config { store: String, reason: String },
    #[error("{store}: {action} {object}: {source}")]
    Object {
        store: String,
        action: &'static str,
        object: String,
        source: Box<object_store::Error>,
    },
    #[error("{path}: {action}: {source}")]
    File {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
}

/// One object below the store's prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    /// Its name relative to the prefix.
    pub name: String,
    pub size: u64,
}

/// A backup's name, `etcd-backup-<UTC stamp YYYYMMDDTHHMMSSZ>`: names sort as their times do.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackupName(String);

impl BackupName {
    /// The backup taken at `stamp` (`YYYYMMDDTHHMMSSZ`).
    pub fn new(stamp: &str) -> Result<Self, String> {
        let ok = stamp.len() == 16
            && stamp.bytes().enumerate().all(|(i, b)| match i {
                8 => b == b'T',
                15 => b == b'Z',
                _ => b.is_ascii_digit(),
            });
        if ok {
            Ok(Self(format!("{BACKUP_PREFIX}{stamp}")))
        } else {
            Err(format!("{stamp:?} is not a UTC stamp YYYYMMDDTHHMMSSZ"))
        }
    }

    /// The backup an object belongs to, if it is one of a backup's objects.
    pub fn of_object(name: &str) -> Option<Self> {
        let rest = name.strip_prefix(BACKUP_PREFIX)?;
        let stamp = rest.get(..16)?;
        let tail = rest.get(16..)?;
        if [".db", ".db.json", ".resources.json"].contains(&tail) {
            Self::new(stamp).ok()
        } else {
            None
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The stamp part, `YYYYMMDDTHHMMSSZ`.
    pub fn stamp(&self) -> &str {
        self.0.get(BACKUP_PREFIX.len()..).unwrap_or_default()
    }

    pub fn snapshot(&self) -> String {
        format!("{}.db", self.0)
    }

    /// The record, named as `etcd-recover` looks for it beside a snapshot file.
    pub fn record(&self) -> String {
        format!("{}.db.json", self.0)
    }

    pub fn resources(&self) -> String {
        format!("{}.resources.json", self.0)
    }
}

impl std::fmt::Display for BackupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A backup as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBackup {
    pub name: BackupName,
    /// Snapshot size; `None` when the snapshot object is missing.
    pub snapshot_size: Option<u64>,
    pub has_record: bool,
    pub has_resources: bool,
}

/// Groups a listing into backups, oldest first; objects of no backup are left out.
pub fn backups(objects: &[StoredObject]) -> Vec<StoredBackup> {
    let mut by_name: std::collections::BTreeMap<BackupName, StoredBackup> = Default::default();
    for o in objects {
        let Some(name) = BackupName::of_object(&o.name) else {
            continue;
        };
        let b = by_name.entry(name.clone()).or_insert_with(|| StoredBackup {
            name: name.clone(),
            snapshot_size: None,
            has_record: false,
            has_resources: false,
        });
        if o.name == name.snapshot() {
            b.snapshot_size = Some(o.size);
        } else if o.name == name.record() {
            b.has_record = true;
        } else {
            b.has_resources = true;
        }
    }
    by_name.into_values().collect()
}

/// `s3://bucket/key…` split into bucket and key.
pub fn parse_s3_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{url:?} is not an s3://bucket/key URL"))?;
    match rest.split_once('/') {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() && !key.ends_with('/') => {
            Ok((bucket.to_owned(), key.to_owned()))
        }
        _ => Err(format!(
            "{url:?} does not name an object: expected s3://bucket/key"
        )),
    }
}

/// A destination opened for reading and writing.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    describe: String,
}

impl Store {
    /// Opens `destination` (a directory is created if missing). Nothing is contacted yet.
    pub fn open(destination: &Destination) -> Result<Self, StoreError> {
        match destination {
            Destination::Local { dir } => {
                let describe = format!("directory {}", dir.display());
                crate::file::private_dir(dir).map_err(|source| StoreError::File {
                    path: dir.clone(),
                    action: "creating the backup directory (owner only, 0700)",
                    source,
                })?;
                let fs = LocalFileSystem::new_with_prefix(dir).map_err(|e| StoreError::Config {
                    store: describe.clone(),
                    reason: e.to_string(),
                })?;
                Ok(Self {
                    inner: Arc::new(fs),
                    prefix: ObjectPath::default(),
                    describe,
                })
            }
            Destination::S3(c) => {
                let prefix = c.prefix.trim_matches('/');
                let describe = if prefix.is_empty() {
                    format!("s3://{} at {}", c.bucket, c.endpoint)
                } else {
                    format!("s3://{}/{prefix} at {}", c.bucket, c.endpoint)
                };
                let config = |reason: String| StoreError::Config {
                    store: describe.clone(),
                    reason,
                };
                let endpoint = url::Url::parse(&c.endpoint)
                    .map_err(|e| config(format!("endpoint {:?}: {e}", c.endpoint)))?;
                if !matches!(endpoint.scheme(), "http" | "https") {
                    return Err(config(format!(
                        "endpoint {:?} is neither http:// nor https://",
                        c.endpoint
                    )));
                }
                if c.bucket.is_empty() {
                    return Err(config("no bucket named".into()));
                }
                if c.access_key_id.is_empty() || c.secret_access_key.is_empty() {
                    return Err(config("the access key id or secret is empty".into()));
                }
                // reqwest is built without a crypto provider of its own (see the workspace
                // manifest): the process default must be ring's, installed once.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let s3 = AmazonS3Builder::new()
                    .with_endpoint(c.endpoint.trim_end_matches('/'))
                    .with_allow_http(endpoint.scheme() == "http")
                    .with_virtual_hosted_style_request(false)
                    .with_bucket_name(&c.bucket)
                    .with_region(&c.region)
                    .with_access_key_id(&c.access_key_id)
                    .with_secret_access_key(&c.secret_access_key)
                    .build()
                    .map_err(|e| config(e.to_string()))?;
                Ok(Self {
                    inner: Arc::new(s3),
                    prefix: ObjectPath::from(prefix),
                    describe,
                })
            }
        }
    }

    /// What it is, for messages: `directory /var/lib/etcd-backup`, `s3://bucket/prefix at …`.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    fn path(&self, object: &str) -> ObjectPath {
        self.prefix.clone().join(object)
    }

    fn err(
        &self,
        action: &'static str,
        object: &str,
    ) -> impl FnOnce(object_store::Error) -> StoreError {
        let store = self.describe.clone();
        let object = object.to_owned();
        move |source| StoreError::Object {
            store,
            action,
            object,
            source: Box::new(source),
        }
    }

    /// Streams `file` into `object`; it exists only once whole. Returns the bytes written.
    pub async fn upload(&self, object: &str, file: &Path) -> Result<u64, StoreError> {
        let ferr = |action: &'static str| {
            let path = file.to_owned();
            move |source| StoreError::File {
                path,
                action,
                source,
            }
        };
        let mut f = tokio::fs::File::open(file).await.map_err(ferr("opening"))?;
        let mut w = BufWriter::with_capacity(Arc::clone(&self.inner), self.path(object), 8 << 20);
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        let written: Result<(), StoreError> = async {
            loop {
                let n = f.read(&mut buf).await.map_err(ferr("reading"))?;
                if n == 0 {
                    return Ok(());
                }
                w.write_all(buf.get(..n).unwrap_or_default())
                    .await
                    .map_err(|source| self.write_error(object, "writing", source))?;
                total += n as u64;
            }
        }
        .await;
        if let Err(e) = written {
            // Nothing partial stays behind (a staging file, an open multipart upload).
            let _ = w.abort().await;
            return Err(e);
        }
        // A failed completion cleans up after itself (and the writer may not be aborted then).
        w.shutdown()
            .await
            .map_err(|source| self.write_error(object, "completing", source))?;
        Ok(total)
    }

    fn write_error(
        &self,
        object: &str,
        action: &'static str,
        source: std::io::Error,
    ) -> StoreError {
        StoreError::File {
            path: PathBuf::from(format!("{} ({object})", self.describe)),
            action,
            source,
        }
    }

    /// Writes `bytes` as `object`, whole or not at all.
    pub async fn put_bytes(&self, object: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.inner
            .put(&self.path(object), PutPayload::from(bytes))
            .await
            .map_err(self.err("writing", object))?;
        Ok(())
    }

    /// Reads `object` whole.
    pub async fn read_bytes(&self, object: &str) -> Result<Vec<u8>, StoreError> {
        let got = self
            .inner
            .get(&self.path(object))
            .await
            .map_err(self.err("reading", object))?;
        let bytes = got.bytes().await.map_err(self.err("reading", object))?;
        Ok(bytes.to_vec())
    }

    /// Streams `object` into the file `to` (through a temporary name beside it).
    pub async fn download(&self, object: &str, to: &Path) -> Result<u64, StoreError> {
        let tmp = to.with_extension("part");
        let ferr = |action: &'static str| {
            let path = tmp.clone();
            move |source| StoreError::File {
                path,
                action,
                source,
            }
        };
        let got = self
            .inner
            .get(&self.path(object))
            .await
            .map_err(self.err("reading", object))?;
        let mut stream = got.into_stream();
        // Owner only: a snapshot holds every key of the cluster.
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .await
            .map_err(ferr("creating"))?;
        let mut total = 0u64;
        let copied: Result<(), StoreError> = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(self.err("reading", object))?;
                f.write_all(&chunk).await.map_err(ferr("writing"))?;
                total += chunk.len() as u64;
            }
            f.sync_all().await.map_err(ferr("syncing"))?;
            Ok(())
        }
        .await;
        if let Err(e) = copied {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e);
        }
        tokio::fs::rename(&tmp, to)
            .await
            .map_err(ferr("renaming into place"))?;
        Ok(total)
    }

    /// Every object below the prefix (not recursing into deeper folders), sorted by name.
    pub async fn list(&self) -> Result<Vec<StoredObject>, StoreError> {
        let listing = self
            .inner
            .list_with_delimiter(Some(&self.prefix))
            .await
            .map_err(self.err("listing", ""))?;
        let mut out: Vec<StoredObject> = listing
            .objects
            .into_iter()
            .filter_map(|m| {
                Some(StoredObject {
                    name: m.location.filename()?.to_owned(),
                    size: m.size,
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Deletes `object` (missing is fine).
    pub async fn delete(&self, object: &str) -> Result<(), StoreError> {
        match self.inner.delete(&self.path(object)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("deleting", object)(e)),
        }
    }

    /// Deletes every object of `backup`, the snapshot last (a half-deleted backup still has
    /// its snapshot and is listed, not silently lost).
    pub async fn delete_backup(&self, backup: &BackupName) -> Result<(), StoreError> {
        self.delete(&backup.resources()).await?;
        self.delete(&backup.record()).await?;
        self.delete(&backup.snapshot()).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "store_tests.rs"]
mod tests;
