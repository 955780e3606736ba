//! Server-side apply, simplified ("apply-lite"). What it keeps from real server-side apply:
//!
//! - each `fieldManager` that applies owns the leaf fields of its applied configuration,
//!   recorded in `metadata.managedFields` (`operation: Apply`, `fieldsType: FieldsV1`);
//! - setting a field another applier owns to a different value is a conflict (409) unless
//!   `force`, which moves the field to the new manager; the same value is shared ownership;
//! - applying again **removes the fields the same manager applied before and no longer
//!   applies**, unless another applying manager also owns them;
//! - the configuration is merged into the live object: maps merge key by key, `null` removes;
//!   a no-op apply changes nothing (not even the entry's time).
//!
//! What it leaves out: lists and scalars are owned whole (no associative-list merge keys, no
//! `k:`/`v:` set entries), and non-apply writes (`Update`) record no ownership, so they never
//! conflict with an applier.

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

/// Maps are not owned themselves, only their leaves (an empty map owns nothing: merged into
/// the live object it changes nothing).
fn collect(v: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v.as_object() {
        Some(map) => {
            for (k, child) in map {
                let mut p = path.clone();
                p.push(k.clone());
                collect(child, p, out);
            }
        }
        None => {
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

/// A field another applier owns with a different value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager.
    pub manager: String,
    /// The field, as `.data.key`.
    pub field: String,
}

/// Who applies, and how.
#[derive(Clone, Copy, Debug)]
pub struct Applier<'a> {
    /// `fieldManager`.
    pub manager: &'a str,
    /// `apiVersion` recorded in the managed fields entry.
    pub api_version: &'a str,
    /// Time recorded when the field set changes.
    pub now: &'a str,
    /// `force`: take over conflicting fields instead of failing.
    pub force: bool,
}

fn value_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |node, part| node.get(part))
}

fn set_fields(entry: &mut Value, fields: &BTreeSet<FieldPath>) {
    if let Some(map) = entry.as_object_mut() {
        map.insert("fieldsV1".into(), to_fields_v1(fields));
    }
}

/// Applies `config` for a manager to `doc` (the live object, or `{}` for a create).
///
/// A field the configuration sets to a value other than the live one, while another applier
/// owns it, is a conflict: without `force` nothing changes and the conflicts are returned; with
/// `force` the field changes hands. Then the fields the manager applied before and dropped now
/// are removed (unless another applier owns them), the configuration is merged, and the
/// manager's field set is recorded in `metadata.managedFields`.
pub fn apply(doc: &mut Value, config: &Value, who: Applier<'_>) -> Result<(), Vec<Conflict>> {
    let mut managed = entries(doc);
    let now_owned = owned_fields(config);
    let conflicts = contest_fields(&mut managed, doc, config, &now_owned, who);
    if !conflicts.is_empty() && !who.force {
        return Err(conflicts);
    }
    managed.retain(|e| {
        e.get("fieldsV1")
            .is_none_or(|f| is_apply_by(e, who.manager) || !from_fields_v1(f).is_empty())
    });
    remove_dropped(doc, &managed, who.manager, &now_owned);
    patch::apply(doc, config);
    record_apply(&mut managed, &now_owned, who);
    objects::metadata_mut(doc).insert("managedFields".into(), Value::Array(managed));
    Ok(())
}

/// Finds the fields other appliers own that `config` changes; with `force`, takes them out of
/// those appliers' entries.
fn contest_fields(
    managed: &mut [Value],
    doc: &Value,
    config: &Value,
    now_owned: &BTreeSet<FieldPath>,
    who: Applier<'_>,
) -> Vec<Conflict> {
    let mut conflicts = Vec::new();
    for entry in managed.iter_mut() {
        if is_apply_by(entry, who.manager)
            || entry.get("operation").and_then(Value::as_str) != Some("Apply")
        {
            continue;
        }
        let other = entry
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut theirs = entry
            .get("fieldsV1")
            .map(from_fields_v1)
            .unwrap_or_default();
        let contested: Vec<FieldPath> = theirs
            .iter()
            .filter(|q| {
                now_owned
                    .iter()
                    .any(|p| overlaps(p, q) && value_at(doc, p) != value_at(config, p))
            })
            .cloned()
            .collect();
        for q in &contested {
            conflicts.push(Conflict {
                manager: other.clone(),
                field: format!(".{}", q.join(".")),
            });
            theirs.remove(q);
        }
        if who.force && !contested.is_empty() {
            set_fields(entry, &theirs);
        }
    }
    conflicts
}

/// Removes from `doc` the fields the manager applied before and no longer applies, unless it
/// still owns something below them or another applier owns them.
fn remove_dropped(
    doc: &mut Value,
    managed: &[Value],
    manager: &str,
    now_owned: &BTreeSet<FieldPath>,
) {
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
    for dropped in previous.difference(now_owned) {
        // Still owned (the same field, or something below it), or owned by another applier.
        let claimed_now = now_owned.iter().any(|p| p.starts_with(dropped));
        let claimed_by_other = others.iter().any(|p| overlaps(p, dropped));
        if !claimed_now && !claimed_by_other {
            remove_path(doc, dropped);
        }
    }
}

/// Replaces the manager's `Apply` entry with one for `now_owned`, keeping the entries sorted
/// by manager.
fn record_apply(managed: &mut Vec<Value>, now_owned: &BTreeSet<FieldPath>, who: Applier<'_>) {
    let Applier {
        manager,
        api_version,
        now,
        ..
    } = who;
    let fields_v1 = to_fields_v1(now_owned);
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn by(manager: &str) -> Applier<'_> {
        Applier {
            manager,
            api_version: "v1",
            now: "t",
            force: false,
        }
    }

    fn apply(doc: &mut Value, config: &Value, manager: &str, _v: &str, now: &str) {
        let who = Applier { now, ..by(manager) };
        super::apply(doc, config, who).unwrap();
    }

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
        assert_eq!(paths, vec!["metadata.labels.x", "spec.a.b", "spec.l"]);
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
    fn a_different_value_for_another_appliers_field_conflicts_unless_forced() {
        let mut doc = json!({});
        apply(&mut doc, &cm(json!({"k": "1"})), "a", "v1", "t");
        let same = super::apply(&mut doc.clone(), &cm(json!({"k": "1"})), by("b"));
        assert!(same.is_ok(), "the same value is shared ownership");
        let before = doc.clone();
        let err = super::apply(&mut doc, &cm(json!({"k": "2"})), by("b")).unwrap_err();
        assert_eq!(
            err,
            vec![Conflict {
                manager: "a".into(),
                field: ".data.k".into()
            }]
        );
        assert_eq!(doc, before, "a conflict changes nothing");
        super::apply(
            &mut doc,
            &cm(json!({"k": "2"})),
            Applier {
                force: true,
                ..by("b")
            },
        )
        .unwrap();
        assert_eq!(doc["data"]["k"], "2");
        let managers: Vec<&str> = doc["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, vec!["b"], "a lost its only field");
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
