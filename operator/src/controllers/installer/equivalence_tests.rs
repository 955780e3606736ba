//! Equivalence on revisions rendered by the real templates.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use membership::{Member, MemberId, MemberIds, MemberUrl};

use super::*;
use crate::api::EtcdClusterSpec;
use crate::podspec::{Images, NodeTarget, PodInput, render_pod};

fn nodes() -> Vec<NodeTarget> {
    (1..=4)
        .map(|i| NodeTarget::new(&format!("n{i}"), IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))))
        .collect()
}

fn url(i: u8) -> MemberUrl {
    format!("https://10.0.0.{i}:2380").parse().unwrap()
}

fn id(i: u8) -> MemberId {
    MemberId::new(u64::from(i) * 0x1111).unwrap()
}

fn voter(i: u8) -> Member {
    Member::voter(id(i), &format!("n{i}"), url(i))
        .with_client_url(format!("https://10.0.0.{i}:2379").parse().unwrap())
}

fn learner(i: u8) -> Member {
    Member::unstarted_learner(id(i), url(i))
}

/// Revision `number` as the revision controller writes it, for every node, from `members`:
/// the pods, the CA bundles, and a certificate and key per node and kind (`certs` tags their
/// content).
fn revision(number: i64, members: &[Member], spec: &EtcdClusterSpec, certs: &str) -> Copies {
    let nodes = nodes();
    let images = Images {
        etcd: "registry.example/etcd:3.5.16".into(),
        operator: "registry.example/etcd-static-operator:0.1.0".into(),
    };
    let mut pods = BTreeMap::new();
    let mut secret = BTreeMap::new();
    for n in &nodes {
        let text = render_pod(&PodInput {
            node: n,
            nodes: &nodes,
            members,
            revision: Some(number),
            bootstrap: false,
            cluster_token: None,
            spec,
            images: &images,
            resource_host_dir: None,
        })
        .unwrap();
        pods.insert(format!("pod-{}.yaml", n.name), text);
        // Every node's certificates are in the Secret from the start, but n4's only once it
        // has a member (as the cert signer issues them).
        if n.name != "n4" || members.len() == 4 {
            for kind in ["etcd-serving", "etcd-peer", "etcd-serving-metrics"] {
                for ext in ["crt", "key"] {
                    let content = format!("{certs} {kind} {}", n.name);
                    secret.insert(
                        format!("{kind}-{}.{ext}", n.name),
                        ByteString(content.into()),
                    );
                }
            }
        }
    }
    let bundles = BTreeMap::from([
        ("server-ca-bundle.crt".to_owned(), "server CA".to_owned()),
        ("peer-ca-bundle.crt".to_owned(), "peer CA".to_owned()),
        ("metrics-ca-bundle.crt".to_owned(), "metrics CA".to_owned()),
    ]);
    let mut s = Secret::default();
    s.metadata.name = Some(format!("{ALL_CERTS_SECRET}-{number}"));
    s.data = Some(secret);
    Copies {
        configmaps: vec![
            configmap(&format!("{POD_CONFIGMAP}-{number}"), pods),
            configmap(&format!("{ALL_BUNDLES_CONFIGMAP}-{number}"), bundles),
        ],
        secrets: vec![s],
    }
}

/// Owned copies of one or more revisions.
#[derive(Default)]
struct Copies {
    configmaps: Vec<ConfigMap>,
    secrets: Vec<Secret>,
}

fn configmap(name: &str, data: BTreeMap<String, String>) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.to_owned());
    c.data = Some(data);
    c
}

fn both(a: Copies, b: Copies) -> Copies {
    Copies {
        configmaps: a.configmaps.into_iter().chain(b.configmaps).collect(),
        secrets: a.secrets.into_iter().chain(b.secrets).collect(),
    }
}

fn check(c: &Copies, node: &str, m: RunningMember<'_>, latest: i64) -> Result<(), Difference> {
    let copies = super::Copies {
        configmaps: &c.configmaps,
        secrets: &c.secrets,
    };
    equivalent(copies, node, m, latest)
}

fn serving<'a>(i: u8, revision: i64, own: &'a MemberUrl, pod: &'a Pod) -> RunningMember<'a> {
    RunningMember {
        id: Some(id(i)),
        peer_url: own,
        serving: Some(revision),
        pod: Some(pod),
    }
}

/// Node `node`'s pod of revision `number` in `c`, as the kubelet would report it.
fn mirror(c: &Copies, number: i64, node: &str) -> Pod {
    let copies = super::Copies {
        configmaps: &c.configmaps,
        secrets: &c.secrets,
    };
    NodeRevision::find(copies, number, node)
        .map(|r| r.pod)
        .unwrap_or_default()
}

/// Node `n<i>`, its member started and serving on `running` as its manifest says, against
/// `latest`.
fn check_at(c: &Copies, i: u8, running: i64, latest: i64) -> Result<(), Difference> {
    let (own, node) = (url(i), format!("n{i}"));
    let pod = mirror(c, running, &node);
    check(c, &node, serving(i, running, &own, &pod), latest)
}

fn three() -> Vec<Member> {
    vec![voter(1), voter(2), voter(3)]
}

fn with(mut members: Vec<Member>, m: Member) -> Vec<Member> {
    members.push(m);
    members
}

#[test]
fn a_learner_add_is_equivalent_for_every_serving_voter() {
    let spec = EtcdClusterSpec::default();
    let cms = both(
        revision(10, &three(), &spec, "certs"),
        revision(11, &with(three(), learner(4)), &spec, "certs"),
    );
    for i in 1..=3 {
        assert_eq!(check_at(&cms, i, 10, 11), Ok(()), "n{i}");
    }
    // Started or promoted, the learner changes no manifest: still equivalent.
    let started = with(three(), voter(4));
    let cms = both(
        revision(10, &three(), &spec, "certs"),
        revision(12, &started, &spec, "certs"),
    );
    assert_eq!(check_at(&cms, 1, 10, 12), Ok(()));
}

#[test]
fn a_removal_a_cert_change_or_a_spec_change_is_not() {
    let spec = EtcdClusterSpec::default();
    // n3 removed since n1's revision.
    let cms = both(
        revision(10, &three(), &spec, "certs"),
        revision(11, &[voter(1), voter(2)], &spec, "certs"),
    );
    assert_eq!(
        check_at(&cms, 1, 10, 11),
        Err(Difference::ListsOthers(vec![id(3)]))
    );
    // New certificates with the learner.
    let cms = both(
        revision(10, &three(), &spec, "certs"),
        revision(11, &with(three(), learner(4)), &spec, "rotated"),
    );
    assert_eq!(
        check_at(&cms, 1, 10, 11),
        Err(Difference::Content("certificates or CA bundles"))
    );
    // An admin's forced redeployment with the learner.
    let mut forced = spec.clone();
    forced.force_redeployment_reason = "rotate disks".into();
    let cms = both(
        revision(10, &three(), &spec, "certs"),
        revision(11, &with(three(), learner(4)), &forced, "certs"),
    );
    assert_eq!(
        check_at(&cms, 1, 10, 11),
        Err(Difference::Content("pod specs"))
    );
}

#[test]
fn only_a_serving_started_member_listed_under_its_url_counts() {
    let spec = EtcdClusterSpec::default();
    let cms = both(
        revision(10, &three(), &spec, "certs"),
        revision(11, &with(three(), learner(4)), &spec, "certs"),
    );
    let own = url(1);
    let pod = mirror(&cms, 10, "n1");
    let mut m = serving(1, 10, &own, &pod);
    m.serving = None;
    assert_eq!(check(&cms, "n1", m, 11), Err(Difference::NotServing));
    let mut m = serving(1, 10, &own, &pod);
    m.id = None;
    assert_eq!(check(&cms, "n1", m, 11), Err(Difference::NoStartedMember));
    // A manifest on the node that is not its revision's (forged, or etcd-recover's), or none.
    let mut forged = pod.clone();
    let etcd = &mut forged.spec.as_mut().unwrap().containers[0];
    etcd.args
        .as_mut()
        .unwrap()
        .push("--force-new-cluster".into());
    let on_node = Err(Difference::Content(
        "the manifest on the node and its revision",
    ));
    assert_eq!(
        check(&cms, "n1", serving(1, 10, &own, &forged), 11),
        on_node
    );
    // No pod at all (its manifest moved away): nothing runs to restart; the missing-pod rule
    // decides about a reinstall.
    let mut m = serving(1, 10, &own, &pod);
    m.pod = None;
    assert_eq!(check(&cms, "n1", m, 11), Ok(()));
    // n4's learner is not in revision 10: a node on it is never equivalent.
    assert_eq!(check_at(&cms, 4, 10, 11), Err(Difference::OwnNotListed));
    // A revision the API no longer has.
    assert!(matches!(
        check_at(&cms, 1, 9, 11),
        Err(Difference::Unreadable(why)) if why.contains("etcd-pod-9")
    ));
}

#[test]
fn a_moved_url_is_not_equivalent() {
    let running = MemberIds::from_members(&three());
    let moved = MemberIds::from_members(&[voter(1), voter(2), Member::voter(id(3), "n3", url(9))]);
    assert_eq!(
        members_allow(id(1), &url(1), &running, &moved),
        Err(Difference::UrlMoved(vec![id(3)]))
    );
    assert_eq!(
        members_allow(id(1), &url(2), &running, &running),
        Err(Difference::OwnNotListed)
    );
}
