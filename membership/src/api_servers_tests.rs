//! Tests of the Kubernetes API's etcd rules ([`super`]).

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
        control_plane: ControlPlanePods::NotListed,
        outage_approved: false,
        standby: None,
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

fn add_learner(i: u64) -> Action {
    Action::AddLearner {
        node: format!("n{i}"),
        peer_url: format!("https://10.0.0.{i}:2380").parse().unwrap(),
    }
}

#[test]
fn a_learner_is_added_only_where_no_api_server_would_send_it_requests() {
    // n2's member was removed (its data dir lost); every kube-apiserver still lists n2.
    let mut v = view(vec![
        api(1, true, &[1, 2, 3]),
        api(2, true, &[2, 1, 3]),
        api(3, true, &[3, 1, 2]),
    ]);
    v.members.remove(1);
    let denied = gate(&v, &add_learner(2));
    assert_eq!(rule(denied.clone()), Some(DenyRule::LearnerAddressListed));
    assert!(message(denied).contains("kube-apiserver-n1"));
    // n1 and n3 dropped it; n2's own still lists it among others: it would spread to it.
    v.api_servers[0] = api(1, true, &[1, 3]);
    v.api_servers[2] = api(3, true, &[3, 1]);
    let denied = gate(&v, &add_learner(2));
    assert!(message(denied).contains("kube-apiserver-n2"));
    v.api_servers[1] = api(2, true, &[1, 3]);
    assert_eq!(rule(gate(&v, &add_learner(2))), None);
    // A new node's address is listed nowhere.
    assert_eq!(rule(gate(&v, &add_learner(4))), None);
}

#[test]
fn a_kube_apiserver_on_the_learners_node_with_only_its_own_member_is_exempt() {
    let mut local = api(2, true, &[]);
    local.etcd_servers = vec!["https://127.0.0.1:2379".into()];
    let mut v = view(vec![local.clone()]);
    v.members.remove(1);
    assert_eq!(rule(gate(&v, &add_learner(2))), None);
    // Loopback plus the others: it would send the learner a share of its requests.
    local.etcd_servers.push("https://10.0.0.1:2379".into());
    v.api_servers = vec![local];
    assert_eq!(
        rule(gate(&v, &add_learner(2))),
        Some(DenyRule::LearnerAddressListed)
    );
}

#[test]
fn hosts_are_read_from_urls() {
    assert_eq!(url_host("https://10.0.0.2:2379"), Some("10.0.0.2"));
    assert_eq!(url_host("https://[::1]:2379"), Some("[::1]"));
    assert_eq!(url_host("https://etcd-0/"), Some("etcd-0"));
    assert_eq!(url_host("no-scheme"), None);
}

fn cp(node: u64, component: &str, ready: bool) -> ControlPlanePod {
    ControlPlanePod {
        pod: format!("kube-system/{component}-n{node}"),
        node: Some(format!("n{node}")),
        ready,
        component: Some(component.to_owned()),
    }
}

fn message(v: Verdict) -> String {
    match v {
        Verdict::Allow => String::new(),
        Verdict::Deny(d) => d.message,
    }
}

#[test]
fn a_restart_waits_for_the_other_nodes_controller_managers_and_schedulers() {
    let mut v = view(vec![api(2, true, &[2, 1, 3]), api(3, true, &[3, 1, 2])]);
    let both = |n, kcm, sched| {
        [
            cp(n, "kube-controller-manager", kcm),
            cp(n, "kube-scheduler", sched),
        ]
    };
    v.control_plane = ControlPlanePods::Listed(
        [
            both(1, true, false),
            both(2, false, true),
            both(3, true, true),
        ]
        .concat(),
    );
    // n2's controller-manager is short: n1's etcd waits (n1's own scheduler does not count).
    let denied = gate(&v, &roll(1));
    assert!(
        message(denied.clone()).contains("not Ready: pod kube-system/kube-controller-manager-n2"),
        "{denied:?}"
    );
    assert_eq!(rule(denied), Some(DenyRule::ControlPlaneNotReady));
    // n2's own restart is not held by its own pods, but by n1's scheduler.
    assert!(message(gate(&v, &roll(2))).contains("kube-scheduler-n1"));
    v.control_plane = ControlPlanePods::Listed([both(1, true, true), both(3, true, true)].concat());
    assert_eq!(rule(gate(&v, &roll(2))), None);
}

#[test]
fn a_component_missing_on_another_node_holds_like_one_not_ready() {
    let mut v = view(vec![api(2, true, &[2, 1, 3]), api(3, true, &[3, 1, 2])]);
    v.control_plane = ControlPlanePods::Listed(vec![
        cp(1, "kube-scheduler", true),
        cp(2, "kube-controller-manager", true),
        cp(3, "kube-controller-manager", true),
        cp(3, "kube-scheduler", true),
    ]);
    let denied = gate(&v, &roll(1));
    assert!(
        message(denied.clone()).contains("missing: kube-scheduler on n2"),
        "{denied:?}"
    );
    assert_eq!(rule(denied), Some(DenyRule::ControlPlaneNotReady));
    // n2's own etcd may restart; n1 lacking a controller-manager holds n3's.
    assert!(message(gate(&v, &roll(3))).contains("missing: kube-controller-manager on n1"));
    assert!(!message(gate(&v, &roll(2))).contains("on n2"));
}

#[test]
fn control_plane_pods_that_cannot_be_listed_hold_every_voter_going_down() {
    let mut v = view(Vec::new());
    v.control_plane = ControlPlanePods::Unreadable("pods is forbidden".into());
    let denied = gate(&v, &roll(1));
    assert!(
        message(denied.clone()).contains("pods is forbidden"),
        "{denied:?}"
    );
    assert_eq!(rule(denied), Some(DenyRule::ControlPlaneNotReady));
    // A learner's or an unhealthy voter's restart takes nothing from the API.
    v.members[0].healthy = false;
    v.members.push(voter(4, true));
    assert_ne!(
        rule(gate(&v, &roll(1))),
        Some(DenyRule::ControlPlaneNotReady)
    );
}

#[test]
fn a_kube_apiserver_also_listed_as_a_control_plane_pod_is_named_once() {
    let mut v = view(vec![api(2, false, &[2, 1, 3])]);
    v.control_plane = ControlPlanePods::Listed(vec![cp(2, "kube-apiserver", false)]);
    let m = message(gate(&v, &roll(1)));
    assert_eq!(m.matches("kube-apiserver-n2").count(), 1, "{m}");
}
