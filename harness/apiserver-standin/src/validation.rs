//! The structural checks kube-apiserver makes that the project's code could trip on: object
//! names, label and annotation syntax, finalizer and owner-reference shape, ConfigMap/Secret
//! immutability, pod spec immutability, `metadata.uid` immutability and CRD naming. Each
//! failure is a [`Cause`]; the caller turns a non-empty list into a 422 `Invalid`.
//!
//! The real server validates every field of every built-in type; the stand-in checks the subset
//! above and otherwise stores what it is given.

use serde_json::Value;

use crate::error::Cause;
use crate::objects;
use crate::resources::{NameRule, ResourceInfo};

mod crd;
mod pod;

pub use crd::validate_crd;
pub use pod::{validate_pod_spec, validate_pod_spec_update};

/// RFC 1123 label, as kube-apiserver checks it (`k8s_names`).
pub fn is_dns1123_label(s: &str) -> bool {
    k8s_names::dns1123_label(s).is_ok()
}

/// RFC 1123 subdomain, as kube-apiserver checks it (`k8s_names`).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    k8s_names::dns1123_subdomain(s).is_ok()
}

/// A qualified name (label and annotation keys, finalizers): optional `<dns-subdomain>/`
/// prefix and a name part.
pub fn is_qualified_name(s: &str) -> bool {
    k8s_names::qualified_name(s).is_ok()
}

/// A label value: empty, or a qualified name's name part.
pub fn is_label_value(s: &str) -> bool {
    k8s_names::label_value(s).is_ok()
}

/// Checks a name against the resource's rule.
pub fn check_name(rule: NameRule, name: &str) -> Option<Cause> {
    if name.is_empty() {
        return Some(Cause::required("metadata.name"));
    }
    let broken = match rule {
        NameRule::Dns1123Subdomain => k8s_names::dns1123_subdomain(name).err(),
        NameRule::Dns1123Label => k8s_names::dns1123_label(name).err(),
        NameRule::PathSegment => {
            let ok = !name.contains('/') && !name.contains('%') && name != "." && name != "..";
            return (!ok).then(|| {
                Cause::invalid(
                    "metadata.name",
                    name,
                    "may not contain '/' or '%' and may not be '.' or '..'",
                )
            });
        }
    };
    broken.map(|e| Cause::invalid("metadata.name", name, e.api_message()))
}

/// Validation shared by every kind: name, labels, annotations, finalizers, owner references.
pub fn validate_object_meta(info: &ResourceInfo, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = objects::name(obj);
    if let Some(c) = check_name(info.name_rule, name) {
        causes.push(c);
    }
    let meta = obj.get("metadata").cloned().unwrap_or(Value::Null);
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Err(e) = k8s_names::qualified_name(k) {
                causes.push(Cause::invalid("metadata.labels", k, e.api_message()));
            }
            let broken = match v.as_str() {
                Some(value) => k8s_names::label_value(value).err(),
                None => Some(k8s_names::NameError::NotNamePart),
            };
            if let Some(e) = broken {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    &v.to_string(),
                    k8s_names::label_value_message(&e),
                ));
            }
        }
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0usize;
        for (k, v) in annotations {
            if let Err(e) = k8s_names::qualified_name(&k.to_ascii_lowercase()) {
                causes.push(Cause::invalid("metadata.annotations", k, e.api_message()));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > 256 * 1024 {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                message: "Too long: must have at most 262144 bytes".into(),
            });
        }
    }
    for (i, f) in objects::finalizers(obj).iter().enumerate() {
        if let Err(e) = k8s_names::qualified_name(f) {
            causes.push(Cause::invalid(
                format!("metadata.finalizers[{i}]"),
                f,
                e.api_message(),
            ));
        }
    }
    if let Some(refs) = meta.get("ownerReferences").and_then(Value::as_array) {
        for (i, r) in refs.iter().enumerate() {
            for field in ["apiVersion", "kind", "name", "uid"] {
                if r.get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(Cause::required(format!(
                        "metadata.ownerReferences[{i}].{field}"
                    )));
                }
            }
        }
        let controllers = refs
            .iter()
            .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            .count();
        if controllers > 1 {
            causes.push(Cause::invalid(
                "metadata.ownerReferences",
                &controllers.to_string(),
                "Only one reference can have Controller set to true",
            ));
        }
    }
    causes
}

/// Update-only metadata rules: uid immutable, no new finalizers while deleting.
pub fn validate_meta_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (old_uid, new_uid) = (objects::uid(old), objects::uid(new));
    if !new_uid.is_empty() && new_uid != old_uid {
        causes.push(Cause::invalid(
            "metadata.uid",
            new_uid,
            "field is immutable",
        ));
    }
    if objects::is_deleting(old) {
        let old_f = objects::finalizers(old);
        let added: Vec<String> = objects::finalizers(new)
            .into_iter()
            .filter(|f| !old_f.contains(f))
            .collect();
        if !added.is_empty() {
            causes.push(Cause::forbidden(
                "metadata.finalizers",
                format!("no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"),
            ));
        }
    }
    causes
}

/// ConfigMap and Secret: valid data keys.
pub fn validate_data_keys(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for field in ["data", "binaryData", "stringData"] {
        if let Some(map) = obj.get(field).and_then(Value::as_object) {
            for key in map.keys() {
                let ok = !key.is_empty()
                    && key.len() <= 253
                    && key
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
                    && key != "."
                    && key != ".."
                    && !key.starts_with("..");
                if !ok {
                    causes.push(Cause::invalid(
                        format!("{field}[{key}]"),
                        key,
                        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                    ));
                }
            }
        }
    }
    causes
}

/// ConfigMap and Secret: the data may total at most 1 MiB (keys and values; Secret values
/// counted decoded, approximated as 3/4 of their base64 length).
pub fn validate_data_size(obj: &Value, secret: bool) -> Vec<Cause> {
    const LIMIT: usize = 1024 * 1024;
    let mut total = 0usize;
    for field in ["data", "binaryData"] {
        if let Some(map) = obj.get(field).and_then(Value::as_object) {
            for (k, v) in map {
                let len = v.as_str().map_or(0, str::len);
                let decoded = secret || field == "binaryData";
                total += k.len() + if decoded { len / 4 * 3 } else { len };
            }
        }
    }
    if total > LIMIT {
        vec![Cause {
            reason: "FieldValueTooLong",
            field: "data".into(),
            message: format!("Too long: must have at most {LIMIT} bytes"),
        }]
    } else {
        Vec::new()
    }
}

/// ConfigMap and Secret with `immutable: true`: data and the flag itself may not change.
pub fn validate_immutable_data(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return causes;
    }
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        causes.push(Cause::forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for field in ["data", "binaryData"] {
        let empty = Value::Object(serde_json::Map::new());
        let o = old.get(field).unwrap_or(&empty);
        let n = new.get(field).unwrap_or(&empty);
        if o != n {
            causes.push(Cause::forbidden(
                field,
                "field is immutable when `immutable` is set",
            ));
        }
    }
    causes
}

/// Secret `type` may not change.
pub fn validate_secret_type(old: &Value, new: &Value) -> Vec<Cause> {
    let t = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .unwrap_or("Opaque")
            .to_string()
    };
    if t(old) != t(new) {
        vec![Cause::invalid("type", &t(new), "field is immutable")]
    } else {
        Vec::new()
    }
}

/// Decodes a built-in kind as its Kubernetes type and encodes it back, as kube-apiserver does
/// with every body: a wrongly typed field is an error (a 400 there), unknown fields are dropped.
/// Custom resources are returned unchanged (no schema validation or pruning).
pub fn normalize_builtin(info: &ResourceInfo, obj: &Value) -> Result<Value, String> {
    use k8s_openapi::api::{coordination, core, events, policy};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    fn try_as<T: serde::de::DeserializeOwned + serde::Serialize>(
        obj: &Value,
    ) -> Result<Value, String> {
        let typed = serde_json::from_value::<T>(obj.clone()).map_err(|e| e.to_string())?;
        serde_json::to_value(typed).map_err(|e| e.to_string())
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "namespaces") => try_as::<core::v1::Namespace>(obj),
        ("", "nodes") => try_as::<core::v1::Node>(obj),
        ("", "pods") => try_as::<core::v1::Pod>(obj),
        ("", "configmaps") => try_as::<core::v1::ConfigMap>(obj),
        ("", "secrets") => try_as::<core::v1::Secret>(obj),
        ("", "events") => try_as::<core::v1::Event>(obj),
        ("", "serviceaccounts") => try_as::<core::v1::ServiceAccount>(obj),
        ("", "endpoints") => try_as::<core::v1::Endpoints>(obj),
        ("events.k8s.io", "events") => try_as::<events::v1::Event>(obj),
        ("coordination.k8s.io", "leases") => try_as::<coordination::v1::Lease>(obj),
        ("policy", "poddisruptionbudgets") => try_as::<policy::v1::PodDisruptionBudget>(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            try_as::<apiextensions::v1::CustomResourceDefinition>(obj)
        }
        _ => Ok(obj.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn dns_names() {
        assert!(is_dns1123_subdomain("etcd-pod.n1"));
        assert!(!is_dns1123_subdomain("Etcd"));
        assert!(!is_dns1123_subdomain("-a"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        assert!(is_dns1123_label("kube-system"));
        assert!(!is_dns1123_label("a.b"));
        assert!(is_qualified_name("example.com/role"));
        assert!(is_qualified_name("Role_1"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(check_name(NameRule::Dns1123Subdomain, "UPPER").is_some());
        assert!(check_name(NameRule::Dns1123Subdomain, "").is_some());
        assert!(check_name(NameRule::PathSegment, "a.b_C").is_none());
    }

    #[test]
    fn data_is_limited_to_one_mebibyte() {
        let small = json!({"data": {"a": "x".repeat(1000)}});
        assert!(validate_data_size(&small, false).is_empty());
        let big = json!({"data": {"a": "x".repeat(1024 * 1024 + 1)}});
        assert_eq!(validate_data_size(&big, false).len(), 1);
    }

    #[test]
    fn immutable_configmap_rejects_data_change() {
        let old = json!({"immutable": true, "data": {"a": "1"}});
        assert!(validate_immutable_data(&old, &old).is_empty());
        let changed = json!({"immutable": true, "data": {"a": "2"}});
        assert_eq!(validate_immutable_data(&old, &changed).len(), 1);
        let unset = json!({"data": {"a": "1"}});
        assert_eq!(validate_immutable_data(&old, &unset).len(), 1);
        let mutable = json!({"data": {"a": "1"}});
        assert!(validate_immutable_data(&mutable, &changed).is_empty());
    }

    #[test]
    fn pod_spec_is_mostly_immutable() {
        let old =
            json!({"spec": {"containers": [{"name": "c", "image": "a:1"}], "nodeName": "n1"}});
        let image =
            json!({"spec": {"containers": [{"name": "c", "image": "a:2"}], "nodeName": "n1"}});
        assert!(validate_pod_spec_update(&old, &image).is_empty());
        let node =
            json!({"spec": {"containers": [{"name": "c", "image": "a:1"}], "nodeName": "n2"}});
        assert_eq!(validate_pod_spec_update(&old, &node).len(), 1);
        let tol = json!({"spec": {"containers": [{"name": "c", "image": "a:1"}], "nodeName": "n1",
            "tolerations": [{"key": "k", "operator": "Exists"}]}});
        assert!(validate_pod_spec_update(&old, &tol).is_empty());
        assert_eq!(
            validate_pod_spec_update(&tol, &old).len(),
            1,
            "tolerations may only be added"
        );
    }

    #[test]
    fn meta_update_rules() {
        let old = json!({"metadata": {"uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["a"]}});
        let new = json!({"metadata": {"uid": "u2", "finalizers": ["a", "b"]}});
        assert_eq!(validate_meta_update(&old, &new).len(), 2);
    }

    #[test]
    fn wrongly_typed_fields_do_not_decode() {
        let reg = crate::resources::Registry::default();
        let cms = reg.lookup("", "v1", "configmaps").unwrap();
        let ok = normalize_builtin(
            &cms,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}, "data": {"k": "v"}, "bogus": 1}),
        )
        .unwrap();
        assert_eq!(ok["data"]["k"], "v");
        assert!(ok.get("bogus").is_none(), "unknown fields are dropped");
        assert_eq!(ok["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
        assert!(normalize_builtin(&cms, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": true}})).is_err());
        let secrets = reg.lookup("", "v1", "secrets").unwrap();
        assert!(normalize_builtin(&secrets, &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}, "data": {"k": "!!"}})).is_err());
    }

    #[test]
    fn crd_name_must_match() {
        let crd = json!({"metadata": {"name": "wrong"}, "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"}, "versions": [{"name": "v1", "served": true, "storage": true}]}});
        let causes = validate_crd(&crd);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.name");
    }

    #[test]
    fn a_crd_with_a_rule_the_stand_in_cannot_evaluate_is_refused() {
        let crd = |rule: &str| {
            json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com",
                "scope": "Cluster", "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": {"type": "object",
                        "x-kubernetes-validations": [{"rule": rule}]}}}}}]}})
        };
        assert_eq!(validate_crd(&crd("has(self.a) || self.b > 1")), Vec::new());
        let causes = validate_crd(&crd("self.a.lowerAscii() == 'x'"));
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(
            causes[0].field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
        );
    }
}
