//! The OpenAPI v3 documents kubectl reads: the index `/openapi/v3` (one `serverRelativeURL`
//! with a content hash per group-version) and one document per group-version
//! (`/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`).
//!
//! kubectl (v1.27+) looks in them for the PATCH operation of the kind it sends and, finding
//! the `fieldValidation` query parameter there, leaves validation to the server
//! (`?fieldValidation=Strict`, see [`crate::field_validation`]). So each document lists, per
//! resource, its item path with `patch` and `put` and its collection path with `post`, all
//! taking `fieldValidation`, `fieldManager` and `dryRun`, and tagged with
//! `x-kubernetes-group-version-kind`. Component schemas are given for custom resources (their
//! CRD's schema); built-in kinds have none, so kubectl computes strategic merge patches from its
//! own compiled-in types, as it does for any server without them.

use serde_json::{Map, Value, json};

use crate::resources::{Registry, ResourceInfo};

/// The group-versions served, as OpenAPI v3 paths (`api/v1`, `apis/<g>/<v>`).
fn group_versions(reg: &Registry) -> Vec<(String, String, String)> {
    let mut out = vec![("api/v1".to_string(), String::new(), "v1".to_string())];
    for (group, versions) in reg.groups() {
        for v in versions {
            out.push((format!("apis/{group}/{v}"), group.clone(), v));
        }
    }
    out
}

/// FNV-1a over the document: any change of what is served changes the hash kubectl caches by.
fn hash(doc: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in doc.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// `/openapi/v3`: the index of the group-version documents.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (path, group, version) in group_versions(reg) {
        let doc = group_version(reg, &group, &version);
        let url = format!("/openapi/v3/{path}?hash={}", hash(&doc));
        paths.insert(path, json!({ "serverRelativeURL": url }));
    }
    json!({ "paths": paths })
}

/// `/openapi/v3/<path>` for a group-version path (`api/v1`, `apis/<g>/<v>`); `None` when
/// nothing is served there.
pub fn document(reg: &Registry, path: &str) -> Option<Value> {
    group_versions(reg)
        .into_iter()
        .find(|(p, _, _)| p == path)
        .map(|(_, group, version)| group_version(reg, &group, &version))
}

fn query_parameters() -> Value {
    let param = |name: &str, description: &str| {
        json!({"name": name, "in": "query", "description": description,
            "schema": {"type": "string", "uniqueItems": true}})
    };
    json!([
        param("dryRun", "When present, modifications are not persisted."),
        param("fieldManager", "The name of the actor making the change."),
        param(
            "fieldValidation",
            "Ignore, Warn or Strict: what unknown or duplicate fields do."
        ),
    ])
}

fn operation(r: &ResourceInfo, action: &str, content_types: &[&str]) -> Value {
    let schema = json!({"type": "object"});
    let content: Map<String, Value> = content_types
        .iter()
        .map(|t| ((*t).to_string(), json!({ "schema": schema })))
        .collect();
    json!({
        "operationId": format!("{action}{}", r.kind),
        "parameters": query_parameters(),
        "requestBody": {"content": content, "required": true},
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
    })
}

fn collection_path(r: &ResourceInfo) -> String {
    let base = if r.group.is_empty() {
        format!("/api/{}", r.version)
    } else {
        format!("/apis/{}/{}", r.group, r.version)
    };
    if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", r.resource)
    } else {
        format!("{base}/{}", r.resource)
    }
}

/// The component name of a kind's schema: the group reversed, then version and kind
/// (`io.static-operator.etcd.v1alpha1.EtcdCluster`).
fn component_name(r: &ResourceInfo) -> String {
    let mut parts: Vec<&str> = r.group.split('.').collect();
    parts.reverse();
    format!("{}.{}.{}", parts.join("."), r.version, r.kind)
}

fn group_version(reg: &Registry, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let patch_types = [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ];
    for r in reg.group_version(group, version) {
        let collection = collection_path(&r);
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "patch": operation(&r, "patch", &patch_types),
                "put": operation(&r, "put", &["application/json"]),
            }),
        );
        paths.insert(
            collection,
            json!({"post": operation(&r, "post", &["application/json"])}),
        );
        if let Some(schema) = r.schema.as_deref() {
            let mut s = schema.clone();
            if let Some(map) = s.as_object_mut() {
                map.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": r.group, "version": r.version, "kind": r.kind}]),
                );
            }
            schemas.insert(component_name(&r), s);
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::version()["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_index_points_at_every_group_version() {
        let reg = Registry::default();
        let idx = index(&reg);
        let url = idx["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/api/v1?hash="));
        assert!(idx["paths"]["apis/coordination.k8s.io/v1"].is_object());
        assert!(document(&reg, "apis/nothing/v1").is_none());
    }

    #[test]
    fn patch_operations_take_field_validation() {
        let doc = document(&Registry::default(), "api/v1").unwrap();
        let op = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "ConfigMap");
        let params: Vec<&str> = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(params.contains(&"fieldValidation"));
        assert!(doc["paths"]["/api/v1/nodes/{name}"]["patch"].is_object());
    }
}
