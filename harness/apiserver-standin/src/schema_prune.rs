//! What kube-apiserver does to a custom resource before validating it, on every write and on
//! every read from storage: **pruning** (fields the structural schema does not declare are
//! dropped, unless `x-kubernetes-preserve-unknown-fields` keeps them; a `null` the schema does
//! not allow with `nullable: true` is dropped) and **defaulting** (a missing field, or a
//! not-nullable `null`, takes the schema's `default`, and defaulting goes on inside it).
//!
//! Pruning reports the unknown fields it dropped (`spec.bogus`), so the caller can warn about
//! them or refuse them (`fieldValidation`). Pure functions over JSON.

use serde_json::{Map, Value};

use crate::schema::Path;

/// The fields of `metadata` (ObjectMeta); others are unknown and dropped.
const OBJECT_META: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

/// Prunes a whole custom resource against its version's `openAPIV3Schema`; returns the
/// unknown fields dropped, sorted (`metadata.x`, `spec.y`, `z`).
pub fn prune_object(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let extra: Vec<String> = meta
            .keys()
            .filter(|k| !OBJECT_META.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in extra {
            meta.remove(&key);
            unknown.push(format!("metadata.{key}"));
        }
    }
    if let Some(map) = obj.as_object_mut() {
        prune_map(map, schema, &Path::root(), true, &mut unknown);
    }
    unknown.sort();
    unknown
}

/// Prunes `value` (at `path`) against `schema`, appending dropped unknown fields to `unknown`.
pub fn prune(value: &mut Value, schema: &Value, path: &Path, unknown: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let embedded = flag(schema, "x-kubernetes-embedded-resource");
            prune_map(map, schema, path, embedded, unknown);
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, item_schema, &path.index(i), unknown);
                }
            }
        }
        _ => {}
    }
}

fn prune_map(
    map: &mut Map<String, Value>,
    schema: &Value,
    path: &Path,
    resource: bool,
    unknown: &mut Vec<String>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let keep_unknown = flag(schema, "x-kubernetes-preserve-unknown-fields")
        || additional.and_then(Value::as_bool) == Some(true);
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        if resource && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let child_schema = properties
            .and_then(|p| p.get(&key))
            .or(additional.filter(|a| a.is_object()));
        let child_path = path.child(&key);
        match child_schema {
            Some(s) => {
                if map.get(&key).is_some_and(Value::is_null) && !flag(s, "nullable") {
                    map.remove(&key);
                } else if let Some(child) = map.get_mut(&key) {
                    prune(child, s, &child_path, unknown);
                }
            }
            None if keep_unknown => {}
            None => {
                map.remove(&key);
                unknown.push(child_path.as_str().to_string());
            }
        }
    }
}

/// Fills in the schema's defaults: a missing property (or a `null` one that is not nullable)
/// takes its `default`, then defaulting goes on inside every present property.
pub fn default(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, prop) in properties {
                    let absent = map
                        .get(key)
                        .is_none_or(|v| v.is_null() && !flag(prop, "nullable"));
                    if absent && let Some(d) = prop.get("default") {
                        map.insert(key.clone(), d.clone());
                    }
                    if let Some(child) = map.get_mut(key) {
                        default(child, prop);
                    }
                }
            }
            if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let known = schema.get("properties").and_then(Value::as_object);
                for (key, child) in map.iter_mut() {
                    if known.is_none_or(|p| !p.contains_key(key)) {
                        default(child, additional);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    default(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "level": {"type": "string", "default": "Normal"},
                "quota": {"type": "integer", "nullable": true},
                "timing": {"type": "object", "default": {}, "properties": {
                    "heartbeat": {"type": "integer", "default": 100}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "clients": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}}}}}},
            "status": {"type": "object"}}})
    }

    #[test]
    fn unknown_fields_are_dropped_and_reported() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a", "bogus": 1},
            "spec": {"bogus": 1, "free": {"anything": 1}, "labels": {"k": "v"},
                "clients": [{"name": "n", "extra": true}]}, "top": 1});
        let unknown = prune_object(&mut obj, &schema());
        assert_eq!(
            unknown,
            vec![
                "metadata.bogus",
                "spec.bogus",
                "spec.clients[0].extra",
                "top"
            ]
        );
        assert_eq!(obj["spec"]["free"]["anything"], 1);
        assert_eq!(obj["spec"]["labels"]["k"], "v");
        assert_eq!(obj["apiVersion"], "x/v1");
        assert!(obj["metadata"].get("bogus").is_none());
    }

    #[test]
    fn nulls_go_unless_nullable() {
        let mut obj = json!({"spec": {"level": null, "quota": null}});
        assert!(prune_object(&mut obj, &schema()).is_empty());
        assert_eq!(obj["spec"], json!({"quota": null}));
    }

    #[test]
    fn defaults_fill_missing_fields_and_go_inside_them() {
        let mut obj = json!({"spec": {"clients": [{"name": "n"}]}});
        default(&mut obj, &schema());
        assert_eq!(obj["spec"]["level"], "Normal");
        assert_eq!(obj["spec"]["timing"], json!({"heartbeat": 100}));
        assert!(obj["spec"].get("quota").is_none());
        let mut set = json!({"spec": {"level": "Debug", "timing": {"heartbeat": 5}}});
        default(&mut set, &schema());
        assert_eq!(set["spec"]["level"], "Debug");
        assert_eq!(set["spec"]["timing"]["heartbeat"], 5);
    }
}
