//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>`,
//! `/apis/<group>/<version>`, built from the live [`Registry`] so custom resources appear
//! once their CRD exists. Both the legacy documents and aggregated discovery
//! (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList` at `/api` and `/apis`, when the client's
//! `Accept` asks for it) are served.

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceInfo};

/// The content type of an aggregated discovery answer.
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header asks for aggregated discovery (v2 or v2beta1).
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|t| {
        let t = t.replace(' ', "");
        t.contains("g=apidiscovery.k8s.io") && t.contains("as=APIGroupDiscoveryList")
    })
}

fn resource_discovery(r: &ResourceInfo) -> Value {
    let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let mut subresources = Vec::new();
    if r.has_eviction() {
        let eviction = json!({"group": "policy", "version": "v1", "kind": "Eviction"});
        subresources.push(
            json!({"subresource": "eviction", "responseKind": eviction, "verbs": ["create"]}),
        );
    }
    if r.status_subresource {
        subresources.push(json!({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}));
    }
    json!({
        "resource": r.resource,
        "responseKind": kind,
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        "shortNames": r.short_names,
        "subresources": subresources,
    })
}

/// Aggregated discovery for the core group (`/api`) or every named group (`/apis`).
pub fn aggregated(reg: &Registry, core: bool) -> Value {
    let groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        reg.groups()
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(g, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = reg
                        .group_version(g, v)
                        .iter()
                        .map(resource_discovery)
                        .collect();
                    json!({"version": v, "freshness": "Current", "resources": resources})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": vs})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// The Kubernetes minor version the stand-in claims: the one k8s-openapi is built for (`v1_36`
/// in the workspace manifest), the oldest the project supports and the one `../shared/kas` runs.
pub const MINOR: &str = "36";

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
    fn aggregated_discovery() {
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!wants_aggregated("application/json"));
        let reg = Registry::default();
        let core = aggregated(&reg, true);
        let pods = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap()
            .clone();
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["subresources"][0]["subresource"], "eviction");
        assert_eq!(pods["subresources"][0]["responseKind"]["group"], "policy");
        assert_eq!(pods["subresources"][1]["subresource"], "status");
        let apis = aggregated(&reg, false);
        assert_eq!(apis["items"].as_array().unwrap().len(), 5);
    }

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
        let eviction = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods/eviction")
            .unwrap();
        assert_eq!(
            *eviction,
            json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]})
        );
        assert!(names.contains(&"endpoints"));
        assert!(!names.contains(&"configmaps/status"));
        assert!(resource_list(&reg, "example.com", "v1").is_none());
        assert_eq!(
            groups(&reg)["groups"][0]["preferredVersion"]["groupVersion"],
            "events.k8s.io/v1"
        );
    }
}
