//! What `operator-failover` counts to show no membership action was done twice: every member id
//! etcd ever listed per node (sampled through the scale-up), the `MemberAddedAsLearner` and
//! `MemberPromoted` Events about the EtcdCluster counted per reporting instance, and the
//! "added learner"/"promoted" lines per node in every operator process's log.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;
use membership::{EtcdClient, LiveMembers};

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, LocalControlPlane, wait_for};

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// Every member id seen per node in etcd's member list, and the most members ever listed.
#[derive(Debug, Default)]
pub struct MemberLedger {
    /// Node name by node IP.
    nodes: BTreeMap<String, String>,
    pub ids: BTreeMap<String, BTreeSet<String>>,
    pub most_members: usize,
    pub samples: usize,
}

impl MemberLedger {
    pub fn new(cp: &LocalControlPlane) -> Self {
        Self {
            nodes: cp
                .nodes
                .iter()
                .map(|n| (n.ip().to_string(), n.name.clone()))
                .collect(),
            ..Self::default()
        }
    }

    /// Learns the nodes added since (their IPs).
    pub fn know_nodes(&mut self, cp: &LocalControlPlane) {
        for n in &cp.nodes {
            self.nodes.insert(n.ip().to_string(), n.name.clone());
        }
    }

    /// The node whose IP a member's peer URL names (`?<url>` for an unknown one).
    pub fn node_of(&self, member: &membership::Member) -> String {
        let Some(url) = member.peer_urls.first() else {
            return format!("?{}", member.id);
        };
        self.nodes
            .get(url.host())
            .cloned()
            .unwrap_or_else(|| format!("?{url}"))
    }

    pub fn observe(&mut self, list: &LiveMembers) {
        self.samples += 1;
        self.most_members = self.most_members.max(list.members.len());
        for m in &list.members {
            self.ids
                .entry(self.node_of(m))
                .or_default()
                .insert(m.id.to_string());
        }
    }

    /// Nodes that had more than one member id over the run, or a member no node explains.
    pub fn problems(&self) -> Vec<String> {
        self.ids
            .iter()
            .filter(|(node, ids)| ids.len() != 1 || node.starts_with('?'))
            .map(|(node, ids)| format!("{node}: member id(s) {ids:?}"))
            .collect()
    }
}

/// One membership Event about the EtcdCluster.
#[derive(Clone, Debug)]
pub struct ActionEvent {
    pub reason: String,
    pub note: String,
    /// The operator instance that reported it (its Lease identity).
    pub instance: String,
    /// How many times it was reported (an Event series counts repeats).
    pub count: i32,
    pub at: Option<Timestamp>,
}

/// The `MemberAddedAsLearner` and `MemberPromoted` Events about the EtcdCluster.
pub async fn membership_events(cp: &LocalControlPlane) -> Result<Vec<ActionEvent>, String> {
    cluster_events(cp, &["MemberAddedAsLearner", "MemberPromoted"]).await
}

/// The Events with one of `reasons` about the EtcdCluster (namespace `default`: the EtcdCluster
/// is cluster-scoped).
pub async fn cluster_events(
    cp: &LocalControlPlane,
    reasons: &[&str],
) -> Result<Vec<ActionEvent>, String> {
    let events: Api<Event> = Api::namespaced(cp.client(), "default");
    let list = events
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing Events: {e}"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some("EtcdCluster"))
        })
        .filter_map(|e| {
            let reason = e.reason.clone()?;
            if !reasons.contains(&reason.as_str()) {
                return None;
            }
            Some(ActionEvent {
                reason,
                note: e.note.clone().unwrap_or_default(),
                instance: e.reporting_instance.clone().unwrap_or_default(),
                count: e.series.as_ref().map_or(1, |s| s.count),
                at: e.event_time.as_ref().map(|t| t.0),
            })
        })
        .collect())
}

/// How many times `reason` was reported, per reporting instance. kube's event recorder folds a
/// repeat of the same reason about the same object by the same instance into one Event series
/// (the first note kept, `series.count` raised), so the notes cannot tell the nodes apart: the
/// counts are what is exact.
pub fn reported_by(events: &[ActionEvent], reason: &str) -> BTreeMap<String, i32> {
    let mut by = BTreeMap::new();
    for e in events.iter().filter(|e| e.reason == reason) {
        *by.entry(e.instance.clone()).or_insert(0) += e.count;
    }
    by
}

/// The `added learner <id> for <node>` and `promoted <node> (<id>)` lines in every operator
/// process's log: (adds, promotions) for `node`.
pub fn logged_actions(cp: &LocalControlPlane, node: &str) -> (usize, usize) {
    let mut adds = 0;
    let mut promotions = 0;
    for p in cp.operators() {
        for line in p.log().lines() {
            let line = plain(line);
            let line = line.trim_end();
            if line.contains("added learner ") && line.ends_with(&format!(" for {node}")) {
                adds += 1;
            }
            if line.contains(&format!("promoted {node} (")) {
                promotions += 1;
            }
        }
    }
    (adds, promotions)
}

/// etcd lists one voter per node, and the ledger saw no repeated membership action.
async fn check_one_voter_per_node(
    h: &mut Harness,
    etcd: &EtcdClient,
    ledger: &MemberLedger,
) -> Result<(), ControlPlaneError> {
    let list = etcd
        .member_list()
        .await
        .map_err(|e| failed(format!("member list: {e}")))?;
    let mut names: Vec<String> = list.members.iter().map(|m| ledger.node_of(m)).collect();
    names.sort();
    let mut nodes: Vec<String> = h.cp.nodes.iter().map(|n| n.name.clone()).collect();
    nodes.sort();
    if names != nodes || list.members.iter().any(|m| m.is_learner) {
        return Err(failed(format!(
            "etcd should list one voter per node {nodes:?}: {:?}",
            list.members
        )));
    }
    let problems = ledger.problems();
    h.step(format!(
        "etcd lists {} voters ({}); over {} samples at most {} members, member ids per node: {:?}",
        names.len(),
        names.join(", "),
        ledger.samples,
        ledger.most_members,
        ledger.ids
    ));
    if !problems.is_empty() || ledger.most_members > nodes.len() {
        return Err(failed(format!(
            "a membership action was repeated: {}",
            problems.join("; ")
        )));
    }
    Ok(())
}

/// etcd ends with one voter per node, each node with one member id over the whole run (and never
/// more members listed than nodes); Events and logs show each new node added at most once and promoted exactly once, and
/// nothing reported by the survivor before it held the Lease.
pub(super) async fn check_no_action_twice(
    h: &mut Harness,
    etcd: &EtcdClient,
    ledger: &MemberLedger,
    new_nodes: &[&str],
    survivor: &str,
    acquired: Option<Timestamp>,
) -> Result<(), ControlPlaneError> {
    check_one_voter_per_node(h, etcd, ledger).await?;
    // Every node but n1 was added as a learner once and promoted once over the whole run (n2
    // and n3 by the first leader); the survivor promoted both new nodes.
    let joined = i32::try_from(ledger.ids.len().saturating_sub(1)).unwrap_or(i32::MAX);
    let new = i32::try_from(new_nodes.len()).unwrap_or(i32::MAX);
    let cp = &h.cp;
    let survivor_promoted = || async move {
        let events = membership_events(cp).await?;
        let by = reported_by(&events, "MemberPromoted");
        match by.get(survivor) {
            Some(n) if *n >= new => Ok(()),
            _ => Err(format!("MemberPromoted Events by instance: {by:?}")),
        }
    };
    wait_for(
        Duration::from_secs(30),
        "the survivor's MemberPromoted Events",
        survivor_promoted,
    )
    .await?;
    let events = membership_events(&h.cp)
        .await
        .map_err(ControlPlaneError::Failed)?;
    let added = reported_by(&events, "MemberAddedAsLearner");
    let promoted = reported_by(&events, "MemberPromoted");
    let added_total: i32 = added.values().sum();
    let promoted_total: i32 = promoted.values().sum();
    // The operators' logs are files here only when they run as local processes.
    let local = !h.cp.operators().is_empty();
    let mut logged = Vec::new();
    let mut wrong = Vec::new();
    for n in new_nodes.iter().filter(|_| local) {
        let (adds, promotions) = logged_actions(&h.cp, n);
        logged.push(format!("{n} added {adds} promoted {promotions}"));
        // A kill can lose the add's log line (it follows the etcd call): at most one.
        if adds > 1 || promotions != 1 {
            wrong.push(*n);
        }
    }
    if !local {
        logged.push("not counted (the operator runs in pods)".into());
    }
    h.step(format!(
        "membership actions: Events MemberAddedAsLearner {added:?}, MemberPromoted \
         {promoted:?} ({joined} nodes joined); log lines {}",
        logged.join(", ")
    ));
    // The add at the kill may have lost its Event (published after the etcd call).
    if !wrong.is_empty()
        || promoted_total != joined
        || promoted.get(survivor) != Some(&new)
        || added_total > joined
        || added_total < joined - 1
    {
        return Err(failed(format!(
            "a membership action was not done exactly once (log lines wrong for {wrong:?}; \
             {joined} joins, {added_total} learner adds and {promoted_total} promotions reported)"
        )));
    }
    let early: Vec<String> = events
        .iter()
        .filter(|e| e.instance == survivor)
        .filter(|e| matches!((e.at, acquired), (Some(at), Some(a)) if at < a))
        .map(|e| format!("{} {}", e.reason, e.note))
        .collect();
    if !early.is_empty() {
        return Err(failed(format!(
            "{survivor} acted before it held the Lease: {early:?}"
        )));
    }
    Ok(())
}

/// How many times the log of operator `identity` says it took the lead.
pub fn leadership_gains(cp: &LocalControlPlane, identity: &str) -> usize {
    log_lines(cp, identity, |l| {
        l.contains("leadership changed") && l.contains("leading=true")
    })
}

/// How many times the log of operator `identity` says it listed its caches anew on taking the
/// lease over (the barrier for its predecessor's writes).
pub fn takeover_relists(cp: &LocalControlPlane, identity: &str) -> usize {
    log_lines(cp, identity, |l| {
        l.contains("caches listed anew on taking the lease over")
    })
}

fn log_lines(cp: &LocalControlPlane, identity: &str, wanted: impl Fn(&str) -> bool) -> usize {
    cp.operator(identity).map_or(0, |p| {
        p.log().lines().map(plain).filter(|l| wanted(l)).count()
    })
}

/// A log line without its ANSI colour sequences (`ESC [ … m`).
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn colours_are_stripped() {
        assert_eq!(
            plain(
                "\u{1b}[2m:\u{1b}[0m leadership changed \u{1b}[3mleading\u{1b}[0m\u{1b}[2m=\u{1b}[0mtrue"
            ),
            ": leadership changed leading=true"
        );
    }
}
