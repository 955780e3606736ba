//! Target config: one manifest per rolled node, deterministic.

use std::net::{IpAddr, Ipv4Addr};

use membership::{MemberId, MemberUrl};

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

fn rolled(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

fn render(
    nodes: &[ControlPlaneNode],
    rolled: &BTreeSet<String>,
    members: &[Member],
) -> BTreeMap<String, String> {
    render_all(
        nodes,
        rolled,
        members,
        &EtcdClusterSpec::default(),
        &images(),
        None,
    )
    .unwrap()
}

/// (name, nodes, nodes to render, members, expected keys)
type RenderCase = (
    &'static str,
    Vec<ControlPlaneNode>,
    BTreeSet<String>,
    Vec<Member>,
    Vec<&'static str>,
);

#[test]
fn only_the_rolled_nodes_get_a_manifest() {
    let three = || vec![node(1), node(2), node(3)];
    let mut unready = three();
    unready[1].ready = false;
    unready[2].deleting = true;
    let cases: Vec<RenderCase> = vec![
        (
            "no member anywhere",
            three(),
            BTreeSet::new(),
            Vec::new(),
            vec![],
        ),
        (
            "no node at all",
            Vec::new(),
            rolled(&["n1"]),
            vec![voter(1)],
            vec![],
        ),
        (
            "one member of three nodes",
            three(),
            rolled(&["n1"]),
            vec![voter(1)],
            vec!["pod-n1.yaml"],
        ),
        (
            "two members of three nodes",
            three(),
            rolled(&["n1", "n3"]),
            vec![voter(1), voter(3)],
            vec!["pod-n1.yaml", "pod-n3.yaml"],
        ),
        (
            "a member of a node that is not a control-plane node",
            three(),
            rolled(&["n9"]),
            Vec::new(),
            vec![],
        ),
        (
            "an unstarted learner's node is rendered",
            three(),
            rolled(&["n1", "n2"]),
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
            "readiness and deletion do not matter, being rolled does",
            unready,
            rolled(&["n1", "n2", "n3"]),
            vec![voter(1), voter(2), voter(3)],
            vec!["pod-n1.yaml", "pod-n2.yaml", "pod-n3.yaml"],
        ),
    ];
    for (name, nodes, rolled, members, want) in cases {
        let out = render(&nodes, &rolled, &members);
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
fn a_node_whose_member_was_removed_lists_the_live_members_and_none_of_its_own() {
    let nodes = [node(1), node(2), node(3)];
    let out = render(&nodes, &rolled(&["n1", "n2", "n3"]), &[voter(1), voter(3)]);
    let n2 = &out["pod-n2.yaml"];
    let ids =
        "name: ETCD_MEMBER_IDS\n      value: \"1=https://10.0.0.1:2380,3=https://10.0.0.3:2380\"";
    assert!(n2.contains(ids), "{n2}");
    assert!(
        n2.contains("ETCD_INITIAL_CLUSTER_STATE\n      value: \"existing\""),
        "{n2}"
    );
}

#[test]
fn each_node_gets_its_own_manifest() {
    let nodes = [node(1), node(2), node(3)];
    let out = render(
        &nodes,
        &rolled(&["n1", "n2", "n3"]),
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
    let ids = rolled(&["n1", "n2", "n3"]);
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
    let changed = render_all(&nodes, &ids, &members, &spec, &images(), None).unwrap();
    assert_ne!(changed, first);
}

#[test]
fn every_manifest_carries_the_cluster_token_once_known() {
    let nodes = [node(1), node(2), node(3)];
    let members = [voter(1), voter(2), voter(3)];
    let ids = rolled(&["n1", "n2", "n3"]);
    let spec = EtcdClusterSpec::default();
    let with = |token| render_all(&nodes, &ids, &members, &spec, &images(), token).unwrap();
    let line = "name: ETCD_INITIAL_CLUSTER_TOKEN\n      value: \"etcd-0123abcd\"";
    let known = with(Some("etcd-0123abcd"));
    assert_eq!(known.len(), 3);
    for (key, text) in &known {
        assert!(text.contains(line), "{key} lacks the token:\n{text}");
    }
    // The same token renders the same bytes (no churn); no token known: etcd's default, as
    // revisions of clusters bootstrapped before tokens were written always had.
    assert_eq!(with(Some("etcd-0123abcd")), known);
    for (key, text) in with(None) {
        assert!(
            !text.contains("ETCD_INITIAL_CLUSTER_TOKEN"),
            "{key}:\n{text}"
        );
    }
}
