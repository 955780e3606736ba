//! Custom resources and their CRD's structural schema, as kube-apiserver's apiextensions
//! strategy applies it: prune and default on every write and read ([`normalize`],
//! [`on_read`]), then validate ([`validate`]): the main resource's writes are checked against
//! everything but `status` (which they cannot change), status writes against `status` only.
//!
//! CEL rules (`x-kubernetes-validations`) are evaluated after schema validation
//! ([`crate::rules`]); like kube-apiserver, when schema validation found a blocking error in a
//! schema that has rules, the stand-in adds the "some validation rules were not checked" cause
//! instead, so its answer to such a write is the real server's word for word.

use serde_json::Value;

use crate::error::Cause;
use crate::resources::ResourceInfo;
use crate::schema::{self, Path};
use crate::schema_prune;

/// Which part of a custom resource a write may change, and so is validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything (a resource without a status subresource).
    All,
    /// Everything but `status` (main writes of a resource with a status subresource).
    Main,
    /// Only `status` (writes to the status subresource).
    Status,
}

impl Scope {
    /// The scope of a write to `info` (on its `/status` subresource when `status`).
    pub fn of(info: &ResourceInfo, status: bool) -> Self {
        match (status, info.status_subresource) {
            (true, _) => Self::Status,
            (false, true) => Self::Main,
            (false, false) => Self::All,
        }
    }

    fn covers(self, property: &str) -> bool {
        match self {
            Self::All => true,
            Self::Main => property != "status",
            Self::Status => property == "status",
        }
    }
}

/// Prunes and defaults a custom resource about to be written; returns it and the unknown
/// fields pruning dropped. Other kinds are returned as they are, with no unknown fields.
pub fn normalize(info: &ResourceInfo, obj: &Value) -> (Value, Vec<String>) {
    let mut out = obj.clone();
    let Some(schema) = info.schema.as_deref() else {
        return (out, Vec::new());
    };
    let unknown = schema_prune::prune_object(&mut out, schema);
    schema_prune::default(&mut out, schema);
    (out, unknown)
}

/// A stored custom resource as served: pruned and defaulted with the schema of today.
pub fn on_read(info: &ResourceInfo, obj: &mut Value) {
    if let Some(schema) = info.schema.as_deref() {
        schema_prune::prune_object(obj, schema);
        schema_prune::default(obj, schema);
    }
}

/// Schema validation of a custom resource (nothing for other kinds), for the part `scope`
/// says the write may change.
pub fn validate(info: &ResourceInfo, obj: &Value, scope: Scope) -> Vec<Cause> {
    let Some(schema) = info.schema.as_deref() else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    let root = Path::root();
    if scope != Scope::Status
        && let Some(required) = schema.get("required").and_then(Value::as_array)
    {
        for name in required.iter().filter_map(Value::as_str) {
            if scope.covers(name) && obj.get(name).is_none_or(Value::is_null) {
                causes.push(Cause::required(name));
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, prop) in properties.into_iter().flatten() {
        if matches!(name.as_str(), "metadata" | "apiVersion" | "kind") || !scope.covers(name) {
            continue;
        }
        if let Some(value) = obj.get(name) {
            schema::validate(value, prop, &root.child(name), &mut causes);
        }
    }
    if !schema::has_rules(schema) {
        return causes;
    }
    match schema::rules_not_checked(&causes) {
        Some(c) => causes.push(c),
        None => rules(obj, schema, scope, &mut causes),
    }
    causes
}

/// The CEL rules ([`crate::rules`]) for the part `scope` covers: the root's own rules (they see
/// the whole object, metadata included) on main writes, then each top-level property's.
fn rules(obj: &Value, schema: &Value, scope: Scope, causes: &mut Vec<Cause>) {
    let root = Path::root();
    if scope != Scope::Status {
        crate::rules::own(obj, schema, &root, causes);
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, prop) in properties.into_iter().flatten() {
        if matches!(name.as_str(), "apiVersion" | "kind") || !scope.covers(name) {
            continue;
        }
        if let Some(value) = obj.get(name) {
            crate::rules::check(value, prop, &root.child(name), causes);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn info() -> ResourceInfo {
        let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com",
            "scope": "Cluster", "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "required": ["spec"],
                    "x-kubernetes-validations": [{"rule": "true"}],
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "clients": {"type": "array", "items": {"type": "object",
                                "required": ["commonName"], "properties": {
                                    "name": {"type": "string"}, "commonName": {"type": "string"}}}},
                            "level": {"type": "string", "default": "Normal"}}},
                        "status": {"type": "object", "properties": {
                            "observedGeneration": {"type": "integer"}}}}}}}]}});
        crate::crd::resources_of(&crd).remove(0)
    }

    #[test]
    fn the_issue_patch_is_refused_as_kube_apiserver_refuses_it() {
        let obj = json!({"spec": {"clients": [{"name": "kas"}]}});
        let causes = validate(&info(), &obj, Scope::Main);
        let err = crate::error::ApiError::invalid(
            "EtcdCluster",
            "etcd.static-operator.io",
            "cluster",
            causes,
        );
        assert_eq!(
            err.message,
            "EtcdCluster.etcd.static-operator.io \"cluster\" is invalid: [spec.clients[0].commonName: \
             Required value, <nil>: Invalid value: null: some validation rules were not checked \
             because the object was invalid; correct the existing errors to complete validation]"
        );
    }

    #[test]
    fn each_write_checks_only_what_it_may_change() {
        let bad_status = json!({"spec": {}, "status": {"observedGeneration": "x"}});
        assert!(validate(&info(), &bad_status, Scope::Main).is_empty());
        assert_eq!(
            validate(&info(), &bad_status, Scope::Status)[0].field,
            "status.observedGeneration"
        );
        let no_spec = json!({"status": {}});
        assert!(validate(&info(), &no_spec, Scope::Status).is_empty());
        assert_eq!(validate(&info(), &no_spec, Scope::Main)[0].field, "spec");
    }

    #[test]
    fn writes_are_pruned_and_defaulted() {
        let (obj, unknown) = normalize(&info(), &json!({"spec": {"bogus": 1}}));
        assert_eq!(unknown, vec!["spec.bogus"]);
        assert_eq!(obj["spec"], json!({"level": "Normal"}));
    }
}
