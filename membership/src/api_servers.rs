//! Rule 10 of the gate: **the Kubernetes API keeps its etcd.** In a control plane the API is
//! served from the etcd being changed, so taking a healthy voter down (removing it, or
//! restarting its node's etcd) is allowed only when
//!
//! * every kube-apiserver on another node is Ready, and so is every other control-plane pod
//!   listed there (kube-controller-manager, kube-scheduler: `spec.controlPlanePods`), the
//!   preflight of Cluster API's control-plane provider: no etcd change while the control plane
//!   is already short. Pods that cannot be listed count as not Ready; and
//! * every Ready kube-apiserver on another node lists, in its `--etcd-servers`, a healthy voter
//!   other than the one going down: without one it would lose etcd, and the API with it, however
//!   healthy the cluster stays. A kube-apiserver on the voter's own node is exempt: it is taken
//!   down with its node's etcd in a kubeadm layout (`--etcd-servers=https://127.0.0.1:2379`) and
//!   the load balancer routes around it.
//!
//! A learner is added only where no kube-apiserver would send it requests: a learner refuses
//! every write and linearizable read (`etcdserver: rpc not supported for learner`, which etcd's
//! client does not retry elsewhere for writes), so a kube-apiserver that still lists the
//! learner's address, left from the member that served there before (a replacement on the
//! same node), fails a share of its requests until the promotion. Seen on the stacked control
//! plane: kube-controller-manager and kube-scheduler lost their leases on those errors, exited,
//! and the restart back-off kept them not Ready for minutes. Exempt is a kube-apiserver on the
//! learner's own node that lists nothing else (kubeadm's `--etcd-servers=https://127.0.0.1:2379`):
//! it has no etcd until the promotion whatever happens, and the load balancer routes around it.
//!
//! Loopback addresses in `--etcd-servers` name the member of the pod's own node. With no
//! kube-apiserver known (the operator sees none, or the platform's kube-apiserver is not a
//! consumer with a pod selector) the rule has nothing to check.

use std::collections::BTreeSet;

use crate::gate_view::{Action, ClusterView, DenyRule, MemberHealth, Verdict, deny, label};
use crate::{MemberId, MemberUrl};

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

/// Any control-plane pod (kube-controller-manager, kube-scheduler, kube-apiserver) as the gate
/// sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlPlanePod {
    /// `<namespace>/<name>`.
    pub pod: String,
    /// Its node (`spec.nodeName`).
    pub node: Option<String>,
    /// Its `Ready` condition is True.
    pub ready: bool,
    /// Its `component` label (`kube-scheduler`, ...).
    pub component: Option<String>,
}

/// The control-plane pods the operator listed this pass (`spec.controlPlanePods`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ControlPlanePods {
    /// None asked for (the selector is empty) or not listed yet: nothing to check.
    #[default]
    NotListed,
    Listed(Vec<ControlPlanePod>),
    /// The list failed; the message names the namespace, the selector and the API's answer.
    Unreadable(String),
}

impl ControlPlanePods {
    /// The pods listed (none when not listed or unreadable).
    pub fn listed(&self) -> &[ControlPlanePod] {
        match self {
            ControlPlanePods::Listed(pods) => pods,
            _ => &[],
        }
    }
}

/// Rule 10 for `action`, which takes voter `id` down; `None` when it allows it.
pub(crate) fn keeps_api(view: &ClusterView, action: &Action, id: MemberId) -> Option<Verdict> {
    let going = view.find(id)?;
    if going.member.is_learner || !going.healthy {
        return None;
    }
    let node = going.member.name.as_str();
    let short = |what: String| {
        deny(
            DenyRule::ControlPlaneNotReady,
            format!(
                "{action}: {what}; waiting before taking {} down",
                label(&going.member)
            ),
        )
    };
    if let Some(what) = short_elsewhere(view, node) {
        return Some(short(what));
    }
    let elsewhere = || {
        view.api_servers
            .iter()
            .filter(move |a| a.node.as_deref() != Some(node))
    };
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

/// The learner rule for `action` (adding a learner for `node` at `peer_url`); `None` when no
/// kube-apiserver would send the learner requests.
pub(crate) fn learner_unlisted(
    view: &ClusterView,
    action: &Action,
    node: &str,
    peer_url: &MemberUrl,
) -> Option<Verdict> {
    let host = peer_url.host();
    let at_learner = |a: &ApiServer, s: &str| {
        url_host(s) == Some(host) || (a.node.as_deref() == Some(node) && is_loopback(s))
    };
    let listing: Vec<String> = view
        .api_servers
        .iter()
        .filter(|a| {
            let (there, elsewhere): (Vec<&String>, Vec<&String>) =
                a.etcd_servers.iter().partition(|s| at_learner(a, s));
            let own_node_only = a.node.as_deref() == Some(node) && elsewhere.is_empty();
            !there.is_empty() && !own_node_only
        })
        .map(|a| format!("{} (--etcd-servers={})", a.pod, a.etcd_servers.join(",")))
        .collect();
    if listing.is_empty() {
        return None;
    }
    Some(deny(
        DenyRule::LearnerAddressListed,
        format!(
            "{action}: kube-apiserver {} still lists {host}, where the learner would serve; a learner refuses writes, so it would fail requests until the promotion (waiting for it to drop the address)",
            listing.join("; ")
        ),
    ))
}

/// The host of `url` (`https://10.0.0.2:2379` → `10.0.0.2`, `https://[::1]:2379` → `[::1]`).
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split("://").nth(1)?;
    let authority = rest.split('/').next()?;
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next();
    }
    authority.split(':').next()
}

/// What the control plane on nodes other than `node` is short of (the pods cannot be listed,
/// pods not Ready, components missing); `None` when nothing.
fn short_elsewhere(view: &ClusterView, node: &str) -> Option<String> {
    if let ControlPlanePods::Unreadable(why) = &view.control_plane {
        return Some(format!("control-plane pods cannot be listed ({why})"));
    }
    let not_ready: Vec<String> = not_ready_elsewhere(view, node).into_iter().collect();
    let missing = missing_elsewhere(view.control_plane.listed(), node);
    let parts: Vec<String> = [("not Ready", not_ready), ("missing", missing)]
        .into_iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what}: {}", names.join(", ")))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The kube-apiservers and other control-plane pods on nodes other than `node` that are not
/// Ready, sorted, each once.
fn not_ready_elsewhere(view: &ClusterView, node: &str) -> BTreeSet<String> {
    let other = |n: &Option<String>| n.as_deref() != Some(node);
    let apis = view
        .api_servers
        .iter()
        .filter(|a| other(&a.node) && !a.ready)
        .map(|a| format!("kube-apiserver {}", a.pod));
    let listed = view.control_plane.listed();
    let api_pods: BTreeSet<&str> = view.api_servers.iter().map(|a| a.pod.as_str()).collect();
    let others = listed
        .iter()
        .filter(|c| other(&c.node) && !c.ready && !api_pods.contains(c.pod.as_str()))
        .map(|c| format!("pod {}", c.pod));
    apis.chain(others).collect()
}

/// Components (by `component` label) that run on some node but are missing on another node
/// that runs control-plane pods, except `node`: `kube-scheduler on n2` (its manifest moved
/// away). A node with no control-plane pod at all is not judged: it may not be one.
fn missing_elsewhere(listed: &[ControlPlanePod], node: &str) -> Vec<String> {
    let components: BTreeSet<&str> = listed
        .iter()
        .filter_map(|c| c.component.as_deref())
        .collect();
    let nodes: BTreeSet<&str> = listed
        .iter()
        .filter_map(|c| c.node.as_deref())
        .filter(|n| *n != node)
        .collect();
    let runs = |n: &str, comp: &str| {
        listed
            .iter()
            .any(|c| c.node.as_deref() == Some(n) && c.component.as_deref() == Some(comp))
    };
    nodes
        .iter()
        .flat_map(|n| components.iter().map(move |comp| (*n, *comp)))
        .filter(|(n, comp)| !runs(n, comp))
        .map(|(n, comp)| format!("{comp} on {n}"))
        .collect()
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
#[path = "api_servers_tests.rs"]
mod tests;
