//! The table of built-in resources the stand-in serves (core/v1 kinds, events, leases, CRDs,
//! RBAC objects stored only, PodDisruptionBudgets), with their per-resource settings: scope,
//! status subresource, generation tracking, name rule, extra field selectors, storage key.

use crate::resources::{NameRule, Representation, ResourceInfo};

/// The built-in resources.
pub fn builtins() -> Vec<ResourceInfo> {
    let mut namespaces =
        ResourceInfo::builtin("", "v1", "namespaces", "Namespace", false, true, &["ns"]);
    namespaces.name_rule = NameRule::Dns1123Label;
    let mut nodes = ResourceInfo::builtin("", "v1", "nodes", "Node", false, true, &["no"]);
    nodes.storage = "minions".into();
    let mut pods = ResourceInfo::builtin("", "v1", "pods", "Pod", true, true, &["po"]);
    pods.tracks_generation = true;
    pods.return_deleted_object = true;
    pods.extra_fields = vec![
        "spec.nodeName".into(),
        "status.phase".into(),
        "spec.serviceAccountName".into(),
    ];
    let mut events = ResourceInfo::builtin("", "v1", "events", "Event", true, false, &["ev"]);
    events.allow_create_on_update = true;
    events.name_rule = NameRule::PathSegment;
    events.extra_fields = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "reason",
        "type",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut events_v1 = ResourceInfo::builtin(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        false,
        &["ev"],
    );
    events_v1.name_rule = NameRule::PathSegment;
    events_v1.allow_create_on_update = true;
    events_v1.representation = Representation::EventsV1;
    events_v1.extra_fields = vec![
        "regarding.kind".into(),
        "regarding.name".into(),
        "reason".into(),
        "type".into(),
    ];
    let mut secrets = ResourceInfo::builtin("", "v1", "secrets", "Secret", true, false, &[]);
    secrets.extra_fields = vec!["type".into()];
    let mut endpoints =
        ResourceInfo::builtin("", "v1", "endpoints", "Endpoints", true, false, &["ep"]);
    endpoints.allow_create_on_update = true;
    let mut service_accounts = ResourceInfo::builtin(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        false,
        &["sa"],
    );
    service_accounts.return_deleted_object = true;
    let mut crds = ResourceInfo::builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        true,
        &["crd", "crds"],
    );
    crds.tracks_generation = true;
    // Their status is written by the disruption controller ([`crate::disruption`]) and by the
    // eviction subresource ([`crate::eviction`]).
    let mut pdbs = ResourceInfo::builtin(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        true,
        &["pdb"],
    );
    pdbs.tracks_generation = true;
    vec![
        namespaces,
        nodes,
        pods,
        ResourceInfo::builtin("", "v1", "configmaps", "ConfigMap", true, false, &["cm"]),
        secrets,
        events,
        service_accounts,
        endpoints,
        events_v1,
        ResourceInfo::builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            false,
            &[],
        ),
        crds,
        pdbs,
        // Stored only: the stand-in authenticates and authorizes nobody (see the crate docs).
        ResourceInfo::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            "Role",
            true,
            false,
            &[],
        ),
        ResourceInfo::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            false,
            &[],
        ),
    ]
}
