//! The table of built-in resources the stand-in serves (core/v1 kinds, events, leases, CRDs,
//! RBAC objects stored only, PodDisruptionBudgets), with their per-resource settings: scope,
//! status subresource, generation tracking, name rule, extra field selectors, storage key.

use crate::resources::{NameRule, Representation, ResourceInfo};

/// The built-in resources, in the order discovery lists them.
pub fn builtins() -> Vec<ResourceInfo> {
    let mut all = core_v1();
    all.push(events_k8s_io_v1());
    all.push(coordination_v1_leases());
    all.push(apiextensions_v1_crds());
    all.push(policy_v1_pdbs());
    all.extend(rbac_v1());
    all
}

/// The core (`""`, `v1`) group: namespaces, nodes, pods, config maps, secrets, events,
/// service accounts, endpoints.
fn core_v1() -> Vec<ResourceInfo> {
    let mut namespaces =
        ResourceInfo::builtin("", "v1", "namespaces", "Namespace", false, true, &["ns"]);
    namespaces.name_rule = NameRule::Dns1123Label;
    let mut nodes = ResourceInfo::builtin("", "v1", "nodes", "Node", false, true, &["no"]);
    nodes.storage = "minions".into();
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
    vec![
        namespaces,
        nodes,
        core_v1_pods(),
        ResourceInfo::builtin("", "v1", "configmaps", "ConfigMap", true, false, &["cm"]),
        secrets,
        core_v1_events(),
        service_accounts,
        endpoints,
    ]
}

/// Core `v1` pods: generation tracked, the deleted object returned, extra field selectors.
fn core_v1_pods() -> ResourceInfo {
    let mut pods = ResourceInfo::builtin("", "v1", "pods", "Pod", true, true, &["po"]);
    pods.tracks_generation = true;
    pods.return_deleted_object = true;
    pods.extra_fields = vec![
        "spec.nodeName".into(),
        "status.phase".into(),
        "spec.serviceAccountName".into(),
    ];
    pods
}

/// Core `v1` events: created on update, path-segment names, `involvedObject` field selectors.
fn core_v1_events() -> ResourceInfo {
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
    events
}

/// `events.k8s.io/v1` events, stored in the core event shape.
fn events_k8s_io_v1() -> ResourceInfo {
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
    events_v1
}

/// `coordination.k8s.io/v1` leases.
fn coordination_v1_leases() -> ResourceInfo {
    ResourceInfo::builtin(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        false,
        &[],
    )
}

/// `apiextensions.k8s.io/v1` CustomResourceDefinitions.
fn apiextensions_v1_crds() -> ResourceInfo {
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
    crds
}

/// `policy/v1` PodDisruptionBudgets.
fn policy_v1_pdbs() -> ResourceInfo {
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
    pdbs
}

/// `rbac.authorization.k8s.io/v1` roles and role bindings.
fn rbac_v1() -> Vec<ResourceInfo> {
    // Stored only: the stand-in authenticates and authorizes nobody (see the crate docs).
    vec![
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
