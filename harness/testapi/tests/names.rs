//! `k8s_names`, the one module every crate checks Kubernetes names with, held to the API
//! server's own answers: each candidate is sent (dry run: nothing is stored) as a Namespace name
//! (an RFC 1123 label), a ConfigMap name (a subdomain), a label key (a qualified name) and a
//! label value, and the API server's accept or refuse must be the module's verdict; a refusal's
//! message must carry the module's sentence for it. With `TEST_API=kas` the answers are
//! kube-apiserver's; on the stand-in (which validates with the same module) the test checks the
//! wiring.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use kube_testapi::TestApi;

fn candidates() -> Vec<String> {
    let mut c: Vec<String> = [
        "a",
        "0",
        "my-name",
        "123-abc",
        "A",
        "-a",
        "a-",
        "a.b",
        "a..b",
        "a-.b",
        ".a",
        "a.",
        "a_b",
        "é",
        "a b",
        "x,y",
        "MyName",
        "my.name_x-1",
        "x/y",
        "example.com/x",
        "Example.com/x",
        "/x",
        "example.com/",
        "a/b/c",
        "a.b/-x",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    c.push("a".repeat(63));
    c.push("a".repeat(64));
    c.push(format!("{}.b", "a".repeat(64)));
    c.push("a".repeat(253));
    c.push("a".repeat(254));
    c.push(format!("{}/x", "a".repeat(254)));
    c
}

/// A dry-run create: nothing is stored.
fn dry() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// The API server's answer to a dry-run create: `Ok` or the refusal's message.
fn answer<K>(what: &str, created: Result<K, kube::Error>) -> Result<(), String> {
    match created {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 422 => Err(s.message),
        Err(e) => panic!("{what}: not a validation answer: {e}"),
    }
}

fn config_map(name: &str, labels: BTreeMap<String, String>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// Compares one verdict with one answer; a disagreement is returned as a line.
fn compare(
    what: &str,
    name: &str,
    ours: Result<(), k8s_names::NameError>,
    message: impl Fn(&k8s_names::NameError) -> String,
    theirs: Result<(), String>,
) -> Option<String> {
    match (ours, theirs) {
        (Ok(()), Ok(())) => None,
        (Err(e), Err(said)) if said.contains(&message(&e)) => None,
        (ours, theirs) => Some(format!(
            "{what} {name:?}: ours {ours:?}, the API server {theirs:?}"
        )),
    }
}

async fn disagreements(client: &Client, name: &str) -> Vec<String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut out = Vec::new();
    if !name.is_empty() {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let theirs = answer(name, namespaces.create(&dry(), &ns).await);
        out.extend(compare(
            "namespace name",
            name,
            k8s_names::dns1123_label(name),
            k8s_names::NameError::api_message,
            theirs,
        ));
        let theirs = answer(
            name,
            maps.create(&dry(), &config_map(name, BTreeMap::new()))
                .await,
        );
        out.extend(compare(
            "configmap name",
            name,
            k8s_names::dns1123_subdomain(name),
            k8s_names::NameError::api_message,
            theirs,
        ));
    }
    let key = BTreeMap::from([(name.to_owned(), "v".to_owned())]);
    let theirs = answer(
        name,
        maps.create(&dry(), &config_map("names-key", key)).await,
    );
    out.extend(compare(
        "label key",
        name,
        k8s_names::qualified_name(name),
        k8s_names::NameError::api_message,
        theirs,
    ));
    let value = BTreeMap::from([("k".to_owned(), name.to_owned())]);
    let theirs = answer(
        name,
        maps.create(&dry(), &config_map("names-value", value)).await,
    );
    out.extend(compare(
        "label value",
        name,
        k8s_names::label_value(name),
        k8s_names::label_value_message,
        theirs,
    ));
    out
}

#[tokio::test]
async fn names_are_judged_as_the_api_server_judges_them() {
    let api = TestApi::start().await.unwrap();
    let client = api.client();
    let mut all = candidates();
    all.push(String::new());
    let mut wrong = Vec::new();
    for name in &all {
        wrong.extend(disagreements(&client, name).await);
    }
    assert!(
        wrong.is_empty(),
        "{} of {} candidates judged differently (real API server: {}):\n{}",
        wrong.len(),
        all.len(),
        api.is_real(),
        wrong.join("\n")
    );
}
