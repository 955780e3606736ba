//! The resources the stand-in serves: the built-in table and the ones custom resource
//! definitions add at run time, with everything the generic handlers need to know about each
//! (scope, status subresource, generation tracking, name rule, storage key prefix).

use std::collections::BTreeMap;

use serde_json::{Value, json};

pub use crate::builtins::builtins;

/// How `metadata.name` is validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds).
    Dns1123Subdomain,
    /// RFC 1123 label (namespaces).
    Dns1123Label,
    /// Anything usable as a path segment.
    PathSegment,
}

/// How the stored representation maps to the served one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Representation {
    /// Stored as served (only `apiVersion` is rewritten to the requested version).
    Native,
    /// events.k8s.io/v1 Event, stored as a core/v1 Event (shared storage, like the real server).
    EventsV1,
}

/// One served resource (one group/version/plural).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group, empty for core.
    pub group: String,
    /// Version served.
    pub version: String,
    /// Plural resource name (URL segment).
    pub resource: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource: main writes ignore `.status`, status writes touch only it.
    pub status_subresource: bool,
    /// `metadata.generation` is set to 1 on create and bumped when the spec changes.
    pub tracks_generation: bool,
    /// Name validation rule.
    pub name_rule: NameRule,
    /// Short names for discovery.
    pub short_names: Vec<String>,
    /// Extra field-selector fields beyond `metadata.name`/`metadata.namespace`.
    pub extra_fields: Vec<String>,
    /// Storage key segment under the prefix (`pods`, `minions`, `example.com/widgets`).
    pub storage: String,
    /// Stored representation.
    pub representation: Representation,
    /// Name of the CRD that defines this resource, if any.
    pub crd: Option<String>,
    /// An immediate delete answers with the deleted object (pods, service accounts, custom
    /// resources); otherwise with a `Status` of `Success`, as kube-apiserver's storages do.
    pub return_deleted_object: bool,
    /// A PUT to a missing object creates it (Endpoints and Events, as on the real server).
    pub allow_create_on_update: bool,
    /// A custom resource's structural schema (its version's `openAPIV3Schema`).
    pub schema: Option<std::sync::Arc<Value>>,
}

impl ResourceInfo {
    /// A built-in resource.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn builtin(
        group: &str,
        version: &str,
        resource: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
        short: &[&str],
    ) -> Self {
        let storage = if group.is_empty() || group == "events.k8s.io" {
            resource.to_string()
        } else {
            format!("{group}/{resource}")
        };
        Self {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.into(),
            namespaced,
            status_subresource: status,
            tracks_generation: false,
            name_rule: NameRule::Dns1123Subdomain,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            extra_fields: Vec::new(),
            storage,
            representation: Representation::Native,
            crd: None,
            return_deleted_object: false,
            allow_create_on_update: false,
            schema: None,
        }
    }

    /// `v1` or `<group>/<version>`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Error identity (group + plural).
    pub fn gr(&self) -> crate::error::GroupResource<'_> {
        crate::error::GroupResource {
            group: &self.group,
            resource: &self.resource,
        }
    }

    /// Field-selector fields this resource supports.
    pub fn field_selectable(&self) -> Vec<&str> {
        let mut f = vec!["metadata.name", "metadata.namespace"];
        f.extend(self.extra_fields.iter().map(String::as_str));
        f
    }

    /// The etcd key of one object.
    pub fn key(&self, prefix: &str, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("{prefix}/{}/{namespace}/{name}", self.storage)
        } else {
            format!("{prefix}/{}/{name}", self.storage)
        }
    }

    /// The etcd prefix of a collection: one namespace, or all of them (`None`).
    pub fn collection_prefix(&self, prefix: &str, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{prefix}/{}/{ns}/", self.storage),
            _ => format!("{prefix}/{}/", self.storage),
        }
    }

    /// The verbs discovery advertises.
    fn verbs() -> Value {
        json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ])
    }

    /// Pods' `eviction` subresource ([`crate::eviction`]), which takes a policy/v1 `Eviction`.
    pub fn has_eviction(&self) -> bool {
        self.group.is_empty() && self.resource == "pods"
    }

    /// `APIResource` entries for discovery (the resource and its subresources, in name order).
    pub fn api_resources(&self) -> Vec<Value> {
        let mut out = vec![json!({
            "name": self.resource,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": Self::verbs(),
            "shortNames": self.short_names,
        })];
        if self.has_eviction() {
            out.push(json!({
                "name": format!("{}/eviction", self.resource),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }));
        }
        if self.status_subresource {
            out.push(json!({
                "name": format!("{}/status", self.resource),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

/// What is served right now: built-ins plus every established CRD's versions.
#[derive(Clone, Debug)]
pub struct Registry {
    builtins: Vec<ResourceInfo>,
    custom: BTreeMap<String, Vec<ResourceInfo>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            builtins: builtins(),
            custom: BTreeMap::new(),
        }
    }
}

impl Registry {
    /// Looks a resource up by group, version and plural.
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<ResourceInfo> {
        self.all()
            .find(|r| r.group == group && r.version == version && r.resource == resource)
            .cloned()
    }

    /// Every served resource, built-ins first, then custom ones in CRD-name order.
    pub fn all(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.builtins.iter().chain(self.custom.values().flatten())
    }

    /// One entry per storage location (versions of one resource share storage).
    pub fn storage_resources(&self) -> Vec<ResourceInfo> {
        let mut seen = std::collections::BTreeSet::new();
        self.all()
            .filter(|r| seen.insert(r.storage.clone()))
            .cloned()
            .collect()
    }

    /// Registers (or replaces) a CRD's resources.
    pub fn set_crd(&mut self, crd_name: &str, resources: Vec<ResourceInfo>) {
        if resources.is_empty() {
            self.custom.remove(crd_name);
        } else {
            self.custom.insert(crd_name.to_string(), resources);
        }
    }

    /// Removes a CRD's resources.
    pub fn remove_crd(&mut self, crd_name: &str) {
        self.custom.remove(crd_name);
    }

    /// Group → sorted versions, core group excluded, groups in first-seen order for built-ins
    /// and then alphabetical for custom ones.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for r in self.all().filter(|r| !r.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) => {
                    if !versions.contains(&r.version) {
                        versions.push(r.version.clone());
                    }
                }
                None => out.push((r.group.clone(), vec![r.version.clone()])),
            }
        }
        out
    }

    /// The resources of one group/version.
    pub fn group_version(&self, group: &str, version: &str) -> Vec<ResourceInfo> {
        self.all()
            .filter(|r| r.group == group && r.version == version)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn keys_follow_kube_apiserver_layout() {
        let reg = Registry::default();
        let pods = reg.lookup("", "v1", "pods").unwrap();
        assert_eq!(pods.key("/registry", "ns", "p"), "/registry/pods/ns/p");
        assert_eq!(
            pods.collection_prefix("/registry", Some("ns")),
            "/registry/pods/ns/"
        );
        assert_eq!(pods.collection_prefix("/registry", None), "/registry/pods/");
        let nodes = reg.lookup("", "v1", "nodes").unwrap();
        assert_eq!(nodes.key("/registry", "", "n1"), "/registry/minions/n1");
        let leases = reg.lookup("coordination.k8s.io", "v1", "leases").unwrap();
        assert_eq!(
            leases.key("/registry", "ns", "l"),
            "/registry/coordination.k8s.io/leases/ns/l"
        );
        let ev = reg.lookup("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(ev.key("/registry", "ns", "e"), "/registry/events/ns/e");
        assert_eq!(
            reg.storage_resources()
                .iter()
                .filter(|r| r.storage == "events")
                .count(),
            1
        );
    }

    #[test]
    fn groups_are_listed_once() {
        let reg = Registry::default();
        let groups: Vec<String> = reg.groups().into_iter().map(|(g, _)| g).collect();
        assert_eq!(
            groups,
            vec![
                "events.k8s.io",
                "coordination.k8s.io",
                "apiextensions.k8s.io",
                "policy",
                "rbac.authorization.k8s.io"
            ]
        );
    }
}
