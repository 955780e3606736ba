//! Strategic merge patch for the built-in kinds the stand-in serves.
//!
//! A JSON merge patch, except for the lists Kubernetes marks with a patch strategy: those listed
//! in [`list_rule`] merge item by item on their merge key (`containers` by `name`,
//! `conditions` by `type`, ...) or, for lists of scalars such as `metadata.finalizers`, as a
//! union. The directives `$patch: replace`, `$patch: delete`, `$retainKeys` and
//! `$deleteFromPrimitiveList/<field>` are understood; `$setElementOrder/<field>` is accepted and
//! ignored (merged items keep the live order, new items are appended). Lists not in the table
//! are replaced whole, as in a merge patch. Custom resources do not support strategic merge
//! patch (415), as on the real server.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// How a list field is patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListRule {
    /// Items are merged on this key.
    MergeKey(&'static str),
    /// A list of scalars merged as a set.
    MergePrimitive,
}

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// The patch strategy of a list field, by resource and dotted path (list indices skipped).
pub fn list_rule(group: &str, resource: &str, path: &str) -> Option<ListRule> {
    use ListRule::{MergeKey, MergePrimitive};
    match path {
        "metadata.finalizers" => return Some(MergePrimitive),
        "metadata.ownerReferences" => return Some(MergeKey("uid")),
        _ => {}
    }
    match (group, resource) {
        ("", "pods") => {
            if let Some(rest) = path.strip_prefix("spec.") {
                for list in CONTAINER_LISTS {
                    if rest == list {
                        return Some(MergeKey("name"));
                    }
                    if let Some(field) = rest.strip_prefix(list).and_then(|r| r.strip_prefix('.')) {
                        return match field {
                            "env" => Some(MergeKey("name")),
                            "ports" => Some(MergeKey("containerPort")),
                            "volumeMounts" => Some(MergeKey("mountPath")),
                            "volumeDevices" => Some(MergeKey("devicePath")),
                            _ => None,
                        };
                    }
                }
            }
            match path {
                "spec.volumes" | "spec.imagePullSecrets" => Some(MergeKey("name")),
                "spec.hostAliases" => Some(MergeKey("ip")),
                "status.conditions" => Some(MergeKey("type")),
                "status.podIPs" | "status.hostIPs" => Some(MergeKey("ip")),
                _ => None,
            }
        }
        ("", "nodes") => match path {
            "spec.podCIDRs" => Some(MergePrimitive),
            "status.conditions" | "status.addresses" => Some(MergeKey("type")),
            _ => None,
        },
        ("", "namespaces") | ("apiextensions.k8s.io", "customresourcedefinitions") => {
            (path == "status.conditions").then_some(MergeKey("type"))
        }
        ("", "serviceaccounts") => {
            matches!(path, "secrets" | "imagePullSecrets").then_some(MergeKey("name"))
        }
        _ => None,
    }
}

/// Applies a strategic merge patch to `doc` for the given resource.
pub fn apply(doc: &mut Value, patch: &Value, group: &str, resource: &str) -> Result<(), ApiError> {
    let Some(patch) = patch.as_object() else {
        return Err(ApiError::bad_request(
            "strategic merge patch must be a JSON object",
        ));
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    if let Some(target) = doc.as_object_mut() {
        merge_map(target, patch, "", &|p| list_rule(group, resource, p));
    }
    Ok(())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

/// A copy without `$` directives.
fn strip(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
        other => other.clone(),
    }
}

fn merge_map(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &str,
    rules: &dyn Fn(&str) -> Option<ListRule>,
) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        if let Value::Object(m) = strip(&Value::Object(patch.clone())) {
            *target = m;
        }
        return;
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) = (target.get_mut(field), v.as_array())
            {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() || directive(v) == Some("delete") {
            target.remove(k);
            continue;
        }
        let child = join(path, k);
        match (target.get_mut(k), v) {
            (Some(Value::Object(t)), Value::Object(p)) => merge_map(t, p, &child, rules),
            (Some(Value::Array(t)), Value::Array(p)) => match rules(&child) {
                Some(ListRule::MergeKey(key)) => merge_keyed(t, p, key, &child, rules),
                Some(ListRule::MergePrimitive) => {
                    for item in p {
                        if !t.contains(item) {
                            t.push(item.clone());
                        }
                    }
                }
                None => *t = p.iter().map(strip).collect(),
            },
            _ => {
                target.insert(k.clone(), strip(v));
            }
        }
    }
    if let Some(retain) = patch.get("$retainKeys").and_then(Value::as_array) {
        target.retain(|k, _| retain.iter().any(|r| r.as_str() == Some(k)));
    }
}

fn merge_keyed(
    target: &mut Vec<Value>,
    patch: &[Value],
    key: &str,
    path: &str,
    rules: &dyn Fn(&str) -> Option<ListRule>,
) {
    if patch.iter().any(|i| directive(i) == Some("replace")) {
        *target = patch
            .iter()
            .filter(|i| directive(i) != Some("replace"))
            .map(strip)
            .collect();
        return;
    }
    for item in patch {
        let id = item.get(key);
        if directive(item) == Some("delete") {
            target.retain(|x| x.get(key) != id);
            continue;
        }
        let existing = target.iter_mut().find(|x| id.is_some() && x.get(key) == id);
        match (existing, item.as_object()) {
            (Some(Value::Object(t)), Some(p)) => merge_map(t, p, path, rules),
            _ => target.push(strip(item)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn pod_patch(doc: &mut Value, patch: Value) {
        apply(doc, &patch, "", "pods").unwrap();
    }

    #[test]
    fn containers_merge_by_name_and_env_by_name() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]}});
        pod_patch(
            &mut pod,
            json!({"spec": {"containers": [
            {"name": "a", "env": [{"name": "Y", "value": "2"}]},
            {"name": "c", "image": "c:1"}]}}),
        );
        assert_eq!(pod["spec"]["containers"][0]["image"], "a:1");
        assert_eq!(
            pod["spec"]["containers"][0]["env"],
            json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}])
        );
        assert_eq!(pod["spec"]["containers"][1]["name"], "b");
        assert_eq!(pod["spec"]["containers"][2]["name"], "c");
    }

    #[test]
    fn conditions_merge_by_type_and_directives_work() {
        let mut pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}});
        pod_patch(
            &mut pod,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        assert_eq!(
            pod["status"]["conditions"],
            json!([
            {"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}])
        );
        pod_patch(
            &mut pod,
            json!({"status": {"conditions": [{"type": "Initialized", "$patch": "delete"}]}}),
        );
        assert_eq!(
            pod["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
        pod_patch(
            &mut pod,
            json!({"status": {"conditions": [{"$patch": "replace"}, {"type": "X", "status": "True"}]}}),
        );
        assert_eq!(
            pod["status"]["conditions"],
            json!([{"type": "X", "status": "True"}])
        );
    }

    #[test]
    fn finalizers_are_a_set_and_unknown_lists_are_replaced() {
        let mut cm = json!({"metadata": {"finalizers": ["a"]}, "data": {"k": "v"}});
        apply(
            &mut cm,
            &json!({"metadata": {"finalizers": ["b", "a"]}}),
            "",
            "configmaps",
        )
        .unwrap();
        assert_eq!(cm["metadata"]["finalizers"], json!(["a", "b"]));
        apply(&mut cm, &json!({"$deleteFromPrimitiveList/metadata": ["x"], "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}), "", "configmaps").unwrap();
        assert_eq!(cm["metadata"]["finalizers"], json!(["b"]));
        let mut pod = json!({"spec": {"tolerations": [{"key": "a"}]}});
        pod_patch(&mut pod, json!({"spec": {"tolerations": [{"key": "b"}]}}));
        assert_eq!(pod["spec"]["tolerations"], json!([{"key": "b"}]));
        apply(
            &mut cm,
            &json!({"data": {"k": null, "n": "1"}}),
            "",
            "configmaps",
        )
        .unwrap();
        assert_eq!(cm["data"], json!({"n": "1"}));
    }

    #[test]
    fn retain_keys_and_map_replace() {
        let mut obj = json!({"spec": {"a": 1, "b": 2, "c": 3}});
        apply(
            &mut obj,
            &json!({"spec": {"$retainKeys": ["a", "d"], "d": 4}}),
            "",
            "configmaps",
        )
        .unwrap();
        assert_eq!(obj["spec"], json!({"a": 1, "d": 4}));
        apply(
            &mut obj,
            &json!({"spec": {"$patch": "replace", "z": 0}}),
            "",
            "configmaps",
        )
        .unwrap();
        assert_eq!(obj["spec"], json!({"z": 0}));
    }
}
