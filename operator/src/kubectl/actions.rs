//! What each admin action of `kubectl etcd` changes (pure): the JSON merge patch of the
//! `EtcdCluster` spec or of one Node's annotations, the sentence the confirmation shows, how to
//! tell from the status that the operator has done it, and every reason to refuse it before
//! anything is sent. Each action is an existing spec field or annotation whose change the
//! operator already acts on; nothing here reaches etcd.

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use crate::api::{EtcdCluster, EtcdClusterStatus, ManagementState, MemberStatus};
use crate::observed::objects::ETCD_STOPPED_ANNOTATION;

/// One admin action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A backup now (`spec.backup.request`).
    Backup { request: String },
    /// Defragment every voter once, thresholds aside (`spec.defragmentation.request`).
    Defragment { request: String },
    /// Rotate the etcd CA (`spec.certificates.caRotationRequest`).
    RotateCa { request: String },
    /// Roll a new static-pod revision to every node (`spec.forceRedeploymentReason`).
    Redeploy { reason: String },
    /// Mark a node's etcd as stopped on purpose (the Node annotation).
    StopEtcd { node: String, reason: String },
    /// Remove that mark: the operator installs the node's revision again.
    StartEtcd { node: String },
}

/// What a change is applied to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Cluster,
    Node(String),
}

/// How the status shows the operator has done what was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    Backup(String),
    Defragment(String),
    CaRotation(String),
    /// Every node runs a revision newer than this one.
    RevisionAfter(i64),
}

/// A change ready to send.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub target: Target,
    /// A JSON merge patch; it carries the `resourceVersion` it was computed from, so a change
    /// made by someone else in between is refused by the API (409) instead of overwritten.
    pub patch: Value,
    /// What the change does, for the confirmation and the result line.
    pub summary: String,
    /// Absent: the status shows nothing to wait for.
    pub done: Option<Done>,
}

/// Why an action is refused before anything is sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error(
        "spec.managementState is Unmanaged: the operator acts on nothing, so {what} would do nothing (set it to Managed first)"
    )]
    Unmanaged { what: &'static str },
    #[error(
        "{field} is already {value:?}: the operator acts only when the value changes (give another value)"
    )]
    Unchanged { field: &'static str, value: String },
    #[error("{0} must not be empty")]
    Empty(&'static str),
    #[error("spec.backup is not set: the cluster takes no backups, so there is nothing to request")]
    NoBackups,
    #[error("node {0} does not exist")]
    NoNode(String),
    #[error(
        "node {0} is not one of the EtcdCluster's control-plane nodes (no member and no revision status names it)"
    )]
    NotControlPlane(String),
    #[error("node {node} is already marked {ETCD_STOPPED_ANNOTATION}: {reason:?}")]
    AlreadyStopped { node: String, reason: String },
    #[error("node {0} is not marked {ETCD_STOPPED_ANNOTATION}: there is nothing to start")]
    NotStopped(String),
    #[error(
        "stopping etcd on {node} would leave {left} healthy voter(s) of {voters}, and quorum is {quorum}: the API would stop with etcd (bring the unhealthy members back first)"
    )]
    WouldLoseQuorum {
        node: String,
        left: usize,
        voters: usize,
        quorum: usize,
    },
}

/// The `kubectl etcd` field manager (server-side field ownership and audit logs name it).
pub const FIELD_MANAGER: &str = "kubectl-etcd";

/// Computes the change `action` makes to `cluster` (and, for node actions, to `node`), or why
/// it is refused.
pub fn decide(
    action: &Action,
    cluster: &EtcdCluster,
    node: Option<&Node>,
) -> Result<Change, Refusal> {
    if cluster.spec.management_state == ManagementState::Unmanaged {
        return Err(Refusal::Unmanaged {
            what: action.name(),
        });
    }
    match action {
        Action::Backup { request } => backup(cluster, request),
        Action::Defragment { request } => request_field(
            cluster,
            "spec.defragmentation.request",
            &cluster.spec.defragmentation.request,
            request,
            json!({"defragmentation": {"request": request}}),
            format!("defragment every voter once (request {request:?}), one at a time"),
            Done::Defragment(request.clone()),
        ),
        Action::RotateCa { request } => request_field(
            cluster,
            "spec.certificates.caRotationRequest",
            &cluster.spec.certificates.ca_rotation_request,
            request,
            json!({"certificates": {"caRotationRequest": request}}),
            format!(
                "rotate the etcd CA (request {request:?}): trust both CAs, re-issue every certificate, drop the old CA, each phase rolled to every node"
            ),
            Done::CaRotation(request.clone()),
        ),
        Action::Redeploy { reason } => {
            let latest = status_of(cluster).latest_available_revision;
            request_field(
                cluster,
                "spec.forceRedeploymentReason",
                &cluster.spec.force_redeployment_reason,
                reason,
                json!({"forceRedeploymentReason": reason}),
                format!(
                    "roll a new static-pod revision (after {latest}) to every node, one at a time through the quorum gate (reason {reason:?})"
                ),
                Done::RevisionAfter(latest),
            )
        }
        Action::StopEtcd { node: name, reason } => stop_etcd(cluster, node, name, reason),
        Action::StartEtcd { node: name } => start_etcd(node, name),
    }
}

impl Action {
    /// The action's command name.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Backup { .. } => "backup",
            Action::Defragment { .. } => "defragment",
            Action::RotateCa { .. } => "rotate-ca",
            Action::Redeploy { .. } => "redeploy",
            Action::StopEtcd { .. } => "stop-etcd",
            Action::StartEtcd { .. } => "start-etcd",
        }
    }
}

fn status_of(cluster: &EtcdCluster) -> EtcdClusterStatus {
    cluster.status.clone().unwrap_or_default()
}

fn backup(cluster: &EtcdCluster, request: &str) -> Result<Change, Refusal> {
    let Some(spec) = &cluster.spec.backup else {
        return Err(Refusal::NoBackups);
    };
    request_field(
        cluster,
        "spec.backup.request",
        &spec.request,
        request,
        json!({"backup": {"request": request}}),
        format!("take a backup now, schedule aside (request {request:?})"),
        Done::Backup(request.to_owned()),
    )
}

/// A spec field whose new value is the request.
fn request_field(
    cluster: &EtcdCluster,
    field: &'static str,
    current: &str,
    wanted: &str,
    spec_patch: Value,
    summary: String,
    done: Done,
) -> Result<Change, Refusal> {
    if wanted.trim().is_empty() {
        return Err(Refusal::Empty(field));
    }
    if current == wanted {
        return Err(Refusal::Unchanged {
            field,
            value: wanted.to_owned(),
        });
    }
    Ok(Change {
        target: Target::Cluster,
        patch: json!({
            "metadata": {"resourceVersion": cluster.metadata.resource_version},
            "spec": spec_patch,
        }),
        summary,
        done: Some(done),
    })
}

fn annotation_of(node: &Node) -> Option<&String> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ETCD_STOPPED_ANNOTATION))
}

fn stop_etcd(
    cluster: &EtcdCluster,
    node: Option<&Node>,
    name: &str,
    reason: &str,
) -> Result<Change, Refusal> {
    let node = node.ok_or_else(|| Refusal::NoNode(name.to_owned()))?;
    if reason.trim().is_empty() {
        return Err(Refusal::Empty("--reason"));
    }
    if let Some(current) = annotation_of(node) {
        return Err(Refusal::AlreadyStopped {
            node: name.to_owned(),
            reason: current.clone(),
        });
    }
    let status = status_of(cluster);
    let ours = status.members.iter().any(|m| m.name == name)
        || status.node_statuses.iter().any(|n| n.node_name == name);
    if !ours {
        return Err(Refusal::NotControlPlane(name.to_owned()));
    }
    let tolerance = after_stopping(&status.members, name)?;
    Ok(Change {
        target: Target::Node(name.to_owned()),
        patch: annotation_patch(node, json!(reason)),
        summary: format!(
            "mark etcd on {name} as stopped on purpose ({ETCD_STOPPED_ANNOTATION}={reason:?}): the operator neither installs etcd there again nor replaces its member while the mark lasts; {tolerance}. Then stop etcd on the node (move its etcd static-pod manifest out of the kubelet's manifest dir)"
        ),
        done: None,
    })
}

/// Refuses a stop that leaves fewer healthy voters than a quorum; else says how many more
/// failures the cluster survives once the node's member is down.
fn after_stopping(members: &[MemberStatus], node: &str) -> Result<String, Refusal> {
    let voters: Vec<&MemberStatus> = members.iter().filter(|m| m.role == "Voter").collect();
    let left = voters
        .iter()
        .filter(|m| m.healthy && m.name != node)
        .count();
    let quorum = membership::quorum(voters.len());
    if left < quorum {
        return Err(Refusal::WouldLoseQuorum {
            node: node.to_owned(),
            left,
            voters: voters.len(),
            quorum,
        });
    }
    let spare = left - quorum;
    Ok(match spare {
        0 => format!(
            "{left} healthy voter(s) of {} stay, exactly a quorum: one more failure stops etcd and the API",
            voters.len()
        ),
        n => format!(
            "{left} healthy voter(s) of {} stay; {n} more may fail",
            voters.len()
        ),
    })
}

fn start_etcd(node: Option<&Node>, name: &str) -> Result<Change, Refusal> {
    let node = node.ok_or_else(|| Refusal::NoNode(name.to_owned()))?;
    let Some(reason) = annotation_of(node) else {
        return Err(Refusal::NotStopped(name.to_owned()));
    };
    Ok(Change {
        target: Target::Node(name.to_owned()),
        patch: annotation_patch(node, Value::Null),
        summary: format!(
            "remove {ETCD_STOPPED_ANNOTATION} ({reason:?}) from {name}: the operator installs the node's revision there again and, if its member stays unhealthy, may replace it"
        ),
        done: None,
    })
}

/// A merge patch setting (or, with `null`, removing) the annotation, guarded by the Node's
/// `resourceVersion`.
fn annotation_patch(node: &Node, value: Value) -> Value {
    json!({
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "annotations": {ETCD_STOPPED_ANNOTATION: value},
        }
    })
}

/// The status field that shows `done`, for an admin who does not wait.
pub fn watch_hint(done: &Done) -> String {
    match done {
        Done::Backup(r) => format!("status.backup.handledRequest = {r:?}"),
        Done::Defragment(r) => format!("status.defragmentation.handledRequest = {r:?}"),
        Done::CaRotation(r) => format!("status.certificates.handledCaRotation = {r:?}"),
        Done::RevisionAfter(r) => {
            format!("every status.nodeStatuses[].currentRevision above {r}")
        }
    }
}

/// Whether `status` shows `done`, with what it shows.
pub fn progress(done: &Done, status: &EtcdClusterStatus) -> Result<String, String> {
    match done {
        Done::Backup(r) => handled(
            "backup",
            r,
            status.backup.as_ref().map(|b| b.handled_request.as_str()),
        ),
        Done::Defragment(r) => handled(
            "defragmentation",
            r,
            status
                .defragmentation
                .as_ref()
                .map(|d| d.handled_request.as_str()),
        ),
        Done::CaRotation(r) => handled(
            "CA rotation",
            r,
            status
                .certificates
                .as_ref()
                .map(|c| c.handled_ca_rotation.as_str()),
        ),
        Done::RevisionAfter(before) => rolled(*before, status),
    }
}

fn handled(what: &str, request: &str, seen: Option<&str>) -> Result<String, String> {
    match seen {
        Some(s) if s == request => Ok(format!("{what} for request {request:?} done")),
        Some(s) => Err(format!(
            "{what} for request {request:?} not done yet (last handled: {s:?})"
        )),
        None => Err(format!("{what} for request {request:?} not done yet")),
    }
}

fn rolled(before: i64, status: &EtcdClusterStatus) -> Result<String, String> {
    let latest = status.latest_available_revision;
    let behind: Vec<String> = status
        .node_statuses
        .iter()
        .filter(|n| !n.runs(latest))
        .map(|n| format!("{} on {}", n.node_name, n.current_revision))
        .collect();
    if latest > before && behind.is_empty() && !status.node_statuses.is_empty() {
        Ok(format!("every node runs revision {latest}"))
    } else if latest > before {
        Err(format!(
            "revision {latest} rolling: {} behind",
            behind.join(", ")
        ))
    } else {
        Err(format!("no revision after {before} yet"))
    }
}

#[cfg(test)]
#[path = "actions_tests.rs"]
mod tests;
