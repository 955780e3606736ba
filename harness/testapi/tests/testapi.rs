//! The harness gives a working API: a ConfigMap round-trips through it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube_testapi::TestApi;

#[tokio::test]
async fn a_configmap_round_trips() {
    let api = TestApi::start().await.unwrap();
    let ns = api.temp_namespace("testapi").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), &ns);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("probe".into()),
            ..Default::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let got = cms.get("probe").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    assert!(api.kubeconfig().is_file());
    api.delete_namespace(&ns).await.unwrap();
}
