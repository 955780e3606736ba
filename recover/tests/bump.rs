//! A restore on a real etcd 3.5.16 (`/opt/etcd-3.5.16`, installed by `scripts/install-deps`)
//! with the command line `etcd-recover from-snapshot` builds: the restored revision is above
//! every revision acknowledged before and after the snapshot, a watch from an old revision is
//! answered "compacted", and every key of the snapshot is there.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::{Client, GetOptions, WatchOptions};
use etcd_fixture::{ClusterSpec, EtcdCluster, LoopbackAddr};
use etcd_recover::restore::{self, RestoreSpec};
use etcd_recover::snapshot::{self, restore_tool, revision_bump};
use tokio::time::{Instant, timeout};

const ETCD_DIR: &str = "/opt/etcd-3.5.16/bin";
const DEADLINE: Duration = Duration::from_secs(30);

/// An etcd process of this test, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Puts `count` keys under `prefix`; returns each put's acknowledged revision.
async fn put_all(client: &mut Client, prefix: &str, count: usize) -> Vec<i64> {
    let mut revisions = Vec::new();
    for i in 0..count {
        let r = client
            .put(format!("{prefix}{i:03}"), format!("value-{i}"), None)
            .await
            .unwrap();
        revisions.push(r.header().unwrap().revision());
    }
    revisions
}

/// Runs `args` (`args[0]` a binary of [`ETCD_DIR`]) and asserts it succeeded.
fn run(args: &[String]) {
    let out = Command::new(Path::new(ETCD_DIR).join(&args[0]))
        .args(&args[1..])
        .env("ETCDCTL_API", "3")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// A client of the etcd at `url` once it answers a read, or a panic naming the last error.
async fn answering(url: &str, log: &Path) -> Client {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let last = match Client::connect([url], None).await {
            Ok(mut c) => match timeout(Duration::from_secs(2), c.get("/", None)).await {
                Ok(Ok(_)) => return c,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "read timed out".to_owned(),
            },
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("restored etcd at {url} never answered; last: {last}\nlog:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_moves_the_revision_past_every_acknowledged_write_and_compacts_the_past() {
    let bin = Path::new(ETCD_DIR);
    if !bin.join("etcdutl").is_file() || !bin.join("etcd").is_file() {
        eprintln!(
            "SKIPPED: {ETCD_DIR}/etcd and etcdutl are not installed (scripts/install-deps installs etcd 3.5.16); the revision bump is not tested"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lost = EtcdCluster::start(ClusterSpec::plain(3).with_etcd(&bin.join("etcd")))
        .await
        .unwrap();
    let endpoint = lost.client_urls()[0].to_string();
    let mut client = Client::connect([endpoint.as_str()], None).await.unwrap();
    let version = client.status().await.unwrap().version().to_owned();
    assert_eq!(
        version, "3.5.16",
        "the lost cluster runs the etcd asked for"
    );
    let before = put_all(&mut client, "/before/", 40).await;
    let snap = dir.path().join("snap.db");
    run(&[
        "etcdctl".into(),
        format!("--endpoints={endpoint}"),
        "snapshot".into(),
        "save".into(),
        snap.display().to_string(),
    ]);
    let after = put_all(&mut client, "/after/", 25).await;
    drop(client);
    drop(lost);

    let verified = snapshot::verify(&snap).unwrap();
    assert_eq!(verified.contents.revision, *before.last().unwrap());
    let spec = RestoreSpec {
        stamp: "20261127T000000Z".into(),
        tool: restore_tool("registry.k8s.io/etcd:3.5.16-0").unwrap(),
        bump: Some(revision_bump(verified.contents.consistent_index)),
        snapshot_node_path: snap.clone(),
        member_id: restore::restored_member_id(&["http://127.0.0.1:2380"], "x").unwrap(),
    };
    let addr = LoopbackAddr::acquire().unwrap();
    let (peer, client_url) = (
        format!("http://{}:2380", addr.ip()),
        format!("http://{}:2379", addr.ip()),
    );
    let data = dir.path().join("restored");
    let command = restore::restore_command(&spec, "r1", &peer, &data, &snap);
    assert!(
        command.contains(&"--mark-compacted".to_owned()),
        "{command:?}"
    );
    run(&command);

    let log = dir.path().join("etcd.log");
    let _etcd = Process(
        Command::new(bin.join("etcd"))
            .arg("--name=r1")
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut restored = answering(&client_url, &log).await;

    // (1) Above every acknowledged revision, also those written after the snapshot.
    let all = restored
        .get("/before/", Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let header_revision = all.header().unwrap().revision();
    let highest_acknowledged = *after.last().unwrap();
    assert!(
        header_revision > highest_acknowledged,
        "restored revision {header_revision}, acknowledged up to {highest_acknowledged}"
    );
    let bump = i64::try_from(spec.bump.unwrap()).unwrap();
    assert_eq!(header_revision, verified.contents.revision + bump);

    // (2) A watch from the first acknowledged revision is told it was compacted.
    let mut watch = restored
        .watch(
            "/before/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(before[0]),
            ),
        )
        .await
        .unwrap();
    let compacted = timeout(DEADLINE, async {
        loop {
            let m = watch
                .message()
                .await
                .unwrap()
                .expect("the watch stream ended");
            assert!(
                m.events().is_empty(),
                "events from the past: {:?}",
                m.events()
            );
            if m.compact_revision() != 0 {
                return m;
            }
        }
    })
    .await
    .expect("no compacted answer to a watch from an old revision");
    eprintln!(
        "acknowledged revisions {}..={highest_acknowledged}, snapshot at {}, raft index {}; restored at {header_revision}, watch from {} answered compact_revision {}",
        before[0],
        verified.contents.revision,
        verified.contents.consistent_index,
        before[0],
        compacted.compact_revision()
    );
    assert!(compacted.canceled());
    assert_eq!(compacted.compact_revision(), header_revision);

    // (3) Every key of the snapshot, with its value; the writes after it are not there.
    let kvs: Vec<(String, String)> = all
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_owned(),
                kv.value_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = (0..before.len())
        .map(|i| (format!("/before/{i:03}"), format!("value-{i}")))
        .collect();
    assert_eq!(kvs, want);
    let gone = restored.get("/after/", Some(GetOptions::new().with_prefix()));
    assert_eq!(gone.await.unwrap().count(), 0);
}
