//! Turns Kubernetes objects into the typed views the controllers decide from. Pure: no client,
//! no clock; every function takes what it reads.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Node, Pod, PodStatus};
use membership::VerifyReport;
use time::OffsetDateTime;

use super::node_view::{
    InstallerPhase, InstallerState, Leaving, NodeInfo, PodState, RestartApproval,
};
use crate::podspec::NodeTarget;

/// Label on installer pods.
pub const INSTALLER_LABEL: &str = "etcd.static-operator.io/installer";
/// Label with the revision (static pods and installer pods).
pub const REVISION_LABEL: &str = "revision";

/// A control-plane node selected by the spec's node selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneNode {
    pub target: NodeTarget,
    pub ready: bool,
    pub deleting: bool,
    /// Cordoned (`spec.unschedulable`): the quorum guard is not recreated there.
    pub unschedulable: bool,
    /// The admin's reason from [`ETCD_STOPPED_ANNOTATION`], when set.
    pub etcd_stopped: Option<String>,
    /// The admin's reason from [`REMOVE_MEMBER_ANNOTATION`], when set.
    pub remove_member: Option<String>,
}

impl ControlPlaneNode {
    /// Why the node leaves the control plane, if it does: its member is removed, none is added,
    /// and no quorum guard is kept there.
    pub fn leaving(&self) -> Option<Leaving> {
        if self.deleting {
            Some(Leaving::Deleted)
        } else {
            self.remove_member.clone().map(Leaving::RemovalRequested)
        }
    }
}

/// A Node annotation saying an admin stopped etcd there on purpose (its value: why).
pub const ETCD_STOPPED_ANNOTATION: &str = "etcd.static-operator.io/etcd-stopped";
/// A Node annotation by which an admin chooses a node whose etcd member goes for good (its
/// value: why), e.g. a scale-down 5 → 3 or a machine about to be retired: the node is treated
/// as one being deleted (Cluster API's `delete-machine` annotation plays the same part).
pub const REMOVE_MEMBER_ANNOTATION: &str = "etcd.static-operator.io/remove-member";

/// The selected control-plane nodes (sorted by name), with their InternalIP. Nodes without an
/// InternalIP are skipped (etcd can't advertise anything for them).
pub fn control_plane_nodes(
    nodes: &[Node],
    selector: &BTreeMap<String, String>,
) -> Vec<ControlPlaneNode> {
    let mut out: Vec<ControlPlaneNode> = nodes
        .iter()
        .filter(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            selector
                .iter()
                .all(|(k, v)| labels.get(k).is_some_and(|have| v.is_empty() || have == v))
        })
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let status = n.status.as_ref()?;
            let ip: IpAddr = status
                .addresses
                .as_ref()?
                .iter()
                .find(|a| a.type_ == "InternalIP")?
                .address
                .parse()
                .ok()?;
            let ready = node_ready(n);
            Some(ControlPlaneNode {
                target: NodeTarget::new(&name, ip),
                ready,
                deleting: n.metadata.deletion_timestamp.is_some(),
                unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
                etcd_stopped: admin_reason(n, ETCD_STOPPED_ANNOTATION, "stopped by an admin"),
                remove_member: admin_reason(n, REMOVE_MEMBER_ANNOTATION, "asked by an admin"),
            })
        })
        .collect();
    out.sort_by(|a, b| a.target.name.cmp(&b.target.name));
    out
}

/// The value of an admin's annotation on a Node, `"<what> (no reason given)"` when empty.
fn admin_reason(n: &Node, key: &str, what: &str) -> Option<String> {
    let why = n.metadata.annotations.as_ref()?.get(key)?;
    Some(if why.trim().is_empty() {
        format!("{what} (no reason given)")
    } else {
        why.clone()
    })
}

/// Whether a Node's `Ready` condition is `True`.
pub fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Membership's view of the nodes: eligible = Ready, not being deleted, certificates issued.
pub fn node_infos(nodes: &[ControlPlaneNode], with_certs: &BTreeSet<String>) -> Vec<NodeInfo> {
    nodes
        .iter()
        .map(|n| NodeInfo {
            target: n.target.clone(),
            eligible: n.ready && n.leaving().is_none() && with_certs.contains(&n.target.name),
            leaving: n.leaving(),
        })
        .collect()
}

fn pod_node(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// An etcd static pod's mirror pod: labelled `app=etcd`.
fn is_etcd_pod(pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    labels.and_then(|l| l.get("app")).map(String::as_str) == Some("etcd")
}

/// The etcd pod the API lists on `node`, if any (the last listed, as [`etcd_pods`] keeps it).
pub fn etcd_pod_of<'a>(pods: &'a [Pod], node: &str) -> Option<&'a Pod> {
    pods.iter()
        .rev()
        .find(|pod| is_etcd_pod(pod) && pod_node(pod) == Some(node))
}

/// The value of `var` in the etcd container's env.
pub fn etcd_env(pod: &Pod, var: &str) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let etcd = spec.containers.iter().find(|c| c.name == "etcd")?;
    let env = etcd.env.as_ref()?.iter().find(|e| e.name == var)?;
    Some(env.value.clone().unwrap_or_default())
}

fn revision_of(pod: &Pod) -> Option<i64> {
    pod.metadata
        .labels
        .as_ref()?
        .get(REVISION_LABEL)?
        .parse()
        .ok()
}

/// The etcd static pod's state on each node, from the mirror pods.
pub fn etcd_pods(pods: &[Pod]) -> BTreeMap<String, (PodState, Option<VerifyReport>)> {
    let mut out = BTreeMap::new();
    for pod in pods {
        if !is_etcd_pod(pod) {
            continue;
        }
        let Some(node) = pod_node(pod) else { continue };
        let status = pod.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .as_ref()
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let etcd_running = status.container_statuses.as_ref().and_then(|cs| {
            cs.iter()
                .find(|c| c.name == "etcd")
                .and_then(|c| c.state.as_ref()?.running.clone())
        });
        let running = etcd_running.is_some();
        let started_at = etcd_running
            .and_then(|r| r.started_at)
            .and_then(|t| OffsetDateTime::from_unix_timestamp(t.0.as_second()).ok());
        let report = (!running)
            .then(|| in_place_report(&status))
            .flatten()
            .or_else(|| init_report(&status));
        let blocked = report
            .as_ref()
            .filter(|r| !r.may_start() && !ready)
            .map(|r| r.reason.clone());
        out.insert(
            node.to_owned(),
            (
                PodState {
                    revision: revision_of(pod).unwrap_or(0),
                    ready,
                    running,
                    started_at,
                    blocked,
                },
                report,
            ),
        );
    }
    out
}

/// The last termination of the container of `status` named `name`: the current state's, else
/// the last state's.
fn last_termination(
    statuses: Option<&Vec<ContainerStatus>>,
    name: &str,
) -> Option<ContainerStateTerminated> {
    let c = statuses?.iter().find(|c| c.name == name)?;
    c.state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.clone()))
}

/// The init container's report (`etcd-verify membership`).
fn init_report(status: &PodStatus) -> Option<VerifyReport> {
    let term = last_termination(status.init_container_statuses.as_ref(), "etcd-verify")?;
    Some(VerifyReport::read(term.message.as_deref()?, term.exit_code))
}

/// The report of the gate in etcd's own container (`etcd-verify exec-etcd`, on a restart in
/// place), read only while etcd does not run: its last termination message is a report only
/// when that gate blocked.
fn in_place_report(status: &PodStatus) -> Option<VerifyReport> {
    let term = last_termination(status.container_statuses.as_ref(), "etcd")?;
    VerifyReport::parse(term.message.as_deref()?)
}

/// The installer's termination message is one JSON line (`{"outcome","reason","message",...}`);
/// status shows `reason: message`. Anything else (e.g. a crash's log tail) is shown as it is.
fn installer_message(raw: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Line {
        reason: String,
        message: String,
    }
    match serde_json::from_str::<Line>(raw.trim()) {
        Ok(l) => format!("{}: {}", l.reason, l.message),
        Err(_) => raw.trim().to_owned(),
    }
}

/// The newest installer pod of each node.
pub fn installers(pods: &[Pod]) -> BTreeMap<String, InstallerState> {
    let mut out: BTreeMap<String, InstallerState> = BTreeMap::new();
    for pod in pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if !labels.contains_key(INSTALLER_LABEL) {
            continue;
        }
        let (Some(node), Some(revision)) = (pod_node(pod), revision_of(pod)) else {
            continue;
        };
        let attempt = labels
            .get("attempt")
            .and_then(|a| a.parse().ok())
            .unwrap_or(1);
        let status = pod.status.clone().unwrap_or_default();
        let phase = match status.phase.as_deref() {
            Some("Succeeded") => InstallerPhase::Succeeded,
            Some("Failed") => {
                let message = status
                    .container_statuses
                    .as_ref()
                    .and_then(|cs| cs.first())
                    .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
                    .unwrap_or_else(|| {
                        status
                            .message
                            .clone()
                            .unwrap_or_else(|| "installer failed".into())
                    });
                InstallerPhase::Failed(installer_message(&message))
            }
            _ => InstallerPhase::Running,
        };
        let approval = restart_approval(pod, &phase);
        let state = InstallerState {
            revision,
            attempt,
            phase,
            approval,
        };
        let newer = out
            .get(node)
            .is_none_or(|cur| (state.revision, state.attempt) > (cur.revision, cur.attempt));
        if newer {
            out.insert(node.to_owned(), state);
        }
    }
    out
}

/// Where a running installer pod stands with its restart approval: its container must be seen
/// running before the operator approves (the verdict is then younger than the installer).
fn restart_approval(pod: &Pod, phase: &InstallerPhase) -> RestartApproval {
    if etcd_installer::approval::approval_of(pod).is_some() {
        return RestartApproval::Given;
    }
    let running = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "installer"))
        .and_then(|c| c.state.as_ref()?.running.as_ref())
        .is_some();
    if running && *phase == InstallerPhase::Running {
        RestartApproval::Awaited
    } else {
        RestartApproval::NotRunning
    }
}

/// Installer pods that can go: finished (Succeeded or Failed), not the newest of their node, and
/// for a revision the node already runs (or has moved past). Running installers and each node's
/// newest one are always kept, so the rollout's record of the last attempt survives.
pub fn prunable_installers(pods: &[Pod], current: &BTreeMap<String, i64>) -> Vec<String> {
    let newest = installers(pods);
    let mut out: Vec<String> = pods
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(INSTALLER_LABEL))
        })
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            matches!(phase, Some("Succeeded" | "Failed")) && p.metadata.deletion_timestamp.is_none()
        })
        .filter_map(|p| {
            let node = pod_node(p)?;
            let revision = revision_of(p)?;
            let attempt: u32 = p.metadata.labels.as_ref()?.get("attempt")?.parse().ok()?;
            let is_newest = newest
                .get(node)
                .is_some_and(|n| n.revision == revision && n.attempt == attempt);
            let passed = current.get(node).is_some_and(|c| revision <= *c);
            (!is_newest && passed)
                .then(|| p.metadata.name.clone())
                .flatten()
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests;
