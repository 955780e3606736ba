//! The commit index `etcd-recover status` reads from a stopped member's WAL, against a real etcd:
//! what the member had committed when it stopped, so the node with the highest one holds every
//! acknowledged write.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use etcd_fixture::{ClusterSpec, EtcdCluster};
use etcd_verify::wal::read_commit;

async fn put_many(cluster: &EtcdCluster, from: usize, n: usize) {
    let client = cluster.client().unwrap();
    for i in from..from + n {
        client
            .put(&format!("/k/{i:04}"), vec![b'v'; 64])
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn the_member_stopped_first_shows_the_lower_wal_commit_and_the_last_ones_hold_every_write() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    put_many(&cluster, 0, 100).await;
    let names = cluster.names();
    let (early, rest) = names.split_first().unwrap();
    cluster.stop(early).unwrap();
    // Writes the early member never sees: a quorum of the other two acknowledges them.
    put_many(&cluster, 100, 100).await;
    let client = cluster.client().unwrap();
    let mut acknowledged = 0;
    for n in rest {
        let url = cluster.client_url(n).unwrap();
        acknowledged = acknowledged.max(client.status_of(&url).await.unwrap().raft_index);
    }
    for n in rest {
        cluster.stop(n).unwrap();
    }
    let commit = |n: &str| {
        read_commit(&cluster.data_dir(n).unwrap().join("member/wal"))
            .unwrap()
            .commit
    };
    let early_commit = commit(early);
    let best = rest.iter().map(|n| commit(n)).max().unwrap();
    assert!(
        best >= acknowledged,
        "the most advanced WAL ({best}) should hold the last acknowledged index {acknowledged}"
    );
    assert!(
        early_commit + 100 <= best,
        "{early} stopped 100 writes earlier: WAL commit {early_commit}, the others' best {best}"
    );
}
