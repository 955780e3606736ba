//! Target config: one manifest per node with a member, deterministic.

use std::net::{IpAddr, Ipv4Addr};

use membership::MemberUrl;

use super::*;
use crate::podspec::REVISION_TOKEN;

fn node(i: u8) -> ControlPlaneNode {
    ControlPlaneNode {
        target: NodeTarget::new(&format!("n{i}"), IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))),
        ready: true,
        deleting: false,
        unschedulable: false,
        etcd_stopped: None,
        remove_member: None,
    }
}

fn url(s: String) -> MemberUrl {
    s.parse().unwrap()
}

fn voter(i: u8) -> Member {
    Member::voter(
        MemberId::new(u64::from(i)).unwrap(),
        &format!("n{i}"),
        url(format!("https://10.0.0.{i}:2380")),
    )
    .with_client_url(url(format!("https://10.0.0.{i}:2379")))
}

fn images() -> Images {
    Images {
        etcd: "registry.example/etcd:3.5.21".into(),
        operator: "registry.example/etcd-operator:0.1.0".into(),
    }
}

fn by_node(ids: &[(&str, u64)]) -> BTreeMap<String, MemberId> {
    ids.iter()
        .map(|(n, i)| ((*n).to_owned(), MemberId::new(*i).unwrap()))
        .collect()
}

fn render(
    nodes: &[ControlPlaneNode],
    by_node: &BTreeMap<String, MemberId>,
    members: &[Member],
) -> BTreeMap<String, String> {
    render_all(
        nodes,
        by_node,
        members,
        &EtcdClusterSpec::default(),
        &images(),
    )
    .unwrap()
}

/// (name, nodes, node → member, members, expected keys)
type RenderCase = (
    &'static str,
    Vec<ControlPlaneNode>,
    BTreeMap<String, MemberId>,
    Vec<Member>,
    Vec<&'static str>,
);

#[test]
fn only_nodes_with_a_member_get_a_manifest() {
    let three = || vec![node(1), node(2), node(3)];
    let mut unready = three();
    unready[1].ready = false;
    unready[2].deleting = true;
    let cases: Vec<RenderCase> = vec![
        (
            "no member anywhere",
            three(),
            BTreeMap::new(),
            Vec::new(),
            vec![],
        ),
        (
            "no node at all",
            Vec::new(),
            by_node(&[("n1", 1)]),
            vec![voter(1)],
            vec![],
        ),
        (
            "one member of three nodes",
            three(),
            by_node(&[("n1", 1)]),
            vec![voter(1)],
            vec!["pod-n1.yaml"],
        ),
        (
            "two members of three nodes",
            three(),
            by_node(&[("n1", 1), ("n3", 3)]),
            vec![voter(1), voter(3)],
            vec!["pod-n1.yaml", "pod-n3.yaml"],
        ),
        (
            "a member of a node that is not a control-plane node",
            three(),
            by_node(&[("n9", 9)]),
            Vec::new(),
            vec![],
        ),
        (
            "an unstarted learner's node is rendered",
            three(),
            by_node(&[("n1", 1), ("n2", 2)]),
            vec![
                voter(1),
                Member::unstarted_learner(
                    MemberId::new(2).unwrap(),
                    url("https://10.0.0.2:2380".into()),
                ),
            ],
            vec!["pod-n1.yaml", "pod-n2.yaml"],
        ),
        (
            "readiness and deletion do not matter, the member does",
            unready,
            by_node(&[("n1", 1), ("n2", 2), ("n3", 3)]),
            vec![voter(1), voter(2), voter(3)],
            vec!["pod-n1.yaml", "pod-n2.yaml", "pod-n3.yaml"],
        ),
    ];
    for (name, nodes, by_node, members, want) in cases {
        let out = render(&nodes, &by_node, &members);
        let keys: Vec<&str> = out.keys().map(String::as_str).collect();
        assert_eq!(keys, want, "case: {name}");
        for (key, text) in &out {
            let node = key
                .strip_prefix("pod-")
                .and_then(|k| k.strip_suffix(".yaml"))
                .unwrap();
            assert!(
                text.contains(&format!("etcd.static-operator.io/node: \"{node}\"")),
                "case: {name}: {key} is not for {node}:\n{text}"
            );
            assert!(
                text.contains(REVISION_TOKEN),
                "case: {name}: {key} has no revision token:\n{text}"
            );
            assert!(
                text.contains("registry.example/etcd:3.5.21"),
                "case: {name}: {key} does not run the etcd image:\n{text}"
            );
        }
    }
}

#[test]
fn each_node_gets_its_own_manifest() {
    let nodes = [node(1), node(2), node(3)];
    let out = render(
        &nodes,
        &by_node(&[("n1", 1), ("n2", 2), ("n3", 3)]),
        &[voter(1), voter(2), voter(3)],
    );
    assert_eq!(out.len(), 3);
    assert_ne!(out["pod-n1.yaml"], out["pod-n2.yaml"]);
    assert_ne!(out["pod-n2.yaml"], out["pod-n3.yaml"]);
    assert!(out["pod-n2.yaml"].contains("https://10.0.0.2:2380"));
}

#[test]
fn rendering_is_deterministic() {
    let nodes = [node(1), node(2), node(3)];
    let ids = by_node(&[("n1", 1), ("n2", 2), ("n3", 3)]);
    let members = [voter(1), voter(2), voter(3)];
    let first = render(&nodes, &ids, &members);
    let second = render(&nodes, &ids, &members);
    assert_eq!(first.len(), 3);
    assert_eq!(first, second);
    // The order the nodes and members are listed in changes nothing either.
    let nodes_rev = [node(3), node(2), node(1)];
    let members_rev = [voter(3), voter(1), voter(2)];
    assert_eq!(render(&nodes_rev, &ids, &members_rev), first);
    // A changed spec does change the output (the comparison above can fail).
    let spec = EtcdClusterSpec {
        etcd_image: Some("registry.example/etcd:other".into()),
        ..Default::default()
    };
    let changed = render_all(&nodes, &ids, &members, &spec, &images()).unwrap();
    assert_ne!(changed, first);
}
