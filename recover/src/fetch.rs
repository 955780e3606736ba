//! `from-snapshot s3://bucket/key`: the snapshot (and its record, `<key>.json`, when the bucket
//! has one) downloaded onto the node before anything is checked, into
//! `/var/lib/etcd-recovery/downloads/` below the node root. The bucket's endpoint and
//! credentials come from the environment, as the AWS tools read them: `AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION` (default `us-east-1`).

use std::path::{Path, PathBuf};

use etcd_snapshot::store::{Destination, S3Config, Store, parse_s3_url};

/// Where downloads go, below the node root.
pub const DOWNLOADS: &str = "var/lib/etcd-recovery/downloads";

/// What went wrong before the snapshot was on the node.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL or the environment is wrong (exit 2).
    #[error("{0}")]
    Invalid(String),
    /// The download failed (exit 3).
    #[error("{0}")]
    Failed(String),
}

/// The S3 settings from `env` (a lookup, so tests need not touch the process environment).
pub fn s3_config(
    url: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(S3Config, String), FetchError> {
    let (bucket, key) = parse_s3_url(url).map_err(FetchError::Invalid)?;
    let need = |name: &str| {
        env(name)
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| FetchError::Invalid(format!("{url}: set {name} (the bucket's endpoint and credentials come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")))
    };
    let (prefix, object) = match key.rsplit_once('/') {
        Some((p, o)) => (p.to_owned(), o.to_owned()),
        None => (String::new(), key.clone()),
    };
    Ok((
        S3Config {
            endpoint: need("AWS_ENDPOINT_URL")?,
            bucket,
            prefix,
            region: env("AWS_REGION").unwrap_or_else(|| "us-east-1".into()),
            access_key_id: need("AWS_ACCESS_KEY_ID")?,
            secret_access_key: need("AWS_SECRET_ACCESS_KEY")?,
        },
        object,
    ))
}

/// Downloads `url` (and its record) below `root`, with the settings `env` gives (the process
/// environment in `main`); returns the snapshot's local path.
pub async fn fetch(
    url: &str,
    root: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn FnMut(String),
) -> Result<PathBuf, FetchError> {
    let (config, object) = s3_config(url, env)?;
    let store =
        Store::open(&Destination::S3(config)).map_err(|e| FetchError::Invalid(e.to_string()))?;
    let dir = root.join(DOWNLOADS);
    std::fs::create_dir_all(&dir)
        .map_err(|e| FetchError::Failed(format!("{}: {e}", dir.display())))?;
    let local = dir.join(&object);
    let size = store
        .download(&object, &local)
        .await
        .map_err(|e| FetchError::Failed(e.to_string()))?;
    out(format!(
        "downloaded {url} ({size} bytes) to {}",
        local.display()
    ));
    let record = format!("{object}.json");
    let local_record = dir.join(&record);
    match store.download(&record, &local_record).await {
        Ok(_) => out(format!("downloaded its record {url}.json")),
        Err(e) => {
            // A snapshot may come without one (an etcdctl snapshot copied to the bucket); a
            // stale record from an earlier download must not be taken for this one's.
            let _ = std::fs::remove_file(&local_record);
            out(format!(
                "no record beside it ({e}): the snapshot is checked on its own"
            ));
        }
    }
    Ok(local)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_environment_and_name_what_is_missing() {
        let env = |k: &str| match k {
            "AWS_ENDPOINT_URL" => Some("http://127.0.0.1:3900".to_owned()),
            "AWS_ACCESS_KEY_ID" => Some("AK".to_owned()),
            _ => None,
        };
        let e = s3_config("s3://b/p/etcd-backup-x.db", &env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("AWS_SECRET_ACCESS_KEY"), "{e}");
        let full = |k: &str| env(k).or_else(|| (k == "AWS_SECRET_ACCESS_KEY").then(|| "SK".into()));
        let (c, object) = s3_config("s3://b/p/q/etcd-backup-x.db", &full).unwrap();
        assert_eq!(
            (c.bucket.as_str(), c.prefix.as_str(), object.as_str()),
            ("b", "p/q", "etcd-backup-x.db")
        );
        assert_eq!(c.region, "us-east-1");
        assert!(matches!(
            s3_config("/tmp/x.db", &full),
            Err(FetchError::Invalid(_))
        ));
    }
}
