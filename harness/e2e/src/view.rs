//! The sandbox's live status view: nodes, members (voter/learner, healthy, learner catch-up),
//! the revision of every node and the operator's conditions, as a few text lines. Printed when
//! they change, so the view reads the same in a terminal and in a CI log.

use etcd_operator::api::{EtcdCluster, EtcdClusterStatus};
use k8s_openapi::api::core::v1::Node;

/// Renders the view (pure).
pub fn render(nodes: &[Node], cluster: Option<&EtcdCluster>) -> Vec<String> {
    let mut lines = Vec::new();
    let node_line: Vec<String> = nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let status = n.status.clone().unwrap_or_default();
            let ip = status
                .addresses
                .unwrap_or_default()
                .into_iter()
                .find(|a| a.type_ == "InternalIP")
                .map(|a| a.address)
                .unwrap_or_default();
            let ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            format!("{name} {ip} {}", if ready { "Ready" } else { "NotReady" })
        })
        .collect();
    lines.push(format!("nodes      {}", node_line.join(" | ")));
    let Some(status) = cluster.and_then(|c| c.status.clone()) else {
        lines.push("operator   no EtcdCluster status yet".to_owned());
        return lines;
    };
    lines.extend(status_lines(&status));
    lines
}

fn status_lines(s: &EtcdClusterStatus) -> Vec<String> {
    let members: Vec<String> = s
        .members
        .iter()
        .map(|m| {
            let name = if m.name.is_empty() {
                format!("(unstarted {})", m.id)
            } else {
                m.name.clone()
            };
            let health = if m.healthy { "healthy" } else { "unhealthy" };
            match (m.learner_raft_index, m.leader_raft_index) {
                (Some(l), Some(leader)) if m.role == "Learner" => {
                    format!(
                        "{name} {} {health} catch-up {l}/{leader}",
                        m.role.to_lowercase()
                    )
                }
                _ => format!("{name} {} {health}", m.role.to_lowercase()),
            }
        })
        .collect();
    let voters = s.members.iter().filter(|m| m.role == "Voter").count();
    let mut lines = vec![format!(
        "members    {voters} voter(s): {}",
        members.join(" | ")
    )];
    let nodes: Vec<String> = s
        .node_statuses
        .iter()
        .map(|n| {
            let mut t = format!("{} r{}", n.node_name, n.current_revision);
            if let Some(e) = n.equivalent_to_revision {
                t.push_str(&format!("(=r{e})"));
            }
            if let Some(target) = n.target_revision {
                t.push_str(&format!("->r{target}"));
            }
            if let Some(f) = n.last_failed_revision {
                t.push_str(&format!(
                    " (failed r{f} x{}: {})",
                    n.last_failed_count, n.last_failed_reason
                ));
            }
            t
        })
        .collect();
    lines.push(format!(
        "revisions  latest r{} | {}",
        s.latest_available_revision,
        nodes.join(" | ")
    ));
    for c in s
        .conditions
        .iter()
        .filter(|c| ["Available", "Progressing", "Degraded"].contains(&c.type_.as_str()))
    {
        let msg = if c.message.is_empty() {
            String::new()
        } else {
            format!(": {}", c.message)
        };
        lines.push(format!("{:<10} {}{msg}", c.type_, c.status));
    }
    lines
}

/// True when `voters` members are voters, all healthy, no learner, and every node runs the
/// latest revision.
pub fn settled(status: &EtcdClusterStatus, voters: usize) -> bool {
    settled_with_standby(status, voters, 0)
}

/// True when `voters` members are healthy voters, `learners` are started, healthy standby
/// learners (the odd-voter policy keeps an even node as one), and every node runs the latest
/// revision.
pub fn settled_with_standby(status: &EtcdClusterStatus, voters: usize, learners: usize) -> bool {
    let count = |role: &str| {
        status
            .members
            .iter()
            .filter(|m| m.role == role && m.healthy && m.started)
            .count()
    };
    count("Voter") == voters
        && count("Learner") == learners
        && status.members.len() == voters + learners
        && status.latest_available_revision > 0
        && status.node_statuses.len() == voters + learners
        && status
            .node_statuses
            .iter()
            .all(|n| n.runs(status.latest_available_revision))
}
