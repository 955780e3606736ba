//! Payload status (issue 18, part 4): where the API serves `config.openshift.io/v1`
//! ClusterOperators, the operator mirrors its payload status into ClusterOperator `etcd`:
//! `Upgradeable=False` (reason `MembershipChanging`) while the bootstrapped member grows to three,
//! then `Upgradeable=True`, `Available=True`, the versions (the operator's, and etcd's once every
//! member runs it) and the related objects. The ClusterOperator kind is installed here as a CRD
//! (OpenShift serves it the same way, from a CRD the payload installs). Runs on the stand-in and,
//! with `TEST_API=kas`, on the real kube-apiserver.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::time::Duration;

use e2e::controlplane::{LocalControlPlane, wait_for};
use etcd_operator::api::EtcdClusterSpec;
use etcd_operator::driver::cluster_operator::{CLUSTER_OPERATOR, resource};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::DynamicObject;
use serde_json::{Value, json};

fn cluster_operator_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusteroperators.config.openshift.io"},
        "spec": {
            "group": "config.openshift.io",
            "scope": "Cluster",
            "names": {"plural": "clusteroperators", "singular": "clusteroperator",
                      "kind": "ClusterOperator", "listKind": "ClusterOperatorList",
                      "shortNames": ["co"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .unwrap()
}

fn condition<'a>(co: &'a Value, type_: &str) -> Option<&'a Value> {
    co["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits until ClusterOperator `etcd` satisfies `check`; returns it.
async fn wait_co(api: &Api<DynamicObject>, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let last = std::sync::Mutex::new(Value::Null);
    let result = wait_for(Duration::from_secs(240), what, || {
        let api = api.clone();
        let (check, last) = (&check, &last);
        async move {
            let co = api
                .get_opt(CLUSTER_OPERATOR)
                .await
                .map_err(|e| e.to_string())?
                .map(|o| serde_json::to_value(o).unwrap())
                .unwrap_or(Value::Null);
            let ok = check(&co);
            *last.lock().unwrap() = co.clone();
            if ok {
                Ok(())
            } else {
                Err(format!("{}", co["status"]))
            }
        }
    })
    .await;
    result.unwrap();
    last.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payload_status_is_mirrored_into_a_cluster_operator() {
    let mut cp = LocalControlPlane::start().await.unwrap();
    cp.install_crd(&cluster_operator_crd()).await.unwrap();
    for i in 1..=3 {
        cp.add_node(&format!("n{i}")).await.unwrap();
    }
    cp.bootstrap("n1").await.unwrap();
    cp.create_cluster(EtcdClusterSpec::default()).await.unwrap();
    cp.start_operator().unwrap();
    let api: Api<DynamicObject> = Api::all_with(cp.client(), &resource());
    let growing = wait_co(
        &api,
        "Upgradeable=False (MembershipChanging) while etcd grows",
        |co| {
            condition(co, "Upgradeable")
                .is_some_and(|c| c["status"] == "False" && c["reason"] == "MembershipChanging")
        },
    )
    .await;
    let message = condition(&growing, "Upgradeable").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("n2") || message.contains("n3") || message.contains("learner"),
        "the message names what is in flight: {message}"
    );
    let settled = wait_co(
        &api,
        "Upgradeable=True, Available=True, etcd's version",
        |co| {
            let upgradeable = condition(co, "Upgradeable").is_some_and(|c| c["status"] == "True");
            let available = condition(co, "Available").is_some_and(|c| c["status"] == "True");
            let etcd = co["status"]["versions"].as_array().is_some_and(|v| {
                v.iter()
                    .any(|v| v["name"] == "etcd" && v["version"] == "3.6.16")
            });
            upgradeable && available && etcd
        },
    )
    .await;
    let status = &settled["status"];
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["Available", "Progressing", "Degraded", "Upgradeable"]
    );
    assert_eq!(
        status["versions"][0],
        json!({"name": "operator", "version": env!("CARGO_PKG_VERSION")})
    );
    let related: Vec<String> = status["relatedObjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["resource"].as_str().unwrap(),
                o["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        related,
        [
            "namespaces/etcd",
            "namespaces/etcd-operator",
            "etcdclusters/cluster",
            "poddisruptionbudgets/etcd-quorum-guard"
        ]
    );
    // The EtcdCluster carries the same payload status.
    let cluster = cp.cluster().await.unwrap().unwrap();
    let own = cluster.status.unwrap();
    assert_eq!(
        serde_json::to_value(&own.versions).unwrap(),
        status["versions"]
    );
    assert!(
        own.conditions
            .iter()
            .any(|c| c.type_ == "Upgradeable" && c.status == "True")
    );
    cp.shutdown().await;
}
