//! Structural schema of the project's CRD (`manifests/01-crd.yaml`): the patch of issue 31 (a
//! client without `commonName`, compared word for word), wrong types, an enum, bounds, pruning
//! of unknown fields (silently by default, refused with `fieldValidation=Strict`), defaults on
//! update, a nullable `null`, and status writes validated against the status schema.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    ValidationDirective,
};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::{error_summary, outcome};

/// Installs the CRD (unless an earlier case did) and waits until it serves.
async fn etcd_clusters(client: &Client) -> Api<DynamicObject> {
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(include_str!("../../../../manifests/01-crd.yaml")).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let _ = crds.create(&PostParams::default(), &crd).await;
    let gvk = GroupVersionKind::gvk("etcd.static-operator.io", "v1alpha1", "EtcdCluster");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // Until the CRD is Established (and for the real server's 429 window after it) lists fail.
    while api.list(&Default::default()).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "EtcdCluster not served in 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api
}

fn merge(p: Value) -> Patch<Value> {
    Patch::Merge(p)
}

fn strict() -> PatchParams {
    PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..Default::default()
    }
}

/// A refusal with its message (for the cases whose wording the issue asks to match).
fn with_message<T>(r: Result<T, kube::Error>) -> Value {
    match r {
        Err(kube::Error::Api(s)) => {
            let mut v = error_summary(&kube::Error::Api(s.clone()));
            v["message"] = json!(s.message);
            v
        }
        other => outcome(other),
    }
}

pub async fn schema(client: Client, ns: String) -> Value {
    let api = etcd_clusters(&client).await;
    if api.get_opt("cluster").await.unwrap().is_none() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "etcd.static-operator.io/v1alpha1", "kind": "EtcdCluster",
            "metadata": {"name": "cluster"}, "spec": {}}))
        .unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
    }
    let pp = PatchParams::default();
    let patch = |p: Value| {
        let api = api.clone();
        async move {
            api.patch("cluster", &PatchParams::default(), &merge(p))
                .await
        }
    };
    let issue = with_message(patch(json!({"spec": {"clients": [{"name": "kas"}]}})).await);
    let wrong_type =
        outcome(patch(json!({"spec": {"clients": [{"name": "kas", "commonName": 5}]}})).await);
    let enum_value = outcome(patch(json!({"spec": {"logLevel": "Loud"}})).await);
    let too_long = outcome(
        patch(json!({"spec": {"clients": [{"name": "kas", "commonName": "x".repeat(65)}]}})).await,
    );
    let negative = outcome(patch(json!({"spec": {"backendQuotaGib": -1}})).await);
    let pruned = patch(json!({"spec": {"bogus": 1, "timing": {"zz": 2}}})).await;
    let pruned = match pruned {
        Ok(o) => json!({"bogus": o.data["spec"].get("bogus"), "timing": o.data["spec"]["timing"]}),
        Err(e) => error_summary(&e),
    };
    let strict_cr = outcome(
        api.patch("cluster", &strict(), &merge(json!({"spec": {"bogus": 1}})))
            .await,
    );
    let defaulted = patch(json!({"spec": {"timing": null, "logLevel": null}})).await;
    let defaulted =
        defaulted.map(|o| json!([o.data["spec"]["timing"], o.data["spec"]["logLevel"]]));
    let nullable = api
        .patch(
            "cluster",
            &pp,
            &Patch::<Value>::Json(
                serde_json::from_value(
                    json!([{"op": "add", "path": "/spec/backendQuotaMib", "value": null}]),
                )
                .unwrap(),
            ),
        )
        .await
        .map(|o| {
            o.data["spec"]
                .as_object()
                .map(|s| s.contains_key("backendQuotaMib"))
        });
    let status_type = outcome(
        api.patch_status(
            "cluster",
            &pp,
            &merge(json!({"status": {"latestAvailableRevision": "x"}})),
        )
        .await,
    );
    let status_required = outcome(
        api.patch_status(
            "cluster",
            &pp,
            &merge(json!({"status": {"members": [{"name": "a"}]}})),
        )
        .await,
    );
    let status_ignores_spec = api
        .patch_status(
            "cluster",
            &pp,
            &merge(json!({"spec": {"logLevel": "Loud"}, "status": {}})),
        )
        .await
        .map(|o| o.data["spec"]["logLevel"].clone());
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "fv"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let strict_cm = outcome(
        cms.patch("fv", &strict(), &merge(json!({"bogus": 1})))
            .await,
    );
    let warn_cm = outcome(cms.patch("fv", &pp, &merge(json!({"bogus": 1}))).await);
    json!({
        "the issue's patch: a client without commonName": issue,
        "a number for a string in a list item": wrong_type,
        "a logLevel outside the enum": enum_value,
        "a commonName over maxLength": too_long,
        "a quota below minimum": negative,
        "unknown fields are pruned": pruned,
        "an unknown field with fieldValidation=Strict": strict_cr,
        "nulls of fields with defaults take the defaults": defaulted.map_err(|e| error_summary(&e)).unwrap_or_else(|e| e),
        "a null for a nullable field is kept": nullable.map_err(|e| error_summary(&e)).map(|v| json!(v)).unwrap_or_else(|e| e),
        "a status write with a wrongly typed field": status_type,
        "a status write missing required fields": status_required,
        "a status write leaves an invalid spec alone": status_ignores_spec.map_err(|e| error_summary(&e)).unwrap_or_else(|e| e),
        "a ConfigMap patch with an unknown field, Strict": strict_cm,
        "a ConfigMap patch with an unknown field, default (Warn)": warn_cm,
    })
}
