//! CustomResourceDefinition checks: naming, scope, one storage version, and validation rules
//! the stand-in can evaluate.

use serde_json::Value;

use super::is_dns1123_subdomain;
use crate::error::Cause;
use crate::objects;

/// CustomResourceDefinition: name is `<plural>.<group>`, names and scope present, exactly one
/// storage version.
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let s = |p: &str| objects::str_at(crd, p);
    let group = s("/spec/group");
    let plural = s("/spec/names/plural");
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    } else if !is_dns1123_subdomain(&group) || !group.contains('.') {
        causes.push(Cause::invalid(
            "spec.group",
            &group,
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural"));
    } else if let Err(e) = k8s_names::dns1123_label(&plural) {
        causes.push(Cause::invalid(
            "spec.names.plural",
            &plural,
            e.api_message(),
        ));
    }
    if s("/spec/names/kind").is_empty() {
        causes.push(Cause::required("spec.names.kind"));
    }
    let name = objects::name(crd);
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = s("/spec/scope");
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(Cause::unsupported(
            "spec.scope",
            &scope,
            &["Cluster", "Namespaced"],
        ));
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required("spec.versions"));
    } else {
        let storage = versions
            .iter()
            .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            .count();
        if storage != 1 {
            causes.push(Cause::invalid(
                "spec.versions",
                &storage.to_string(),
                "must have exactly one version marked as storage version",
            ));
        }
        for (i, v) in versions.iter().enumerate() {
            let vn = v.get("name").and_then(Value::as_str).unwrap_or_default();
            if let Err(e) = k8s_names::dns1123_label(vn) {
                causes.push(Cause::invalid(
                    format!("spec.versions[{i}].name"),
                    vn,
                    e.api_message(),
                ));
            }
            crd_rules(v, i, &mut causes);
        }
    }
    causes
}

/// Version `i`'s CEL rules that the stand-in cannot evaluate ([`crate::rules::uncompilable`]):
/// it refuses them rather than let values through unchecked.
fn crd_rules(version: &Value, i: usize, causes: &mut Vec<Cause>) {
    let Some(schema) = version.pointer("/schema/openAPIV3Schema") else {
        return;
    };
    let mut bad = Vec::new();
    let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
    crate::rules::uncompilable(schema, &at, &mut bad);
    for (path, why) in bad {
        causes.push(Cause::invalid(path, "", why));
    }
}
