//! The stand-in driven by kube-rs against a real etcd: typed `Api<T>`, `watcher`, and a
//! `Controller`. One test binary; each test gets its own etcd and stand-in on its own loopback
//! address. Waits are condition polls with deadlines that print what was last seen.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use apiserver_standin::{ApiServerStandIn, StandInConfig};
use etcd_fixture::{ClusterSpec, EtcdCluster, LoopbackAddr};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy, VersionMatch,
    WatchEvent, WatchParams,
};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(20);

struct Env {
    standin: ApiServerStandIn,
    client: Client,
    _addr: LoopbackAddr,
    _etcd: EtcdCluster,
}

async fn env() -> Env {
    let etcd = EtcdCluster::start(ClusterSpec::plain(1))
        .await
        .expect("etcd starts");
    let addr = LoopbackAddr::acquire().expect("a loopback address");
    let config = StandInConfig::new(
        etcd.client_urls().iter().map(|u| u.to_string()),
        SocketAddr::new(addr.ip().into(), 0),
    )
    .with_bookmark_interval(Duration::from_millis(300))
    .with_gc_interval(Duration::from_millis(500));
    let standin = ApiServerStandIn::start(config)
        .await
        .expect("stand-in starts");
    let client = standin.client().expect("client");
    Env {
        standin,
        client,
        _addr: addr,
        _etcd: etcd,
    }
}

/// Polls `probe` until it yields a value; on timeout panics with what it last saw.
async fn wait_for<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (Option<T>, String)>,
{
    let start = tokio::time::Instant::now();
    let mut last = String::new();
    while start.elapsed() < DEADLINE {
        let (value, seen) = probe().await;
        if let Some(v) = value {
            return v;
        }
        last = seen;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {DEADLINE:?} waiting for {what}; last seen: {last}");
}

fn code<T: Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

fn pod(name: &str, node: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1"}]}
    }))
    .unwrap()
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    size: i64,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    observed: Option<i64>,
}

async fn install_widget_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Widget::crd())
        .await
        .unwrap();
    wait_for("the Widget CRD to be Established", || async {
        let crd = crds.get("widgets.example.com").await.unwrap();
        let conds = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let ok = conds
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        (ok.then_some(()), format!("{conds:?}"))
    })
    .await;
}

#[tokio::test]
async fn crud_conflicts_and_structural_errors() {
    let env = env().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();

    let created = cms
        .create(&pp, &cm("one", json!({"a": "1"})))
        .await
        .unwrap();
    let rv = created.resource_version().unwrap();
    assert!(created.uid().is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(
        code(cms.create(&pp, &cm("one", json!({}))).await),
        (409, "AlreadyExists".into())
    );

    // Replace with the current resourceVersion works; with the stale one it is a 409.
    let mut fresh = created.clone();
    fresh.data = Some([("a".to_string(), "2".to_string())].into());
    let replaced = cms.replace("one", &pp, &fresh).await.unwrap();
    assert_ne!(replaced.resource_version().unwrap(), rv);
    assert_eq!(
        code(cms.replace("one", &pp, &fresh).await),
        (409, "Conflict".into())
    );
    // An unchanged replace does not write: the resourceVersion stays.
    let same = cms.replace("one", &pp, &replaced).await.unwrap();
    assert_eq!(same.resource_version(), replaced.resource_version());

    // Name in body vs URL, invalid names, missing namespace, unknown object.
    assert_eq!(code(cms.replace("other", &pp, &replaced).await).0, 400);
    assert_eq!(
        code(cms.create(&pp, &cm("Bad_Name", json!({}))).await),
        (422, "Invalid".into())
    );
    let nowhere: Api<ConfigMap> = Api::namespaced(env.client.clone(), "missing");
    assert_eq!(
        code(nowhere.create(&pp, &cm("x", json!({}))).await),
        (404, "NotFound".into())
    );
    assert_eq!(code(cms.get("absent").await), (404, "NotFound".into()));

    // Creating an object that carries a resourceVersion fails as on the real server.
    let mut with_rv = cm("with-rv", json!({}));
    with_rv.metadata.resource_version = Some("5".into());
    assert_eq!(code(cms.create(&pp, &with_rv).await).0, 500);

    // generateName.
    let mut g = cm("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let generated = cms.create(&pp, &g).await.unwrap();
    assert!(generated.name_any().starts_with("gen-") && generated.name_any().len() == 9);

    // Merge patch, JSON patch with a failing `test`, apply.
    let patched = cms
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"b": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.data.as_ref().unwrap().get("b").map(String::as_str),
        Some("3")
    );
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/a", "value": "nope"}]))
            .unwrap();
    assert_eq!(
        code(
            cms.patch("one", &PatchParams::default(), &Patch::Json::<()>(failing))
                .await
        )
        .0,
        422
    );
    let ok: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/data/a", "value": "2"}, {"op": "remove", "path": "/data/b"}]),
    )
    .unwrap();
    let jp = cms
        .patch("one", &PatchParams::default(), &Patch::Json::<()>(ok))
        .await
        .unwrap();
    assert!(!jp.data.unwrap().contains_key("b"));
    let apply = PatchParams::apply("standin-test").force();
    let applied = cms
        .patch(
            "applied",
            &apply,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["k"], "v");
    // Apply-lite: the same manager dropping a field removes it; another manager's stays; a
    // no-op apply writes nothing.
    let other = PatchParams::apply("other-manager");
    cms.patch(
        "applied",
        &other,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k2": "v2"}})),
    )
    .await
    .unwrap();
    let reapplied = cms
        .patch(
            "applied",
            &apply,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k3": "v3"}})),
        )
        .await
        .unwrap();
    let keys: Vec<String> = reapplied.data.clone().unwrap().into_keys().collect();
    assert_eq!(
        keys,
        vec!["k2", "k3"],
        "k dropped by its manager, k2 kept for the other"
    );
    let managers: Vec<String> = reapplied
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, vec!["other-manager", "standin-test"]);
    let again = cms
        .patch(
            "applied",
            &apply,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k3": "v3"}})),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), reapplied.resource_version());
    // Setting another applier's field to a different value conflicts unless forced.
    let unforced = PatchParams::apply("third-manager");
    let clash =
        Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k2": "mine"}}));
    let conflict = cms.patch("applied", &unforced, &clash).await;
    assert_eq!(code(conflict), (409, "Conflict".into()));
    let forced = cms
        .patch(
            "applied",
            &PatchParams::apply("third-manager").force(),
            &clash,
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["k2"], "mine");

    // Immutable ConfigMap.
    let mut frozen = cm("frozen", json!({"a": "1"}));
    frozen.immutable = Some(true);
    cms.create(&pp, &frozen).await.unwrap();
    let change = cms
        .patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await;
    assert_eq!(code(change), (422, "Invalid".into()));

    // uid is immutable.
    let uid_change = cms
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"uid": "forged"}})),
        )
        .await;
    assert_eq!(code(uid_change).0, 422);

    // Delete, then 404.
    let gone = cms.delete("one", &DeleteParams::default()).await.unwrap();
    assert!(
        gone.is_right(),
        "an immediate ConfigMap delete answers with a Status: {gone:?}"
    );
    assert_eq!(code(cms.get("one").await).0, 404);
    assert_eq!(
        code(cms.delete("one", &DeleteParams::default()).await).0,
        404
    );

    // Discovery and version.
    let info = env.client.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    let groups = env.client.list_api_groups().await.unwrap();
    assert!(
        groups
            .groups
            .iter()
            .any(|g| g.name == "coordination.k8s.io")
    );
}

#[tokio::test]
async fn label_and_field_selectors() {
    let env = env().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    pods.create(&pp, &pod("a", "n1", json!({"app": "web", "tier": "front"})))
        .await
        .unwrap();
    pods.create(&pp, &pod("b", "n2", json!({"app": "web"})))
        .await
        .unwrap();
    pods.create(&pp, &pod("c", "n1", json!({"app": "db"})))
        .await
        .unwrap();
    let names = |sel: &'static str, fields: &'static str| {
        let pods = pods.clone();
        async move {
            let mut lp = ListParams::default();
            if !sel.is_empty() {
                lp = lp.labels(sel);
            }
            if !fields.is_empty() {
                lp = lp.fields(fields);
            }
            let mut n: Vec<String> = pods
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .map(|p| p.name_any())
                .collect();
            n.sort();
            n.join(",")
        }
    };
    assert_eq!(names("app=web", "").await, "a,b");
    assert_eq!(names("app==db", "").await, "c");
    assert_eq!(names("app!=web", "").await, "c");
    assert_eq!(names("app in (db,web),tier", "").await, "a");
    assert_eq!(names("app notin (web)", "").await, "c");
    assert_eq!(names("!tier", "").await, "b,c");
    assert_eq!(names("", "spec.nodeName=n1").await, "a,c");
    assert_eq!(names("app=web", "spec.nodeName!=n1").await, "b");
    assert_eq!(
        names("", "metadata.name=b,metadata.namespace=default").await,
        "b"
    );
    let bad = pods
        .list(&ListParams::default().fields("spec.bogus=x"))
        .await;
    assert_eq!(code(bad).0, 400);

    // Paging: limit + continue walk the whole set at one revision.
    let first = pods.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("a continue token");
    let rest = pods
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_eq!(
        rest.metadata.resource_version,
        first.metadata.resource_version
    );

    // All namespaces.
    let all: Api<Pod> = Api::all(env.client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );
}

#[tokio::test]
async fn watch_resume_bookmarks_timeout_and_410_after_compaction() {
    let env = env().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    cms.create(&pp, &cm("w", json!({"v": "0"}))).await.unwrap();
    let list = cms.list(&ListParams::default()).await.unwrap();
    let list_rv = list.metadata.resource_version.clone().unwrap();
    for i in 1..=3 {
        cms.patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    cms.delete("w", &DeleteParams::default()).await.unwrap();

    // Resume from the list's resourceVersion: exactly the later changes, in order, then bookmarks.
    let wp = WatchParams::default().timeout(10);
    let mut stream = cms.watch(&wp, &list_rv).await.unwrap().boxed();
    let mut seen = Vec::new();
    let mut bookmark = None;
    let started = tokio::time::Instant::now();
    while bookmark.is_none() && started.elapsed() < DEADLINE {
        match tokio::time::timeout(DEADLINE, stream.try_next()).await {
            Ok(Ok(Some(WatchEvent::Modified(o)))) => {
                seen.push(format!("M{}", o.data.unwrap()["v"]))
            }
            Ok(Ok(Some(WatchEvent::Deleted(o)))) => seen.push(format!("D{}", o.data.unwrap()["v"])),
            Ok(Ok(Some(WatchEvent::Bookmark(b)))) => bookmark = Some(b.metadata.resource_version),
            other => panic!("unexpected watch item {other:?}; seen so far {seen:?}"),
        }
    }
    assert_eq!(
        seen,
        vec!["M1", "M2", "M3", "D3"],
        "events after the list's revision"
    );
    let bookmark: i64 = bookmark.expect("a bookmark").parse().unwrap();
    assert!(bookmark >= list_rv.parse::<i64>().unwrap() + 4);
    drop(stream);

    // kube-runtime's watcher with streaming lists (sendInitialEvents) gets its initial state.
    cms.create(&pp, &cm("streamed", json!({}))).await.unwrap();
    let mut events = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init = Vec::new();
    loop {
        match tokio::time::timeout(DEADLINE, events.try_next()).await {
            Ok(Ok(Some(watcher::Event::InitApply(o)))) => init.push(o.name_any()),
            Ok(Ok(Some(watcher::Event::Init))) => {}
            Ok(Ok(Some(watcher::Event::InitDone))) => break,
            other => {
                panic!("unexpected streaming-list item {other:?}; initial objects so far {init:?}")
            }
        }
    }
    assert_eq!(init, vec!["streamed"]);
    drop(events);

    // timeoutSeconds ends the stream.
    let short = WatchParams::default().timeout(1);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        let s = cms.watch(&short, &bookmark.to_string()).await.unwrap();
        s.collect::<Vec<_>>().await
    })
    .await;
    assert!(ended.is_ok(), "watch with timeoutSeconds=1 did not end");

    // After compaction, a watch from the old revision gets an ERROR event with 410 Expired,
    // and an exact list at it gets HTTP 410.
    env.standin.compact().await.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default(), &list_rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(DEADLINE, stream.try_next()).await {
        Ok(Ok(Some(WatchEvent::Error(e)))) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"), "{e:?}");
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    let exact = cms
        .list(
            &ListParams::default()
                .at(&list_rv)
                .matching(VersionMatch::Exact),
        )
        .await;
    assert_eq!(code(exact), (410, "Expired".into()));
}

#[tokio::test]
async fn crd_registration_watcher_and_controller() {
    let env = env().await;
    let widgets: Api<Widget> = Api::namespaced(env.client.clone(), "default");
    // Not served before the CRD exists.
    assert_eq!(code(widgets.list(&ListParams::default()).await).0, 404);
    install_widget_crd(&env.client).await;

    // A watcher sees creations.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watched = {
        let seen = Arc::clone(&seen);
        let stream = watcher(widgets.clone(), watcher::Config::default()).applied_objects();
        tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Some(item) = stream.next().await {
                if let Ok(w) = item {
                    seen.lock().unwrap().push(w.name_any());
                }
            }
        })
    };

    // A controller reconciles each Widget: status.observed = spec.size.
    async fn reconcile(w: Arc<Widget>, api: Arc<Api<Widget>>) -> Result<Action, kube::Error> {
        let status = json!({"status": {"observed": w.spec.size}});
        api.patch_status(
            &w.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await?;
        Ok(Action::await_change())
    }
    fn error_policy(_: Arc<Widget>, _: &kube::Error, _: Arc<Api<Widget>>) -> Action {
        Action::requeue(Duration::from_millis(200))
    }
    let controller = tokio::spawn(
        Controller::new(widgets.clone(), watcher::Config::default())
            .run(reconcile, error_policy, Arc::new(widgets.clone()))
            .for_each(|_| async {}),
    );

    let w = Widget::new("w1", WidgetSpec { size: 3 });
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    wait_for("the controller to write status.observed=3", || async {
        let w = widgets.get("w1").await.unwrap();
        let obs = w.status.as_ref().and_then(|s| s.observed);
        ((obs == Some(3)).then_some(()), format!("{:?}", w.status))
    })
    .await;

    // Status isolation on the custom resource: a spec write ignores status and bumps
    // generation; a status write leaves spec alone.
    let spec_write = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}, "status": {"observed": 99}})),
        )
        .await
        .unwrap();
    assert_eq!(spec_write.metadata.generation, Some(2));
    assert_ne!(
        spec_write.status.as_ref().and_then(|s| s.observed),
        Some(99)
    );
    wait_for("the controller to observe size 5", || async {
        let w = widgets.get("w1").await.unwrap();
        let obs = w.status.as_ref().and_then(|s| s.observed);
        ((obs == Some(5)).then_some(()), format!("{:?}", w.status))
    })
    .await;
    let status_write = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 1}, "status": {"observed": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(status_write.spec.size, 5);
    assert_eq!(status_write.metadata.generation, Some(2));
    // Custom resources do not take strategic merge patches (415), as on the real server.
    let smp = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 6}})),
        )
        .await;
    assert_eq!(code(smp).0, 415);

    wait_for("the watcher to see w1", || async {
        let s = seen.lock().unwrap().clone();
        (
            s.contains(&"w1".to_string()).then_some(()),
            format!("{s:?}"),
        )
    })
    .await;

    // A cluster-scoped custom resource through the dynamic API.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let gadget_crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &gadget_crd)
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let ar = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let gadgets: Api<DynamicObject> = Api::all_with(env.client.clone(), &ar);
    let g: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g1", "finalizers": ["example.com/hold"]}, "spec": {"x": 1}
    }))
    .unwrap();
    gadgets.create(&PostParams::default(), &g).await.unwrap();
    assert_eq!(
        gadgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let discovered = kube::Discovery::new(env.client.clone())
        .run()
        .await
        .unwrap();
    assert!(discovered.groups().any(|g| g.name() == "example.com"));
    let aggregated = kube::Discovery::new(env.client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(aggregated.groups().any(|g| g.name() == "example.com"));
    assert!(
        aggregated.groups().any(|g| g.name().is_empty()),
        "the core group"
    );

    // Deleting the CRD deletes its custom resources first (finalizers respected), refuses new
    // ones meanwhile, then stops serving them.
    crds.delete("gadgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("g1 to be marked for deletion", || async {
        let g = gadgets.get("g1").await.unwrap();
        (
            g.metadata.deletion_timestamp.is_some().then_some(()),
            format!("{:?}", g.metadata),
        )
    })
    .await;
    let terminating = crds.get("gadgets.example.com").await.unwrap();
    let conds = terminating.status.unwrap().conditions.unwrap_or_default();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Terminating" && c.status == "True"),
        "{conds:?}"
    );
    let mut g2 = g.clone();
    g2.metadata.name = Some("g2".into());
    g2.metadata.finalizers = None;
    assert_eq!(
        code(gadgets.create(&PostParams::default(), &g2).await).0,
        405
    );
    gadgets
        .patch(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_for("the Gadget resource to stop being served", || async {
        match gadgets.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => (Some(()), String::new()),
            other => (None, format!("{other:?}")),
        }
    })
    .await;
    assert!(crds.get_opt("gadgets.example.com").await.unwrap().is_none());

    controller.abort();
    watched.abort();
}

#[tokio::test]
async fn status_isolation_for_pods_and_nodes() {
    let env = env().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let p = pods
        .create(&PostParams::default(), &pod("p", "n1", json!({})))
        .await
        .unwrap();
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );

    let status = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({
            "spec": {"activeDeadlineSeconds": 5}, "status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(
        status.spec.unwrap().active_deadline_seconds,
        None,
        "status writes do not touch spec"
    );

    let main = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({
            "metadata": {"labels": {"x": "y"}}, "status": {"phase": "Failed"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        main.status.unwrap().phase.as_deref(),
        Some("Running"),
        "spec writes do not touch status"
    );
    assert_eq!(main.metadata.labels.unwrap()["x"], "y");

    // Strategic merge patch merges conditions by type.
    pods.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [
            {"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "False"}]}})),
    )
    .await
    .unwrap();
    let merged = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            ),
        )
        .await
        .unwrap();
    let conds: Vec<(String, String)> = merged
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conds,
        vec![
            ("Initialized".to_string(), "True".to_string()),
            ("Ready".to_string(), "True".to_string())
        ]
    );

    // Pod spec is mostly immutable; images may change.
    let node_change = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "n2"}})),
        )
        .await;
    assert_eq!(code(node_change), (422, "Invalid".into()));
    let image = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
            {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(image.metadata.generation, Some(2));

    // Nodes: status may be set on create, later only through /status.
    let nodes: Api<Node> = Api::all(env.client.clone());
    let node: Node = serde_json::from_value(
        json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    )
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let replaced = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        replaced.status.unwrap().conditions.unwrap()[0].status,
        "True"
    );
    let st = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(st.status.unwrap().conditions.unwrap()[0].status, "False");
    assert_eq!(st.spec.unwrap().unschedulable, Some(true));
}

#[tokio::test]
async fn finalizers_graceful_pods_and_service_accounts() {
    let env = env().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let mut guarded = cm("guarded", json!({}));
    guarded.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &guarded).await.unwrap();
    cms.delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    let held = cms.get("guarded").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp set, object kept"
    );
    let add = cms
        .patch(
            "guarded",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
            ),
        )
        .await;
    assert_eq!(code(add).0, 422, "no new finalizers while deleting");
    cms.patch(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(
        code(cms.get("guarded").await).0,
        404,
        "gone once the finalizers are"
    );

    // A pod bound to a node terminates gracefully until deleted with grace 0 (the kubelet's job).
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("bound", "n1", json!({})))
        .await
        .unwrap();
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        pods.get("bound")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let gone = pods
        .delete("bound", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(
        gone.is_left(),
        "a pod delete answers with the pod: {gone:?}"
    );
    assert_eq!(code(pods.get("bound").await).0, 404);

    // Pods need their service account (mirror pods don't); new namespaces get `default`.
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let team_pods: Api<Pod> = Api::namespaced(env.client.clone(), "team");
    let mut p = pod("needs-sa", "", json!({}));
    p.spec.as_mut().unwrap().service_account_name = Some("installer".into());
    assert_eq!(
        code(team_pods.create(&PostParams::default(), &p).await),
        (403, "Forbidden".into())
    );
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), "team");
    assert!(sas.get("default").await.is_ok());
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "installer"}})).unwrap(),
    )
    .await
    .unwrap();
    team_pods.create(&PostParams::default(), &p).await.unwrap();

    // Deleting a namespace removes its contents, then the namespace.
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    wait_for("namespace team to be gone", || async {
        match nss.get_opt("team").await.unwrap() {
            None => (Some(()), String::new()),
            Some(ns) => (None, format!("{:?}", ns.status)),
        }
    })
    .await;
    assert_eq!(
        code(
            team_pods
                .create(&PostParams::default(), &pod("late", "", json!({})))
                .await
        )
        .0,
        404
    );
}

#[tokio::test]
async fn owner_reference_cascade() {
    let env = env().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    let make_owned = |name: &str, owner: &ConfigMap| {
        let mut c = cm(name, json!({}));
        c.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
        c
    };
    let names = || async {
        let mut n: Vec<String> = cms
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|c| c.name_any())
            .collect();
        n.sort();
        n
    };

    // Background: the owner goes at once, dependents follow.
    let owner = cms.create(&pp, &cm("owner", json!({}))).await.unwrap();
    cms.create(&pp, &make_owned("dep-1", &owner)).await.unwrap();
    cms.create(&pp, &make_owned("dep-2", &owner)).await.unwrap();
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    wait_for("dependents of a background-deleted owner to go", || async {
        let n = names().await;
        (
            n.iter().all(|x| !x.starts_with("dep-")).then_some(()),
            format!("{n:?}"),
        )
    })
    .await;

    // Foreground: the owner stays (deletionTimestamp, finalizer) until its dependents are gone.
    let owner = cms.create(&pp, &cm("fg-owner", json!({}))).await.unwrap();
    let mut held = make_owned("fg-dep", &owner);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&pp, &held).await.unwrap();
    cms.delete("fg-owner", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_for(
        "the foreground dependent to be marked for deletion",
        || async {
            let d = cms.get("fg-dep").await.unwrap();
            (
                d.metadata.deletion_timestamp.is_some().then_some(()),
                format!("{:?}", d.metadata),
            )
        },
    )
    .await;
    let o = cms.get("fg-owner").await.unwrap();
    assert!(
        o.finalizers().contains(&"foregroundDeletion".to_string()),
        "{:?}",
        o.metadata
    );
    cms.patch(
        "fg-dep",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_for("the foreground owner to go after its dependent", || async {
        let n = names().await;
        (
            n.iter().all(|x| !x.starts_with("fg-")).then_some(()),
            format!("{n:?}"),
        )
    })
    .await;

    // Orphan: the dependent stays, without the owner reference.
    let owner = cms.create(&pp, &cm("or-owner", json!({}))).await.unwrap();
    cms.create(&pp, &make_owned("or-dep", &owner))
        .await
        .unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    cms.delete("or-owner", &dp).await.unwrap();
    wait_for("the orphan owner to go", || async {
        let n = names().await;
        (
            n.iter().all(|x| x != "or-owner").then_some(()),
            format!("{n:?}"),
        )
    })
    .await;
    let dep = cms.get("or-dep").await.unwrap();
    assert!(dep.owner_references().is_empty(), "{:?}", dep.metadata);
}

#[tokio::test]
async fn events_leases_endpoints_and_kubeconfig() {
    let env = env().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    env.standin.write_kubeconfig(&path).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let client = Client::try_from(config).unwrap();

    // An events.k8s.io/v1 event is visible as a core/v1 event (shared storage).
    let ev1: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let e: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "MemberPromoted",
        "note": "promoted n4", "type": "Normal", "action": "Promote", "reportingController": "etcd-operator",
        "reportingInstance": "op-1", "regarding": {"kind": "Node", "name": "n4"}
    }))
    .unwrap();
    ev1.create(&PostParams::default(), &e).await.unwrap();
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let seen = core.get("e1").await.unwrap();
    assert_eq!(seen.message.as_deref(), Some("promoted n4"));
    assert_eq!(seen.involved_object.name.as_deref(), Some("n4"));

    // kube-runtime's event Recorder: create, then a merge patch with a series on repeat.
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n9"}})).unwrap(),
        )
        .await
        .unwrap();
    let recorder = kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: "etcd-operator".into(),
            instance: Some("op-1".into()),
        },
    );
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Normal,
        reason: "MemberAddedAsLearner".into(),
        note: Some("added n9".into()),
        action: "AddLearner".into(),
        secondary: None,
    };
    recorder
        .publish(&event, &node.object_ref(&()))
        .await
        .unwrap();
    recorder
        .publish(&event, &node.object_ref(&()))
        .await
        .unwrap();
    let recorded: Vec<k8s_openapi::api::events::v1::Event> = ev1
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("MemberAddedAsLearner"))
        .collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].series.as_ref().map(|s| s.count), Some(2));

    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    let l = serde_json::from_value(
        json!({"metadata": {"name": "etcd-operator"}, "spec": {"holderIdentity": "a"}}),
    )
    .unwrap();
    let created = leases.create(&PostParams::default(), &l).await.unwrap();
    assert_eq!(created.spec.unwrap().holder_identity.as_deref(), Some("a"));

    let eps: Api<k8s_openapi::api::core::v1::Endpoints> =
        Api::namespaced(client.clone(), "default");
    let ep = serde_json::from_value(json!({"metadata": {"name": "etcd"},
        "subsets": [{"addresses": [{"ip": "127.0.100.1"}], "ports": [{"name": "etcd", "port": 2379}]}]})).unwrap();
    // Endpoints allow create-on-update (PUT to a missing object creates it); leases do not.
    eps.replace("etcd", &PostParams::default(), &ep)
        .await
        .unwrap();
    let ghost = serde_json::from_value(json!({"metadata": {"name": "ghost"}})).unwrap();
    assert_eq!(
        code(
            leases
                .replace("ghost", &PostParams::default(), &ghost)
                .await
        )
        .0,
        404
    );
    assert_eq!(
        eps.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    // Gvk check on a kind served nowhere.
    let unknown = client
        .request::<serde_json::Value>(
            axum::http::Request::get("/apis/apps/v1/namespaces/default/deployments")
                .body(Vec::new())
                .unwrap(),
        )
        .await;
    assert_eq!(code(unknown).0, 404);
    let method = client
        .request::<serde_json::Value>(
            axum::http::Request::post("/api/v1/namespaces/default/configmaps/x")
                .body(b"{}".to_vec())
                .unwrap(),
        )
        .await;
    assert_eq!(code(method).0, 405);
    // A body that does not decode as the kind is a 400, as on the real server.
    let typed = client
        .request::<serde_json::Value>(
            axum::http::Request::post("/api/v1/namespaces/default/configmaps")
                .header("content-type", "application/json")
                .body(br#"{"metadata":{"name":"typed"},"data":{"on":true}}"#.to_vec())
                .unwrap(),
        )
        .await;
    assert_eq!(code(typed).0, 400);
    let _ = Widget::api_resource();
    let _ = <Widget as Resource>::kind(&());
}

#[tokio::test]
async fn etcd_over_mutual_tls() {
    let etcd = EtcdCluster::start(ClusterSpec::tls(1))
        .await
        .expect("TLS etcd starts");
    let files = etcd.client_tls().expect("client certificates");
    let addr = LoopbackAddr::acquire().expect("a loopback address");
    let config = StandInConfig::new(
        etcd.client_urls().iter().map(|u| u.to_string()),
        SocketAddr::new(addr.ip().into(), 0),
    )
    .with_etcd_tls(apiserver_standin::EtcdTls {
        ca: files.ca.clone(),
        cert: files.cert.clone(),
        key: files.key.clone(),
    });
    let standin = ApiServerStandIn::start(config)
        .await
        .expect("stand-in starts over TLS");
    let cms: Api<ConfigMap> = Api::namespaced(standin.client().unwrap(), "default");
    cms.create(&PostParams::default(), &cm("tls", json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test]
async fn eviction_waits_for_the_disruption_budget() {
    let env = env().await;
    // What `kubectl drain` checks first: the eviction subresource in discovery.
    let core = env
        .client
        .list_core_api_resources("v1")
        .await
        .expect("core discovery");
    let eviction = core
        .resources
        .iter()
        .find(|r| r.name == "pods/eviction")
        .expect("pods/eviction advertised");
    assert_eq!(
        (
            eviction.group.as_deref(),
            eviction.version.as_deref(),
            eviction.kind.as_str()
        ),
        (Some("policy"), Some("v1"), "Eviction")
    );

    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), "default");
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let start = |name: &'static str| {
        let (pods, ready) = (pods.clone(), ready.clone());
        async move {
            pods.create(
                &PostParams::default(),
                &pod(name, "n1", json!({"app": "db"})),
            )
            .await
            .unwrap();
            pods.patch_status(name, &PatchParams::default(), &Patch::Merge(ready))
                .await
                .unwrap();
        }
    };
    for name in ["db-1", "db-2", "db-3"] {
        start(name).await;
    }
    let budget: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "db"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}}))
    .unwrap();
    pdbs.create(&PostParams::default(), &budget).await.unwrap();
    let allowed = |want: i32| {
        let pdbs = pdbs.clone();
        async move {
            wait_for(&format!("disruptionsAllowed {want}"), || async {
                let pdb = pdbs.get("db").await.unwrap();
                let status = pdb.status.clone().unwrap_or_default();
                let done = status.observed_generation == pdb.metadata.generation
                    && status.disruptions_allowed == Some(want)
                    && status.disrupted_pods.as_ref().is_none_or(|d| d.is_empty());
                (done.then_some(pdb), format!("{status:?}"))
            })
            .await
        }
    };
    let settled = allowed(1).await;

    // Nothing changes while nothing happens: the controller does not rewrite the status.
    let quiet = pdbs
        .watch(
            &WatchParams::default().timeout(2),
            settled.metadata.resource_version.as_deref().unwrap(),
        )
        .await
        .unwrap();
    let events: Vec<_> = quiet.boxed().try_collect().await.unwrap();
    assert!(
        events.iter().all(|e| matches!(e, WatchEvent::Bookmark(_))),
        "status rewritten without a change: {events:?}"
    );

    // kube's default client retries 429s; a drain wants to see them.
    let mut config = env.standin.kube_config().unwrap();
    config.default_retry = false;
    let drain: Api<Pod> = Api::namespaced(Client::try_from(config).unwrap(), "default");
    drain.evict("db-1", &Default::default()).await.unwrap();
    let refused = drain.evict("db-2", &Default::default()).await;
    assert_eq!(code(refused), (429, "TooManyRequests".into()));
    // The kubelet finishes db-1 and a replacement becomes Ready: the budget allows one again.
    pods.delete("db-1", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    start("db-4").await;
    allowed(1).await;
    drain.evict("db-2", &Default::default()).await.unwrap();
    let evicted = pods.get("db-2").await.unwrap();
    assert!(evicted.metadata.deletion_timestamp.is_some());
    let target = evicted
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("DisruptionTarget condition");
    assert_eq!(target.reason.as_deref(), Some("EvictionByEvictionAPI"));
}
