//! One backup, off the pass: marker, snapshot, checks, store, verification, record, retention
//! (the order and why in [`super`]'s docs).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_snapshot::file::{Record, Verified};
use etcd_snapshot::store::{self, BackupName, Destination, Store};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use membership::{EtcdClient, MemberUrl};
use time::OffsetDateTime;

use super::{FailReason, Failure, Kept, Source};
use crate::api::{Backup, BackupRecord, BackupVerification};
use crate::certs::format_time;
use crate::context::BackupPaths;

/// The key written just before every snapshot; its value is the backup's name.
pub const MARKER_KEY: &str = "/etcd.static-operator.io/backup-marker";
/// How long the source member may take to apply the marker.
const APPLY_LIMIT: Duration = Duration::from_secs(10);

/// What the run needs, prepared by the pass.
#[derive(Debug)]
pub struct Inputs {
    pub destination: Destination,
    pub source: Source,
    pub client: Arc<EtcdClient>,
    /// `<id hex>=<name>` of every member.
    pub members: Vec<String>,
    pub cluster_id: String,
    pub etcd_version: String,
    /// The etcd image of the cluster (which restore tool verification uses).
    pub image: String,
    /// `spec.etcdImageVersion`: the image's version when its tag names none.
    pub image_version: String,
    /// The static-pod resources of the current revision, as stored beside the snapshot.
    pub resources: serde_json::Value,
    pub paths: BackupPaths,
}

/// A good backup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Good {
    pub record: BackupRecord,
    pub verified: Option<BackupVerification>,
}

/// How a run ended, and the backups the destination holds after its retention.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub result: Result<Good, Failure>,
    pub stored: Option<Vec<String>>,
}

impl Outcome {
    pub fn failed(f: Failure) -> Self {
        Self {
            result: Err(f),
            stored: None,
        }
    }
}

/// The static-pod resources of `revision`: its ConfigMaps whole; its Secrets only named (they
/// hold private keys, and no destination is encrypted).
pub fn resources(configmaps: &[ConfigMap], secrets: &[Secret], revision: i64) -> serde_json::Value {
    let suffix = format!("-{revision}");
    let of_revision = |name: &str| name.ends_with(&suffix);
    let maps: BTreeMap<String, BTreeMap<String, String>> = configmaps
        .iter()
        .filter_map(|c| {
            let name = c.metadata.name.clone()?;
            of_revision(&name).then(|| (name, c.data.clone().unwrap_or_default()))
        })
        .collect();
    let left_out: Vec<String> = secrets
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .filter(|n| of_revision(n))
        .collect();
    serde_json::json!({
        "revision": revision,
        "configMaps": maps,
        "secretsLeftOut": left_out,
        "why": "Secrets hold the members' private keys and the destination is not encrypted: they are left out; the CA (Secret etcd-signer in the operator's namespace) must be kept apart",
    })
}

/// Takes the backup `name`.
pub async fn take(name: BackupName, spec: Backup, prepared: Result<Inputs, Failure>) -> Outcome {
    let i = match prepared {
        Ok(i) => i,
        Err(f) => return Outcome::failed(f),
    };
    let store = match Store::open(&i.destination) {
        Ok(s) => s,
        Err(e) => return Outcome::failed(Failure::new(FailReason::Destination, e.to_string())),
    };
    let scratch = i.paths.scratch.join(format!("etcd-operator-{name}"));
    let limit = Duration::from_secs(u64::from(spec.timeout_seconds));
    let result = match tokio::time::timeout(limit, steps(&name, &spec, &i, &store, &scratch)).await
    {
        Ok(r) => r,
        Err(_) => Err(Failure::new(
            FailReason::Timeout,
            format!(
                "not done within spec.backup.timeoutSeconds ({}s)",
                spec.timeout_seconds
            ),
        )),
    };
    let _ = tokio::fs::remove_dir_all(&scratch).await;
    let stored = match retain(&spec, &store).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(backup = %name, "retention: {e}");
            None
        }
    };
    Outcome { result, stored }
}

async fn steps(
    name: &BackupName,
    spec: &Backup,
    i: &Inputs,
    store: &Store,
    scratch: &Path,
) -> Result<Good, Failure> {
    let started = Instant::now();
    let taken_at = OffsetDateTime::now_utc();
    let marker = name.to_string();
    let file = scratch.join(name.snapshot());
    let checked = snapshot(spec, i, scratch, &marker, &file).await?;
    let mut record = new_record(i, &checked, taken_at, &marker);
    let dest = |e: store::StoreError| Failure::new(FailReason::Destination, e.to_string());
    store.upload(&name.snapshot(), &file).await.map_err(dest)?;
    let resources = serde_json::to_vec_pretty(&i.resources).unwrap_or_default();
    store
        .put_bytes(&name.resources(), resources)
        .await
        .map_err(dest)?;
    let verified = if spec.verify {
        Some(verify_restore(name, i, store, scratch, &file, &marker, &mut record).await?)
    } else {
        None
    };
    store_record(store, name, &record).await.map_err(dest)?;
    Ok(Good {
        record: BackupRecord {
            name: name.to_string(),
            destination: store.describe().to_owned(),
            taken_at: record.taken_at,
            revision: record.revision,
            size_bytes: checked.size,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            sha256: checked.sha256,
            source_member: i.source.label(),
        },
        verified,
    })
}

/// Writes the marker, waits until the source applied it, streams its snapshot to `file`, checks it.
async fn snapshot(
    spec: &Backup,
    i: &Inputs,
    scratch: &Path,
    marker: &str,
    file: &Path,
) -> Result<Verified, Failure> {
    let snap = |e: String| Failure::new(FailReason::Snapshot, e);
    let dir = scratch.to_owned();
    tokio::task::spawn_blocking(move || etcd_snapshot::file::private_dir(&dir))
        .await
        .map_err(|e| snap(format!("{}: {e}", scratch.display())))?
        .map_err(|e| snap(format!("{}: {e}", scratch.display())))?;
    let revision = i
        .client
        .put(MARKER_KEY, marker.to_owned().into_bytes())
        .await
        .map_err(|e| snap(format!("writing the marker key {MARKER_KEY}: {e}")))?;
    applied(&i.client, &i.source.url, revision)
        .await
        .map_err(|e| snap(format!("{}: {e}", i.source.name)))?;
    let mut out = tokio::fs::File::create(file)
        .await
        .map_err(|e| snap(format!("{}: {e}", file.display())))?;
    let limit = Duration::from_secs(u64::from(spec.timeout_seconds));
    i.client
        .snapshot_into(&i.source.url, &mut out, limit)
        .await
        .map_err(|e| snap(format!("streaming from {}: {e}", i.source.label())))?;
    out.sync_all()
        .await
        .map_err(|e| snap(format!("{}: {e}", file.display())))?;
    drop(out);
    let file = file.to_owned();
    tokio::task::spawn_blocking(move || etcd_snapshot::file::verify(&file))
        .await
        .map_err(|e| snap(e.to_string()))?
        .map_err(|e| snap(e.to_string()))
}

/// The record of a checked snapshot, not yet verified.
fn new_record(i: &Inputs, checked: &Verified, taken_at: OffsetDateTime, marker: &str) -> Record {
    Record {
        sha256: checked.sha256.clone(),
        revision: checked.contents.revision,
        cluster_id: i.cluster_id.clone(),
        members: i.members.clone(),
        etcd_version: i.etcd_version.clone(),
        taken_at: format_time(taken_at),
        source_member: i.source.label(),
        marker_key: MARKER_KEY.into(),
        marker_value: marker.to_owned(),
        ..Record::default()
    }
}

/// Restores the snapshot and reads the marker back, noting in `record` (stored at once on failure).
async fn verify_restore(
    name: &BackupName,
    i: &Inputs,
    store: &Store,
    scratch: &Path,
    file: &Path,
    marker: &str,
    record: &mut Record,
) -> Result<BackupVerification, Failure> {
    let work = scratch.join("verify");
    let checked = super::verify::restore_and_read(
        &i.paths.etcd_tools,
        &i.image,
        &i.image_version,
        file,
        &work,
        marker,
    )
    .await;
    match checked {
        Ok(message) => {
            record.verified_at = format_time(OffsetDateTime::now_utc());
            record.verification = message.clone();
            Ok(BackupVerification {
                name: name.to_string(),
                time: record.verified_at.clone(),
                message,
            })
        }
        Err(e) => {
            record.verification = format!("verification failed: {e}");
            // Recorded, so an admin can still find it, but never counted as good.
            let _ = store_record(store, name, record).await;
            Err(Failure::new(FailReason::Verification, e))
        }
    }
}

/// Stores the record of the backup `name`.
async fn store_record(
    store: &Store,
    name: &BackupName,
    record: &Record,
) -> Result<(), store::StoreError> {
    store
        .put_bytes(
            &name.record(),
            serde_json::to_vec_pretty(record).unwrap_or_default(),
        )
        .await
}

/// Waits until the member at `url` applied `revision`.
async fn applied(client: &EtcdClient, url: &MemberUrl, revision: i64) -> Result<(), String> {
    let deadline = Instant::now() + APPLY_LIMIT;
    let mut last: String;
    loop {
        match client.status_of(url).await {
            Ok(s) if s.revision >= revision => return Ok(()),
            Ok(s) => last = format!("at revision {}", s.revision),
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            return Err(format!(
                "did not apply the marker (revision {revision}) within {APPLY_LIMIT:?}: last {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Applies retention to what `store` holds; returns the backups kept, oldest first.
async fn retain(spec: &Backup, store: &Store) -> Result<Vec<String>, String> {
    let listed = store.list().await.map_err(|e| e.to_string())?;
    let backups = store::backups(&listed);
    let mut kept = Vec::new();
    let mut good_found = false;
    // Newest first: only as many records are read as it takes to find the newest good one.
    for b in backups.iter().rev() {
        let good = !good_found
            && b.snapshot_size.is_some()
            && b.has_record
            && is_good(spec, store, &b.name).await;
        good_found |= good;
        kept.push(Kept {
            name: b.name.clone(),
            good,
        });
    }
    kept.reverse();
    let delete = super::to_delete(spec, &kept, OffsetDateTime::now_utc());
    for name in &delete {
        store.delete_backup(name).await.map_err(|e| e.to_string())?;
        tracing::info!(backup = %name, "retention deleted backup");
    }
    Ok(kept
        .into_iter()
        .filter(|k| !delete.contains(&k.name))
        .map(|k| k.name.to_string())
        .collect())
}

async fn is_good(spec: &Backup, store: &Store, name: &BackupName) -> bool {
    let Ok(bytes) = store.read_bytes(&name.record()).await else {
        return false;
    };
    let Ok(record) = serde_json::from_slice::<Record>(&bytes) else {
        return false;
    };
    !spec.verify || !record.verified_at.is_empty()
}
