//! The stand-in's store over several etcd endpoints (#65 item 4): like kube-apiserver's etcd
//! client with every member in `--etcd-servers`, it moves to a member that answers when one
//! does not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use apiserver_standin::store::Store;
use etcd_fixture::{ClusterSpec, EtcdCluster, LoopbackAddr};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A dead endpoint (a loopback address nothing listens on) first, the live member second.
async fn store_dead_first(etcd: &EtcdCluster, dead: &LoopbackAddr) -> Store {
    let endpoints = vec![
        format!("http://{}:2379", dead.ip()),
        etcd.client_urls()[0].to_string(),
    ];
    Store::connect(&endpoints, TIMEOUT, None)
        .await
        .expect("the store connects (lazily) to both endpoints")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_moves_to_a_member_that_answers() {
    let etcd = EtcdCluster::start(ClusterSpec::plain(1))
        .await
        .expect("etcd starts");
    let dead = LoopbackAddr::acquire().expect("a loopback address");

    // A read goes on to the next member within the same call.
    let store = store_dead_first(&etcd, &dead).await;
    let read = store.get("/registry/configmaps/default/a").await;
    assert!(
        matches!(read, Ok(None)),
        "a read with the first member dead: {read:?}"
    );

    // A write is sent on only when the dead member could not have taken it; otherwise its
    // error is the caller's and the next call starts at the live member. Either way it is
    // written by the second call, and once.
    let store = store_dead_first(&etcd, &dead).await;
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
    let key = "/registry/configmaps/default/a";
    let first = store.create(key, &object).await;
    let revision = match first {
        Ok(r) => r,
        Err(e) => {
            let second = store.create(key, &object).await;
            second.unwrap_or_else(|e2| {
                panic!("the write failed on the dead member ({e}) and again after it ({e2})")
            })
        }
    };
    let stored = store.get(key).await.expect("read back").expect("the key");
    assert_eq!(stored.mod_revision, revision);
    let page = store
        .list("/registry/configmaps/", None, 0, 0)
        .await
        .expect("list");
    assert_eq!(page.items.len(), 1, "written once: {:?}", page.items);
}
