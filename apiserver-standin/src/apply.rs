//! Server-side apply, simplified ("apply-lite"). What it keeps from real server-side apply:
//!
//! - each `fieldManager` that applies owns the fields of its applied configuration, recorded in
//!   `metadata.managedFields` (`operation: Apply`, `fieldsType: FieldsV1`);
//! - applying again **removes the fields the same manager applied before and no longer
//!   applies**, unless another applying manager also owns them;
//! - the configuration is merged into the live object: maps merge key by key, `null` removes.
//!
//! What it leaves out: lists and scalars are owned whole (no associative-list merge keys, no
//! `k:`/`v:` set entries), there are **no conflicts** (so `force` changes nothing), and
//! non-apply writes (`Update`) do not record ownership.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::objects;
use crate::patch;

/// A field path (map keys from the root).
pub type FieldPath = Vec<String>;

/// Metadata fields that identify the object rather than belong to a manager.
const UNOWNED_META: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
];

/// The leaf fields of an applied configuration.
pub fn owned_fields(config: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    if let Some(map) = config.as_object() {
        for (k, v) in map {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            if k == "metadata" {
                if let Some(meta) = v.as_object() {
                    for (mk, mv) in meta {
                        if !UNOWNED_META.contains(&mk.as_str()) {
                            collect(mv, vec![k.clone(), mk.clone()], &mut out);
                        }
                    }
                }
                continue;
            }
            collect(v, vec![k.clone()], &mut out);
        }
    }
    out
}

fn collect(v: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v.as_object() {
        Some(map) if !map.is_empty() => {
            for (k, child) in map {
                let mut p = path.clone();
                p.push(k.clone());
                collect(child, p, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

/// A field set in the `FieldsV1` shape (`{"f:spec": {"f:size": {}}}`).
pub fn to_fields_v1(fields: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut node = &mut root;
        for part in path {
            let entry = node
                .entry(format!("f:{part}"))
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            node = match entry {
                Value::Object(m) => m,
                _ => return Value::Object(root),
            };
        }
    }
    Value::Object(root)
}

/// Reads a `FieldsV1` set back into paths (leaves are empty objects).
pub fn from_fields_v1(v: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    walk(v, Vec::new(), &mut out);
    out
}

fn walk(v: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    let children: Vec<(&String, &Value)> = v
        .as_object()
        .map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect())
        .unwrap_or_default();
    if children.is_empty() {
        if !path.is_empty() {
            out.insert(path);
        }
        return;
    }
    for (k, child) in children {
        let mut p = path.clone();
        p.push(k.trim_start_matches("f:").to_string());
        walk(child, p, out);
    }
}

fn remove_path(doc: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = doc;
    for part in parents {
        match node.get_mut(part) {
            Some(child) => node = child,
            None => return,
        }
    }
    if let Some(map) = node.as_object_mut() {
        map.remove(last);
    }
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn entries(doc: &Value) -> Vec<Value> {
    doc.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn is_apply_by(entry: &Value, manager: &str) -> bool {
    entry.get("manager").and_then(Value::as_str) == Some(manager)
        && entry.get("operation").and_then(Value::as_str) == Some("Apply")
}

/// Applies `config` for `manager` to `doc` (the live object, or `{}` for a create): removes the
/// fields the manager applied before and dropped now (unless another applier owns them), merges
/// the configuration, and records the manager's field set in `metadata.managedFields`.
pub fn apply(doc: &mut Value, config: &Value, manager: &str, api_version: &str, now: &str) {
    let mut managed = entries(doc);
    let previous: BTreeSet<FieldPath> = managed
        .iter()
        .find(|e| is_apply_by(e, manager))
        .and_then(|e| e.get("fieldsV1"))
        .map(from_fields_v1)
        .unwrap_or_default();
    let others: Vec<FieldPath> = managed
        .iter()
        .filter(|e| !is_apply_by(e, manager))
        .filter(|e| e.get("operation").and_then(Value::as_str) == Some("Apply"))
        .filter_map(|e| e.get("fieldsV1"))
        .flat_map(from_fields_v1)
        .collect();
    let now_owned = owned_fields(config);
    for dropped in previous.difference(&now_owned) {
        // Still owned (the same field, or something below it), or owned by another applier.
        let claimed_now = now_owned.iter().any(|p| p.starts_with(dropped));
        let claimed_by_other = others.iter().any(|p| overlaps(p, dropped));
        if !claimed_now && !claimed_by_other {
            remove_path(doc, dropped);
        }
    }
    patch::apply(doc, config);
    let fields_v1 = to_fields_v1(&now_owned);
    // An unchanged field set keeps its time, so a no-op apply writes nothing.
    let time = managed
        .iter()
        .find(|e| is_apply_by(e, manager))
        .filter(|e| {
            e.get("fieldsV1") == Some(&fields_v1)
                && e.get("apiVersion").and_then(Value::as_str) == Some(api_version)
        })
        .and_then(|e| e.get("time").cloned())
        .unwrap_or_else(|| Value::String(now.to_string()));
    managed.retain(|e| !is_apply_by(e, manager));
    managed.push(json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1,
    }));
    managed.sort_by(|a, b| {
        let key = |e: &Value| {
            e.get("manager")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        key(a).cmp(&key(b))
    });
    objects::metadata_mut(doc).insert("managedFields".into(), Value::Array(managed));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    #[test]
    fn field_sets_round_trip() {
        let set = owned_fields(
            &json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"a": {"b": 1}, "l": [1], "e": {}}}),
        );
        let paths: Vec<String> = set.iter().map(|p| p.join(".")).collect();
        assert_eq!(
            paths,
            vec!["metadata.labels.x", "spec.a.b", "spec.e", "spec.l"]
        );
        let v1 = to_fields_v1(&set);
        assert_eq!(v1["f:spec"]["f:a"]["f:b"], json!({}));
        assert_eq!(from_fields_v1(&v1), set);
    }

    #[test]
    fn reapplying_without_a_field_removes_it() {
        let mut doc = json!({});
        apply(&mut doc, &cm(json!({"a": "1", "b": "2"})), "op", "v1", "t");
        assert_eq!(doc["data"], json!({"a": "1", "b": "2"}));
        apply(&mut doc, &cm(json!({"a": "1"})), "op", "v1", "t");
        assert_eq!(doc["data"], json!({"a": "1"}));
        let before = doc.clone();
        apply(&mut doc, &cm(json!({"a": "1"})), "op", "v1", "later");
        assert_eq!(
            doc, before,
            "a no-op apply changes nothing, not even the time"
        );
        assert_eq!(
            doc["metadata"]["managedFields"].as_array().unwrap().len(),
            1
        );
    }

    #[test]
    fn fields_owned_by_another_applier_or_updater_stay() {
        let mut doc = json!({"data": {"manual": "x"}});
        apply(
            &mut doc,
            &cm(json!({"a": "1", "shared": "s"})),
            "op",
            "v1",
            "t",
        );
        apply(&mut doc, &cm(json!({"shared": "s"})), "other", "v1", "t");
        apply(&mut doc, &cm(json!({})), "op", "v1", "t");
        assert_eq!(doc["data"], json!({"manual": "x", "shared": "s"}));
        let managers: Vec<&str> = doc["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, vec!["op", "other"]);
    }
}
