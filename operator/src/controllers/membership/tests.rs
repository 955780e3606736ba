//! Membership decisions: priorities, the gate, replacement order.

use crate::podspec::NodeTarget;
use std::net::{IpAddr, Ipv4Addr};

use membership::{DenyRule, Member, MemberHealth};

use super::*;

fn t(s: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000 + s).unwrap()
}

fn node(i: u8, eligible: bool) -> NodeInfo {
    NodeInfo {
        target: NodeTarget::new(&format!("n{i}"), IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))),
        eligible,
        leaving: None,
    }
}

fn id(i: u8) -> MemberId {
    MemberId::new(u64::from(i)).unwrap()
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
    step_full(nodes, members, added, lost, None, &[], now)
}

fn cluster_of(members: Vec<MemberHealth>) -> ClusterView {
    ClusterView {
        members,
        ..Default::default()
    }
}

fn step_full(
    nodes: &[NodeInfo],
    members: Vec<MemberHealth>,
    added: &[(u8, i64)],
    lost: &BTreeMap<String, MemberId>,
    leader: Option<u8>,
    remediation: &[Candidate],
    now: i64,
) -> MembershipStep {
    let cluster = cluster_of(members);
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
        leader: leader.map(id),
        remediation,
        divergent: &[],
        removed_listed: &BTreeMap::new(),
        standby_due: None,
        add_wait: None,
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

/// Node `i` now at address 10.0.0.`to`.
fn moved_node(i: u8, to: u8) -> NodeInfo {
    NodeInfo {
        target: NodeTarget::new(&format!("n{i}"), IpAddr::V4(Ipv4Addr::new(10, 0, 0, to))),
        eligible: true,
        leaving: None,
    }
}

#[test]
fn a_member_whose_node_changed_address_moves_with_it() {
    // n3 is at .33 now; its member (down: the old address is gone) keeps its id and moves.
    let nodes = [node(1, true), node(2, true), moved_node(3, 33)];
    let members = vec![voter(1, true), voter(2, true), voter(3, false)];
    match step(&nodes, members.clone(), &[], 0) {
        MembershipStep::Move(mv) => {
            assert_eq!((mv.node.as_str(), mv.id), ("n3", id(3)));
            assert_eq!(mv.from, vec![url(3)]);
            assert_eq!(mv.to, url(33));
        }
        other => panic!("{other:?}"),
    }
    // Moving comes before a node without a member gets a learner (n4 waits).
    let mut with_new = nodes.to_vec();
    with_new.push(node(4, true));
    assert!(matches!(
        step(&with_new, members.clone(), &[], 0),
        MembershipStep::Move(_)
    ));
    // Without quorum the move waits; the member is never removed instead.
    let lost = vec![voter(1, true), voter(2, false), voter(3, false)];
    match step(&nodes, lost, &[], 0) {
        MembershipStep::Denied { denial, step } => {
            assert_eq!(denial.rule, DenyRule::NoQuorum, "{step}");
            assert!(step.starts_with("move member 3 of n3"), "{step}");
        }
        other => panic!("{other:?}"),
    }
    // A node being deleted is not followed: its member goes as a gone node's.
    let mut deleting = moved_node(3, 33);
    deleting.leaving = Some(Leaving::Deleted);
    let nodes = [node(1, true), node(2, true), deleting];
    assert!(matches!(
        step(&nodes, members, &[], 0),
        MembershipStep::Remove {
            kind: RemovalKind::NodeGone,
            ..
        }
    ));
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

#[test]
fn an_even_node_is_a_standby_learner_until_the_count_is_odd() {
    // Two eligible nodes: n2 joins as a learner and is not promoted (2 voters tolerate no failure).
    let two = [node(1, true), node(2, true)];
    match step(&two, vec![voter(1, true), learner(2, true)], &[(2, 0)], 10) {
        MembershipStep::Standby { id: s, message } => {
            assert_eq!(s, id(2));
            assert!(
                message.contains("1 voter(s) for 2 eligible node(s)"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A third node makes the count odd: the standby is promoted first, then n3 joins.
    let three = [node(1, true), node(2, true), node(3, true)];
    assert!(matches!(
        step(
            &three,
            vec![voter(1, true), learner(2, true)],
            &[(2, 0)],
            10
        ),
        MembershipStep::Promote { .. }
    ));
    // A fourth node joins as a learner and stays a standby beside three voters.
    let four = [node(1, true), node(2, true), node(3, true), node(4, true)];
    let three_voters = vec![voter(1, true), voter(2, true), voter(3, true)];
    assert!(matches!(
        step(&four, three_voters.clone(), &[], 10),
        MembershipStep::AddLearner { node, .. } if node == "n4"
    ));
    let mut with_standby = three_voters.clone();
    with_standby.push(learner(4, true));
    assert!(matches!(
        step(&four, with_standby.clone(), &[(4, 0)], 10_000),
        MembershipStep::Standby { .. }
    ));
    // A fifth node: the standby is promoted (4 voters, on the way to 5), then n5 joins.
    let five: Vec<NodeInfo> = (1..=5).map(|i| node(i, true)).collect();
    assert!(matches!(
        step(&five, with_standby, &[(4, 0)], 10_000),
        MembershipStep::Promote { id: p, .. } if p == id(4)
    ));
    // A NotReady node lowers the growth target but never removes a voter.
    let one_not_ready: Vec<NodeInfo> = (1..=5).map(|i| node(i, i != 5)).collect();
    let mut five_voters: Vec<MemberHealth> = (1..=5).map(|i| voter(i, true)).collect();
    five_voters[4].healthy = false;
    assert_eq!(
        step(&one_not_ready, five_voters, &[], 0),
        MembershipStep::None
    );
}

#[test]
fn a_lost_voter_is_replaced_by_promoting_the_standby() {
    // n3 is deleted: its member goes first, then the standby n4 is promoted.
    let nodes = [node(1, true), node(2, true), node(4, true)];
    let members = vec![
        voter(1, true),
        voter(2, true),
        voter(3, false),
        learner(4, true),
    ];
    assert!(matches!(
        step(&nodes, members, &[(4, 0)], 0),
        MembershipStep::Remove { kind: RemovalKind::NodeGone, id: r, .. } if r == id(3)
    ));
    let members = vec![voter(1, true), voter(2, true), learner(4, true)];
    assert!(matches!(
        step(&nodes, members, &[(4, 0)], 0),
        MembershipStep::Promote { id: p, .. } if p == id(4)
    ));
}

#[test]
fn too_many_voters_for_the_remaining_nodes_removes_one_never_the_leader() {
    // Five voters, n5's node was deleted and its member removed: four voters on four nodes.
    let nodes: Vec<NodeInfo> = (1..=4).map(|i| node(i, true)).collect();
    let voters: Vec<MemberHealth> = (1..=4).map(|i| voter(i, true)).collect();
    match step_full(
        &nodes,
        voters.clone(),
        &[],
        &BTreeMap::new(),
        Some(4),
        &[],
        0,
    ) {
        MembershipStep::Remove {
            id: r,
            kind: RemovalKind::OddVoterCount,
            message,
        } => {
            assert_eq!(
                r,
                id(3),
                "n4 leads, so n3 is the last node by name: {message}"
            );
            assert!(
                message.contains("4 voters for 4 control-plane node(s)"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // An unhealthy voter is the one removed.
    let mut sick = voters.clone();
    sick[0].healthy = false;
    assert!(matches!(
        step_full(&nodes, sick, &[], &BTreeMap::new(), Some(4), &[], 0),
        MembershipStep::Remove { id: r, kind: RemovalKind::OddVoterCount, .. } if r == id(1)
    ));
    // A voter of a node being deleted goes first.
    let mut leaving = nodes.clone();
    leaving[1].leaving = Some(Leaving::Deleted);
    let five: Vec<MemberHealth> = (1..=4).map(|i| voter(i, true)).collect();
    assert!(matches!(
        step_full(&leaving, five, &[], &BTreeMap::new(), Some(4), &[], 0),
        MembershipStep::Remove { id: r, kind: RemovalKind::OddVoterCount, .. } if r == id(2)
    ));
    // Never below three voters: two nodes with three voters keep them (only a gone node's
    // member is removed).
    let two_nodes = [node(1, true), node(2, true), node(3, false)];
    let three: Vec<MemberHealth> = (1..=3).map(|i| voter(i, true)).collect();
    let mut two_left = two_nodes.to_vec();
    two_left[2].leaving = Some(Leaving::Deleted);
    assert_eq!(
        step_full(&two_left, three, &[], &BTreeMap::new(), Some(1), &[], 0),
        MembershipStep::None
    );
}

#[test]
fn a_member_unhealthy_past_its_time_is_replaced_through_the_gate() {
    use crate::controllers::membership::remediation::Assessment;
    let nodes = [node(1, true), node(2, true), node(3, true)];
    let members = vec![voter(1, true), voter(2, false), voter(3, true)];
    let due = |n: u8| Candidate {
        node: format!("n{n}"),
        member: id(n),
        since: t(0),
        assessment: Assessment::Due {
            attempt: 1,
            unhealthy_for: time::Duration::seconds(700),
        },
    };
    match step_full(
        &nodes,
        members.clone(),
        &[],
        &BTreeMap::new(),
        Some(1),
        &[due(2)],
        700,
    ) {
        MembershipStep::Remove {
            id: r,
            kind: RemovalKind::Unhealthy,
            message,
        } => {
            assert_eq!(r, id(2));
            assert!(message.contains("unhealthy for 700s"), "{message}");
            assert!(message.contains("attempt 1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Not yet due, backing off or exhausted: nothing is removed.
    let mut waiting = due(2);
    waiting.assessment = Assessment::Exhausted { attempts: 3 };
    assert_eq!(
        step_full(
            &nodes,
            members.clone(),
            &[],
            &BTreeMap::new(),
            Some(1),
            &[waiting],
            700
        ),
        MembershipStep::None
    );
    // The gate still decides: with two of three voters down, no removal.
    let two_down = vec![voter(1, true), voter(2, false), voter(3, false)];
    assert!(matches!(
        step_full(&nodes, two_down, &[], &BTreeMap::new(), Some(1), &[due(2)], 700),
        MembershipStep::Denied { denial, .. } if denial.rule == DenyRule::NoQuorum
    ));
}

#[test]
fn describe_each_step() {
    let cases: Vec<(MembershipStep, &str)> = vec![
        (
            MembershipStep::None,
            "nothing to do: every eligible node has a member",
        ),
        (
            MembershipStep::Waiting {
                message: "waiting for learner 2 to start".into(),
            },
            "waiting: waiting for learner 2 to start",
        ),
        (
            MembershipStep::Move(AddressMove {
                node: "n3".into(),
                id: id(3),
                from: vec![url(3)],
                to: url(33),
            }),
            "move member 3 of n3 (https://10.0.0.3:2380 → https://10.0.0.33:2380): its node's address changed; the same member restarts there on its own data",
        ),
        (
            MembershipStep::Standby {
                id: id(4),
                message: "learner n4 (4) is a standby".into(),
            },
            "nothing to do: learner n4 (4) is a standby",
        ),
        (
            MembershipStep::Denied {
                step: "add learner for n4 (https://10.0.0.4:2380)".into(),
                denial: Denial {
                    rule: DenyRule::VoterUnhealthy,
                    message: "add learner for n4 (https://10.0.0.4:2380): voter(s) n3 (3) unhealthy"
                        .into(),
                },
            },
            "blocked by the quorum gate: add learner for n4 (https://10.0.0.4:2380): voter(s) n3 (3) unhealthy [voter_unhealthy]",
        ),
        (
            MembershipStep::AddLearner {
                node: "n4".into(),
                peer_url: url(4),
            },
            "add learner for n4 (https://10.0.0.4:2380)",
        ),
        (
            MembershipStep::Promote {
                id: id(4),
                node: "n4".into(),
            },
            "promote learner 4 (n4)",
        ),
        (
            MembershipStep::Remove {
                id: id(3),
                kind: RemovalKind::NodeGone,
                message: "member n3 (3) has peer URL https://10.0.0.3:2380 and no control-plane node has that address".into(),
            },
            "remove member 3: member n3 (3) has peer URL https://10.0.0.3:2380 and no control-plane node has that address",
        ),
    ];
    for (step, want) in cases {
        assert_eq!(describe(&step), want, "step: {step:?}");
    }
}

/// With `replaceMinority`, a voter the corruption check outvoted is removed although etcd calls
/// it healthy (its copy of the data does not count), once: a second divergent voter of three
/// would leave no quorum and is refused by the gate.
/// `decide` with n1 the leader, nothing pending but `divergent` and `removed_listed`.
fn decide_with(
    nodes: &[NodeInfo],
    members: Vec<MemberHealth>,
    divergent: &[MemberId],
    removed_listed: &BTreeMap<String, RemovedListed>,
) -> MembershipStep {
    let cluster = ClusterView {
        api_servers: Vec::new(),
        control_plane: Default::default(),
        outage_approved: false,
        standby: None,
        members,
        rolling_node: None,
        preflight: Default::default(),
    };
    decide(&MembershipInput {
        nodes,
        cluster: &cluster,
        data_lost: &BTreeMap::new(),
        learner_added: &BTreeMap::new(),
        start_deadline: Duration::from_secs(300),
        leader: Some(id(1)),
        remediation: &[],
        divergent,
        removed_listed,
        standby_due: None,
        add_wait: None,
        now: t(0),
    })
}

#[test]
fn a_divergent_voter_is_replaced_through_the_gate() {
    let nodes = [node(1, true), node(2, true), node(3, true)];
    let input = |divergent: &[MemberId]| {
        let voters = vec![voter(1, true), voter(2, true), voter(3, true)];
        decide_with(&nodes, voters, divergent, &BTreeMap::new())
    };
    match input(&[id(2)]) {
        MembershipStep::Remove {
            id: removed,
            kind,
            message,
        } => {
            assert_eq!((removed, kind), (id(2), RemovalKind::Divergent));
            assert!(message.contains("diverged from the majority"), "{message}");
        }
        other => panic!("expected the removal of n2, got {other:?}"),
    }
    assert_eq!(input(&[]), MembershipStep::None);
}

#[test]
fn a_scale_down_removes_the_members_the_admin_chose_the_leader_last() {
    // As node_infos makes them: a leaving node is not eligible.
    let asked = |i: u8| NodeInfo {
        leaving: Some(Leaving::RemovalRequested("retiring the rack".into())),
        ..node(i, false)
    };
    let nodes = vec![
        node(1, true),
        asked(2),
        node(3, true),
        asked(4),
        node(5, true),
    ];
    // 5 voters, n2 (the leader) and n4 chosen: n4 goes first, then n2 (not the last node by
    // name, n5, which the odd-voter policy would pick on its own).
    let five: Vec<MemberHealth> = (1..=5).map(|i| voter(i, true)).collect();
    match step_full(&nodes, five, &[], &BTreeMap::new(), Some(2), &[], 0) {
        MembershipStep::Remove {
            id: r,
            kind,
            message,
        } => {
            assert_eq!((r, kind), (id(4), RemovalKind::OddVoterCount), "{message}");
            assert!(message.contains("retiring the rack"), "{message}");
            assert!(!message.contains("standby"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let four: Vec<MemberHealth> = [1, 2, 3, 5].into_iter().map(|i| voter(i, true)).collect();
    assert!(matches!(
        step_full(&nodes, four, &[], &BTreeMap::new(), Some(2), &[], 0),
        MembershipStep::Remove { id: r, kind: RemovalKind::OddVoterCount, .. } if r == id(2)
    ));
    // Three voters left: the chosen nodes get no member again.
    let three: Vec<MemberHealth> = [1, 3, 5].into_iter().map(|i| voter(i, true)).collect();
    assert_eq!(
        step_full(&nodes, three, &[], &BTreeMap::new(), Some(1), &[], 0),
        MembershipStep::None
    );
}

#[test]
fn a_learner_of_a_leaving_node_is_removed_and_three_voters_stay() {
    let mut nodes: Vec<NodeInfo> = (1..=4).map(|i| node(i, true)).collect();
    nodes[3].leaving = Some(Leaving::RemovalRequested(
        "asked by an admin (no reason given)".into(),
    ));
    let mut members: Vec<MemberHealth> = (1..=3).map(|i| voter(i, true)).collect();
    members.push(learner(4, true));
    assert!(matches!(
        step_full(&nodes, members, &[], &BTreeMap::new(), Some(1), &[], 0),
        MembershipStep::Remove { id: r, kind: RemovalKind::LeavingNode, .. } if r == id(4)
    ));
    // Asking for one of three voters removes nothing: never below three by shrinking.
    let mut three_nodes: Vec<NodeInfo> = (1..=3).map(|i| node(i, true)).collect();
    three_nodes[2].eligible = false;
    three_nodes[2].leaving = Some(Leaving::RemovalRequested("x".into()));
    let three: Vec<MemberHealth> = (1..=3).map(|i| voter(i, true)).collect();
    assert_eq!(
        step_full(&three_nodes, three, &[], &BTreeMap::new(), Some(1), &[], 0),
        MembershipStep::None
    );
}

#[test]
fn a_member_with_the_address_of_no_node_is_counted_and_removed() {
    let nodes = [node(1, true), node(2, true), node(3, true)];
    let mut members: Vec<MemberHealth> = (1..=3).map(|i| voter(i, true)).collect();
    members.push(learner(9, false));
    let plain: Vec<Member> = members.iter().map(|m| m.member.clone()).collect();
    assert_eq!(without_node(&nodes, &plain), 1);
    assert_eq!(without_node(&nodes, &plain[..3]), 0);
    assert!(matches!(
        step_full(&nodes, members, &[], &BTreeMap::new(), Some(1), &[], 0),
        MembershipStep::Remove { id: r, kind: RemovalKind::NodeGone, .. } if r == id(9)
    ));
}

#[test]
fn a_node_whose_pod_lists_its_removed_member_gets_no_learner_until_it_moved_off() {
    let nodes = [node(1, true), node(2, true), node(3, true), node(4, true)];
    let listed = RemovedListed {
        id: id(2),
        revision: 7,
    };
    let with = |removed: &BTreeMap<String, RemovedListed>| {
        let voters = vec![voter(1, true), voter(3, true), voter(4, true)];
        decide_with(&nodes, voters, &[], removed)
    };
    let held = with(&BTreeMap::from([("n2".to_owned(), listed.clone())]));
    assert_eq!(
        held,
        MembershipStep::AddHeld {
            node: "n2".into(),
            listed,
        }
    );
    let line = describe(&held);
    assert!(
        line.contains("off revision 7") && line.contains("removed member 2"),
        "{line}"
    );
    assert!(matches!(
        with(&BTreeMap::new()),
        MembershipStep::AddLearner { node, .. } if node == "n2"
    ));
}

#[test]
fn another_node_joins_while_one_waits_for_its_removed_member_to_go() {
    let nodes = [node(1, true), node(2, true), node(3, true), node(5, true)];
    let removed = BTreeMap::from([(
        "n2".to_owned(),
        RemovedListed {
            id: id(2),
            revision: 7,
        },
    )]);
    let step = decide_with(&nodes, vec![voter(1, true), voter(3, true)], &[], &removed);
    assert!(
        matches!(&step, MembershipStep::AddLearner { node, .. } if node == "n5"),
        "{step:?}"
    );
}

/// The membership step of a settled cluster of `nodes` with the renewal inputs given.
fn renewal_step(
    nodes: &[NodeInfo],
    cluster: &ClusterView,
    standby_due: Option<&crate::controllers::defragmentation::StandbyDue>,
    add_wait: Option<(&str, &str)>,
) -> MembershipStep {
    decide(&MembershipInput {
        nodes,
        cluster,
        data_lost: &BTreeMap::new(),
        learner_added: &BTreeMap::new(),
        start_deadline: Duration::from_secs(300),
        leader: Some(id(1)),
        remediation: &[],
        divergent: &[],
        removed_listed: &BTreeMap::new(),
        standby_due,
        add_wait,
        now: t(0),
    })
}

/// #65: the standby learner whose file must be renewed (etcd refuses to defragment a learner) is
/// removed, so its node joins again as a new learner; under `NOSPACE` too (the gate lets a
/// learner go under that alarm), and never a voter by this path.
#[test]
fn the_standby_whose_file_must_be_renewed_is_removed() {
    use crate::controllers::defragmentation::StandbyDue;
    let nodes: Vec<NodeInfo> = (1..=4).map(|i| node(i, true)).collect();
    let mut members: Vec<MemberHealth> = (1..=3).map(|i| voter(i, true)).collect();
    members.push(learner(4, true));
    let mut cluster = cluster_of(members);
    cluster.preflight.alarms = vec![membership::RaisedAlarm {
        member: id(4),
        kind: membership::AlarmKind::NoSpace,
    }];
    let due = |i: u8| StandbyDue {
        id: id(i),
        name: format!("n{i}"),
        db: crate::etcd::DbSize {
            total: 95 << 20,
            in_use: 40 << 20,
        },
    };
    let decide_with =
        |standby_due: &StandbyDue| renewal_step(&nodes, &cluster, Some(standby_due), None);
    match decide_with(&due(4)) {
        MembershipStep::Remove {
            id: r,
            kind,
            message,
        } => {
            assert_eq!((r, kind), (id(4), RemovalKind::StandbyRenewal));
            assert!(message.contains("standby learner n4"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        decide_with(&due(2)),
        MembershipStep::Standby { .. }
    ));
    // Removed: its node joins again only once the leader's log moved on (`add_wait`).
    let cluster = cluster_of((1..=3).map(|i| voter(i, true)).collect());
    let add = |add_wait: Option<(&str, &str)>| renewal_step(&nodes, &cluster, None, add_wait);
    assert_eq!(
        add(Some(("n4", "n4 waits for the log"))),
        MembershipStep::Waiting {
            message: "n4 waits for the log".into()
        }
    );
    assert!(matches!(
        add(None),
        MembershipStep::AddLearner { node, .. } if node == "n4"
    ));
}
