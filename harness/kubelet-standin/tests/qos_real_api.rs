//! The node agent's QoS class agrees with the one the real kube-apiserver computes: pods with
//! the resource shapes that matter are created on a real kube-apiserver (the shared kas control
//! plane) and the class it stored is compared with `kubelet_standin::qos::qos_class` of the spec as
//! submitted (un-defaulted, as a static pod's manifest is). `status.qosClass` is immutable, so a
//! disagreement makes the real API reject every status the agent writes for that pod.
//! Skipped, with a loud line, where kas is not beside the repository.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements, ServiceAccount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube_testapi::{KasOptions, TestApi};
use kubelet_standin::qos::qos_class;

fn list(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    })
}

fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        image: Some("registry.k8s.io/pause:3.10".into()),
        resources: Some(ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Pod shapes: name → (containers, init containers).
fn shapes() -> Vec<(&'static str, Vec<Container>, Vec<Container>)> {
    vec![
        ("none", vec![container("c", &[], &[])], vec![]),
        (
            "requests-only",
            vec![container("c", &[("cpu", "100m"), ("memory", "200Mi")], &[])],
            vec![container("i", &[], &[])],
        ),
        (
            "limits-only",
            vec![container("c", &[], &[("cpu", "1"), ("memory", "1Gi")])],
            vec![],
        ),
        (
            "equal-other-spelling",
            vec![container(
                "c",
                &[("cpu", "1000m"), ("memory", "1073741824")],
                &[("cpu", "1"), ("memory", "1Gi")],
            )],
            vec![],
        ),
        (
            "init-without-limits",
            vec![container("c", &[], &[("cpu", "1"), ("memory", "1Gi")])],
            vec![container("i", &[("cpu", "10m")], &[])],
        ),
        (
            "cpu-limit-only",
            vec![container("c", &[], &[("cpu", "1")])],
            vec![],
        ),
        (
            "other-resource-only",
            vec![container("c", &[("ephemeral-storage", "1Gi")], &[])],
            vec![],
        ),
        (
            "two-guaranteed",
            vec![
                container("a", &[], &[("cpu", "500m"), ("memory", "64Mi")]),
                container(
                    "b",
                    &[("cpu", "0.5")],
                    &[("cpu", "500m"), ("memory", "64Mi")],
                ),
            ],
            vec![],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_class_agrees_with_the_real_api_server() {
    let Some(api) = TestApi::kas(KasOptions::default()).await.unwrap() else {
        eprintln!(
            "SKIPPED qos_class_agrees_with_the_real_api_server: no kas control plane beside the \
             repository (../shared/kas/kas) and no $KAS; nothing was compared"
        );
        return;
    };
    let ns = api.temp_namespace("qos").await.unwrap();
    // No controller-manager here: the ServiceAccount pods need is made by hand.
    Api::<ServiceAccount>::namespaced(api.client(), &ns)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: ObjectMeta {
                    name: Some("default".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(api.client(), &ns);
    let mut disagreements = Vec::new();
    for (name, containers, init) in shapes() {
        let spec = PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            node_name: Some("no-such-node".into()),
            automount_service_account_token: Some(false),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(spec.clone()),
            ..Default::default()
        };
        let created = pods.create(&PostParams::default(), &pod).await.unwrap();
        let server = created.status.and_then(|s| s.qos_class).unwrap_or_default();
        let ours = qos_class(&spec);
        eprintln!("{name}: kube-apiserver {server}, node agent {ours}");
        if server != ours {
            disagreements.push(format!(
                "{name}: kube-apiserver {server}, node agent {ours}"
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "the node agent's QoS class differs from kube-apiserver's: {}",
        disagreements.join("; ")
    );
}
