//! Pod spec checks: what a create must carry, and which fields an update may not change.

use serde_json::Value;

use crate::error::Cause;

/// Pod create: at least one container, each with a name (RFC 1123 label) and an image.
pub fn validate_pod_spec(pod: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let containers = pod
        .get("spec")
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    match containers {
        None => causes.push(Cause::required("spec.containers")),
        Some(list) if list.is_empty() => causes.push(Cause::required("spec.containers")),
        Some(_) => {}
    }
    for list in ["initContainers", "containers"] {
        let items = pod
            .get("spec")
            .and_then(|s| s.get(list))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, c) in items.iter().enumerate() {
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            if name.is_empty() {
                causes.push(Cause::required(format!("spec.{list}[{i}].name")));
            } else if let Err(e) = k8s_names::dns1123_label(name) {
                causes.push(Cause::invalid(
                    format!("spec.{list}[{i}].name"),
                    name,
                    e.api_message(),
                ));
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                causes.push(Cause::required(format!("spec.{list}[{i}].image")));
            }
        }
    }
    causes
}

/// Pod update: only container images, `activeDeadlineSeconds`, added tolerations and
/// `terminationGracePeriodSeconds` may change in `spec` (the real server's rule, simplified).
pub fn validate_pod_spec_update(old: &Value, new: &Value) -> Vec<Cause> {
    // Blank out what may change, then compare what is left.
    let strip = |pod: &Value| -> Value {
        let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(map) = spec.as_object_mut() {
            for field in [
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
            ] {
                map.remove(field);
            }
            for list in ["containers", "initContainers"] {
                if let Some(Value::Array(items)) = map.get_mut(list) {
                    for c in items.iter_mut() {
                        if let Some(obj) = c.as_object_mut() {
                            obj.remove("image");
                        }
                    }
                }
            }
        }
        spec
    };
    let mut causes = Vec::new();
    if strip(new) != strip(old) {
        causes.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
    let old_tol = old
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let new_tol = new
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if old_tol.iter().any(|t| !new_tol.contains(t)) {
        causes.push(Cause::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    }
    causes
}
