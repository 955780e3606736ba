//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>`,
//! `/apis/<group>/<version>`, built from the live [`Registry`] so custom resources appear
//! once their CRD exists. Only the legacy (non-aggregated) discovery format is served.

use serde_json::{Value, json};

use crate::resources::Registry;

/// The Kubernetes minor version the stand-in claims (k8s-openapi's `latest`).
pub const MINOR: &str = "37";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": MINOR,
        "emulationMajor": "1",
        "emulationMinor": MINOR,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": MINOR,
        "gitVersion": format!("v1.{MINOR}.0-apiserver-standin"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "none (Rust API stand-in)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// `/api`.
pub fn core_versions(address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    })
}

/// `/api/v1` or `/apis/<group>/<version>`; `None` if nothing is served there.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let resources = reg.group_version(group, version);
    if resources.is_empty() && !(group.is_empty() && version == "v1") {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let list: Vec<Value> = resources.iter().flat_map(|r| r.api_resources()).collect();
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": list,
    }))
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({"name": name, "versions": vs, "preferredVersion": preferred})
}

/// `/apis`.
pub fn groups(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    reg.groups().iter().find(|(g, _)| g == name).map(|(g, vs)| {
        let mut v = group_json(g, vs);
        v["kind"] = json!("APIGroup");
        v["apiVersion"] = json!("v1");
        v
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn core_list_has_status_subresources() {
        let reg = Registry::default();
        let list = resource_list(&reg, "", "v1").unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods"));
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"endpoints"));
        assert!(!names.contains(&"configmaps/status"));
        assert!(resource_list(&reg, "example.com", "v1").is_none());
        assert_eq!(
            groups(&reg)["groups"][0]["preferredVersion"]["groupVersion"],
            "events.k8s.io/v1"
        );
    }
}
