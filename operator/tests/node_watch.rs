//! The operator's Node watch against an API server (the stand-in, or kube-apiserver with
//! `TEST_API=kas`, or the cluster `KUBECONFIG` names): it holds only the Nodes the selector
//! picks, follows a label change into and out of the selection, and when the selector itself
//! changes it says which selector its contents were listed with, so a pass never decides from
//! a list made for another selector. Labels and names are unique to the run, so a real cluster's
//! own Nodes are never picked; the test deletes the Nodes it made.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_operator::run::{NodeWatch, Tasks};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube_testapi::TestApi;
use tokio::sync::Notify;

fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Waits until the watch was listed with `selector` and holds exactly `names` (of this run's
/// Nodes); on the deadline it panics with what it last saw.
async fn wait_for(watch: &NodeWatch, prefix: &str, selector: &str, names: &[&str]) {
    let want: BTreeSet<String> = names.iter().map(|n| format!("{prefix}{n}")).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = watch.listed_with();
        let have: BTreeSet<String> = watch
            .store
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .filter(|n| n.starts_with(prefix))
            .collect();
        if listed.as_deref() == Some(selector) && have == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after 30 s the Node watch was listed with {listed:?} and held {have:?}; \
             wanted {selector:?} and {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_node_watch_holds_only_the_selected_nodes_and_follows_the_selector() {
    let api = TestApi::start().await.expect("an API server");
    let client = api.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let run = std::process::id();
    let prefix = format!("nw-{run}-");
    let role = format!("test.etcd.static-operator.io/role-{run}");
    let zone = format!("test.etcd.static-operator.io/zone-{run}");
    let made = [
        ("cp-1", vec![(role.as_str(), "")]),
        ("cp-2", vec![(role.as_str(), ""), (zone.as_str(), "a")]),
        ("worker-1", vec![(zone.as_str(), "a")]),
        ("worker-2", vec![]),
    ];
    for (name, labels) in &made {
        nodes
            .create(
                &PostParams::default(),
                &node(&format!("{prefix}{name}"), labels),
            )
            .await
            .expect("create a Node");
    }

    let tasks = Tasks::default();
    let watch = NodeWatch::start(nodes.clone(), Arc::new(Notify::new()), &tasks);
    assert_eq!(
        watch.listed_with(),
        None,
        "nothing is listed before a selector"
    );
    watch.select(&role);
    wait_for(&watch, &prefix, &role, &["cp-1", "cp-2"]).await;

    // A worker gains the label: it joins; a control-plane node loses it: it leaves.
    let label = |value: Option<&str>| {
        Patch::Merge(serde_json::json!({"metadata": {"labels": {role.as_str(): value}}}))
    };
    let pp = PatchParams::default();
    nodes
        .patch(&format!("{prefix}worker-1"), &pp, &label(Some("")))
        .await
        .unwrap();
    nodes
        .patch(&format!("{prefix}cp-1"), &pp, &label(None))
        .await
        .unwrap();
    wait_for(&watch, &prefix, &role, &["cp-2", "worker-1"]).await;

    // A new selector: the watch starts over and says so once its new list is in.
    let both = format!("{role},{zone}=a");
    watch.select(&both);
    wait_for(&watch, &prefix, &both, &["cp-2", "worker-1"]).await;
    let by_zone = format!("{zone}=a");
    watch.select(&by_zone);
    wait_for(&watch, &prefix, &by_zone, &["cp-2", "worker-1"]).await;
    nodes
        .patch(
            &format!("{prefix}worker-2"),
            &pp,
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {zone.as_str(): "a"}}})),
        )
        .await
        .unwrap();
    wait_for(&watch, &prefix, &by_zone, &["cp-2", "worker-1", "worker-2"]).await;

    for (name, _) in &made {
        nodes
            .delete(&format!("{prefix}{name}"), &DeleteParams::default())
            .await
            .expect("delete a Node");
    }
    wait_for(&watch, &prefix, &by_zone, &[]).await;
}
