//! Per-resource write rules ("strategies" in kube-apiserver): what the server sets on create,
//! what an update may and may not change, status isolation for resources with a `/status`
//! subresource, and when `metadata.generation` moves. Pure functions, no I/O.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::objects;
use crate::resources::ResourceInfo;

/// Fields of `metadata` only the server writes; on update they are carried over from the stored
/// object whatever the client sends.
const SERVER_META: [&str; 5] = [
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
];

/// The "spec" of an object for generation tracking: everything except `metadata`, `status`,
/// `kind` and `apiVersion`.
fn spec_part(obj: &Value) -> Value {
    let mut copy = obj.clone();
    if let Some(map) = copy.as_object_mut() {
        for f in ["metadata", "status", "kind", "apiVersion"] {
            map.remove(f);
        }
    }
    copy
}

/// Prepares a new object: server-owned metadata, status handling, per-kind defaults.
/// `uid` and `now` are inputs so this stays deterministic.
pub fn prepare_for_create(info: &ResourceInfo, obj: &mut Value, uid: &str, now: &str) {
    {
        let meta = objects::metadata_mut(obj);
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(f);
        }
        meta.insert("uid".into(), Value::String(uid.to_string()));
        meta.insert("creationTimestamp".into(), Value::String(now.to_string()));
        if info.tracks_generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
    }
    let map = objects::object_mut(obj);
    map.insert("apiVersion".into(), Value::String(info.api_version()));
    map.insert("kind".into(), Value::String(info.kind.clone()));
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "pods") => {
            map.insert("status".into(), json!({"phase": "Pending"}));
        }
        ("", "namespaces") => {
            map.insert("status".into(), json!({"phase": "Active"}));
            let spec = map.entry("spec").or_insert_with(|| json!({}));
            if let Some(spec) = spec.as_object_mut() {
                spec.entry("finalizers")
                    .or_insert_with(|| json!(["kubernetes"]));
            }
        }
        // Nodes may carry status on create (the kubelet registers that way).
        ("", "nodes") => {}
        // The real strategy resets the status, whose counters are always serialized.
        ("policy", "poddisruptionbudgets") => {
            map.insert(
                "status".into(),
                crate::pdb::BudgetStatus::default().to_value(),
            );
        }
        _ if info.status_subresource => {
            map.remove("status");
        }
        _ => {}
    }
    if info.group.is_empty() && info.resource == "secrets" {
        fold_string_data(map);
    }
}

/// Secret `stringData` is write-only: it is merged into `data` (base64) and dropped.
fn fold_string_data(map: &mut Map<String, Value>) {
    let Some(Value::Object(string_data)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            let s = v.as_str().unwrap_or_default();
            data.insert(
                k,
                Value::String(base64::engine::general_purpose::STANDARD.encode(s)),
            );
        }
    }
}

/// Prepares a main-resource update: server-owned metadata from `old`, `.status` from `old` for
/// resources with a status subresource, generation bumped when the spec changed.
pub fn prepare_for_update(info: &ResourceInfo, old: &Value, new: &mut Value) {
    carry_server_meta(old, new);
    {
        let map = objects::object_mut(new);
        map.insert("apiVersion".into(), Value::String(info.api_version()));
        map.insert("kind".into(), Value::String(info.kind.clone()));
        if info.status_subresource {
            match old.get("status") {
                Some(s) => {
                    map.insert("status".into(), s.clone());
                }
                None => {
                    map.remove("status");
                }
            }
        }
        if info.group.is_empty() && info.resource == "secrets" {
            fold_string_data(map);
        }
    }
    if info.tracks_generation {
        let current = objects::generation(old).max(1);
        let bumped = if spec_part(old) != spec_part(new) {
            current + 1
        } else {
            current
        };
        objects::metadata_mut(new).insert("generation".into(), json!(bumped));
    }
}

/// Prepares a `/status` write: the stored object with `.status` taken from `new`. For built-in
/// kinds `new`'s metadata (labels, annotations, finalizers, ...) is taken too, as kube-apiserver's
/// status strategies for them reset only the spec (pods also keep their ownerReferences); a
/// custom resource's status write changes nothing but `.status`.
pub fn prepare_for_status_update(info: &ResourceInfo, old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    if info.crd.is_none()
        && let Some(meta) = new.get("metadata").filter(|m| m.is_object())
    {
        objects::object_mut(&mut out).insert("metadata".into(), meta.clone());
        carry_server_meta(old, &mut out);
        if info.group.is_empty() && info.resource == "pods" {
            let owners = old.get("metadata").and_then(|m| m.get("ownerReferences"));
            let meta = objects::metadata_mut(&mut out);
            match owners {
                Some(o) => {
                    meta.insert("ownerReferences".into(), o.clone());
                }
                None => {
                    meta.remove("ownerReferences");
                }
            }
        }
    }
    let map = objects::object_mut(&mut out);
    map.insert("apiVersion".into(), Value::String(info.api_version()));
    map.insert("kind".into(), Value::String(info.kind.clone()));
    match new.get("status") {
        Some(s) => {
            map.insert("status".into(), s.clone());
        }
        None => {
            map.remove("status");
        }
    }
    out
}

fn carry_server_meta(old: &Value, new: &mut Value) {
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let new_meta = objects::metadata_mut(new);
    // managedFields: kept from the stored object unless the request sets them (an empty list
    // resets them, as on the real server).
    if !new_meta.contains_key("managedFields")
        && let Some(mf) = old_meta.get("managedFields")
    {
        new_meta.insert("managedFields".into(), mf.clone());
    }
    for f in SERVER_META {
        match old_meta.get(f) {
            Some(v) => {
                new_meta.insert(f.to_string(), v.clone());
            }
            None => {
                new_meta.remove(f);
            }
        }
    }
    if new_meta
        .get("uid")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && let Some(uid) = old_meta.get("uid")
    {
        new_meta.insert("uid".into(), uid.clone());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::resources::Registry;

    fn info(group: &str, resource: &str) -> ResourceInfo {
        Registry::default().lookup(group, "v1", resource).unwrap()
    }

    #[test]
    fn create_sets_server_fields_and_drops_status() {
        let pods = info("", "pods");
        let mut pod = json!({"metadata": {"name": "p", "resourceVersion": "9", "deletionTimestamp": "x"},
            "spec": {}, "status": {"phase": "Running"}});
        prepare_for_create(&pods, &mut pod, "uid-1", "2026-01-01T00:00:00Z");
        assert_eq!(pod["metadata"]["uid"], "uid-1");
        assert_eq!(pod["metadata"]["generation"], 1);
        assert!(pod["metadata"].get("resourceVersion").is_none());
        assert!(pod["metadata"].get("deletionTimestamp").is_none());
        assert_eq!(pod["status"], json!({"phase": "Pending"}));
        assert_eq!(pod["kind"], "Pod");

        let cms = info("", "configmaps");
        let mut cm = json!({"metadata": {"name": "c"}, "data": {}});
        prepare_for_create(&cms, &mut cm, "u", "t");
        assert!(cm["metadata"].get("generation").is_none());

        let nodes = info("", "nodes");
        let mut node = json!({"metadata": {"name": "n"}, "status": {"conditions": []}});
        prepare_for_create(&nodes, &mut node, "u", "t");
        assert_eq!(node["status"], json!({"conditions": []}));
    }

    #[test]
    fn main_update_ignores_status_and_bumps_generation_on_spec_change() {
        let pods = info("", "pods");
        let old = json!({"metadata": {"name": "p", "uid": "u", "generation": 1, "creationTimestamp": "t"},
            "spec": {"nodeName": "a"}, "status": {"phase": "Running"}});
        let mut same_spec = json!({"metadata": {"name": "p", "labels": {"x": "1"}, "generation": 7},
            "spec": {"nodeName": "a"}, "status": {"phase": "Failed"}});
        prepare_for_update(&pods, &old, &mut same_spec);
        assert_eq!(same_spec["status"]["phase"], "Running");
        assert_eq!(same_spec["metadata"]["generation"], 1);
        assert_eq!(same_spec["metadata"]["uid"], "u");
        assert_eq!(same_spec["metadata"]["creationTimestamp"], "t");
        let mut new_spec = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "b"}});
        prepare_for_update(&pods, &old, &mut new_spec);
        assert_eq!(new_spec["metadata"]["generation"], 2);
    }

    #[test]
    fn status_update_keeps_the_spec_and_takes_status_and_metadata() {
        let pods = info("", "pods");
        let old = json!({"metadata": {"name": "p", "uid": "u1", "labels": {"a": "1"},
            "ownerReferences": [{"uid": "o"}]}, "spec": {"nodeName": "a"}, "status": {"phase": "Pending"}});
        let new = json!({"metadata": {"name": "p", "labels": {"a": "2"}},
            "spec": {"nodeName": "b"}, "status": {"phase": "Running"}});
        let out = prepare_for_status_update(&pods, &old, &new);
        assert_eq!(out["spec"]["nodeName"], "a");
        assert_eq!(out["metadata"]["labels"]["a"], "2");
        assert_eq!(out["metadata"]["uid"], "u1");
        assert_eq!(out["metadata"]["ownerReferences"][0]["uid"], "o");
        assert_eq!(out["status"]["phase"], "Running");
    }

    #[test]
    fn secret_string_data_folds_into_data() {
        let secrets = info("", "secrets");
        let mut s = json!({"metadata": {"name": "s"}, "stringData": {"k": "hi"}});
        prepare_for_create(&secrets, &mut s, "u", "t");
        assert_eq!(s["data"]["k"], "aGk=");
        assert!(s.get("stringData").is_none());
    }
}
