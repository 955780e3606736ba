//! The one view of the world a pass decides from, built once per pass: [`Inputs`] (a snapshot of
//! the watch caches) turned into typed values ([`Observed`]), plus etcd as the
//! [`crate::controllers::etcd_observer`] saw it. Pure: no client, no clock of its own.
//!
//! etcd is read after the certificate signer ran, because the operator's etcd client
//! certificate is one of that controller's outputs; everything else is read before any
//! controller runs.

pub mod address_move;
pub mod node_view;
pub mod objects;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use membership::MemberId;
use time::OffsetDateTime;

pub use objects::{ControlPlaneNode, node_ready};

use crate::api::{
    EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, ManagementState, NodeStatus, StoredCluster,
    Unreadable,
};
use crate::etcd::EtcdObservation;
use crate::writer::Awaited;
use node_view::{InstallerState, NodeView, PodState};

/// A snapshot of the watch caches.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub cluster: Option<EtcdCluster>,
    /// The EtcdCluster exists but cannot be decoded (`cluster` is `None` then): the pass holds
    /// every action and reports it.
    pub unreadable: Option<Unreadable>,
    pub nodes: Vec<Node>,
    /// How `nodes` was read.
    pub node_listing: NodeListing,
    /// Pods, ConfigMaps and Secrets of the static-pod namespace.
    pub pods: Vec<Pod>,
    pub configmaps: Vec<ConfigMap>,
    pub secrets: Vec<Secret>,
    /// Secrets of the operator's namespace.
    pub operator_secrets: Vec<Secret>,
    /// PodDisruptionBudgets of the static-pod namespace.
    pub pdbs: Vec<PodDisruptionBudget>,
}

/// How the Node list in [`Inputs`] was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NodeListing {
    /// Every Node (a one-shot read such as `plan`, tests): the pass picks by the selector itself.
    #[default]
    All,
    /// The operator's watch, listed with this label selector (none before its first list).
    Selected(Option<String>),
}

/// The stored EtcdCluster decoded: the cluster, or what stops it from being read.
pub fn decode_cluster(stored: Option<&StoredCluster>) -> (Option<EtcdCluster>, Option<Unreadable>) {
    match stored.map(StoredCluster::decode) {
        None => (None, None),
        Some(Ok(cluster)) => (Some(cluster), None),
        Some(Err(unreadable)) => (None, Some(*unreadable)),
    }
}

/// The object of `items` named `ns/name`.
pub fn find<'a, K: kube::Resource>(items: &'a [K], ns: &str, name: &str) -> Option<&'a K> {
    items.iter().find(|o| {
        o.meta().name.as_deref() == Some(name) && o.meta().namespace.as_deref().unwrap_or("") == ns
    })
}

impl Inputs {
    /// Why the Node list can't be decided from yet: the watch has not listed the Nodes that the
    /// spec's selector picks (it was started over for a new selector, or has not listed at all).
    /// An invalid selector is not waited for: the pass reports it.
    pub fn nodes_lag(&self) -> Option<String> {
        let NodeListing::Selected(listed) = &self.node_listing else {
            return None;
        };
        if self.unreadable.is_some() {
            // No selector to wait for: the pass reports the unreadable spec.
            return None;
        }
        let spec = self
            .cluster
            .as_ref()
            .map(|c| c.spec.clone())
            .unwrap_or_default();
        let want = spec.node_label_selector().ok()?;
        (listed.as_deref() != Some(want.as_str()))
            .then(|| format!("waiting for the Node cache to list the nodes selected by {want:?}"))
    }

    /// The cache's resourceVersion of an object, if the cache has it.
    pub fn resource_version(&self, a: &Awaited) -> Option<String> {
        let meta = match a.kind {
            // Once the spec is unreadable the status written before is not waited for: the
            // pass holds and writes conditions alone.
            "EtcdCluster" if self.unreadable.is_some() => return a.resource_version.clone(),
            "EtcdCluster" => self
                .cluster
                .as_ref()
                .filter(|c| c.metadata.name.as_deref() == Some(a.name.as_str()))
                .map(|c| &c.metadata),
            "ConfigMap" => find(&self.configmaps, &a.namespace, &a.name).map(|o| &o.metadata),
            "Pod" => find(&self.pods, &a.namespace, &a.name).map(|o| &o.metadata),
            "Secret" => find(&self.secrets, &a.namespace, &a.name)
                .or_else(|| find(&self.operator_secrets, &a.namespace, &a.name))
                .map(|o| &o.metadata),
            "PodDisruptionBudget" => find(&self.pdbs, &a.namespace, &a.name).map(|o| &o.metadata),
            // Kinds without a cache here never hold a pass back.
            _ => return a.resource_version.clone(),
        };
        meta.and_then(|m| m.resource_version.clone())
    }
}

/// What one pass decides from.
#[derive(Clone, Debug)]
pub struct Observed {
    pub cluster: EtcdCluster,
    pub spec: EtcdClusterSpec,
    pub managed: bool,
    /// Status as the previous pass wrote it.
    pub prev: EtcdClusterStatus,
    /// The selected control-plane nodes, sorted by name.
    pub nodes: Vec<ControlPlaneNode>,
    /// Per node: its etcd pod and what `etcd-verify` reported.
    pub pods: BTreeMap<String, (PodState, Option<membership::VerifyReport>)>,
    /// Per node: its newest installer pod.
    pub installers: BTreeMap<String, InstallerState>,
    /// etcd, once the etcd observer read it (default before).
    pub etcd: EtcdObservation,
    /// The etcd observer ran in this pass (a pass stopped before it knows nothing of etcd).
    pub etcd_read: bool,
    /// Node name → its member, matched by peer URL (filled with `etcd`).
    pub by_node: BTreeMap<String, MemberId>,
    pub now: OffsetDateTime,
}

impl Observed {
    /// The API part of the view.
    pub fn new(inputs: &Inputs, cluster: EtcdCluster, now: OffsetDateTime) -> Self {
        let spec = cluster.spec.clone();
        Self {
            managed: spec.management_state == ManagementState::Managed,
            prev: cluster.status.clone().unwrap_or_default(),
            nodes: objects::control_plane_nodes(&inputs.nodes, &spec.node_selector()),
            pods: objects::etcd_pods(&inputs.pods),
            installers: objects::installers(&inputs.pods),
            etcd: EtcdObservation::default(),
            etcd_read: false,
            by_node: BTreeMap::new(),
            spec,
            cluster,
            now,
        }
    }

    /// Adds etcd as observed.
    pub fn with_etcd(&mut self, etcd: EtcdObservation) {
        self.by_node = members_by_node(&self.nodes, &etcd);
        self.etcd = etcd;
        self.etcd_read = true;
    }

    /// Members whose node is being rolled to a revision (member → node and that revision): down,
    /// they are a planned restart rather than a degradation.
    pub fn restarting(&self) -> BTreeMap<MemberId, (String, i64)> {
        self.by_node
            .iter()
            .filter_map(|(node, id)| {
                let status = self
                    .prev
                    .node_statuses
                    .iter()
                    .find(|s| s.node_name == *node)?;
                Some((*id, (node.clone(), status.target_revision?)))
            })
            .collect()
    }

    /// The nodes `target_config` renders a manifest for and the installer moves: every node
    /// with a member, and a node without one that still runs an etcd pod (its member was removed
    /// while that pod's revision still names it) unless it is leaving or its member is only
    /// waiting to follow it to a new address. Such a node gets a revision listing no member of
    /// its own, on which `etcd-verify` archives the removed member's data and waits, before
    /// membership adds it again ([`Self::removed_listed`]).
    pub fn rolled_nodes(&self) -> BTreeSet<String> {
        let moving: BTreeSet<String> = self.address_moves().into_iter().map(|m| m.node).collect();
        self.nodes
            .iter()
            .filter(|n| {
                let name = &n.target.name;
                self.by_node.contains_key(name)
                    || (n.leaving().is_none()
                        && self.pods.contains_key(name)
                        && !moving.contains(name))
            })
            .map(|n| n.target.name.clone())
            .collect()
    }

    /// Per node: the removed member its etcd pod (the kubelet's mirror of the manifest on disk,
    /// one of `pods`) still lists for the node's peer URL ([`membership::MemberIds::removed_at`]),
    /// and the revision that pod runs. With no endpoint answering, `etcd-verify` would start that
    /// member on its old data, so membership adds no learner for the node while it is listed.
    pub fn removed_listed(&self, pods: &[Pod]) -> BTreeMap<String, RemovedListed> {
        let live: Vec<MemberId> = self.etcd.members.iter().map(|m| m.id).collect();
        self.nodes
            .iter()
            .filter_map(|n| {
                let name = &n.target.name;
                let url = n.target.peer_url().ok()?;
                let (state, _) = self.pods.get(name)?;
                let pod = objects::etcd_pod_of(pods, name)?;
                let listed = objects::etcd_env(pod, "ETCD_MEMBER_IDS")?;
                let id = membership::MemberIds::parse(&listed)
                    .ok()?
                    .removed_at(&url, &live)?;
                let revision = state.revision;
                Some((name.clone(), RemovedListed { id, revision }))
            })
            .collect()
    }

    /// What the decision sees of each node the installer moves ([`Self::rolled_nodes`]; one
    /// without a member only while it is Ready: its installer could not run otherwise, and a
    /// move that cannot finish would hold every other node's).
    pub fn node_views(&self, statuses: &[NodeStatus]) -> Vec<NodeView> {
        let rolled = self.rolled_nodes();
        self.nodes
            .iter()
            .filter(|n| {
                let name = &n.target.name;
                self.by_node.contains_key(name) || (n.ready && rolled.contains(name))
            })
            .map(|n| {
                let name = &n.target.name;
                let member = self.by_node.get(name).copied();
                NodeView {
                    name: name.clone(),
                    member,
                    is_leader: member.is_some() && member == self.etcd.leader,
                    pod: self.pods.get(name).map(|(p, _)| p.clone()),
                    installer: self.installers.get(name).cloned(),
                    member_healthy: member.is_some_and(|m| self.etcd.is_healthy(m)),
                    node_ready: n.ready,
                    etcd_stopped: n.etcd_stopped.clone(),
                    serves_elsewhere: member
                        .and_then(|id| self.etcd.members.iter().find(|m| m.id == id))
                        .is_some_and(|m| {
                            crate::observed::address_move::serves_elsewhere(&n.target, m)
                        }),
                    equivalent_to_latest: false,
                    status: statuses
                        .iter()
                        .find(|s| s.node_name == *name)
                        .cloned()
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Members that have to follow their node to a new address (see
    /// [`crate::observed::address_move`]).
    pub fn address_moves(&self) -> Vec<crate::observed::address_move::AddressMove> {
        let nodes = self
            .nodes
            .iter()
            .filter(|n| n.leaving().is_none())
            .map(|n| &n.target);
        crate::observed::address_move::pending_moves(nodes, &self.etcd.members)
    }

    /// Names of the selected nodes.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.target.name.clone()).collect()
    }
}

/// Node name → its member id, matched by peer URL.
pub fn members_by_node(
    nodes: &[ControlPlaneNode],
    etcd: &EtcdObservation,
) -> BTreeMap<String, MemberId> {
    nodes
        .iter()
        .filter_map(|n| {
            let url = n.target.peer_url().ok()?;
            let m = etcd.members.iter().find(|m| m.has_peer_url(&url))?;
            Some((n.target.name.clone(), m.id))
        })
        .collect()
}

/// A node's etcd pod still names, for the node's own peer URL, a member etcd no longer has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovedListed {
    /// The removed member.
    pub id: MemberId,
    /// The revision the pod runs.
    pub revision: i64,
}

/// Objects for tests, built as the API serves them.
#[cfg(test)]
pub(crate) mod fixtures {
    use k8s_openapi::api::core::v1::Node;

    /// Control-plane Node `n<i>` at `10.0.0.<i>`, Ready or not.
    pub fn node_object(i: u8, ready: bool) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("n{i}"), "labels": {crate::api::CONTROL_PLANE_LABEL: ""}},
            "status": {
                "addresses": [{"type": "InternalIP", "address": format!("10.0.0.{i}")}],
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
            }
        }))
        .unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::node_object;
    use super::*;

    fn awaited(rv: &str) -> Awaited {
        Awaited {
            kind: "EtcdCluster",
            namespace: String::new(),
            name: "cluster".into(),
            resource_version: Some(rv.into()),
        }
    }

    fn with_cluster(rv: &str) -> Inputs {
        let mut cluster = EtcdCluster::new("cluster", EtcdClusterSpec::default());
        cluster.metadata.resource_version = Some(rv.into());
        Inputs {
            cluster: Some(cluster),
            ..Inputs::default()
        }
    }

    /// n`i`'s etcd mirror pod on `revision`, listing members 1..=3 (member i on n`i`).
    fn etcd_pod(i: u8, revision: i64) -> Pod {
        let ids = "1=https://10.0.0.1:2380,2=https://10.0.0.2:2380,3=https://10.0.0.3:2380";
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("etcd-n{i}"), "namespace": "etcd",
                "labels": {"app": "etcd", "revision": revision.to_string()}},
            "spec": {"nodeName": format!("n{i}"), "containers": [{"name": "etcd",
                "env": [{"name": "ETCD_MEMBER_IDS", "value": ids}]}]}
        }))
        .unwrap()
    }

    fn voter(i: u8) -> membership::Member {
        let url = format!("https://10.0.0.{i}:2380").parse().unwrap();
        membership::Member::voter(MemberId::new(u64::from(i)).unwrap(), &format!("n{i}"), url)
    }

    /// n2's member 2 was removed while its pod still lists it; n4 is a new node with no pod.
    fn after_a_removal(n2_ready: bool) -> (Inputs, Observed) {
        let inputs = Inputs {
            nodes: vec![
                node_object(1, true),
                node_object(2, n2_ready),
                node_object(3, true),
                node_object(4, true),
            ],
            pods: vec![etcd_pod(1, 4), etcd_pod(2, 4), etcd_pod(3, 4)],
            ..Inputs::default()
        };
        let cluster = EtcdCluster::new(crate::api::SINGLETON, EtcdClusterSpec::default());
        let mut o = Observed::new(&inputs, cluster, OffsetDateTime::UNIX_EPOCH);
        o.with_etcd(EtcdObservation {
            members: vec![voter(1), voter(3)],
            ..EtcdObservation::default()
        });
        (inputs, o)
    }

    #[test]
    fn a_node_whose_pod_lists_its_removed_member_is_rolled_and_held() {
        let (inputs, o) = after_a_removal(true);
        let listed = o.removed_listed(&inputs.pods);
        let want = RemovedListed {
            id: MemberId::new(2).unwrap(),
            revision: 4,
        };
        assert_eq!(listed, BTreeMap::from([("n2".to_owned(), want)]));
        let rolled: Vec<String> = o.rolled_nodes().into_iter().collect();
        assert_eq!(rolled, ["n1", "n2", "n3"]);
        let views: Vec<(String, Option<MemberId>)> = o
            .node_views(&[])
            .into_iter()
            .map(|v| (v.name, v.member))
            .collect();
        assert_eq!(
            views,
            [
                ("n1".to_owned(), MemberId::new(1)),
                ("n2".to_owned(), None),
                ("n3".to_owned(), MemberId::new(3)),
            ]
        );
    }

    #[test]
    fn an_unready_node_without_a_member_is_rendered_but_not_moved() {
        let (_, o) = after_a_removal(false);
        assert!(o.rolled_nodes().contains("n2"));
        assert!(o.node_views(&[]).iter().all(|v| v.name != "n2"));
    }

    #[test]
    fn a_status_write_holds_the_next_pass_until_the_cache_shows_it() {
        let want = awaited("12");
        let stale = with_cluster("11");
        assert!(!crate::writer::satisfied(
            &want,
            stale.resource_version(&want).as_deref()
        ));
        let fresh = with_cluster("12");
        assert!(crate::writer::satisfied(
            &want,
            fresh.resource_version(&want).as_deref()
        ));
        let gone = Inputs::default();
        assert!(!crate::writer::satisfied(
            &want,
            gone.resource_version(&want).as_deref()
        ));
    }

    #[test]
    fn an_unreadable_spec_does_not_wait_for_the_status_written_before() {
        let want = awaited("12");
        let inputs = Inputs {
            unreadable: Some(Unreadable {
                object: Default::default(),
                generation: Some(3),
                field: "spec.clients[0]".into(),
                message: "missing field `commonName`".into(),
                observed_generation: Some(1),
                conditions: Vec::new(),
            }),
            ..Inputs::default()
        };
        assert!(crate::writer::satisfied(
            &want,
            inputs.resource_version(&want).as_deref()
        ));
    }
}
