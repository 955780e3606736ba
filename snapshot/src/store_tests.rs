//! Backup names, grouping, S3 URLs and a directory store writing whole objects.

use super::*;

#[test]
fn names_sort_as_times_and_round_trip() {
    let a = BackupName::new("20261126T040000Z").unwrap();
    let b = BackupName::new("20261126T050000Z").unwrap();
    assert!(a < b);
    assert_eq!(a.snapshot(), "etcd-backup-20261126T040000Z.db");
    assert_eq!(BackupName::of_object(&a.record()), Some(a.clone()));
    assert_eq!(BackupName::of_object(&a.resources()), Some(a.clone()));
    assert_eq!(a.stamp(), "20261126T040000Z");
    assert_eq!(
        BackupName::of_object("etcd-backup-20261126T040000Z.db.part"),
        None
    );
    assert_eq!(BackupName::of_object("notes.txt"), None);
    assert!(BackupName::new("2026-11-26").is_err());
    assert!(BackupName::new("../../../etc/pa").is_err());
}

#[test]
fn backups_group_their_objects() {
    let a = BackupName::new("20261126T040000Z").unwrap();
    let objects = vec![
        StoredObject {
            name: a.snapshot(),
            size: 10,
        },
        StoredObject {
            name: a.record(),
            size: 1,
        },
        StoredObject {
            name: "etcd-backup-20261126T050000Z.db.json".into(),
            size: 1,
        },
        StoredObject {
            name: "unrelated".into(),
            size: 1,
        },
    ];
    let got = backups(&objects);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].snapshot_size, Some(10));
    assert!(got[0].has_record && !got[0].has_resources);
    assert_eq!(got[1].snapshot_size, None, "a record without its snapshot");
}

#[test]
fn s3_urls() {
    assert_eq!(
        parse_s3_url("s3://b/p/etcd-backup-x.db").unwrap(),
        ("b".to_owned(), "p/etcd-backup-x.db".to_owned())
    );
    assert!(parse_s3_url("s3://b/").is_err());
    assert!(parse_s3_url("https://b/k").is_err());
}

#[tokio::test]
async fn a_directory_store_writes_whole_objects() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&Destination::Local {
        dir: dir.path().join("backups"),
    })
    .unwrap();
    let src = dir.path().join("src");
    std::fs::write(&src, vec![7u8; 3 << 20]).unwrap();
    assert_eq!(store.upload("a.db", &src).await.unwrap(), 3 << 20);
    store.put_bytes("a.db.json", b"{}".to_vec()).await.unwrap();
    // #65: a backup holds every key; the directory is its owner's only, whatever the umask.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("backups"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "backup directory mode {mode:o}");
    let listed = store.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["a.db", "a.db.json"]);
    let back = dir.path().join("back");
    store.download("a.db", &back).await.unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&src).unwrap());
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&back).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "downloaded snapshot mode {mode:o}");
    store.delete("a.db").await.unwrap();
    store.delete("a.db").await.unwrap();
    let err = store.read_bytes("a.db").await.unwrap_err().to_string();
    assert!(err.contains("a.db"), "{err}");
}
