//! The API stand-in held to the real kube-apiserver: every case runs the same requests against
//! both (the stand-in on its own etcd, and a kas control plane) and reduces what came back to a
//! comparable summary (status codes, reasons, the fields an error names, the names a selector
//! returns, the owners of a field, the events a watch delivered). Where the two summaries differ
//! the test fails and prints both. Without kas it says SKIPPED once and checks nothing.
//!
//! Differences the stand-in is known to have are listed in `KNOWN_DIFFERENCES` (each must still
//! differ, so the list stays true). Left out here altogether (see `harness/apiserver-standin/src/lib.rs`):
//! authentication,
//! authorization and admission beyond NamespaceLifecycle and the ServiceAccount check; error
//! message wording (only codes, reasons and the fields named are compared, plus the causes of an
//! eviction refused by a disruption budget); `status.qosClass`; the disruption controller's
//! Events;
//! watch-cache behaviour (a watch from a compacted revision: the real server answers from its
//! watch cache's window, the stand-in from etcd's compaction).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{
    DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, VersionMatch, WatchEvent,
    WatchParams,
};
use kube::{Api, Client};
use kube_testapi::{KasOptions, TestApi};
use serde_json::{Value, json};

#[path = "differential/eviction.rs"]
mod eviction;
use eviction::disruption_budgets;
#[path = "differential/schema.rs"]
mod schema;

/// What an API error says, without its wording.
fn error_summary(e: &kube::Error) -> Value {
    match e {
        kube::Error::Api(s) => {
            let mut fields: Vec<String> = s
                .details
                .as_ref()
                .map(|d| {
                    d.causes
                        .iter()
                        .map(|c| c.field.clone())
                        .filter(|f| !f.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            fields.sort();
            fields.dedup();
            json!({"code": s.code, "reason": s.reason, "fields": fields})
        }
        other => json!({"error": other.to_string()}),
    }
}

fn outcome<T>(r: Result<T, kube::Error>) -> Value {
    match r {
        Ok(_) => json!("ok"),
        Err(e) => error_summary(&e),
    }
}

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Default::default()
    }
}

/// Validation errors for the kinds and fields the project writes.
async fn validation(client: Client, ns: String) -> Value {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    let bad_name = outcome(cms.create(&pp, &cm("Bad_Name", &[])).await);
    let mut bad_key = cm("bad-key", &[]);
    bad_key.data = Some([("a/b".to_owned(), "v".to_owned())].into());
    let bad_key = outcome(cms.create(&pp, &bad_key).await);
    let bad_label = outcome(cms.create(&pp, &cm("bad-label", &[("k", "-x-")])).await);
    let mut bad_annotation = cm("bad-annotation", &[]);
    bad_annotation.metadata.annotations = Some([("a b".to_owned(), "v".to_owned())].into());
    let bad_annotation = outcome(cms.create(&pp, &bad_annotation).await);
    let mut immutable = cm("immutable", &[]);
    immutable.immutable = Some(true);
    cms.create(&pp, &immutable).await.unwrap();
    let mut changed = cms.get("immutable").await.unwrap();
    changed.data = Some([("k".to_owned(), "other".to_owned())].into());
    let immutable_change = outcome(cms.replace("immutable", &pp, &changed).await);
    let wrong_ns = {
        let mut c = cm("wrong-ns", &[]);
        c.metadata.namespace = Some("elsewhere".into());
        outcome(cms.create(&pp, &c).await)
    };
    let missing_ns: Api<ConfigMap> = Api::namespaced(client, "no-such-namespace-xyz");
    let missing_ns = outcome(missing_ns.create(&pp, &cm("x", &[])).await);
    json!({
        "bad name": bad_name,
        "bad data key": bad_key,
        "bad label value": bad_label,
        "bad annotation key": bad_annotation,
        "change of immutable data": immutable_change,
        "body namespace differs from the URL's": wrong_ns,
        "create in a missing namespace": missing_ns,
    })
}

/// Main writes keep `.status`, status writes keep everything else.
async fn status_subresource(client: Client, ns: String) -> Value {
    let nodes: Api<Node> = Api::all(client);
    let name = format!("diff-{ns}");
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"a": "1"}},
        "status": {"capacity": {"pods": "10"}},
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    let status_on_create = created.status.as_ref().and_then(|s| s.capacity.clone());
    let main = nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"a": "2"}}, "status": {"capacity": {"pods": "20"}}}),
            ),
        )
        .await
        .unwrap();
    let after_main = (
        main.metadata.labels.clone().unwrap_or_default(),
        main.status.as_ref().and_then(|s| s.capacity.clone()),
    );
    let status = nodes
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"a": "3"}}, "status": {"capacity": {"pods": "30"}}}),
            ),
        )
        .await
        .unwrap();
    let after_status = (
        status.metadata.labels.clone().unwrap_or_default(),
        status.status.as_ref().and_then(|s| s.capacity.clone()),
    );
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
    json!({
        "status given on create": status_on_create.map(|c| serde_json::to_value(c).unwrap()),
        "after a main patch (labels, capacity)": serde_json::to_value(after_main).unwrap(),
        "after a status patch (labels, capacity)": serde_json::to_value(after_status).unwrap(),
    })
}

/// Optimistic concurrency: a stale resourceVersion loses, a current one wins.
async fn conflicts(client: Client, ns: String) -> Value {
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let pp = PostParams::default();
    let first = cms.create(&pp, &cm("occ", &[])).await.unwrap();
    let mut winner = first.clone();
    winner.data = Some([("k".to_owned(), "winner".to_owned())].into());
    let won = outcome(cms.replace("occ", &pp, &winner).await);
    let mut loser = first;
    loser.data = Some([("k".to_owned(), "loser".to_owned())].into());
    let lost = outcome(cms.replace("occ", &pp, &loser).await);
    let stale_patch = outcome(
        cms.patch(
            "occ",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"k": "x"}})),
        )
        .await,
    );
    let mut no_rv = cm("occ", &[]);
    no_rv.data = Some([("k".to_owned(), "unconditional".to_owned())].into());
    let unconditional = outcome(cms.replace("occ", &pp, &no_rv).await);
    let duplicate = outcome(cms.create(&pp, &cm("occ", &[])).await);
    let final_value = cms.get("occ").await.unwrap().data.unwrap()["k"].clone();
    json!({
        "update at the current version": won,
        "update at a stale version": lost,
        "merge patch carrying a stale version": stale_patch,
        "update without a version": unconditional,
        "create of an existing name": duplicate,
        "final value": final_value,
    })
}

/// A watch from a list's resourceVersion delivers exactly what happened after it.
async fn watch_resume(client: Client, ns: String) -> Value {
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let pp = PostParams::default();
    cms.create(&pp, &cm("before", &[])).await.unwrap();
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    cms.create(&pp, &cm("after", &[])).await.unwrap();
    cms.patch(
        "before",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "changed"}})),
    )
    .await
    .unwrap();
    cms.delete("after", &DeleteParams::default()).await.unwrap();
    let stream = cms
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap();
    let mut stream = stream.boxed();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.len() < 3 {
        let next = tokio::time::timeout_at(deadline, stream.try_next()).await;
        match next {
            Ok(Ok(Some(WatchEvent::Added(o)))) => {
                seen.push(format!("ADDED {}", o.metadata.name.unwrap()))
            }
            Ok(Ok(Some(WatchEvent::Modified(o)))) => {
                seen.push(format!("MODIFIED {}", o.metadata.name.unwrap()))
            }
            Ok(Ok(Some(WatchEvent::Deleted(o)))) => {
                seen.push(format!("DELETED {}", o.metadata.name.unwrap()))
            }
            Ok(Ok(Some(WatchEvent::Bookmark(_)))) => {}
            Ok(Ok(Some(WatchEvent::Error(e)))) => seen.push(format!("ERROR {}", e.code)),
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                seen.push(format!("stream error: {e}"));
                break;
            }
            Err(_) => {
                seen.push("no more events within 20s".into());
                break;
            }
        }
    }
    json!({"events after the list's resourceVersion": seen})
}

/// One watch's first event, summarised.
async fn first_event<K>(api: &Api<K>, rv: &str) -> Value
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let stream = match api.watch(&WatchParams::default().timeout(10), rv).await {
        Ok(s) => s,
        Err(e) => return json!({"request": error_summary(&e)}),
    };
    let mut stream = stream.boxed();
    match tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await {
        Ok(Ok(Some(WatchEvent::Error(e)))) => {
            json!({"ERROR": {"code": e.code, "reason": e.reason, "message": e.message}})
        }
        Ok(Ok(Some(WatchEvent::Added(o)))) => json!({"ADDED": o.meta().name}),
        Ok(Ok(Some(WatchEvent::Modified(o)))) => json!({"MODIFIED": o.meta().name}),
        Ok(Ok(Some(WatchEvent::Deleted(o)))) => json!({"DELETED": o.meta().name}),
        Ok(Ok(Some(WatchEvent::Bookmark(_)))) => json!("BOOKMARK"),
        Ok(Ok(None)) => json!("stream ended"),
        Ok(Err(e)) => json!({"stream error": e.to_string()}),
        Err(_) => json!("no event within 20s"),
    }
}

/// After etcd is compacted, a watch, an exact list and a list's continue token from before the
/// compaction get 410 Expired (what makes clients re-list). Secrets, because the real server
/// of this suite keeps no watch cache for them (`--watch-cache-sizes=secrets#0`), so it reads
/// etcd directly as the stand-in always does.
async fn expired(api: &TestApi, ns: String) -> Value {
    let secrets: Api<Secret> = Api::namespaced(api.client(), &ns);
    let pp = PostParams::default();
    let secret = |name: &str| Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let old = secrets.create(&pp, &secret("a")).await.unwrap();
    let old_rv = old.metadata.resource_version.unwrap();
    secrets.create(&pp, &secret("b")).await.unwrap();
    let page = secrets.list(&ListParams::default().limit(1)).await.unwrap();
    let token = page.metadata.continue_.unwrap_or_default();
    secrets.create(&pp, &secret("c")).await.unwrap();
    api.compact_storage().await.unwrap();
    let exact = ListParams::default()
        .at(&old_rv)
        .matching(VersionMatch::Exact);
    let with_message = |r: Result<_, kube::Error>| match r {
        Err(kube::Error::Api(s)) => {
            json!({"code": s.code, "reason": s.reason, "message": s.message})
        }
        other => outcome(other.map(|l: kube::core::ObjectList<Secret>| l.items.len())),
    };
    let next = ListParams::default().limit(1).continue_token(&token);
    json!({
        "watch from before the compaction": first_event(&secrets, &old_rv).await,
        "exact list from before the compaction": with_message(secrets.list(&exact).await),
        "continue token from before the compaction": with_message(secrets.list(&next).await),
    })
}

/// The same watch on ConfigMaps, which the real server serves from its watch cache.
async fn expired_cached(api: &TestApi, ns: String) -> Value {
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), &ns);
    let pp = PostParams::default();
    let old = cms.create(&pp, &cm("a", &[])).await.unwrap();
    let old_rv = old.metadata.resource_version.unwrap();
    cms.create(&pp, &cm("b", &[])).await.unwrap();
    cms.create(&pp, &cm("c", &[])).await.unwrap();
    api.compact_storage().await.unwrap();
    json!({"watch from before the compaction": first_event(&cms, &old_rv).await})
}

/// Label and field selectors on lists.
async fn selectors(client: Client, ns: String) -> Value {
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let pp = PostParams::default();
    cms.create(&pp, &cm("one", &[("tier", "a"), ("n", "1")]))
        .await
        .unwrap();
    cms.create(&pp, &cm("two", &[("tier", "b"), ("n", "2")]))
        .await
        .unwrap();
    cms.create(&pp, &cm("three", &[("n", "3")])).await.unwrap();
    let mut out = BTreeMap::new();
    for (labels, fields) in [
        ("tier=a", ""),
        ("tier==a", ""),
        ("tier!=a", ""),
        ("tier in (a,b)", ""),
        ("tier notin (a)", ""),
        ("tier", ""),
        ("!tier", ""),
        ("tier,n=2", ""),
        ("", "metadata.name=two"),
        ("", "metadata.name!=two"),
        ("n", "metadata.name!=one"),
    ] {
        let mut lp = ListParams::default();
        if !labels.is_empty() {
            lp = lp.labels(labels);
        }
        if !fields.is_empty() {
            lp = lp.fields(fields);
        }
        let got = match cms.list(&lp).await {
            Ok(list) => {
                let mut names: Vec<String> = list
                    .items
                    .into_iter()
                    .filter_map(|c| c.metadata.name)
                    .filter(|n| n != "kube-root-ca.crt" && n != "openshift-service-ca.crt")
                    .collect();
                names.sort();
                json!(names)
            }
            Err(e) => error_summary(&e),
        };
        out.insert(format!("labels {labels:?} fields {fields:?}"), got);
    }
    let bad = outcome(cms.list(&ListParams::default().labels("tier in a")).await);
    out.insert("a malformed label selector".into(), bad);
    let unknown = outcome(cms.list(&ListParams::default().fields("data.k=v")).await);
    out.insert("an unsupported field selector".into(), unknown);
    json!(out)
}

/// Finalizers hold a deleted object; the update that clears them removes it.
async fn finalizers(client: Client, ns: String) -> Value {
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let pp = PostParams::default();
    let mut held = cm("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&pp, &held).await.unwrap();
    let deleted = cms.delete("held", &DeleteParams::default()).await.unwrap();
    let delete_returned = if deleted.is_left() {
        "the object"
    } else {
        "a status"
    };
    let still = cms.get("held").await.unwrap();
    let terminating = still.metadata.deletion_timestamp.is_some();
    let add = outcome(
        cms.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}),
            ),
        )
        .await,
    );
    let clear = outcome(
        cms.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await,
    );
    let after = outcome(cms.get("held").await);
    let precondition = {
        cms.create(&pp, &cm("pre", &[])).await.unwrap();
        let dp = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some("not-the-uid".into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        outcome(cms.delete("pre", &dp).await)
    };
    json!({
        "delete of an object with a finalizer returned": delete_returned,
        "the object is terminating": terminating,
        "adding a finalizer while terminating": add,
        "clearing the finalizers": clear,
        "get after clearing": after,
        "delete with a wrong uid precondition": precondition,
    })
}

/// Server-side apply: each manager owns what it applied; a conflict is a 409 unless forced.
async fn server_side_apply(client: Client, ns: String) -> Value {
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let apply = |manager: &str, force: bool| {
        let mut pp = PatchParams::apply(manager);
        pp.force = force;
        pp
    };
    let body = |k: &str, v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {k: v}});
    let first = outcome(
        cms.patch("ssa", &apply("alice", false), &Patch::Apply(body("a", "1")))
            .await,
    );
    let other_field = outcome(
        cms.patch("ssa", &apply("bob", false), &Patch::Apply(body("b", "1")))
            .await,
    );
    let conflict = outcome(
        cms.patch("ssa", &apply("bob", false), &Patch::Apply(body("a", "2")))
            .await,
    );
    let forced = outcome(
        cms.patch("ssa", &apply("bob", true), &Patch::Apply(body("a", "2")))
            .await,
    );
    let dropped = outcome(
        cms.patch(
            "ssa",
            &apply("bob", false),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "2"}})),
        )
        .await,
    );
    let live = cms.get("ssa").await.unwrap();
    let mut managers: Vec<String> = live
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0.get("f:data")
                    .is_some_and(|d| d.as_object().is_some_and(|o| !o.is_empty()))
            })
        })
        .filter_map(|m| Some(format!("{} {}", m.manager.clone()?, m.operation.clone()?)))
        .collect();
    managers.sort();
    let no_manager = outcome(
        cms.patch(
            "ssa",
            &PatchParams::default(),
            &Patch::Apply(body("a", "3")),
        )
        .await,
    );
    json!({
        "first apply": first,
        "another manager applies another field": other_field,
        "another manager applies an owned field": conflict,
        "the same, forced": forced,
        "a manager stops applying a field": dropped,
        "data after": live.data,
        "managers owning data fields": managers,
        "apply without a field manager": no_manager,
    })
}

/// The project's own custom resource (`manifests/01-crd.yaml` as shipped): CEL and schema
/// validation, defaults, the status subresource and generation.
async fn custom_resource(client: Client, _ns: String) -> Value {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(include_str!("../../../manifests/01-crd.yaml")).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let c = crds.get(&name).await.unwrap();
        let established = c.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        if established {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "CRD {name} not Established in 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gvk = GroupVersionKind::gvk("etcd.static-operator.io", "v1alpha1", "EtcdCluster");
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::from_gvk(&gvk));
    let object = |name: &str, spec: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "etcd.static-operator.io/v1alpha1", "kind": "EtcdCluster",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    };
    let pp = PostParams::default();
    let mut out = BTreeMap::new();
    for (what, name, spec) in [
        ("a name other than cluster", "other", json!({})),
        (
            "backendQuotaGib 0 (CEL)",
            "cluster",
            json!({"backendQuotaGib": 0}),
        ),
        (
            "unhealthySeconds 5",
            "cluster",
            json!({"memberRemediation": {"unhealthySeconds": 5}}),
        ),
        (
            "an unknown managementState",
            "cluster",
            json!({"managementState": "Sometimes"}),
        ),
        (
            "a string for a number",
            "cluster",
            json!({"backendQuotaGib": "eight"}),
        ),
    ] {
        let result = api.create(&pp, &object(name, spec)).await;
        if result.is_ok() {
            api.delete(name, &DeleteParams::default()).await.unwrap();
        }
        out.insert(what.to_string(), outcome(result));
    }
    let created = api
        .create(&pp, &object("cluster", json!({"logLevel": "Debug"})))
        .await
        .unwrap();
    out.insert(
        "defaults filled in on create".into(),
        json!({
            "managementState": created.data["spec"]["managementState"],
            "localClientListener": created.data["spec"]["localClientListener"],
            "generation": created.metadata.generation,
        }),
    );
    let main = api
        .patch(
            "cluster",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"logLevel": "Trace"}, "status": {"observedGeneration": 7}}),
            ),
        )
        .await
        .unwrap();
    out.insert(
        "a main patch of spec and status".into(),
        json!({"generation": main.metadata.generation, "status": main.data.get("status")}),
    );
    let status = api
        .patch_status(
            "cluster",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"a": "1"}}, "spec": {"logLevel": "Normal"},
                "status": {"observedGeneration": 2}}),
            ),
        )
        .await
        .unwrap();
    out.insert(
        "a status patch of labels, spec and status".into(),
        json!({"generation": status.metadata.generation, "labels": status.metadata.labels,
            "logLevel": status.data["spec"]["logLevel"], "status": status.data.get("status")}),
    );
    json!(out)
}

type Case = fn(Client, String) -> futures::future::BoxFuture<'static, Value>;

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("validation", |c, ns| Box::pin(validation(c, ns))),
        ("status subresource", |c, ns| {
            Box::pin(status_subresource(c, ns))
        }),
        ("optimistic concurrency", |c, ns| Box::pin(conflicts(c, ns))),
        ("watch resume", |c, ns| Box::pin(watch_resume(c, ns))),
        ("selectors", |c, ns| Box::pin(selectors(c, ns))),
        ("finalizers and deletion", |c, ns| {
            Box::pin(finalizers(c, ns))
        }),
        ("server-side apply", |c, ns| {
            Box::pin(server_side_apply(c, ns))
        }),
        ("custom resource", |c, ns| Box::pin(custom_resource(c, ns))),
        ("custom resource schema", |c, ns| {
            Box::pin(schema::schema(c, ns))
        }),
        ("disruption budgets and eviction", |c, ns| {
            Box::pin(disruption_budgets(c, ns))
        }),
    ]
}

/// A client that does not retry 429s and 503s (kube's default client does, which would hide
/// what the server answered, e.g. an eviction refused by a disruption budget).
async fn client_without_retries(api: &TestApi) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(api.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

async fn run_all(api: &TestApi) -> BTreeMap<&'static str, Value> {
    let mut out = BTreeMap::new();
    let client = client_without_retries(api).await;
    for (name, case) in cases() {
        let ns = api.temp_namespace("diff").await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(60), case(client.clone(), ns.clone()))
            .await
            .unwrap_or_else(|_| panic!("case {name:?} took over 60s"));
        out.insert(name, got);
    }
    // These two compact the API's etcd, so they need the TestApi and run after the rest.
    let within = Duration::from_secs(60);
    let ns = api.temp_namespace("diff").await.unwrap();
    let got = tokio::time::timeout(within, expired(api, ns)).await;
    out.insert("expired resourceVersion", got.expect("case took over 60s"));
    let ns = api.temp_namespace("diff").await.unwrap();
    let got = tokio::time::timeout(within, expired_cached(api, ns)).await;
    out.insert(
        "expired resourceVersion, watch cache",
        got.expect("case took over 60s"),
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stand_in_answers_as_the_real_api_server_does() {
    // The controller-manager runs the disruption controller (PodDisruptionBudget status) and
    // makes each namespace's default ServiceAccount.
    let Some(real) = TestApi::kas(KasOptions {
        controller_manager: true,
        apiserver_args: vec!["--watch-cache-sizes=secrets#0".into()],
        ..KasOptions::default()
    })
    .await
    .unwrap() else {
        eprintln!(
            "SKIPPED the_stand_in_answers_as_the_real_api_server_does: no kas control plane beside \
             the repository (../shared/kas/kas) and no $KAS; the stand-in was not compared"
        );
        return;
    };
    let stand_in = TestApi::stand_in().await.unwrap();
    let want = run_all(&real).await;
    let got = run_all(&stand_in).await;
    let mut differences = Vec::new();
    let mut known_seen = Vec::new();
    for (case, real_summary) in &want {
        let stand_in_summary = &got[case];
        let keys: std::collections::BTreeSet<&String> = real_summary
            .as_object()
            .into_iter()
            .chain(stand_in_summary.as_object())
            .flat_map(|o| o.keys())
            .collect();
        for key in keys {
            let (r, s) = (&real_summary[key], &stand_in_summary[key]);
            let known = KNOWN_DIFFERENCES
                .iter()
                .find(|(c, k, _)| c == case && k == key);
            match (r == s, known) {
                (true, None) => {}
                (true, Some((_, _, why))) => differences.push(format!(
                    "{case} / {key}: listed as a known difference ({why}) but the stand-in now \
                     agrees; remove it from KNOWN_DIFFERENCES"
                )),
                (false, Some(_)) => known_seen.push(format!("{case} / {key}")),
                (false, None) => {
                    differences.push(format!("{case} / {key}:\n  real:     {r}\n  stand-in: {s}"))
                }
            }
        }
    }
    eprintln!(
        "real kube-apiserver answers:\n{}",
        serde_json::to_string_pretty(&want).unwrap()
    );
    eprintln!("known differences seen: {known_seen:?}");
    assert!(
        differences.is_empty(),
        "the stand-in differs from kube-apiserver in {} place(s):\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// Where the stand-in is known to answer differently, and why; each entry must still differ.
const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = {
    &[
        (
            "expired resourceVersion",
            "continue token from before the compaction",
            "the stand-in's 410 for an expired continue token offers no fresh, inconsistent \
             continue token in Status.metadata.continue (and its message does not mention one); \
             clients start a new list, which is what kube-runtime does",
        ),
        (
            "expired resourceVersion, watch cache",
            "watch from before the compaction",
            "the stand-in has no watch cache: a watch from a compacted revision gets 410 at once, \
             where kube-apiserver serves recent history from its cache for a while longer; \
             clients see the re-list path sooner on the stand-in, never later",
        ),
    ]
};
