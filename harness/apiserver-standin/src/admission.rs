//! Admission: the checks kube-apiserver's admission plugins make that the project's code can
//! meet: `NamespaceLifecycle` (create into a missing namespace is a 404, into a terminating one a
//! 403) and `ServiceAccount` (a pod's service account must exist; mirror pods are exempt).

use serde_json::Value;

use crate::error::{ApiError, GroupResource};
use crate::objects;
use crate::resources::ResourceInfo;
use crate::state::State;
use crate::verbs::read;

const NAMESPACES: GroupResource<'static> = GroupResource {
    group: "",
    resource: "namespaces",
};

/// Custom resources cannot be created while their CRD is being deleted (405, as on the real
/// server).
pub async fn crd_not_terminating(
    state: &State,
    info: &ResourceInfo,
    crd_name: &str,
) -> Result<(), ApiError> {
    let reg = state.registry();
    let Some(crds) = reg.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions") else {
        return Ok(());
    };
    match read(state, &crds, "", crd_name).await? {
        Some(s) if objects::is_deleting(&s.object) => Err(ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!(
                "create not allowed while custom resource definition is terminating ({})",
                info.resource
            ),
            details: None,
        }),
        _ => Ok(()),
    }
}

/// The namespace must exist and not be terminating (admission `NamespaceLifecycle`).
pub async fn namespace_admission(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    let reg = state.registry();
    let Some(ns_info) = reg.lookup("", "v1", "namespaces") else {
        return Ok(());
    };
    match read(state, &ns_info, "", ns).await? {
        None => Err(ApiError::not_found(NAMESPACES, ns)),
        Some(s) if objects::is_deleting(&s.object) => Err(ApiError::forbidden(
            info.gr(),
            name,
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        )),
        Some(_) => Ok(()),
    }
}

/// Admission `ServiceAccount`: a pod names a service account (`default` if none) that must
/// exist; mirror pods are exempt.
pub async fn service_account_admission(
    state: &State,
    ns: &str,
    pod: &mut Value,
) -> Result<(), ApiError> {
    let mirror = pod
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some();
    if mirror || !state.config.service_account_admission {
        return Ok(());
    }
    let sa = pod
        .pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("serviceAccountName".into(), Value::String(sa.clone()));
    }
    let reg = state.registry();
    let Some(sa_info) = reg.lookup("", "v1", "serviceaccounts") else {
        return Ok(());
    };
    if read(state, &sa_info, ns, &sa).await?.is_none() {
        let pods = GroupResource {
            group: "",
            resource: "pods",
        };
        return Err(ApiError::forbidden(
            pods,
            objects::name(pod),
            &format!("error looking up service account {ns}/{sa}: serviceaccount {sa:?} not found"),
        ));
    }
    Ok(())
}
