//! Snapshots of a real etcd 3.4 (saved with Debian's `etcdctl snapshot save`): what recovery reads
//! from them, and what it refuses.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use etcd_fixture::{ClusterSpec, EtcdCluster};
use etcd_recover::restore::restored_member_id;
use etcd_recover::snapshot::{self, LocalIdentity, Origin, Record, SnapshotError};
use etcd_snapshot::bolt;

/// A 3-member cluster with `keys` keys written; returns it, the saved snapshot and the last
/// write's revision.
async fn saved(dir: &Path, keys: usize) -> (EtcdCluster, PathBuf, i64) {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    let client = cluster.client().unwrap();
    let mut revision = 0;
    for i in 0..keys {
        revision = client
            .put(&format!("/k/{i:04}"), vec![b'v'; 100])
            .await
            .unwrap();
    }
    let path = dir.join("snap.db");
    let endpoint = cluster.client_urls()[0].to_string();
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &endpoint, "snapshot", "save"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "etcdctl snapshot save: {out:?}");
    (cluster, path, revision)
}

#[tokio::test]
async fn a_saved_snapshot_verifies_and_names_its_members_and_revision() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, path, revision) = saved(dir.path(), 300).await;
    let v = snapshot::verify(&path).unwrap();
    assert_eq!(v.contents.revision, revision);
    assert!(v.contents.consistent_index > 0);
    assert!(v.record.is_none());
    let mut ids: Vec<u64> = v.contents.members.iter().map(|m| m.id).collect();
    ids.sort_unstable();
    let mut want: Vec<u64> = cluster
        .names()
        .iter()
        .map(|n| cluster.member_id(n).unwrap().get())
        .collect();
    want.sort_unstable();
    assert_eq!(ids, want);
    for m in &v.contents.members {
        assert!(cluster.names().contains(&m.name), "{m:?}");
        assert_eq!(m.peer_urls.len(), 1, "{m:?}");
    }

    let local = LocalIdentity {
        cluster_id: None,
        member_ids: [want[1]].into(),
    };
    assert!(matches!(
        snapshot::origin(&v.contents, None, &local),
        Origin::ThisCluster(_)
    ));
    let stranger = LocalIdentity {
        cluster_id: None,
        member_ids: [0x1234].into(),
    };
    assert!(matches!(
        snapshot::origin(&v.contents, None, &stranger),
        Origin::OtherCluster(_)
    ));
}

#[tokio::test]
async fn a_flipped_byte_or_a_cut_copy_is_refused_by_its_integrity_hash() {
    let dir = tempfile::tempdir().unwrap();
    let (_cluster, path, _) = saved(dir.path(), 10).await;
    let mut bytes = std::fs::read(&path).unwrap();
    let flipped = dir.path().join("flipped.db");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&flipped, &bytes).unwrap();
    let e = snapshot::verify(&flipped).unwrap_err();
    assert!(matches!(e, SnapshotError::Integrity { .. }), "{e}");
    assert!(e.to_string().contains("flipped.db"), "{e}");

    bytes[middle] ^= 0x01;
    let cut = dir.path().join("cut.db");
    std::fs::write(&cut, &bytes[..bytes.len() - 4096]).unwrap();
    assert!(matches!(
        snapshot::verify(&cut),
        Err(SnapshotError::Integrity { .. })
    ));
}

#[tokio::test]
async fn a_record_beside_the_snapshot_must_agree_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_cluster, path, revision) = saved(dir.path(), 10).await;
    let sha = snapshot::verify(&path).unwrap().sha256;
    let mut record = Record {
        sha256: "00".repeat(32),
        revision,
        cluster_id: "abc".into(),
        members: Vec::new(),
        etcd_version: "3.4.23".into(),
        taken_at: "2026-11-26T00:00:00Z".into(),
        ..Record::default()
    };
    let record_path = snapshot::record_path(&path);
    std::fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();
    let e = snapshot::verify(&path).unwrap_err();
    assert!(matches!(e, SnapshotError::Record { .. }), "{e}");

    record.sha256 = sha;
    std::fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();
    let v = snapshot::verify(&path).unwrap();
    assert_eq!(v.record.as_ref(), Some(&record));
    // The record's cluster id decides the origin when this node knows its own.
    let local = LocalIdentity {
        cluster_id: Some(0xabc),
        member_ids: Default::default(),
    };
    assert!(matches!(
        snapshot::origin(&v.contents, v.record.as_ref(), &local),
        Origin::ThisCluster(_)
    ));
    let other = LocalIdentity {
        cluster_id: Some(0xdef),
        ..local
    };
    assert!(matches!(
        snapshot::origin(&v.contents, v.record.as_ref(), &other),
        Origin::OtherCluster(_)
    ));

    std::fs::write(&record_path, b"{not json").unwrap();
    assert!(matches!(
        snapshot::verify(&path),
        Err(SnapshotError::Record { .. })
    ));
}

#[tokio::test]
async fn member_ids_are_derived_as_etcd_derives_them() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, path, _) = saved(dir.path(), 1).await;
    for name in cluster.names() {
        let peer = cluster.peer_url(&name).unwrap();
        assert_eq!(
            restored_member_id(&[peer.as_str()], "etcd-fixture"),
            Some(cluster.member_id(&name).unwrap()),
            "{name}"
        );
    }
    // And after a restore with a token of ours (Debian's etcdctl 3.4).
    let restored = dir.path().join("restored");
    let peer = "https://127.0.0.9:2380";
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "restore"])
        .arg(&path)
        .arg("--data-dir")
        .arg(&restored)
        .args([
            "--name=n9",
            &format!("--initial-cluster=n9={peer}"),
            &format!("--initial-advertise-peer-urls={peer}"),
            "--initial-cluster-token=etcd-recover-20261126T000000Z",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let wal = etcd_verify::wal::read_identity(&restored.join("member/wal")).unwrap();
    assert_eq!(
        restored_member_id(&[peer], "etcd-recover-20261126T000000Z").map(|id| id.get()),
        Some(wal.member_id)
    );
}

#[test]
fn a_file_that_is_no_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zeros.db");
    std::fs::write(&path, vec![0u8; 64 * 1024]).unwrap();
    assert!(bolt::read(&path).is_err());
    assert!(snapshot::verify(&path).is_err());
}

/// `from-snapshot s3://…` downloads the snapshot and its record from a real S3 server (Garage on
/// loopback); a wrong secret key fails the download, naming the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_snapshot_is_downloaded_with_its_record() {
    use etcd_recover::fetch::{FetchError, fetch};
    use etcd_snapshot::store::{Destination, S3Config, Store};
    let dir = tempfile::tempdir().unwrap();
    let (_cluster, path, _revision) = saved(dir.path(), 10).await;
    let sha = snapshot::verify(&path).unwrap().sha256;
    let garage = etcd_fixture::garage::Garage::start(&dir.path().join("garage"))
        .await
        .unwrap();
    garage.create_bucket("snapshots").await.unwrap();
    let key = garage.create_key("admin").await.unwrap();
    garage.allow("snapshots", &key.access_key_id).await.unwrap();
    let store = Store::open(&Destination::S3(S3Config {
        endpoint: garage.endpoint(),
        bucket: "snapshots".into(),
        prefix: "a/b".into(),
        region: garage.region().to_owned(),
        access_key_id: key.access_key_id.clone(),
        secret_access_key: key.secret_access_key.clone(),
    }))
    .unwrap();
    store.upload("s.db", &path).await.unwrap();
    let record = Record {
        sha256: sha.clone(),
        ..Record::default()
    };
    store
        .put_bytes("s.db.json", serde_json::to_vec(&record).unwrap())
        .await
        .unwrap();
    let env = |secret: String| {
        let (endpoint, region, id) = (
            garage.endpoint(),
            garage.region().to_owned(),
            key.access_key_id.clone(),
        );
        move |k: &str| match k {
            "AWS_ENDPOINT_URL" => Some(endpoint.clone()),
            "AWS_REGION" => Some(region.clone()),
            "AWS_ACCESS_KEY_ID" => Some(id.clone()),
            "AWS_SECRET_ACCESS_KEY" => Some(secret.clone()),
            _ => None,
        }
    };
    let root = dir.path().join("node");
    let mut lines = Vec::new();
    let wrong = fetch(
        "s3://snapshots/a/b/s.db",
        &root,
        &env("wrong".into()),
        &mut |l| lines.push(l),
    )
    .await;
    match wrong {
        Err(FetchError::Failed(e)) => assert!(e.contains("s3://snapshots/a/b"), "{e}"),
        other => panic!("a wrong secret must fail the download: {other:?}"),
    }
    let local = fetch(
        "s3://snapshots/a/b/s.db",
        &root,
        &env(key.secret_access_key.clone()),
        &mut |l| lines.push(l),
    )
    .await
    .unwrap();
    assert!(local.starts_with(root.join(etcd_recover::fetch::DOWNLOADS)));
    let checked = snapshot::verify(&local).unwrap();
    assert_eq!(checked.sha256, sha);
    assert!(checked.record.is_some(), "its record came along: {lines:?}");
}
