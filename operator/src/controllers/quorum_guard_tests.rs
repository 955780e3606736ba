//! The quorum guard's decision: guards per node, and the budget's `minAvailable` from the risks.

use std::net::{IpAddr, Ipv4Addr};

use membership::{Member, MemberId};

use super::*;
use crate::api::{EtcdCluster, EtcdClusterSpec, NodeStatus};
use crate::etcd::{EtcdObservation, MemberObs};
use crate::observed::Inputs;
use crate::podspec::NodeTarget;

fn target(i: u8) -> NodeTarget {
    NodeTarget::new(&format!("n{i}"), IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)))
}

fn cp(i: u8, unschedulable: bool) -> ControlPlaneNode {
    ControlPlaneNode {
        target: target(i),
        ready: true,
        deleting: false,
        unschedulable,
        etcd_stopped: None,
        remove_member: None,
    }
}

fn guard(i: u8, ready: bool) -> GuardPod {
    GuardPod {
        name: guard_pod_name(&format!("n{i}")),
        node: format!("n{i}"),
        ready,
        deleting: false,
        probe: None,
        stale: false,
    }
}

#[test]
fn three_healthy_nodes_tolerate_one_drain() {
    let nodes = [cp(1, false), cp(2, false), cp(3, false)];
    let plan = decide(
        &nodes,
        &[guard(1, true), guard(2, true), guard(3, true)],
        &[],
    );
    assert_eq!(plan.create, Vec::<String>::new());
    assert_eq!(plan.delete, Vec::<String>::new());
    assert_eq!((plan.expected, plan.ready, plan.min_available), (3, 3, 2));
    assert_eq!(
        describe(&plan),
        "3/3 guard(s) Ready; budget minAvailable 2: a drain may take one node"
    );
}

#[test]
fn a_cordoned_node_gets_no_new_guard_and_still_counts() {
    // n1 was drained: its guard was evicted and is not recreated while n1 stays cordoned, so
    // the budget (2 of 3) has 2 Ready guards and allows no second eviction.
    let nodes = [cp(1, true), cp(2, false), cp(3, false)];
    let plan = decide(&nodes, &[guard(2, true), guard(3, true)], &[]);
    assert!(plan.create.is_empty(), "{plan:?}");
    assert_eq!((plan.expected, plan.ready, plan.min_available), (3, 2, 2));
    // Uncordoned: the guard comes back.
    let nodes = [cp(1, false), cp(2, false), cp(3, false)];
    let plan = decide(&nodes, &[guard(2, true), guard(3, true)], &[]);
    assert_eq!(plan.create, vec!["n1".to_owned()]);
}

#[test]
fn a_risk_lets_no_node_go_and_says_why() {
    let nodes = [cp(1, false), cp(2, false), cp(3, false)];
    let guards = [guard(1, true), guard(2, true), guard(3, true)];
    let plan = decide(
        &nodes,
        &guards,
        &[risk(
            RiskKind::MembershipChange,
            "learner n4 waits to be promoted".into(),
        )],
    );
    assert_eq!(plan.min_available, 3);
    assert_eq!(
        describe(&plan),
        "3/3 guard(s) Ready; budget minAvailable 3: no drain now (learner n4 waits to be promoted)"
    );
}

#[test]
fn guards_of_nodes_that_left_go_and_misnamed_guards_are_replaced() {
    let mut gone = cp(3, false);
    gone.deleting = true;
    let nodes = [cp(1, false), cp(2, false), gone];
    let stray = GuardPod {
        name: "etcd-quorum-guard-old".into(),
        node: "n2".into(),
        ready: true,
        deleting: false,
        probe: None,
        stale: false,
    };
    let plan = decide(&nodes, &[guard(1, true), stray, guard(3, true)], &[]);
    assert_eq!(plan.create, vec!["n2".to_owned()]);
    assert_eq!(
        plan.delete,
        vec![
            "etcd-quorum-guard-old".to_owned(),
            "etcd-quorum-guard-n3".to_owned()
        ]
    );
    assert_eq!((plan.expected, plan.min_available), (2, 1));
}

#[test]
fn a_single_node_is_never_held() {
    let plan = decide(&[cp(1, false)], &[guard(1, true)], &[]);
    assert_eq!(plan.min_available, 0);
    let plan = decide(
        &[cp(1, false)],
        &[guard(1, true)],
        &[risk(RiskKind::Rollout, "x".into())],
    );
    assert_eq!(
        plan.min_available, 0,
        "waiting cannot make draining the only node safe"
    );
}

fn member(i: u8) -> Member {
    let t = target(i);
    Member::voter(
        MemberId::new(u64::from(i)).unwrap(),
        &t.name,
        t.peer_url().unwrap(),
    )
    .with_client_url(t.client_url().unwrap())
}

fn observed(nodes: u8, members: Vec<Member>, healthy: &[u8]) -> Observed {
    let inputs = Inputs {
        nodes: (1..=nodes)
            .map(|i| crate::observed::fixtures::node_object(i, true))
            .collect(),
        ..Inputs::default()
    };
    let cluster = EtcdCluster::new(crate::api::SINGLETON, EtcdClusterSpec::default());
    let mut o = Observed::new(&inputs, cluster, time::OffsetDateTime::UNIX_EPOCH);
    let health = members
        .iter()
        .map(|m| {
            let up = healthy.iter().any(|i| m.name == format!("n{i}"));
            (
                m.id,
                MemberObs {
                    healthy: up,
                    ..MemberObs::default()
                },
            )
        })
        .collect();
    o.with_etcd(EtcdObservation {
        members,
        health,
        ..EtcdObservation::default()
    });
    o
}

fn texts(o: &Observed, guards: &[GuardPod]) -> Vec<String> {
    risks(o, guards).into_iter().map(|r| r.text).collect()
}

#[test]
fn nothing_is_at_risk_in_a_settled_cluster() {
    let o = observed(3, vec![member(1), member(2), member(3)], &[1, 2, 3]);
    assert_eq!(texts(&o, &[]), Vec::<String>::new());
}

#[test]
fn a_down_member_is_a_risk_only_while_its_guard_reads_ready() {
    let o = observed(3, vec![member(1), member(2), member(3)], &[2, 3]);
    assert_eq!(texts(&o, &[guard(1, false)]), Vec::<String>::new());
    assert_eq!(texts(&o, &[]), Vec::<String>::new(), "n1 drained");
    assert_eq!(
        texts(&o, &[guard(1, true)]),
        vec!["member n1 is down while its guard still reads Ready".to_owned()]
    );
}

#[test]
fn joins_promotions_removals_and_rollouts_are_risks() {
    let t4 = target(4);
    let joining = Member::unstarted_learner(MemberId::new(4).unwrap(), t4.peer_url().unwrap());
    let o = observed(
        4,
        vec![member(1), member(2), member(3), joining],
        &[1, 2, 3],
    );
    assert_eq!(
        texts(&o, &[]),
        vec!["member 4 has not started yet (joining)".to_owned()]
    );
    // A started learner on the fourth node is the standby (3 voters is the target): no risk.
    let mut standby = member(4);
    standby.is_learner = true;
    let o = observed(
        4,
        vec![member(1), member(2), member(3), standby.clone()],
        &[1, 2, 3, 4],
    );
    assert_eq!(texts(&o, &[]), Vec::<String>::new());
    // With five nodes the learner is to be promoted, and n5 has no member yet.
    let o = observed(
        5,
        vec![member(1), member(2), member(3), standby],
        &[1, 2, 3, 4],
    );
    assert_eq!(
        texts(&o, &[]),
        vec![
            "learner n4 waits to be promoted".to_owned(),
            "node n5 has no etcd member yet".to_owned()
        ]
    );
    // A member whose node left.
    let o = observed(2, vec![member(1), member(2), member(3)], &[1, 2, 3]);
    assert_eq!(
        texts(&o, &[]),
        vec!["member n3 is on no selected node (to be removed)".to_owned()]
    );
    // A rollout in flight.
    let mut o = observed(3, vec![member(1), member(2), member(3)], &[1, 2, 3]);
    o.prev.latest_available_revision = 5;
    o.prev.node_statuses = (1..=3)
        .map(|i| NodeStatus {
            node_name: format!("n{i}"),
            current_revision: if i == 2 { 4 } else { 5 },
            ..NodeStatus::default()
        })
        .collect();
    assert_eq!(
        texts(&o, &[]),
        vec!["node n2 moves to revision 5 (runs 4)".to_owned()]
    );
}

#[test]
fn etcd_not_answering_is_a_risk() {
    let mut o = observed(3, vec![], &[]);
    assert_eq!(texts(&o, &[]), vec!["etcd did not answer".to_owned()]);
    o.etcd.error = Some("deadline exceeded".into());
    assert_eq!(
        texts(&o, &[]),
        vec!["etcd did not answer: deadline exceeded".to_owned()]
    );
}

#[test]
fn the_budget_selects_the_guards_and_keeps_unhealthy_ones_evictable_when_safe() {
    let spec = budget_spec(2);
    assert_eq!(spec.min_available, Some(IntOrString::Int(2)));
    assert_eq!(
        spec.selector.unwrap().match_labels.unwrap()["app"],
        GUARD_APP
    );
    assert_eq!(
        spec.unhealthy_pod_eviction_policy.as_deref(),
        Some("IfHealthyBudget")
    );
}

#[test]
fn guard_pods_are_read_with_their_readiness() {
    let pod = |name: &str, app: &str, ready: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    };
    let got = guard_pods(&[
        pod("etcd-quorum-guard-n1", GUARD_APP, "True"),
        pod("etcd", "etcd", "True"),
    ]);
    assert_eq!(got, vec![guard(1, true)]);
}

#[test]
fn a_guard_with_an_older_probe_is_replaced() {
    let nodes = [cp(1, false), cp(2, false), cp(3, false)];
    let old = GuardPod {
        stale: true,
        ..guard(2, true)
    };
    let plan = decide(&nodes, &[guard(1, true), old, guard(3, true)], &[]);
    assert_eq!(plan.delete, [guard_pod_name("n2")]);
    assert!(plan.create.is_empty(), "recreated once the old one is gone");
}

fn backup_risk() -> Risk {
    risk(
        RiskKind::BackupNotReady,
        "BackupReady is False (BackupTooOld): the last verified backup is 3h old".into(),
    )
}

#[test]
fn backups_not_ready_allow_no_eviction_on_any_number_of_nodes() {
    let nodes = [cp(1, false), cp(2, false), cp(3, false)];
    let guards = [guard(1, true), guard(2, true), guard(3, true)];
    let plan = decide(&nodes, &guards, &[backup_risk()]);
    assert_eq!(plan.min_available, 3);
    assert_eq!(
        describe(&plan),
        "3/3 guard(s) Ready; budget minAvailable 3: no drain now (BackupReady is False \
         (BackupTooOld): the last verified backup is 3h old)"
    );
    // The one node too: a backup is what waiting makes safer.
    let plan = decide(&[cp(1, false)], &[guard(1, true)], &[backup_risk()]);
    assert_eq!(plan.min_available, 1);
    let plan = decide(
        &[cp(1, false), cp(2, false)],
        &[guard(1, true), guard(2, true)],
        &[backup_risk()],
    );
    assert_eq!(plan.min_available, 2);
}
