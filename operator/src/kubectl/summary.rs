//! `kubectl etcd status`: the EtcdCluster's status as an admin reads it first (pure): the
//! members with their roles and health, every node's revision, the summary conditions, what
//! runs now (a rollout, a CA rotation, a defragmentation), and what needs attention, each with
//! the operator's own words. Columns are aligned and rows sorted, so two runs on the same
//! status print the same text.

use std::fmt::Write as _;

use crate::api::{Condition, EtcdCluster, EtcdClusterStatus, MemberStatus, NodeStatus};

/// The summary conditions, in the order they are printed.
const SUMMARY: [&str; 3] = ["Available", "Progressing", "Degraded"];

/// Renders the whole summary.
pub fn render(cluster: &EtcdCluster) -> String {
    let status = cluster.status.clone().unwrap_or_default();
    let mut out = header(cluster, &status);
    out.push('\n');
    out.push_str(&table(
        &[
            "MEMBER", "ID", "ROLE", "STARTED", "HEALTHY", "LEADER", "VERSION", "PEER URL",
        ],
        &members(&status.members),
    ));
    out.push('\n');
    out.push_str(&table(
        &["NODE", "REVISION", "TARGET", "NOTE"],
        &nodes(&status.node_statuses),
    ));
    out.push('\n');
    out.push_str(&table(
        &["CONDITION", "STATUS", "REASON", "MESSAGE"],
        &conditions(&status.conditions),
    ));
    let running = running(&status);
    if !running.is_empty() {
        out.push_str("\nUnder way:\n");
        for line in running {
            let _ = writeln!(out, "  - {line}");
        }
    }
    let attention = attention(cluster, &status);
    out.push_str(if attention.is_empty() {
        "\nNothing needs attention.\n"
    } else {
        "\nNeeds attention:\n"
    });
    for line in attention {
        let _ = writeln!(out, "  - {line}");
    }
    out
}

fn header(cluster: &EtcdCluster, status: &EtcdClusterStatus) -> String {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let generation = cluster.metadata.generation.unwrap_or_default();
    let observed = status
        .observed_generation
        .map_or_else(|| "none".to_owned(), |g| g.to_string());
    let mut out = format!(
        "EtcdCluster {name}: {:?}, generation {generation} (status from {observed}), latest revision {}\n",
        cluster.spec.management_state, status.latest_available_revision
    );
    if let Some(id) = &status.cluster_identity {
        let _ = writeln!(out, "etcd cluster id {}", id.cluster_id);
    }
    if let Some(v) = &status.etcd_version {
        let _ = writeln!(
            out,
            "etcd cluster version {} (target {}: {})",
            v.cluster_version,
            dash(&v.target_version),
            v.state
        );
    }
    out
}

fn dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

fn members(members: &[MemberStatus]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = members
        .iter()
        .map(|m| {
            let role = match (m.learner_raft_index, m.leader_raft_index) {
                (Some(l), Some(leader)) if m.role == "Learner" => {
                    format!("Learner ({l}/{leader})")
                }
                _ => m.role.clone(),
            };
            vec![
                if m.name.is_empty() {
                    "(unstarted)".to_owned()
                } else {
                    m.name.clone()
                },
                m.id.clone(),
                role,
                yes(m.started),
                yes(m.healthy),
                if m.leader { "*" } else { "" }.to_owned(),
                dash(&m.version).to_owned(),
                m.peer_url.clone(),
            ]
        })
        .collect();
    rows.sort();
    rows
}

fn nodes(nodes: &[NodeStatus]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let mut notes = Vec::new();
            if let Some(f) = n.last_failed_revision {
                notes.push(format!(
                    "revision {f} failed {} time(s): {}",
                    n.last_failed_count, n.last_failed_reason
                ));
            }
            if !n.etcd_stopped_by_admin.is_empty() {
                notes.push(format!(
                    "etcd stopped by an admin: {}",
                    n.etcd_stopped_by_admin
                ));
            }
            if let Some(e) = n.equivalent_to_revision {
                notes.push(format!("equivalent to revision {e}"));
            }
            if !n.etcd_pod_missing_since.is_empty() {
                notes.push(format!("no etcd pod since {}", n.etcd_pod_missing_since));
            }
            vec![
                n.node_name.clone(),
                n.current_revision.to_string(),
                n.target_revision
                    .map_or_else(|| "-".to_owned(), |t| t.to_string()),
                notes.join("; "),
            ]
        })
        .collect();
    rows.sort();
    rows
}

fn conditions(conditions: &[Condition]) -> Vec<Vec<String>> {
    SUMMARY
        .iter()
        .filter_map(|t| conditions.iter().find(|c| c.type_ == *t))
        .map(|c| {
            vec![
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            ]
        })
        .collect()
}

/// What runs now: a rollout, a CA rotation, a defragmentation.
fn running(status: &EtcdClusterStatus) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing" && c.status == "True")
    {
        out.push(format!("{}: {}", p.reason, p.message));
    }
    if let Some(r) = status
        .certificates
        .as_ref()
        .and_then(|c| c.ca_rotation.as_ref())
    {
        out.push(format!(
            "CA rotation for {:?}: phase {} since {}",
            r.trigger, r.phase, r.phase_started_at
        ));
    }
    if let Some(d) = status
        .defragmentation
        .as_ref()
        .and_then(|d| d.in_progress.as_ref())
    {
        out.push(format!(
            "defragmenting {} ({}) since {}",
            d.member_name, d.member_id, d.start_time
        ));
    }
    out
}

/// A condition that is not as it should be: a summary one off its good state, a detail
/// `...Degraded` one that is True, any other detail one that is False.
fn abnormal(c: &Condition) -> bool {
    match c.type_.as_str() {
        "Available" => c.status != "True",
        "Progressing" => false,
        t if t.ends_with("Degraded") => c.status == "True",
        _ => c.status == "False",
    }
}

fn attention(cluster: &EtcdCluster, status: &EtcdClusterStatus) -> Vec<String> {
    let mut out = Vec::new();
    let generation = cluster.metadata.generation.unwrap_or_default();
    if status.observed_generation.unwrap_or_default() < generation {
        out.push(format!(
            "the operator has not acted on generation {generation} of the spec yet (its status is from {})",
            status
                .observed_generation
                .map_or_else(|| "no generation".to_owned(), |g| g.to_string())
        ));
    }
    let mut detail: Vec<&Condition> = status.conditions.iter().filter(|c| abnormal(c)).collect();
    detail.sort_by(|a, b| a.type_.cmp(&b.type_));
    for c in detail {
        out.push(format!(
            "{} {} ({}): {}",
            c.type_, c.status, c.reason, c.message
        ));
    }
    out
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
