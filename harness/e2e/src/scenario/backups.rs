//! The backup half of `restore-from-backup`: the operator's scheduled backups, first to the
//! local directory, then to an S3 bucket of a real S3 server (Garage on loopback), with the bad
//! inputs an admin makes on the way (no credentials Secret, a wrong secret key), each a named
//! `status.backup.lastFailure`; every good backup verified by restore.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_fixture::garage::Garage;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, OPERATOR_NS};

const BACKUP_DEADLINE: Duration = Duration::from_secs(120);
/// Fires once a year: only the first backup and requests run during the scenario.
const SCHEDULE: &str = "0 0 1 1 *";
const BUCKET: &str = "etcd-backups";
const PREFIX: &str = "sandbox";
const SECRET: &str = "backup-s3";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// The S3 server; stops when dropped.
#[derive(Debug)]
pub struct S3Server(#[allow(dead_code)] Garage);

/// A good backup as the status names it.
struct Seen {
    name: String,
    revision: i64,
}

/// What the restore gets.
pub struct Taken {
    /// `s3://bucket/prefix/<backup>.db`.
    pub url: String,
    /// The local backup's snapshot (for the bad-input copies).
    pub local: PathBuf,
    /// The S3 backup's store revision.
    pub revision: i64,
    pub env: Vec<(&'static str, String)>,
    pub server: S3Server,
}

async fn set_secret(h: &Harness, id: &str, key: &str) -> Result<(), ControlPlaneError> {
    let api: Api<Secret> = Api::namespaced(h.cp.client(), OPERATOR_NS);
    let body = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": OPERATOR_NS},
        "stringData": {"accessKeyId": id, "secretAccessKey": key},
    });
    let exists = api
        .get_opt(SECRET)
        .await
        .map_err(|e| failed(format!("reading Secret {SECRET}: {e}")))?
        .is_some();
    if exists {
        api.patch(SECRET, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|e| failed(format!("updating Secret {SECRET}: {e}")))?;
    } else {
        let secret: Secret =
            serde_json::from_value(body).map_err(|e| failed(format!("Secret {SECRET}: {e}")))?;
        api.create(&PostParams::default(), &secret)
            .await
            .map_err(|e| failed(format!("creating Secret {SECRET}: {e}")))?;
    }
    Ok(())
}

/// Waits for a new failure of `reason` whose message holds `says`.
async fn failure(
    h: &mut Harness,
    what: &str,
    reason: &str,
    says: &str,
) -> Result<(), ControlPlaneError> {
    let seen = h
        .status()
        .await
        .backup
        .and_then(|b| b.last_failure)
        .map(|f| f.time + &f.name);
    let s = h
        .wait_status(
            &format!("status.backup.lastFailure: {reason} ({what})"),
            BACKUP_DEADLINE,
            |s| {
                s.backup
                    .as_ref()
                    .and_then(|b| b.last_failure.as_ref())
                    .is_some_and(|f| {
                        Some(f.time.clone() + &f.name) != seen
                            && f.reason == reason
                            && f.message.contains(says)
                    })
            },
        )
        .await?;
    let f = s.backup.and_then(|b| b.last_failure).unwrap_or_default();
    h.step(format!(
        "{what}: backup {} failed, reason {}: {}",
        f.name, f.reason, f.message
    ));
    Ok(())
}

/// Waits for a good backup other than `previous`; its record.
async fn success(
    h: &mut Harness,
    what: &str,
    previous: Option<&str>,
    destination: &str,
) -> Result<Seen, ControlPlaneError> {
    let s = h
        .wait_status(
            &format!("a good, verified backup {what}"),
            BACKUP_DEADLINE,
            |s| {
                s.backup.as_ref().is_some_and(|b| {
                    b.last_success.as_ref().is_some_and(|g| {
                        Some(g.name.as_str()) != previous
                            && g.destination.starts_with(destination)
                            && b.last_verified.as_ref().is_some_and(|v| v.name == g.name)
                    })
                })
            },
        )
        .await?;
    let b = s.backup.unwrap_or_default();
    let good = b.last_success.unwrap_or_default();
    let verified = b.last_verified.unwrap_or_default();
    h.step(format!(
        "backup {} {what}: from {} at revision {}, {} bytes in {} ms, into {}; verified: {}; stored: {}",
        good.name,
        good.source_member,
        good.revision,
        good.size_bytes,
        good.duration_ms,
        good.destination,
        verified.message,
        b.stored.join(", ")
    ));
    Ok(Seen {
        name: good.name,
        revision: good.revision,
    })
}

pub async fn take_backups(h: &mut Harness, dir: &Path) -> Result<Taken, ControlPlaneError> {
    // Local: the default destination.
    h.patch_spec(serde_json::json!({"backup": {
        "schedule": SCHEDULE, "retention": {"count": 3}, "verify": true,
    }}))
    .await?;
    h.step(format!(
        "spec.backup: schedule {SCHEDULE:?}, keep 3, verify; destination the operator's backup dir"
    ));
    let local = success(h, "to the local directory", None, "directory").await?;
    let file = h.cp.backup_dir().join(format!("{}.db", local.name));
    if !file.is_file() || !file.with_extension("db.json").is_file() {
        return Err(failed(format!(
            "{} or its record is missing",
            file.display()
        )));
    }

    // S3: a real server on loopback.
    let garage = Garage::start(&dir.join("garage"))
        .await
        .map_err(|e| failed(format!("starting Garage: {e}")))?;
    garage
        .create_bucket(BUCKET)
        .await
        .map_err(|e| failed(format!("creating bucket {BUCKET}: {e}")))?;
    let key = garage
        .create_key("etcd-operator")
        .await
        .map_err(|e| failed(format!("creating a key: {e}")))?;
    garage
        .allow(BUCKET, &key.access_key_id)
        .await
        .map_err(|e| failed(format!("allowing the key on {BUCKET}: {e}")))?;
    h.step(format!(
        "Garage serves S3 at {} (bucket {BUCKET}, key {})",
        garage.endpoint(),
        key.access_key_id
    ));
    h.patch_spec(
        serde_json::json!({"backup": {"request": "s3-without-secret", "s3": {
            "endpoint": garage.endpoint(), "bucket": BUCKET, "prefix": PREFIX,
            "region": garage.region(), "credentialsSecret": SECRET,
        }}}),
    )
    .await?;
    failure(h, "no credentials Secret", "Credentials", "not found").await?;
    set_secret(h, &key.access_key_id, "0000wrong0000").await?;
    h.patch_spec(serde_json::json!({"backup": {"request": "s3-wrong-secret"}}))
        .await?;
    failure(h, "a wrong secret key", "Destination", BUCKET).await?;
    set_secret(h, &key.access_key_id, &key.secret_access_key).await?;
    h.patch_spec(serde_json::json!({"backup": {"request": "s3-good"}}))
        .await?;
    let s3 = success(h, "to S3", Some(&local.name), "s3://").await?;
    Ok(Taken {
        url: format!("s3://{BUCKET}/{PREFIX}/{}.db", s3.name),
        local: file,
        revision: s3.revision,
        env: vec![
            ("AWS_ENDPOINT_URL", garage.endpoint()),
            ("AWS_REGION", garage.region().to_owned()),
            ("AWS_ACCESS_KEY_ID", key.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", key.secret_access_key),
        ],
        server: S3Server(garage),
    })
}

/// The `backups` scenario: [`take_backups`] alone.
pub async fn backups(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let dir = h.cp.path().join("backups-scenario");
    std::fs::create_dir_all(&dir)
        .map_err(|e| failed(format!("creating {}: {e}", dir.display())))?;
    let taken = take_backups(h, &dir).await?;
    h.step(format!(
        "the S3 backup {} at revision {} is the one a restore would take",
        taken.url, taken.revision
    ));
    defrag_after_backup(h).await
}

/// `t` rounded up to a whole second: status times are whole seconds rounded down, so a time
/// recorded at or after this was taken at or after `t`.
fn ceil_second(t: time::OffsetDateTime) -> time::OffsetDateTime {
    let floor = t.replace_nanosecond(0).unwrap_or(t);
    if floor == t {
        t
    } else {
        floor + time::Duration::SECOND
    }
}

/// When the first defragmentation for `request` started, from `status.defragmentation`.
fn first_defrag(
    s: &etcd_operator::api::EtcdClusterStatus,
    request: &str,
) -> Option<time::OffsetDateTime> {
    use etcd_operator::certs::parse_time;
    s.defragmentation.as_ref().and_then(|d| {
        d.members
            .iter()
            .chain(d.in_progress.iter())
            .filter(|r| r.request == request)
            .filter_map(|r| parse_time(&r.start_time))
            .min()
    })
}

/// A defragmentation request with backups configured: one good backup taken after the request
/// comes first, then the defragmentation (issue 31, item 5).
async fn defrag_after_backup(h: &mut Harness) -> Result<(), ControlPlaneError> {
    use etcd_operator::certs::{format_time, parse_time};
    const REQUEST: &str = "preop-1";
    let before: Vec<String> = h
        .status()
        .await
        .backup
        .map(|b| b.stored)
        .unwrap_or_default();
    let asked = time::OffsetDateTime::now_utc();
    // `takenAt` has whole seconds: only one at or after this second proves "after the request".
    let after = ceil_second(asked);
    h.patch_spec(serde_json::json!({"defragmentation": {"request": REQUEST}}))
        .await?;
    h.step(format!(
        "spec.defragmentation.request {REQUEST} at {asked} (a backup taken at or after {} counts)",
        format_time(after)
    ));
    let s = h
        .wait_status(
            &format!("a defragmentation for {REQUEST} after a backup taken for it"),
            BACKUP_DEADLINE,
            |s| {
                let taken = s
                    .backup
                    .as_ref()
                    .and_then(|b| b.last_success.as_ref())
                    .and_then(|g| parse_time(&g.taken_at));
                taken.is_some_and(|t| t >= after) && first_defrag(s, REQUEST).is_some()
            },
        )
        .await?;
    let b = s.backup.clone().unwrap_or_default();
    let good = b.last_success.clone().unwrap_or_default();
    let taken = parse_time(&good.taken_at);
    let first = first_defrag(&s, REQUEST);
    let verified = b
        .last_verified
        .as_ref()
        .is_some_and(|v| v.name == good.name);
    let new: Vec<&String> = b.stored.iter().filter(|n| !before.contains(n)).collect();
    match (taken, first) {
        (Some(t), Some(f)) if verified && t >= after && f >= t && new.len() == 1 => {
            h.step(format!(
                "backup {} taken {} (after the request), verified, the only one taken for it; the defragmentation started {}",
                good.name,
                good.taken_at,
                format_time(f)
            ));
        }
        _ => {
            return Err(failed(format!(
                "the defragmentation did not wait for one verified backup taken after the request: backup {} taken {:?}, verified {verified}, defragmentation started {first:?}, backups stored since the request {new:?} (before: {before:?}, after: {:?})",
                good.name, good.taken_at, b.stored
            )));
        }
    }
    // The request done on every voter, its need is cleared.
    h.wait_status(
        &format!("{REQUEST} handled and status.backup.preOperation empty"),
        BACKUP_DEADLINE,
        |s| {
            s.defragmentation
                .as_ref()
                .is_some_and(|d| d.handled_request == REQUEST)
                && s.backup
                    .as_ref()
                    .is_some_and(|b| b.pre_operation.is_empty())
        },
    )
    .await?;
    Ok(())
}
