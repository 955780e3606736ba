//! Rule 10 of the gate: **the Kubernetes API keeps its etcd.** In a control plane the API is
//! served from the etcd being changed, so taking a healthy voter down (removing it, or
//! restarting its node's etcd) is allowed only when
//!
//! * every kube-apiserver on another node is Ready (the preflight of Cluster API's control-plane
//!   provider: no etcd change while the control plane is already short), and
//! * every Ready kube-apiserver on another node lists, in its `--etcd-servers`, a healthy voter
//!   other than the one going down: without one it would lose etcd, and the API with it, however
//!   healthy the cluster stays. A kube-apiserver on the voter's own node is exempt: it is taken
//!   down with its node's etcd in a kubeadm layout (`--etcd-servers=https://127.0.0.1:2379`) and
//!   the load balancer routes around it.
//!
//! Loopback addresses in `--etcd-servers` name the member of the pod's own node. With no
//! kube-apiserver known (the operator sees none, or the platform's kube-apiserver is not a
//! consumer with a pod selector) the rule has nothing to check.

use std::collections::BTreeSet;

use crate::MemberId;
use crate::gate_view::{Action, ClusterView, DenyRule, MemberHealth, Verdict, deny, label};

/// A kube-apiserver pod as the gate sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiServer {
    /// `<namespace>/<name>`.
    pub pod: String,
    /// Its node (`spec.nodeName`).
    pub node: Option<String>,
    /// Its `Ready` condition is True.
    pub ready: bool,
    /// Its `--etcd-servers`, as written.
    pub etcd_servers: Vec<String>,
}

/// Rule 10 for `action`, which takes voter `id` down; `None` when it allows it.
pub(crate) fn keeps_api(view: &ClusterView, action: &Action, id: MemberId) -> Option<Verdict> {
    let going = view.find(id)?;
    if going.member.is_learner || !going.healthy || view.api_servers.is_empty() {
        return None;
    }
    let node = going.member.name.as_str();
    let elsewhere = || {
        view.api_servers
            .iter()
            .filter(move |a| a.node.as_deref() != Some(node))
    };
    let not_ready: Vec<&str> = elsewhere()
        .filter(|a| !a.ready)
        .map(|a| a.pod.as_str())
        .collect();
    if !not_ready.is_empty() {
        return Some(deny(
            DenyRule::ControlPlaneNotReady,
            format!(
                "{action}: kube-apiserver {} not Ready; waiting before taking {} down",
                not_ready.join(", "),
                label(&going.member)
            ),
        ));
    }
    let cut: Vec<String> = elsewhere()
        .filter(|a| !reaches_other_voter(view, a, id))
        .map(|a| format!("{} (--etcd-servers={})", a.pod, a.etcd_servers.join(",")))
        .collect();
    if cut.is_empty() {
        return None;
    }
    Some(deny(
        DenyRule::ApiServerCutOff,
        format!(
            "{action}: kube-apiserver {} lists no healthy voter but {}; it would lose etcd (waiting for it to list the others)",
            cut.join("; "),
            label(&going.member)
        ),
    ))
}

/// `api` lists the client URL of a healthy voter other than `id`.
fn reaches_other_voter(view: &ClusterView, api: &ApiServer, id: MemberId) -> bool {
    let listed: BTreeSet<String> = api
        .etcd_servers
        .iter()
        .map(|s| s.trim_end_matches('/').to_owned())
        .collect();
    view.members
        .iter()
        .filter(|m| !m.member.is_learner && m.healthy && m.member.id != id)
        .any(|m| listed_member(&listed, m, api.node.as_deref()))
}

/// `m` is among `listed`: by one of its client URLs, or by a loopback URL on its own node.
fn listed_member(listed: &BTreeSet<String>, m: &MemberHealth, node: Option<&str>) -> bool {
    let by_url = m
        .member
        .client_urls
        .iter()
        .any(|u| listed.contains(u.as_str().trim_end_matches('/')));
    let local = node == Some(m.member.name.as_str()) && listed.iter().any(|s| is_loopback(s));
    by_url || local
}

/// `https://127.0.0.1:2379`, `https://localhost:2379`, `https://[::1]:2379`.
fn is_loopback(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    rest.starts_with("127.0.0.1") || rest.starts_with("localhost") || rest.starts_with("[::1]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Member, MemberUrl, Preflight, gate};

    fn voter(i: u64, healthy: bool) -> MemberHealth {
        let peer: MemberUrl = format!("https://10.0.0.{i}:2380").parse().unwrap();
        let mut member = Member::voter(MemberId::new(i).unwrap(), &format!("n{i}"), peer);
        member.client_urls = vec![format!("https://10.0.0.{i}:2379").parse().unwrap()];
        MemberHealth { member, healthy }
    }

    fn api(node: u64, ready: bool, servers: &[u64]) -> ApiServer {
        ApiServer {
            pod: format!("kube-system/kube-apiserver-n{node}"),
            node: Some(format!("n{node}")),
            ready,
            etcd_servers: servers
                .iter()
                .map(|i| format!("https://10.0.0.{i}:2379"))
                .collect(),
        }
    }

    fn view(api_servers: Vec<ApiServer>) -> ClusterView {
        ClusterView {
            members: vec![voter(1, true), voter(2, true), voter(3, true)],
            rolling_node: None,
            preflight: Preflight::default(),
            api_servers,
        }
    }

    fn roll(i: u64) -> Action {
        Action::RollNode {
            node: format!("n{i}"),
            member: MemberId::new(i),
        }
    }

    fn rule(v: Verdict) -> Option<DenyRule> {
        match v {
            Verdict::Allow => None,
            Verdict::Deny(d) => Some(d.rule),
        }
    }

    #[test]
    fn a_restart_waits_while_another_nodes_api_server_lists_only_that_member() {
        // Bootstrap: every kube-apiserver still lists n1's member alone.
        let v = view(vec![
            api(1, true, &[1]),
            api(2, true, &[1]),
            api(3, true, &[1]),
        ]);
        assert_eq!(rule(gate(&v, &roll(1))), Some(DenyRule::ApiServerCutOff));
        // n2's and n3's list the others too now; n1's own is exempt.
        let v = view(vec![
            api(1, true, &[1]),
            api(2, true, &[2, 1, 3]),
            api(3, true, &[3, 1, 2]),
        ]);
        assert_eq!(rule(gate(&v, &roll(1))), None);
    }

    #[test]
    fn a_removal_waits_for_every_other_api_server_to_be_ready() {
        let mut v = view(vec![api(1, true, &[1, 2, 3]), api(2, false, &[2, 1, 3])]);
        v.members.push(voter(4, true));
        let remove = Action::Remove {
            id: MemberId::new(3).unwrap(),
        };
        assert_eq!(
            rule(gate(&v, &remove)),
            Some(DenyRule::ControlPlaneNotReady)
        );
        v.api_servers[1].ready = true;
        assert_eq!(rule(gate(&v, &remove)), None);
    }

    #[test]
    fn a_loopback_server_names_its_own_nodes_member() {
        let mut local = api(2, true, &[]);
        local.etcd_servers = vec!["https://127.0.0.1:2379".into()];
        let v = view(vec![local]);
        // n2's kube-apiserver reaches n2's member through loopback: n1 may restart.
        assert_eq!(rule(gate(&v, &roll(1))), None);
        // Its own node's restart takes it down with it: exempt.
        assert_eq!(rule(gate(&v, &roll(2))), None);
    }

    #[test]
    fn an_unhealthy_voter_or_no_known_api_server_leaves_the_rule_silent() {
        let mut v = view(vec![api(2, true, &[1])]);
        v.members[0].healthy = false;
        v.members.push(voter(4, true));
        assert_ne!(rule(gate(&v, &roll(1))), Some(DenyRule::ApiServerCutOff));
        assert_eq!(rule(gate(&view(Vec::new()), &roll(1))), None);
    }
}
