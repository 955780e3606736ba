//! The text files of a gather bundle, rendered from what was read (pure: tested with built
//! values). What guards them against private keys is in [`super::redact`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::api::EtcdClusterStatus;
use crate::etcd::EtcdObservation;

/// `status.conditions` as a table: type, status, reason, since, message.
pub fn conditions(status: &EtcdClusterStatus) -> String {
    let mut out = String::new();
    for c in &status.conditions {
        let _ = writeln!(
            out,
            "{:<36} {:<7} {:<28} {}  {}",
            c.type_, c.status, c.reason, c.last_transition_time, c.message
        );
    }
    out
}

/// Per node: its revision status, its etcd pod (containers, `etcd-verify`'s message) and its
/// installer pods with their results.
pub fn nodes(status: &EtcdClusterStatus, pods: &[Pod]) -> String {
    let mut by_node: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| "(unscheduled)".into());
        by_node.entry(node).or_default().push(p);
    }
    for s in &status.node_statuses {
        by_node.entry(s.node_name.clone()).or_default();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "latest available revision: {}",
        status.latest_available_revision
    );
    for (node, pods) in &by_node {
        let _ = writeln!(out, "\n== {node}");
        if let Some(s) = status.node_statuses.iter().find(|s| s.node_name == *node) {
            let _ = writeln!(
                out,
                "status: current revision {}{}, target {:?}, last failed {:?} x{} {} {}",
                s.current_revision,
                s.equivalent_to_revision
                    .map_or_else(String::new, |e| format!(" (equivalent to {e})")),
                s.target_revision,
                s.last_failed_revision,
                s.last_failed_count,
                s.last_failed_time,
                s.last_failed_reason
            );
            if !s.etcd_pod_missing_since.is_empty() {
                let _ = writeln!(
                    out,
                    "no etcd pod since {} (stopped by admin: {:?})",
                    s.etcd_pod_missing_since, s.etcd_stopped_by_admin
                );
            }
        }
        let mut pods = pods.clone();
        pods.sort_by_key(|p| p.metadata.name.clone());
        for p in pods {
            pod_lines(&mut out, p);
        }
    }
    out
}

fn pod_lines(out: &mut String, p: &Pod) {
    let name = p.metadata.name.clone().unwrap_or_default();
    let revision = p
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("revision"))
        .cloned()
        .unwrap_or_default();
    let status = p.status.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "pod {name} revision={revision} phase={}",
        status.phase.unwrap_or_default()
    );
    let all = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in all {
        let _ = writeln!(out, "  {}", container_line(c));
    }
}

fn container_line(c: &ContainerStatus) -> String {
    let state = c.state.clone().unwrap_or_default();
    let now = if let Some(r) = state.running {
        format!(
            "running since {}",
            r.started_at.map(|t| t.0.to_string()).unwrap_or_default()
        )
    } else if let Some(w) = state.waiting {
        format!(
            "waiting: {} {}",
            w.reason.unwrap_or_default(),
            w.message.unwrap_or_default()
        )
    } else if let Some(t) = state.terminated {
        format!(
            "terminated: exit {} {} {}",
            t.exit_code,
            t.reason.unwrap_or_default(),
            t.message.unwrap_or_default().trim()
        )
    } else {
        "no state".to_owned()
    };
    format!(
        "{}: ready={} restarts={} {now}",
        c.name, c.ready, c.restart_count
    )
}

/// Every member as etcd answered this gather: role, health, leader, raft and applied index,
/// store revision, database size, version; then alarms, the voters' member-list agreement and
/// the cluster version.
pub fn etcd(obs: &EtcdObservation) -> String {
    let mut out = String::new();
    if let Some(e) = &obs.error {
        let _ = writeln!(out, "etcd could not be read: {e}");
        return out;
    }
    let _ = writeln!(
        out,
        "cluster version: {}",
        obs.cluster_version.as_deref().unwrap_or("(not read)")
    );
    for m in &obs.members {
        let h = obs.health.get(&m.id).cloned().unwrap_or_default();
        let role = if m.is_learner { "learner" } else { "voter" };
        let leader = if obs.leader == Some(m.id) {
            " LEADER"
        } else {
            ""
        };
        let db = h.db.map_or_else(
            || "-".to_owned(),
            |d| format!("{} bytes ({} in use)", d.total, d.in_use),
        );
        let _ = writeln!(
            out,
            "member {} {} {role}{leader} healthy={} raft index {} applied {} revision {} db {db} version {} peer {:?} client {:?}{}",
            m.id,
            if m.name.is_empty() {
                "(unstarted)"
            } else {
                m.name.as_str()
            },
            h.healthy,
            number(h.raft_index),
            number(h.applied_index),
            number(h.revision),
            h.version.as_deref().unwrap_or("-"),
            m.peer_urls
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            m.client_urls
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            h.error.map(|e| format!(" error: {e}")).unwrap_or_default(),
        );
    }
    let alarms: Vec<String> = obs
        .preflight
        .alarms
        .iter()
        .map(ToString::to_string)
        .collect();
    let _ = writeln!(out, "alarms: {}", alarms_text(&alarms, obs));
    let _ = writeln!(
        out,
        "member lists: {}",
        if obs.preflight.disagreements.is_empty() {
            "every voter agrees".to_owned()
        } else {
            obs.preflight.disagreements.join("; ")
        }
    );
    out
}

fn number<T: std::fmt::Display>(n: Option<T>) -> String {
    n.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

fn alarms_text(alarms: &[String], obs: &EtcdObservation) -> String {
    match (&obs.preflight.alarms_unreadable, alarms.is_empty()) {
        (Some(e), _) => format!("unreadable: {e}"),
        (None, true) => "none".to_owned(),
        (None, false) => alarms.join(", "),
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
