//! CustomResourceDefinitions: what a CRD makes the stand-in serve, and the status the
//! apiextensions controllers of a real server would write (`NamesAccepted` and `Established`
//! true, `acceptedNames`, `storedVersions`), written here inline with every CRD write.

use serde_json::{Value, json};

use crate::objects;
use crate::resources::{NameRule, Representation, ResourceInfo};

/// The finalizer a CRD gets on its first delete, so its custom resources go before it.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Sets the `Terminating` condition of a CRD being deleted.
pub fn mark_terminating(crd: &mut Value, now: &str) {
    let cond = json!({"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress",
        "message": "CustomResource deletion is in progress", "lastTransitionTime": now});
    if let Some(conds) = crd
        .get_mut("status")
        .and_then(|s| s.get_mut("conditions"))
        .and_then(Value::as_array_mut)
    {
        conds.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
        conds.push(cond);
    }
}

/// The resources a CRD serves: one per served version.
pub fn resources_of(crd: &Value) -> Vec<ResourceInfo> {
    let s = |p: &str| objects::str_at(crd, p);
    let group = s("/spec/group");
    let plural = s("/spec/names/plural");
    let kind = s("/spec/names/kind");
    let singular = {
        let v = s("/spec/names/singular");
        if v.is_empty() {
            kind.to_ascii_lowercase()
        } else {
            v
        }
    };
    let namespaced = s("/spec/scope") == "Namespaced";
    let short_names = objects::strings(crd.pointer("/spec/names/shortNames"));
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .map(|v| {
            let version = v.get("name").and_then(Value::as_str).unwrap_or_default();
            let status = v.pointer("/subresources/status").is_some();
            let extra_fields = v
                .get("selectableFields")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                        .map(|p| p.trim_start_matches('.').to_string())
                        .collect()
                })
                .unwrap_or_default();
            ResourceInfo {
                group: group.clone(),
                version: version.to_string(),
                resource: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                status_subresource: status,
                tracks_generation: true,
                name_rule: NameRule::Dns1123Subdomain,
                short_names: short_names.clone(),
                extra_fields,
                storage: format!("{group}/{plural}"),
                representation: Representation::Native,
                crd: Some(objects::name(crd).to_string()),
                return_deleted_object: true,
                allow_create_on_update: false,
                schema: v
                    .pointer("/schema/openAPIV3Schema")
                    .cloned()
                    .map(std::sync::Arc::new),
            }
        })
        .collect()
}

/// Writes the status the apiextensions controllers would: names accepted, established,
/// stored versions (keeping versions stored before). `now` is the transition time for new
/// conditions.
pub fn set_status(crd: &mut Value, old_status: Option<&Value>, now: &str) {
    let names = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut stored: Vec<String> = old_status
        .and_then(|s| s.get("storedVersions"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if let Some(storage) = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
        && !stored.iter().any(|s| s == storage)
    {
        stored.push(storage.to_string());
    }
    let since = |ty: &str| -> String {
        old_status
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
            })
            .and_then(|c| c.get("lastTransitionTime"))
            .and_then(Value::as_str)
            .unwrap_or(now)
            .to_string()
    };
    let terminating: Vec<Value> = old_status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter(|c| c.get("type").and_then(Value::as_str) == Some("Terminating"))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let mut status = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": since("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": since("Established")},
        ],
        "acceptedNames": names,
        "storedVersions": stored,
    });
    if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        conds.extend(terminating);
    }
    objects::object_mut(crd).insert("status".into(), status);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn widget_crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com",
            "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                {"name": "v1beta1", "served": false, "storage": false}]}})
    }

    #[test]
    fn served_versions_become_resources() {
        let rs = resources_of(&widget_crd());
        assert_eq!(rs.len(), 1);
        assert_eq!(rs[0].api_version(), "example.com/v1");
        assert!(rs[0].status_subresource);
        assert!(rs[0].namespaced);
        assert_eq!(rs[0].singular, "widget");
        assert_eq!(
            rs[0].key("/registry", "ns", "w"),
            "/registry/example.com/widgets/ns/w"
        );
    }

    #[test]
    fn status_is_established_and_keeps_transition_times() {
        let mut crd = widget_crd();
        set_status(&mut crd, None, "t1");
        assert_eq!(crd["status"]["conditions"][1]["type"], "Established");
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        let old = crd["status"].clone();
        set_status(&mut crd, Some(&old), "t2");
        assert_eq!(crd["status"]["conditions"][0]["lastTransitionTime"], "t1");
    }
}
