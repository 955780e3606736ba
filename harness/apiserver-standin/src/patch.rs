//! Patch application: JSON merge patch (RFC 7386), JSON patch (RFC 6902, including `test`),
//! strategic merge patch (treated as a JSON merge patch) and the recursive merge under
//! server-side apply (ownership is in [`crate::apply`]).

use serde_json::{Map, Value};

use crate::error::ApiError;

/// The patch flavours, from the request's `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json` (applied as a merge patch).
    Strategic,
    /// `application/json-patch+json`.
    Json,
    /// `application/apply-patch+yaml`.
    Apply,
}

impl PatchKind {
    /// Parses a `Content-Type` header value.
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/json-patch+json" => Ok(Self::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// Parses a patch body: JSON for every kind, YAML (a superset of JSON) for apply.
pub fn parse_body(kind: PatchKind, body: &[u8]) -> Result<Value, ApiError> {
    match kind {
        PatchKind::Apply => match serde_json::from_slice(body) {
            Ok(v) => Ok(v),
            Err(_) => {
                let text = std::str::from_utf8(body)
                    .map_err(|e| ApiError::bad_request(format!("apply patch is not UTF-8: {e}")))?;
                // YAML 1.2 booleans only: `yes`/`on` stay strings (ConfigMap data!).
                let mut options = serde_saphyr::Options::default();
                options.strict_booleans = true;
                serde_saphyr::from_str_with_options::<Value>(text, options)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
            }
        },
        _ => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}"))),
    }
}

/// Applies a merge-style patch (merge, strategic) to `doc`.
pub fn merge(doc: &mut Value, patch: &Value) -> Result<(), ApiError> {
    if !patch.is_object() {
        return Err(ApiError::bad_request("merge patch must be a JSON object"));
    }
    json_patch::merge(doc, patch);
    Ok(())
}

/// Applies an RFC 6902 JSON patch to `doc`; a failed operation (including `test`) is a 422.
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?;
    json_patch::patch(doc, &ops).map_err(|e| {
        ApiError::unprocessable_patch(format!(
            "the server rejected our request due to an error in our request: {e}"
        ))
    })
}

/// Server-side apply, simplified: maps merge recursively, every other value (including lists)
/// is replaced by the applied one; `null` in the applied configuration removes the field.
/// Fields the configuration omits are left alone, whoever set them.
pub fn apply(doc: &mut Value, config: &Value) {
    match (doc, config) {
        (Value::Object(target), Value::Object(src)) => apply_map(target, src),
        (doc, config) => *doc = config.clone(),
    }
}

fn apply_map(target: &mut Map<String, Value>, src: &Map<String, Value>) {
    for (k, v) in src {
        if v.is_null() {
            target.remove(k);
            continue;
        }
        match target.get_mut(k) {
            Some(existing) if existing.is_object() && v.is_object() => apply(existing, v),
            _ => {
                target.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8").unwrap(),
            PatchKind::Merge
        );
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml").unwrap(),
            PatchKind::Apply
        );
        assert_eq!(
            PatchKind::from_content_type("text/plain").unwrap_err().code,
            415
        );
    }

    #[test]
    fn merge_patch_removes_nulls_and_replaces_lists() {
        let mut doc = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge(&mut doc, &json!({"a": {"b": null, "d": 3}, "l": [3]})).unwrap();
        assert_eq!(doc, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_test_op_fails_with_422() {
        let mut doc = json!({"metadata": {"labels": {"a": "1"}}});
        let ok = json!([{"op": "test", "path": "/metadata/labels/a", "value": "1"},
                        {"op": "replace", "path": "/metadata/labels/a", "value": "2"}]);
        json_patch(&mut doc, &ok).unwrap();
        assert_eq!(doc["metadata"]["labels"]["a"], "2");
        let failing = json!([{"op": "test", "path": "/metadata/labels/a", "value": "1"}]);
        assert_eq!(json_patch(&mut doc, &failing).unwrap_err().code, 422);
        assert_eq!(
            json_patch(&mut doc, &json!({"op": "x"})).unwrap_err().code,
            400
        );
    }

    #[test]
    fn apply_merges_maps_and_keeps_unmentioned_fields() {
        let mut doc = json!({"spec": {"a": 1, "b": {"c": 2}}, "data": {"x": "1"}});
        apply(&mut doc, &json!({"spec": {"b": {"d": 3}, "l": [1]}}));
        assert_eq!(
            doc,
            json!({"spec": {"a": 1, "b": {"c": 2, "d": 3}, "l": [1]}, "data": {"x": "1"}})
        );
    }

    #[test]
    fn apply_body_may_be_yaml() {
        let v = parse_body(
            PatchKind::Apply,
            b"apiVersion: v1\nkind: ConfigMap\ndata:\n  on: yes\n",
        )
        .unwrap();
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(v["data"]["on"], "yes");
    }
}
