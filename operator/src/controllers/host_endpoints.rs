//! Endpoints (host endpoints): what etcd's consumers (kube-apiserver's `--etcd-servers`, backup
//! tools) dial. Published as ConfigMap `etcd-endpoints`:
//!
//! * `data`: member id (hex) → `host:port`, voters only (learners reject client traffic; unlike
//!   the manifests' `ETCDCTL_ENDPOINTS`, which list every member so that a promotion needs no new
//!   revision, this ConfigMap is not part of a revision and costs no restart to change). A
//!   promoted learner appears and a removed member (the bootstrap member included) disappears on
//!   the next pass. Every value is dialable: readers that dial every value keep working.
//! * annotation [`NODES_ANNOTATION`]: every control-plane node, sorted by name, as one JSON
//!   array of [`EndpointNode`] (`{"node","memberId","clientURL","voter"}`): its member (none
//!   yet: no `memberId`), where its etcd serves clients, and whether that member votes. A
//!   kube-apiserver lists its own node's member first from it. It is an annotation, not a data
//!   key, so `data` stays a map of dialable addresses (cluster-etcd-operator's `etcd-endpoints`
//!   carries its bootstrap address in an annotation too).
//!
//! There is no Endpoints object: no consumer reads one (they read this ConfigMap, as
//! cluster-etcd-operator's consumers do), Endpoints is deprecated in favour of EndpointSlice, and
//! kube-apiserver rejects loopback addresses in it, so it could only fail.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use membership::{Member, MemberId};

use crate::controller::{ControllerError, ControllerName};
use crate::observed::find;
use crate::pass::Pass;
use crate::podspec::{NodeTarget, STATIC_POD_NAMESPACE as NS, voter_endpoints};

const NAME: ControllerName = ControllerName::Endpoints;

/// ConfigMap of member id → client address.
pub const ENDPOINTS_CONFIGMAP: &str = "etcd-endpoints";
/// Its annotation listing every control-plane node ([`EndpointNode`]s, JSON).
pub const NODES_ANNOTATION: &str = "etcd.static-operator.io/nodes";

/// Member id (hex) → `host:port` of every voter with a client URL
/// ([`voter_endpoints`]).
pub fn endpoint_data(members: &[Member]) -> BTreeMap<String, String> {
    voter_endpoints(members)
        .into_iter()
        .map(|(id, url)| (id.to_string(), url.authority().to_owned()))
        .collect()
}

/// One control-plane node in [`NODES_ANNOTATION`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointNode {
    pub node: String,
    /// Its member's id (hex); absent while the node has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<String>,
    /// Where its etcd serves clients: the URL its member advertises, else the node's own
    /// (`https://<node ip>:2379`, where its etcd will serve).
    #[serde(rename = "clientURL")]
    pub client_url: String,
    /// Its member is a voter (false: a learner, or no member).
    pub voter: bool,
}

/// Every node in `nodes`, sorted by name, with the member `by_node` matched to it (by peer URL).
pub fn endpoint_nodes(
    nodes: &[NodeTarget],
    by_node: &BTreeMap<String, MemberId>,
    members: &[Member],
) -> Vec<EndpointNode> {
    let mut out: Vec<EndpointNode> = nodes
        .iter()
        .map(|n| {
            let member = by_node
                .get(&n.name)
                .and_then(|id| members.iter().find(|m| m.id == *id));
            let own = n.client_url().map(|u| u.to_string()).unwrap_or_default();
            EndpointNode {
                node: n.name.clone(),
                member_id: member.map(|m| m.id.to_string()),
                client_url: member
                    .and_then(|m| m.client_urls.first())
                    .map_or(own, ToString::to_string),
                voter: member.is_some_and(|m| !m.is_learner),
            }
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

/// The annotations of `etcd-endpoints`: [`NODES_ANNOTATION`] as compact JSON.
pub fn endpoint_annotations(
    nodes: &[EndpointNode],
) -> Result<BTreeMap<String, String>, serde_json::Error> {
    Ok(BTreeMap::from([(
        NODES_ANNOTATION.to_owned(),
        serde_json::to_string(nodes)?,
    )]))
}

/// The nodes a reader finds in `etcd-endpoints` (none when the annotation is absent, as from an
/// operator before it).
pub fn read_nodes(cm: &ConfigMap) -> Result<Vec<EndpointNode>, serde_json::Error> {
    cm.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODES_ANNOTATION))
        .map_or(Ok(Vec::new()), |text| serde_json::from_str(text))
}

/// Publishes the voters' client addresses and every node (not in a plan).
pub async fn reconcile(p: &mut Pass<'_>) -> Result<(), ControllerError> {
    let _t = p.ctx.metrics.time(NAME.as_str());
    let data = endpoint_data(&p.o.etcd.members);
    let targets: Vec<NodeTarget> = p.o.nodes.iter().map(|n| n.target.clone()).collect();
    let nodes = endpoint_nodes(&targets, &p.o.by_node, &p.o.etcd.members);
    p.next(
        NAME,
        format!(
            "publish {} voter endpoint(s) and {} node(s)",
            data.len(),
            nodes.len()
        ),
    );
    if !data.is_empty() {
        let annotations = endpoint_annotations(&nodes).map_err(|e| {
            ControllerError::new(
                NAME,
                crate::retry::ErrorKind::Permanent,
                crate::category::Category::Encode,
                e.to_string(),
            )
        })?;
        let current = find(&p.inputs.configmaps, NS, ENDPOINTS_CONFIGMAP);
        p.w.configmap_annotated(NS, ENDPOINTS_CONFIGMAP, current, &data, &annotations)
            .await
            .map_err(|e| ControllerError::write(NAME, &e))?;
    }
    p.succeeded(NAME);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use membership::{MemberId, MemberUrl};

    #[test]
    fn voters_only_sorted_by_id() {
        let u = |s: &str| -> MemberUrl { s.parse().unwrap() };
        let members = [
            Member::voter(
                MemberId::new(0xb).unwrap(),
                "n2",
                u("https://10.0.0.2:2380"),
            )
            .with_client_url(u("https://10.0.0.2:2379")),
            Member::voter(
                MemberId::new(0xa).unwrap(),
                "n1",
                u("https://10.0.0.1:2380"),
            )
            .with_client_url(u("https://10.0.0.1:2379")),
            Member::unstarted_learner(MemberId::new(0xc).unwrap(), u("https://10.0.0.3:2380")),
        ];
        let data = endpoint_data(&members);
        assert_eq!(
            data,
            BTreeMap::from([
                ("a".to_owned(), "10.0.0.1:2379".to_owned()),
                ("b".to_owned(), "10.0.0.2:2379".to_owned())
            ])
        );
    }

    /// Every node, sorted by name, whatever its member is: a voter (its advertised URL), a
    /// started learner, an unstarted learner (the node's own URL), none; a member of no node
    /// stays in `data` only. The annotation reads back the same, byte-stable.
    #[test]
    fn every_node_with_its_member_and_vote_sorted_by_name() {
        let u = |s: &str| -> MemberUrl { s.parse().unwrap() };
        let id = |n: u64| MemberId::new(n).unwrap();
        let ip = |s: &str| -> std::net::IpAddr { s.parse().unwrap() };
        let nodes = [
            NodeTarget::new("n3", ip("10.0.0.3")),
            NodeTarget::new("n1", ip("10.0.0.1")),
            NodeTarget::new("n4", ip("fd00::4")),
            NodeTarget::new("n2", ip("10.0.0.2")),
        ];
        let members = [
            Member::voter(id(0xa), "n1", u("https://10.0.0.1:2380"))
                .with_client_url(u("https://10.0.0.1:2379")),
            Member::unstarted_learner(id(0xb), u("https://10.0.0.2:2380"))
                .started_as("n2")
                .with_client_url(u("https://10.0.0.2:2379")),
            Member::unstarted_learner(id(0xc), u("https://10.0.0.3:2380")),
            Member::voter(id(0xd), "gone", u("https://10.0.0.9:2380"))
                .with_client_url(u("https://10.0.0.9:2379")),
        ];
        let by_node = BTreeMap::from([
            ("n1".to_owned(), id(0xa)),
            ("n2".to_owned(), id(0xb)),
            ("n3".to_owned(), id(0xc)),
        ]);
        let listed = endpoint_nodes(&nodes, &by_node, &members);
        let annotations = endpoint_annotations(&listed).unwrap();
        assert_eq!(
            annotations[NODES_ANNOTATION],
            concat!(
                r#"[{"node":"n1","memberId":"a","clientURL":"https://10.0.0.1:2379","voter":true},"#,
                r#"{"node":"n2","memberId":"b","clientURL":"https://10.0.0.2:2379","voter":false},"#,
                r#"{"node":"n3","memberId":"c","clientURL":"https://10.0.0.3:2379","voter":false},"#,
                r#"{"node":"n4","clientURL":"https://[fd00::4]:2379","voter":false}]"#
            )
        );
        let mut shuffled = nodes.clone();
        shuffled.reverse();
        assert_eq!(endpoint_nodes(&shuffled, &by_node, &members), listed);
        assert_eq!(
            endpoint_data(&members).keys().collect::<Vec<_>>(),
            ["a", "d"],
            "data: voters only, a member of no node too"
        );
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                annotations: Some(annotations),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(read_nodes(&cm).unwrap(), listed);
        assert_eq!(read_nodes(&ConfigMap::default()).unwrap(), []);
    }
}
