//! Backups against real etcd (the fixture's, 3.5.16 by default): a snapshot streamed from a follower into a directory, checked,
//! stored with its record and resources, verified by a restore into a throwaway etcd that
//! answers the marker, and kept by retention; a full backup disk fails with a named error and
//! leaves no partial file; a verification that cannot run fails the backup and never counts as
//! good.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use etcd_fixture::{ClusterSpec, EtcdCluster};
use etcd_operator::api::{Backup, BackupRetention};
use etcd_operator::context::BackupPaths;
use etcd_operator::controllers::backup::{FailReason, pick_source, run};
use etcd_operator::etcd::observe;
use etcd_snapshot::store::{BackupName, Destination, Store};

/// The etcd version the fixture runs (`ETCD_FIXTURE_VERSION`, else its default).
fn version() -> String {
    std::env::var("ETCD_FIXTURE_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| etcd_fixture::DEFAULT_ETCD_VERSION.to_owned())
}

/// The image of that version, as the operator's spec would name it.
fn image() -> String {
    format!("quay.io/coreos/etcd:v{}", version())
}

/// Its restore tool: `etcdctl` for 3.4, `etcdutl` for 3.5.
fn restore_tool() -> &'static str {
    if version().starts_with("3.4.") {
        "etcdctl"
    } else {
        "etcdutl"
    }
}

/// The directory of the fixture's etcd, which holds that version's tools.
fn tools() -> PathBuf {
    etcd_fixture::etcd_binary()
        .parent()
        .expect("the etcd binary's directory")
        .to_path_buf()
}

async fn inputs(
    cluster: &EtcdCluster,
    dest: Destination,
    scratch: &Path,
    tools: &Path,
) -> run::Inputs {
    let client = Arc::new(cluster.client().unwrap());
    let obs = observe(&client).await;
    assert_eq!(obs.error, None);
    let source = pick_source(&obs).unwrap();
    assert_ne!(Some(source.id), obs.leader, "never the leader");
    run::Inputs {
        destination: dest,
        source,
        client,
        members: obs
            .members
            .iter()
            .map(|m| format!("{}={}", m.id, m.name))
            .collect(),
        cluster_id: obs.cluster_id.map(|c| format!("{c:x}")).unwrap_or_default(),
        etcd_version: "3.4.0".into(),
        image: image(),
        image_version: String::new(),
        resources: serde_json::json!({"revision": 3}),
        paths: BackupPaths {
            dir: "/nonexistent".into(),
            etcd_tools: tools.to_owned(),
            scratch: scratch.to_owned(),
        },
    }
}

async fn load(cluster: &EtcdCluster, keys: usize, size: usize) {
    let client = cluster.client().unwrap();
    for i in 0..keys {
        client
            .put(&format!("/load/{i:05}"), vec![b'x'; size])
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_is_stored_verified_by_restore_and_retained() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    load(&cluster, 50, 100).await;
    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("backups");
    let dest = Destination::Local {
        dir: backups.clone(),
    };
    let spec = Backup {
        retention: BackupRetention {
            count: 2,
            max_age_hours: 0,
        },
        ..Backup::default()
    };
    let mut names = Vec::new();
    for stamp in ["20261126T040000Z", "20261126T050000Z", "20261126T060000Z"] {
        let name = BackupName::new(stamp).unwrap();
        let i = inputs(&cluster, dest.clone(), dir.path(), &tools()).await;
        let out = run::take(name.clone(), spec.clone(), Ok(i)).await;
        let good = out.result.unwrap_or_else(|f| panic!("{stamp}: {f:?}"));
        assert!(good.record.revision > 50, "{:?}", good.record);
        let v = good.verified.expect("verified");
        assert!(
            v.message.contains(&format!("= {name}")) && v.message.contains(restore_tool()),
            "{}",
            v.message
        );
        names.push(name);
        load(&cluster, 5, 10).await;
    }
    // The newest two are kept; the first is gone, every object of it.
    let store = Store::open(&dest).unwrap();
    let listed: Vec<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .collect();
    assert!(
        !listed.iter().any(|n| n.starts_with(names[0].as_str())),
        "{listed:?}"
    );
    for n in &names[1..] {
        for o in [n.snapshot(), n.record(), n.resources()] {
            assert!(listed.contains(&o), "{o} missing from {listed:?}");
        }
    }
    // What etcd-recover reads: the file whole, its record agreeing, the marker recorded.
    let last = &names[2];
    let checked = etcd_snapshot::file::verify(&backups.join(last.snapshot())).unwrap();
    let record = checked.record.expect("record beside the snapshot");
    assert_eq!(record.marker_value, last.to_string());
    assert!(!record.verified_at.is_empty());
    assert_eq!(record.members.len(), 3);
    assert!(
        !std::fs::read_dir(dir.path()).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("etcd-operator-")),
        "scratch space is emptied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backup_disk_or_missing_tools_fail_by_name_and_store_nothing_good() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    // ~2 MiB of data: more than the 1 MiB disk below holds.
    load(&cluster, 40, 50_000).await;
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small-disk");
    std::fs::create_dir_all(&small).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&small)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if mounted {
        let dest = Destination::Local { dir: small.clone() };
        let i = inputs(&cluster, dest.clone(), dir.path(), &tools()).await;
        let name = BackupName::new("20261126T040000Z").unwrap();
        let out = run::take(name, Backup::default(), Ok(i)).await;
        let f = out.result.unwrap_err();
        let _ = std::process::Command::new("umount").arg(&small).status();
        assert_eq!(f.reason, FailReason::Destination, "{f:?}");
        assert!(
            f.message.contains("No space left on device") && f.message.contains("small-disk"),
            "{}",
            f.message
        );
    } else {
        eprintln!(
            "SKIPPED the full-disk case: `mount -t tmpfs` is not permitted here (needs root); the missing-tools case still runs"
        );
    }
    let after: Vec<_> = std::fs::read_dir(&small).unwrap().collect();
    assert!(after.is_empty(), "nothing partial left: {after:?}");

    // Verification that cannot run: the backup is stored and recorded, but fails and is not good.
    let dest = Destination::Local {
        dir: dir.path().join("b"),
    };
    let i = inputs(
        &cluster,
        dest.clone(),
        dir.path(),
        Path::new("/nonexistent-tools"),
    )
    .await;
    let name = BackupName::new("20261126T050000Z").unwrap();
    let out = run::take(name.clone(), Backup::default(), Ok(i)).await;
    let f = out.result.unwrap_err();
    assert_eq!(f.reason, FailReason::Verification);
    assert!(
        f.message
            .contains(&format!("/nonexistent-tools/{} not found", restore_tool())),
        "{}",
        f.message
    );
    let store = Store::open(&dest).unwrap();
    let record: etcd_snapshot::file::Record =
        serde_json::from_slice(&store.read_bytes(&name.record()).await.unwrap()).unwrap();
    assert!(record.verified_at.is_empty());
    assert!(
        record.verification.starts_with("verification failed"),
        "{record:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_to_s3_is_verified_and_a_wrong_key_is_refused_by_name() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    load(&cluster, 20, 100).await;
    let dir = tempfile::tempdir().unwrap();
    let garage = etcd_fixture::garage::Garage::start(&dir.path().join("garage"))
        .await
        .unwrap();
    garage.create_bucket("etcd-backups").await.unwrap();
    let key = garage.create_key("operator").await.unwrap();
    garage
        .allow("etcd-backups", &key.access_key_id)
        .await
        .unwrap();
    let config = |secret: &str| {
        Destination::S3(etcd_snapshot::store::S3Config {
            endpoint: garage.endpoint(),
            bucket: "etcd-backups".into(),
            prefix: "cluster-a".into(),
            region: garage.region().to_owned(),
            access_key_id: key.access_key_id.clone(),
            secret_access_key: secret.to_owned(),
        })
    };

    let wrong = inputs(&cluster, config("not-the-secret"), dir.path(), &tools()).await;
    let name = BackupName::new("20261126T040000Z").unwrap();
    let f = run::take(name, Backup::default(), Ok(wrong))
        .await
        .result
        .unwrap_err();
    assert_eq!(f.reason, FailReason::Destination, "{f:?}");
    assert!(
        f.message.contains("s3://etcd-backups/cluster-a"),
        "{}",
        f.message
    );
    eprintln!("wrong key: {}", f.message);

    let good = inputs(
        &cluster,
        config(&key.secret_access_key),
        dir.path(),
        &tools(),
    )
    .await;
    let name = BackupName::new("20261126T050000Z").unwrap();
    let out = run::take(name.clone(), Backup::default(), Ok(good)).await;
    let good = out.result.unwrap_or_else(|f| panic!("{f:?}"));
    assert!(
        good.record
            .destination
            .starts_with("s3://etcd-backups/cluster-a"),
        "{good:?}"
    );
    assert!(good.verified.is_some());
    assert_eq!(
        out.stored,
        Some(vec![name.to_string()]),
        "the failed attempt left nothing"
    );
    let store = Store::open(&config(&key.secret_access_key)).unwrap();
    let back = dir.path().join("back.db");
    store.download(&name.snapshot(), &back).await.unwrap();
    let checked = etcd_snapshot::file::verify(&back).unwrap();
    assert_eq!(checked.sha256, good.record.sha256);
}

/// The operator image's layout (`scripts/build-images`): `/usr/local/bin` links the Deployment's
/// etcd build, every supported build lives in `/usr/local/lib/etcd/<version>/`. A cluster whose
/// image names no version (a digest) but declares it in `spec.etcdImageVersion` is verified with
/// the tools of that version, not with whatever `/usr/local/bin` holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_only_image_verifies_with_the_tools_of_its_declared_version() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("image/usr/local");
    let bin = root.join("bin");
    let versioned = root.join("lib/etcd").join(version());
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&versioned).unwrap();
    for tool in ["etcd", restore_tool()] {
        std::os::unix::fs::symlink(tools().join(tool), versioned.join(tool)).unwrap();
        // What /usr/local/bin would hold for another default: tools that cannot restore.
        std::fs::write(bin.join(tool), "#!/bin/sh\nexit 3\n").unwrap();
        let mut perms = std::fs::metadata(bin.join(tool)).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(bin.join(tool), perms).unwrap();
    }
    let dest = Destination::Local {
        dir: dir.path().join("backups"),
    };
    let mut i = inputs(&cluster, dest, dir.path(), &bin).await;
    i.image = format!("registry.example/etcd@sha256:{}", "a".repeat(64));
    i.image_version = version();
    let name = BackupName::new("20261127T040000Z").unwrap();
    let out = run::take(name.clone(), Backup::default(), Ok(i)).await;
    let good = out.result.unwrap_or_else(|f| panic!("{f:?}"));
    let v = good.verified.expect("verified");
    assert!(v.message.contains(&format!("= {name}")), "{}", v.message);
}
