//! The pure part of the kube-apiserver operator stand-in: the material and `--etcd-servers`
//! each kube-apiserver should run with, their digest, and which node is laid down or rolled
//! next.

use etcd_operator::controllers::cert_signer::consumers::MATERIAL_DIGEST_ANNOTATION;
use etcd_operator::controllers::host_endpoints::EndpointNode;
use k8s_openapi::api::core::v1::Secret;
use sha2::{Digest, Sha256};

use crate::controlplane::kube_pods::{ApiServerInputs, RESOURCES_DIR};

/// kube-apiserver's etcd client material (the consumer Secret's `ca.crt`, `tls.crt`,
/// `tls.key`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMaterial {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    /// The Secret's material digest (annotation [`MATERIAL_DIGEST_ANNOTATION`]), copied onto
    /// the pods laid down from it so the operator can tell which material each one runs.
    pub digest: Option<String>,
}

impl EtcdMaterial {
    /// The material in a consumer Secret; `None` when a key is missing.
    pub fn from_secret(secret: &Secret) -> Option<Self> {
        let data = secret.data.as_ref()?;
        let get = |k: &str| data.get(k).map(|b| b.0.clone());
        Some(Self {
            ca: get("ca.crt")?,
            cert: get("tls.crt")?,
            key: get("tls.key")?,
            digest: material_digest(secret),
        })
    }
}

/// A Secret's [`MATERIAL_DIGEST_ANNOTATION`].
pub fn material_digest(secret: &Secret) -> Option<String> {
    let annotations = secret.metadata.annotations.as_ref()?;
    annotations.get(MATERIAL_DIGEST_ANNOTATION).cloned()
}

/// `--etcd-servers` for `node`: its own voter first, then every other voter by node name.
pub fn etcd_servers(node: &str, nodes: &[EndpointNode]) -> Vec<String> {
    let mut voters: Vec<&EndpointNode> = nodes.iter().filter(|n| n.voter).collect();
    voters.sort_by_key(|n| (n.node != node, n.node.clone()));
    voters.iter().map(|n| n.client_url.clone()).collect()
}

/// The inputs of one node's kube-apiserver, with their digest.
pub fn inputs(material: &EtcdMaterial, servers: Vec<String>) -> ApiServerInputs {
    let mut h = Sha256::new();
    for part in [&material.ca, &material.cert, &material.key] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    for s in &servers {
        h.update((s.len() as u64).to_be_bytes());
        h.update(s.as_bytes());
    }
    let digest: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    ApiServerInputs {
        material_digest: material.digest.clone(),
        etcd_servers: servers,
        etcd_dir: format!("{RESOURCES_DIR}/kube-apiserver-etcd-{digest}"),
        digest,
    }
}

/// One node's kube-apiserver as the stand-in sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub node: String,
    /// The digest of the inputs it laid down last (`None`: nothing laid yet).
    pub laid: Option<String>,
    /// The digest its mirror pod shows while Ready (`None`: not Ready, or not seen).
    pub ready: Option<String>,
    /// The digest of the inputs it should run with.
    pub want: String,
}

/// What the stand-in does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Every kube-apiserver runs, Ready, with its inputs.
    Idle,
    /// Nodes that never had a kube-apiserver: laid down together (nothing runs there to keep).
    LayFirst(Vec<String>),
    /// A kube-apiserver given new inputs is not Ready with them yet.
    Wait(String),
    /// Give this node's kube-apiserver its new inputs (a restart).
    Roll(String),
}

/// The next step over `views` (one per node, sorted by node): first lays down what was never
/// laid; then waits for a restart in flight (a node laid with its wanted inputs, not Ready
/// with them); then rolls one outdated node, first one that is not Ready with what it was
/// laid last (down, or a restart still in flight whose inputs are outdated again: it serves
/// nothing now, and rolling another node would take two down at once).
pub fn next_step(views: &[NodeView]) -> Step {
    let unlaid: Vec<String> = views
        .iter()
        .filter(|v| v.laid.is_none())
        .map(|v| v.node.clone())
        .collect();
    if !unlaid.is_empty() {
        return Step::LayFirst(unlaid);
    }
    if let Some(v) = views
        .iter()
        .find(|v| v.laid.as_ref() == Some(&v.want) && v.ready.as_ref() != Some(&v.want))
    {
        return Step::Wait(v.node.clone());
    }
    let outdated = views.iter().filter(|v| v.laid.as_ref() != Some(&v.want));
    let (not_ready, ready): (Vec<&NodeView>, Vec<&NodeView>) =
        outdated.partition(|v| v.ready != v.laid);
    match not_ready.first().or(ready.first()) {
        Some(v) => Step::Roll(v.node.clone()),
        None => Step::Idle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(node: &str, voter: bool) -> EndpointNode {
        EndpointNode {
            node: node.to_owned(),
            member_id: None,
            client_url: format!("https://{node}:2379"),
            voter,
        }
    }

    fn view(node: &str, laid: Option<&str>, ready: Option<&str>, want: &str) -> NodeView {
        NodeView {
            node: node.to_owned(),
            laid: laid.map(str::to_owned),
            ready: ready.map(str::to_owned),
            want: want.to_owned(),
        }
    }

    #[test]
    fn a_node_lists_its_own_voter_first_and_no_learner() {
        let nodes = [
            ep("n1", true),
            ep("n2", true),
            ep("n3", false),
            ep("n4", true),
        ];
        assert_eq!(
            etcd_servers("n2", &nodes),
            ["https://n2:2379", "https://n1:2379", "https://n4:2379"]
        );
        assert_eq!(
            etcd_servers("n3", &nodes),
            ["https://n1:2379", "https://n2:2379", "https://n4:2379"]
        );
    }

    #[test]
    fn new_material_or_servers_change_the_digest() {
        let m = EtcdMaterial {
            ca: b"ca".to_vec(),
            cert: b"c".to_vec(),
            key: b"k".to_vec(),
            digest: Some("0123".into()),
        };
        let a = inputs(&m, vec!["https://n1:2379".into()]);
        assert_eq!(a, inputs(&m, vec!["https://n1:2379".into()]));
        assert_ne!(a.digest, inputs(&m, vec!["https://n2:2379".into()]).digest);
        let rotated = EtcdMaterial {
            ca: b"ca2".to_vec(),
            ..m
        };
        assert_ne!(
            a.digest,
            inputs(&rotated, vec!["https://n1:2379".into()]).digest
        );
    }

    #[test]
    fn nodes_never_laid_are_laid_together() {
        let views = [view("n1", None, None, "a"), view("n2", None, None, "a")];
        assert_eq!(
            next_step(&views),
            Step::LayFirst(vec!["n1".into(), "n2".into()])
        );
    }

    #[test]
    fn one_restart_at_a_time_each_after_the_previous_is_ready() {
        let all_old = [
            view("n1", Some("a"), Some("a"), "b"),
            view("n2", Some("a"), Some("a"), "b"),
        ];
        assert_eq!(next_step(&all_old), Step::Roll("n1".into()));
        let n1_restarting = [
            view("n1", Some("b"), None, "b"),
            view("n2", Some("a"), Some("a"), "b"),
        ];
        assert_eq!(next_step(&n1_restarting), Step::Wait("n1".into()));
        let n1_ready = [
            view("n1", Some("b"), Some("b"), "b"),
            view("n2", Some("a"), Some("a"), "b"),
        ];
        assert_eq!(next_step(&n1_ready), Step::Roll("n2".into()));
        let done = [
            view("n1", Some("b"), Some("b"), "b"),
            view("n2", Some("b"), Some("b"), "b"),
        ];
        assert_eq!(next_step(&done), Step::Idle);
    }

    #[test]
    fn a_down_outdated_server_is_rolled_before_a_serving_one() {
        let views = [
            view("n1", Some("a"), Some("a"), "b"),
            view("n2", Some("a"), None, "b"),
        ];
        assert_eq!(next_step(&views), Step::Roll("n2".into()));
    }

    #[test]
    fn a_restart_in_flight_whose_inputs_changed_again_is_rolled_before_another_node() {
        // n2 was laid "b" and is still Ready with its old "a" (or shows it) when the wanted
        // inputs move on to "c": n2 again, not n1, or two would be down at once.
        let views = [
            view("n1", Some("b"), Some("b"), "c"),
            view("n2", Some("b"), Some("a"), "c"),
        ];
        assert_eq!(next_step(&views), Step::Roll("n2".into()));
    }

    #[test]
    fn nothing_rolls_while_the_api_shows_no_ready_server_with_its_inputs() {
        // The API down: no mirror pod seen Ready, the inputs laid are the wanted ones.
        let views = [
            view("n1", Some("b"), None, "b"),
            view("n2", Some("b"), None, "b"),
        ];
        assert_eq!(next_step(&views), Step::Wait("n1".into()));
    }
}
