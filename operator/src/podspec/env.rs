//! The env contract of the etcd static pod (DESIGN section 4), computed from the live member list
//! and the node the pod is for. Pure: same inputs, same map, sorted by name.

use std::collections::BTreeMap;

use membership::{InitialCluster, Member, MemberId, MemberIds, MemberUrl};

use super::paths::CertPaths;
use super::{NodeTarget, RenderError};

/// Name used in `ETCD_INITIAL_CLUSTER` for a member that has not started and whose peer URL
/// belongs to no known node (etcd matches members by peer URL; the name only has to be unique).
fn placeholder_name(member: &Member) -> String {
    format!("unstarted-{}", member.id)
}

/// What the env is computed from.
#[derive(Clone, Debug)]
pub struct EnvInput<'a> {
    pub node: &'a NodeTarget,
    /// Every node the operator knows (to name unstarted learners by their node).
    pub nodes: &'a [NodeTarget],
    /// The live member list (voters and learners). Empty for the bootstrap render.
    pub members: &'a [Member],
    pub revision: &'a str,
    /// `ETCD_INITIAL_CLUSTER_STATE=new` (bootstrap render only).
    pub bootstrap: bool,
    /// `ETCD_INITIAL_CLUSTER_TOKEN`: the cluster's own token, made by `render` (none: etcd's
    /// default, for revisions of clusters whose token the operator does not know).
    pub cluster_token: Option<&'a str>,
    pub certs: &'a CertPaths,
}

/// Each voter's client URL (the one it advertises): the published host endpoints. Learners reject
/// client traffic, so they are never listed; members that have not started advertise nothing.
pub fn voter_endpoints(members: &[Member]) -> BTreeMap<MemberId, MemberUrl> {
    members
        .iter()
        .filter(|m| !m.is_learner)
        .filter_map(|m| Some((m.id, m.client_urls.first()?.clone())))
        .collect()
}

/// The node whose peer URL a member has, if any.
fn node_of<'n>(
    member: &Member,
    nodes: &'n [NodeTarget],
) -> Result<Option<&'n NodeTarget>, RenderError> {
    let Some(url) = member.peer_url() else {
        return Ok(None);
    };
    for n in nodes {
        if n.peer_url()? == *url {
            return Ok(Some(n));
        }
    }
    Ok(None)
}

/// Every member's client URL, learners included, sorted (`ETCDCTL_ENDPOINTS`): the one its node
/// (the node with its peer URL) advertises, or, for a member of no known node, the URL it
/// advertised. So the manifests do not change when a learner starts or is promoted, nor when a
/// member that moved with its node's address starts advertising the new one: one membership
/// change makes one revision. Clients skip learners: etcd answers a learner's client requests with
/// `Unavailable` ("rpc not supported for learner"), which etcd's own client retries on the next
/// endpoint, and the project's client (`etcd-verify`, the operator) asks each endpoint's status
/// first and never sends a learner a request it would refuse.
pub fn member_client_urls(
    members: &[Member],
    nodes: &[NodeTarget],
) -> Result<Vec<MemberUrl>, RenderError> {
    let mut urls = Vec::new();
    for m in members {
        if let Some(node) = node_of(m, nodes)? {
            urls.push(node.client_url()?);
        } else if let Some(advertised) = m.client_urls.first() {
            urls.push(advertised.clone());
        }
    }
    urls.sort();
    urls.dedup();
    Ok(urls)
}

/// Computes the contract env for one node.
pub fn contract_env(input: &EnvInput<'_>) -> Result<BTreeMap<String, String>, RenderError> {
    let node = input.node;
    let own_peer = node.peer_url()?;
    let mut initial = InitialCluster::default();
    for m in input.members {
        let Some(url) = m.peer_url() else { continue };
        let name = if m.is_started() {
            m.name.clone()
        } else {
            node_of(m, input.nodes)?.map_or_else(|| placeholder_name(m), |n| n.name.clone())
        };
        initial.insert(&name, url.clone());
    }
    initial.insert(&node.name, own_peer.clone());
    let ids = MemberIds::from_members(input.members);
    let mut endpoints: Vec<String> = member_client_urls(input.members, input.nodes)?
        .iter()
        .map(ToString::to_string)
        .collect();
    if endpoints.is_empty() {
        // Bootstrap: the only etcd there will be is this node's own.
        endpoints.push(node.client_url()?.to_string());
    }
    let certs = input.certs;
    let mut env = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_owned(), v);
    };
    set("ETCD_NAME", node.name.clone());
    set("ETCD_DATA_DIR", "/var/lib/etcd".into());
    set("ETCD_INITIAL_ADVERTISE_PEER_URLS", own_peer.to_string());
    set("ETCD_ADVERTISE_CLIENT_URLS", node.client_url()?.to_string());
    set("ETCD_INITIAL_CLUSTER", initial.to_string());
    set(
        "ETCD_INITIAL_CLUSTER_STATE",
        if input.bootstrap { "new" } else { "existing" }.into(),
    );
    if let Some(token) = input.cluster_token {
        set("ETCD_INITIAL_CLUSTER_TOKEN", token.to_owned());
    }
    set("ETCD_MEMBER_IDS", ids.to_string());
    set("ETCDCTL_ENDPOINTS", endpoints.join(","));
    set("ETCDCTL_CACERT", certs.server_ca.clone());
    set("ETCDCTL_CERT", certs.peer_cert.clone());
    set("ETCDCTL_KEY", certs.peer_key.clone());
    set("ETCD_STATIC_POD_REVISION", input.revision.to_owned());
    Ok(env)
}
