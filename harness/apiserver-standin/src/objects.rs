//! Small accessors for Kubernetes objects held as JSON (`serde_json::Value`): the stand-in keeps
//! every object untyped, the way kube-apiserver's unstructured path does, so custom resources and
//! built-in kinds go through the same code.

use serde_json::{Map, Value};

/// `metadata.<field>` as a string, if present.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata.name`, or empty.
pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or_default()
}

/// `metadata.namespace`, or empty.
pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or_default()
}

/// `metadata.uid`, or empty.
pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or_default()
}

/// `metadata.resourceVersion`, or empty.
pub fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion").unwrap_or_default()
}

/// `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

/// `metadata`, created (as an empty map) if missing or not a map.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let meta = object_mut(obj)
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    object_mut(meta)
}

/// The map inside a value, which is made an empty map first if it is not one.
pub fn object_mut(obj: &mut Value) -> &mut Map<String, Value> {
    match obj {
        Value::Object(map) => map,
        other => {
            *other = Value::Object(Map::new());
            // Now a map: the recursion ends here.
            object_mut(other)
        }
    }
}

/// Sets `metadata.<field>` to a string.
pub fn set_meta_str(obj: &mut Value, field: &str, value: &str) {
    metadata_mut(obj).insert(field.to_string(), Value::String(value.to_string()));
}

/// Removes `metadata.<field>`.
pub fn remove_meta(obj: &mut Value, field: &str) {
    metadata_mut(obj).remove(field);
}

/// `metadata.labels` as (key, value) pairs; non-string values are skipped.
pub fn labels(obj: &Value) -> Map<String, Value> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The strings of a JSON array (none when `v` is not an array; non-strings skipped).
pub fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<String> {
    strings(obj.get("metadata").and_then(|m| m.get("finalizers")))
}

/// Replaces `metadata.finalizers` (removing the field when empty).
pub fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let meta = metadata_mut(obj);
    if finalizers.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert(
            "finalizers".to_string(),
            Value::Array(finalizers.iter().cloned().map(Value::String).collect()),
        );
    }
}

/// The uids named in `metadata.ownerReferences`.
pub fn owner_uids(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the owner references naming `owner_uid`.
pub fn remove_owner(obj: &mut Value, owner_uid: &str) {
    let meta = metadata_mut(obj);
    if let Some(Value::Array(refs)) = meta.get_mut("ownerReferences") {
        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
        if refs.is_empty() {
            meta.remove("ownerReferences");
        }
    }
}

/// `metadata.generation`, or 0.
pub fn generation(obj: &Value) -> i64 {
    obj.get("metadata")
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The string at JSON pointer `pointer` in `obj`, empty when absent or not a string.
pub fn str_at(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The value at a dotted path (`spec.nodeName`), if present.
pub fn path<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(obj, |v, part| v.get(part))
}

/// The current time as kube-apiserver writes timestamps (RFC 3339, UTC, whole seconds).
pub fn now_rfc3339() -> String {
    rfc3339_after(0)
}

/// The time `seconds` from now, formatted like [`now_rfc3339`].
pub fn rfc3339_after(seconds: i64) -> String {
    rfc3339(time::OffsetDateTime::now_utc() + time::Duration::seconds(seconds))
}

/// A time as kube-apiserver writes timestamps (`metav1.Time`: RFC 3339, UTC, whole seconds),
/// which is how the operator writes its status times too.
pub fn rfc3339(t: time::OffsetDateTime) -> String {
    etcd_pki::format_time(t)
}

/// Parses an RFC 3339 timestamp.
pub fn parse_rfc3339(s: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn accessors_read_metadata() {
        let mut o = json!({"metadata": {"name": "a", "namespace": "ns", "finalizers": ["x"],
            "ownerReferences": [{"uid": "u1"}, {"uid": "u2"}]}, "spec": {"nodeName": "n1"}});
        assert_eq!(name(&o), "a");
        assert_eq!(namespace(&o), "ns");
        assert_eq!(finalizers(&o), vec!["x".to_string()]);
        assert_eq!(owner_uids(&o), vec!["u1", "u2"]);
        assert_eq!(path(&o, "spec.nodeName"), Some(&json!("n1")));
        remove_owner(&mut o, "u1");
        assert_eq!(owner_uids(&o), vec!["u2"]);
        set_finalizers(&mut o, &[]);
        assert!(o["metadata"].get("finalizers").is_none());
    }

    #[test]
    fn timestamps_are_rfc3339_seconds() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20);
        assert!(t.ends_with('Z'));
        assert!(
            time::OffsetDateTime::parse(&t, &time::format_description::well_known::Rfc3339).is_ok()
        );
    }
}
