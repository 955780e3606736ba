//! Membership decisions: priorities, the gate, replacement order.

use std::net::{IpAddr, Ipv4Addr};

use membership::{DenyRule, MemberHealth};

use super::*;

fn t(s: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000 + s).unwrap()
}

fn node(i: u8, eligible: bool) -> NodeInfo {
    NodeInfo {
        target: NodeTarget::new(&format!("n{i}"), IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))),
        eligible,
    }
}

fn url(i: u8) -> MemberUrl {
    format!("https://10.0.0.{i}:2380").parse().unwrap()
}

fn voter(i: u8, healthy: bool) -> MemberHealth {
    MemberHealth {
        member: Member::voter(
            MemberId::new(u64::from(i)).unwrap(),
            &format!("n{i}"),
            url(i),
        ),
        healthy,
    }
}

fn learner(i: u8, started: bool) -> MemberHealth {
    let mut m = Member::unstarted_learner(MemberId::new(u64::from(i)).unwrap(), url(i));
    if started {
        m = m.started_as(&format!("n{i}"));
    }
    MemberHealth {
        member: m,
        healthy: started,
    }
}

fn step(
    nodes: &[NodeInfo],
    members: Vec<MemberHealth>,
    added: &[(u8, i64)],
    now: i64,
) -> MembershipStep {
    step_with(nodes, members, added, &BTreeMap::new(), now)
}

fn step_with(
    nodes: &[NodeInfo],
    members: Vec<MemberHealth>,
    added: &[(u8, i64)],
    lost: &BTreeMap<String, MemberId>,
    now: i64,
) -> MembershipStep {
    let cluster = ClusterView {
        members,
        rolling_node: None,
    };
    let added: BTreeMap<MemberId, OffsetDateTime> = added
        .iter()
        .map(|(i, s)| (MemberId::new(u64::from(*i)).unwrap(), t(*s)))
        .collect();
    decide(&MembershipInput {
        nodes,
        cluster: &cluster,
        data_lost: lost,
        learner_added: &added,
        start_deadline: Duration::from_secs(300),
        now: t(now),
    })
}

#[test]
fn grows_one_learner_at_a_time() {
    let nodes = [node(1, true), node(2, true), node(3, true)];
    assert_eq!(
        step(&nodes, vec![voter(1, true)], &[], 0),
        MembershipStep::AddLearner {
            node: "n2".into(),
            peer_url: url(2)
        }
    );
    assert_eq!(
        step(
            &nodes,
            vec![voter(1, true), learner(2, false)],
            &[(2, 0)],
            10
        ),
        MembershipStep::Waiting {
            message: "waiting for learner 2 to start".into()
        }
    );
    assert_eq!(
        step(
            &nodes,
            vec![voter(1, true), learner(2, true)],
            &[(2, 0)],
            10
        ),
        MembershipStep::Promote {
            id: MemberId::new(2).unwrap(),
            node: "n2".into()
        }
    );
    assert_eq!(
        step(&nodes, vec![voter(1, true), voter(2, true)], &[], 20),
        MembershipStep::AddLearner {
            node: "n3".into(),
            peer_url: url(3)
        }
    );
    assert_eq!(
        step(
            &nodes,
            vec![voter(1, true), voter(2, true), voter(3, true)],
            &[],
            30
        ),
        MembershipStep::None
    );
}

#[test]
fn ineligible_nodes_are_not_added() {
    let nodes = [node(1, true), node(2, false)];
    assert_eq!(
        step(&nodes, vec![voter(1, true)], &[], 0),
        MembershipStep::None
    );
}

#[test]
fn an_unstarted_learner_is_removed_after_its_deadline() {
    let nodes = [node(1, true), node(2, true)];
    let members = vec![voter(1, true), learner(2, false)];
    assert!(matches!(
        step(&nodes, members.clone(), &[(2, 0)], 299),
        MembershipStep::Waiting { .. }
    ));
    match step(&nodes, members, &[(2, 0)], 300) {
        MembershipStep::Remove {
            kind: RemovalKind::UnstartedLearner,
            message,
            ..
        } => {
            assert!(
                message.contains("added 300s ago and never started"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_gone_node_is_removed_before_its_replacement_is_added() {
    // n3 was deleted; n4 is new. Remove n3's (unhealthy) member first.
    let nodes = [node(1, true), node(2, true), node(4, true)];
    let members = vec![voter(1, true), voter(2, true), voter(3, false)];
    match step(&nodes, members, &[], 0) {
        MembershipStep::Remove {
            id,
            kind: RemovalKind::NodeGone,
            ..
        } => assert_eq!(id.get(), 3),
        other => panic!("{other:?}"),
    }
    // With n3 gone, n4 joins.
    let members = vec![voter(1, true), voter(2, true)];
    assert!(
        matches!(step(&nodes, members, &[], 0), MembershipStep::AddLearner { node, .. } if node == "n4")
    );
}

#[test]
fn a_healthy_member_of_a_gone_node_waits_for_margin() {
    let nodes = [node(1, true), node(2, true)];
    let members = vec![voter(1, true), voter(2, true), voter(3, true)];
    match step(&nodes, members, &[], 0) {
        MembershipStep::Denied { denial, .. } => assert_eq!(denial.rule, DenyRule::NoMargin),
        other => panic!("{other:?}"),
    }
}

#[test]
fn lost_data_removes_the_member_then_the_node_rejoins() {
    let nodes = [node(1, true), node(2, true), node(3, true)];
    let lost = BTreeMap::from([("n3".to_owned(), MemberId::new(3).unwrap())]);
    let members = vec![voter(1, true), voter(2, true), voter(3, false)];
    match step_with(&nodes, members, &[], &lost, 0) {
        MembershipStep::Remove {
            kind: RemovalKind::DataDirLost,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    // After the removal the stale report no longer matches a member: n3 is added again.
    let members = vec![voter(1, true), voter(2, true)];
    assert!(
        matches!(step_with(&nodes, members, &[], &lost, 0), MembershipStep::AddLearner { node, .. } if node == "n3")
    );
}

#[test]
fn no_add_while_a_voter_is_unhealthy() {
    let nodes = [node(1, true), node(2, true), node(3, true), node(4, true)];
    let members = vec![voter(1, true), voter(2, true), voter(3, false)];
    match step(&nodes, members, &[], 0) {
        MembershipStep::Denied { denial, .. } => assert_eq!(denial.rule, DenyRule::VoterUnhealthy),
        other => panic!("{other:?}"),
    }
}
