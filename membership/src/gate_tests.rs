//! The gate's rules, one by one, and property tests over arbitrary clusters and action sequences.

use proptest::prelude::*;

use super::*;
use crate::{AlarmKind, Member, RaisedAlarm};

fn url(i: u64) -> MemberUrl {
    format!("https://10.0.{}.{}:2380", i / 250, i % 250 + 1)
        .parse()
        .unwrap()
}

fn voter(i: u64, healthy: bool) -> MemberHealth {
    MemberHealth {
        member: Member::voter(MemberId::new(i).unwrap(), &format!("n{i}"), url(i)),
        healthy,
    }
}

fn learner(i: u64, started: bool, healthy: bool) -> MemberHealth {
    let mut m = Member::unstarted_learner(MemberId::new(i).unwrap(), url(i));
    if started {
        m = m.started_as(&format!("n{i}"));
    }
    MemberHealth { member: m, healthy }
}

fn view(members: Vec<MemberHealth>) -> ClusterView {
    ClusterView {
        members,
        ..Default::default()
    }
}

fn id(i: u64) -> MemberId {
    MemberId::new(i).unwrap()
}

fn add(i: u64) -> Action {
    Action::AddLearner {
        node: format!("n{i}"),
        peer_url: url(i),
    }
}

fn roll(i: u64) -> Action {
    Action::RollNode {
        node: format!("n{i}"),
        member: Some(id(i)),
    }
}

fn denied(v: Verdict, rule: DenyRule, text: &str) {
    match v {
        Verdict::Deny(d) => {
            assert_eq!(d.rule, rule, "{d}");
            assert!(d.message.contains(text), "{:?} lacks {text:?}", d.message);
        }
        Verdict::Allow => panic!("expected {rule:?}, got Allow"),
    }
}

#[test]
fn adds_only_to_a_healthy_cluster_without_a_pending_learner() {
    let healthy = view(vec![voter(1, true), voter(2, true), voter(3, true)]);
    assert!(gate(&healthy, &add(4)).is_allowed());
    let one_down = view(vec![voter(1, true), voter(2, true), voter(3, false)]);
    denied(
        gate(&one_down, &add(4)),
        DenyRule::VoterUnhealthy,
        "n3 (3) unhealthy",
    );
    let pending = view(vec![
        voter(1, true),
        voter(2, true),
        learner(4, false, false),
    ]);
    denied(
        gate(&pending, &add(5)),
        DenyRule::ChangeInFlight,
        "learner unstarted 4 is still pending",
    );
    denied(
        gate(&healthy, &add(2)),
        DenyRule::AlreadyMember,
        "already belongs to member n2 (2)",
    );
}

#[test]
fn promotes_only_a_started_healthy_learner() {
    let v = view(vec![
        voter(1, true),
        learner(2, true, true),
        learner(3, false, false),
    ]);
    assert!(gate(&v, &Action::Promote { id: id(2) }).is_allowed());
    denied(
        gate(&v, &Action::Promote { id: id(3) }),
        DenyRule::LearnerNotReady,
        "unstarted 3",
    );
    denied(
        gate(&v, &Action::Promote { id: id(1) }),
        DenyRule::NotALearner,
        "already a voter",
    );
    denied(
        gate(&v, &Action::Promote { id: id(9) }),
        DenyRule::UnknownMember,
        "no such member",
    );
}

#[test]
fn removes_unhealthy_first_and_healthy_only_with_margin() {
    let v = view(vec![voter(1, true), voter(2, true), voter(3, false)]);
    assert!(gate(&v, &Action::Remove { id: id(3) }).is_allowed());
    denied(
        gate(&v, &Action::Remove { id: id(1) }),
        DenyRule::QuorumAfterAction,
        "1 of 2 voters healthy",
    );
    let all = view(vec![voter(1, true), voter(2, true), voter(3, true)]);
    denied(
        gate(&all, &Action::Remove { id: id(3) }),
        DenyRule::NoMargin,
        "add its replacement first",
    );
    let four = view(vec![
        voter(1, true),
        voter(2, true),
        voter(3, true),
        voter(4, true),
    ]);
    assert!(gate(&four, &Action::Remove { id: id(4) }).is_allowed());
    denied(
        gate(&view(vec![voter(1, true)]), &Action::Remove { id: id(1) }),
        DenyRule::LastVoter,
        "last voter",
    );
    let with_learner = view(vec![voter(1, true), learner(2, false, false)]);
    assert!(gate(&with_learner, &Action::Remove { id: id(2) }).is_allowed());
}

#[test]
fn no_membership_change_without_quorum() {
    let v = view(vec![voter(1, true), voter(2, false), voter(3, false)]);
    denied(
        gate(&v, &Action::Remove { id: id(3) }),
        DenyRule::NoQuorum,
        "1 of 3 voters healthy (quorum 2)",
    );
    // Restarting a broken member can only help.
    assert!(gate(&v, &roll(3)).is_allowed());
    denied(
        gate(&v, &roll(1)),
        DenyRule::QuorumAfterAction,
        "unhealthy voter(s) n2 (2), n3 (3) to recover",
    );
}

#[test]
fn rolls_one_node_at_a_time_and_only_with_a_spare_voter() {
    let mut v = view(vec![voter(1, true), voter(2, true), voter(3, true)]);
    assert!(gate(&v, &roll(1)).is_allowed());
    v.rolling_node = Some("n1".into());
    denied(
        gate(&v, &roll(2)),
        DenyRule::RolloutInProgress,
        "node n1 is still being rolled",
    );
    let two = view(vec![voter(1, true), voter(2, true)]);
    denied(
        gate(&two, &roll(1)),
        DenyRule::LoneVoter,
        "waiting for more voters to join or for an admin to approve the outage",
    );
    denied(
        gate(&view(vec![voter(1, true)]), &roll(1)),
        DenyRule::LoneVoter,
        "n1 runs one of 1 voter(s)",
    );
    // A node whose member is a learner, or that has no member yet, can always be rolled.
    let joining = view(vec![voter(1, true), learner(2, false, false)]);
    assert!(gate(&joining, &roll(2)).is_allowed());
    assert!(
        gate(
            &joining,
            &Action::RollNode {
                node: "n9".into(),
                member: None
            }
        )
        .is_allowed()
    );
}

#[test]
fn preflight_stops_membership_changes_and_guards_healthy_voters() {
    let mut v = view(vec![
        voter(1, true),
        voter(2, true),
        voter(3, true),
        learner(4, true, true),
    ]);
    v.preflight.alarms = vec![crate::RaisedAlarm {
        member: id(2),
        kind: crate::AlarmKind::NoSpace,
    }];
    denied(
        gate(&v, &Action::Promote { id: id(4) }),
        DenyRule::Preflight,
        "alarm NOSPACE on member 2 is raised",
    );
    denied(
        gate(&v, &Action::Remove { id: id(1) }),
        DenyRule::Preflight,
        "NOSPACE",
    );
    // Removing the learner is how a learner's own full file stops raising NOSPACE (#65): a
    // learner votes on nothing, and etcd refuses to defragment one.
    assert!(gate(&v, &Action::Remove { id: id(4) }).is_allowed());
    // NOSPACE alone does not stop a restart (a larger quota may be the fix).
    assert!(gate(&v, &roll(1)).is_allowed());
    v.preflight.alarms[0].kind = crate::AlarmKind::Corrupt;
    denied(
        gate(&v, &roll(1)),
        DenyRule::Preflight,
        "CORRUPT on member 2",
    );
    denied(
        gate(&v, &Action::Remove { id: id(4) }),
        DenyRule::Preflight,
        "CORRUPT on member 2",
    );
    // Restarting the learner's node takes no voter down.
    assert!(gate(&v, &roll(4)).is_allowed());
    v.preflight.alarms.clear();
    v.preflight.disagreements = vec!["voter 3 reports members [1, 2, 3]".into()];
    denied(
        gate(&v, &Action::Promote { id: id(4) }),
        DenyRule::Preflight,
        "voter 3 reports",
    );
    denied(gate(&v, &roll(2)), DenyRule::Preflight, "voter 3 reports");
    denied(
        gate(&v, &Action::Remove { id: id(4) }),
        DenyRule::Preflight,
        "voter 3 reports",
    );
    v.preflight.disagreements.clear();
    v.preflight.alarms_unreadable = Some("deadline exceeded".into());
    denied(
        gate(&v, &Action::Remove { id: id(4) }),
        DenyRule::Preflight,
        "could not be read",
    );
    denied(
        gate(&v, &Action::Promote { id: id(4) }),
        DenyRule::Preflight,
        "alarm list could not be read (deadline exceeded)",
    );
    assert!(gate(&v, &roll(2)).is_allowed());
    v.preflight.alarms_unreadable = None;
    assert!(gate(&v, &Action::Promote { id: id(4) }).is_allowed());
}

fn healthy_voters(v: &ClusterView) -> usize {
    v.members
        .iter()
        .filter(|m| !m.member.is_learner && m.healthy)
        .count()
}

fn voter_count(v: &ClusterView) -> usize {
    v.members.iter().filter(|m| !m.member.is_learner).count()
}

fn is_quorate(v: &ClusterView) -> bool {
    crate::is_quorate(healthy_voters(v), voter_count(v))
}

/// Applies an allowed action to the model of the cluster.
fn apply(v: &mut ClusterView, action: &Action, next_id: &mut u64) {
    match action {
        Action::AddLearner { peer_url, .. } => {
            let mut m = Member::unstarted_learner(id(*next_id), peer_url.clone());
            m.peer_urls = vec![peer_url.clone()];
            v.members.push(MemberHealth {
                member: m,
                healthy: false,
            });
            *next_id += 1;
        }
        Action::Promote { id } => {
            if let Some(m) = v.members.iter_mut().find(|m| m.member.id == *id) {
                m.member.is_learner = false;
            }
        }
        Action::Remove { id } => v.members.retain(|m| m.member.id != *id),
        Action::RollNode { node, member } => {
            if let Some(m) = member.and_then(|id| v.members.iter_mut().find(|m| m.member.id == id))
            {
                m.healthy = false;
            }
            v.rolling_node = Some(node.clone());
        }
        // Its peers dial the new address, where it serves only after its node restarts.
        Action::MovePeerUrl { id, peer_url, .. } => {
            if let Some(m) = v.members.iter_mut().find(|m| m.member.id == *id) {
                m.member.peer_urls = vec![peer_url.clone()];
                m.healthy = false;
            }
        }
        // The member is held until its defragmentation ends (a Flip brings it back).
        Action::Defragment { id, .. } => {
            if let Some(m) = v.members.iter_mut().find(|m| m.member.id == *id) {
                m.healthy = false;
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Step {
    Add(u64),
    Promote(usize),
    Remove(usize),
    Roll(usize),
    Defrag(usize),
    Move(usize),
    /// Environment: the rollout step finishes (the rolled member comes back healthy).
    FinishRoll,
    /// Environment: a member's health flips.
    Flip(usize),
    /// Environment: a learner starts.
    Start(usize),
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (100u64..200).prop_map(Step::Add),
        (0usize..8).prop_map(Step::Promote),
        (0usize..8).prop_map(Step::Remove),
        (0usize..8).prop_map(Step::Roll),
        (0usize..8).prop_map(Step::Defrag),
        (0usize..8).prop_map(Step::Move),
        Just(Step::FinishRoll),
        (0usize..8).prop_map(Step::Flip),
        (0usize..8).prop_map(Step::Start),
    ]
}

fn arb_view() -> impl Strategy<Value = ClusterView> {
    (
        proptest::collection::vec(any::<bool>(), 1..6),
        proptest::option::of((any::<bool>(), any::<bool>())),
    )
        .prop_map(|(voters, learner_spec)| {
            let mut members: Vec<MemberHealth> = voters
                .iter()
                .enumerate()
                .map(|(i, h)| voter(i as u64 + 1, *h))
                .collect();
            if let Some((started, healthy)) = learner_spec {
                members.push(learner(50, started, started && healthy));
            }
            view(members)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No allowed action ever takes a quorate cluster below quorum, and there is never more than
    /// one learner (one membership change in flight).
    #[test]
    fn allowed_actions_never_break_quorum(start in arb_view(), steps in proptest::collection::vec(arb_step(), 1..40)) {
        let mut v = start;
        let mut next_id = 1000;
        for step in steps {
            let member_at = |v: &ClusterView, i: usize| v.members.get(i % v.members.len().max(1)).map(|m| m.member.clone());
            let action = match step {
                Step::Add(i) => Some(add(i)),
                Step::Promote(i) => member_at(&v, i).map(|m| Action::Promote { id: m.id }),
                Step::Remove(i) => member_at(&v, i).map(|m| Action::Remove { id: m.id }),
                Step::Roll(i) => member_at(&v, i).map(|m| Action::RollNode { node: format!("node-{}", m.id), member: Some(m.id) }),
                Step::Defrag(i) => member_at(&v, i).map(|m| Action::Defragment { id: m.id, nospace: false }),
                Step::Move(i) => member_at(&v, i).map(|m| Action::MovePeerUrl { id: m.id, node: format!("node-{}", m.id), peer_url: url(900 + m.id.get()) }),
                Step::FinishRoll => {
                    if let Some(node) = v.rolling_node.take()
                        && let Some(m) = v.members.iter_mut().find(|m| format!("node-{}", m.member.id) == node)
                    {
                        m.healthy = true;
                    }
                    None
                }
                Step::Flip(i) => {
                    let n = v.members.len();
                    if n > 0 {
                        let m = &mut v.members[i % n];
                        m.healthy = !m.healthy && m.member.is_started();
                    }
                    None
                }
                Step::Start(i) => {
                    let n = v.members.len();
                    if n > 0 && v.members[i % n].member.is_learner {
                        let m = &mut v.members[i % n];
                        m.member.name = format!("started-{}", m.member.id);
                        m.healthy = true;
                    }
                    None
                }
            };
            let Some(action) = action else { continue };
            let before_quorate = is_quorate(&v);
            if gate(&v, &action).is_allowed() {
                apply(&mut v, &action, &mut next_id);
                if before_quorate {
                    prop_assert!(is_quorate(&v), "{action} broke quorum: {v:?}");
                }
                let learners = v.members.iter().filter(|m| m.member.is_learner).count();
                prop_assert!(learners <= 1, "{action} left {learners} learners");
            }
        }
    }
}

fn defrag(i: u64, nospace: bool) -> Action {
    Action::Defragment { id: id(i), nospace }
}

#[test]
fn rule_8_defragments_one_voter_of_a_healthy_cluster() {
    let healthy3 = || view(vec![voter(1, true), voter(2, true), voter(3, true)]);
    assert!(gate(&healthy3(), &defrag(2, false)).is_allowed());
    // NOSPACE does not stop it (it is how the space comes back); CORRUPT does.
    let mut nospace = healthy3();
    nospace.preflight.alarms = vec![RaisedAlarm {
        member: id(1),
        kind: AlarmKind::NoSpace,
    }];
    assert!(gate(&nospace, &defrag(2, true)).is_allowed());
    let mut corrupt = healthy3();
    corrupt.preflight.alarms = vec![RaisedAlarm {
        member: id(3),
        kind: AlarmKind::Corrupt,
    }];
    denied(
        gate(&corrupt, &defrag(2, false)),
        DenyRule::Preflight,
        "CORRUPT",
    );
    denied(
        gate(
            &view(vec![voter(1, true), voter(2, true), voter(3, false)]),
            &defrag(2, false),
        ),
        DenyRule::VoterUnhealthy,
        "n3",
    );
    let with_learner = view(vec![
        voter(1, true),
        voter(2, true),
        voter(3, true),
        learner(4, true, true),
    ]);
    // A learner (the standby of an even node count, or one not yet promoted) holds nothing
    // back: a voter is defragmented beside it (#65: four nodes never defragmented before, and
    // NOSPACE stayed until an admin acted). The learner itself is not: etcd refuses the call.
    assert!(gate(&with_learner, &defrag(2, false)).is_allowed());
    denied(
        gate(&with_learner, &defrag(4, false)),
        DenyRule::NotAVoter,
        "etcd refuses to defragment a learner",
    );
    let joining = view(vec![
        voter(1, true),
        voter(2, true),
        voter(3, true),
        learner(4, false, false),
    ]);
    assert!(gate(&joining, &defrag(2, false)).is_allowed());
    let mut rolling = healthy3();
    rolling.rolling_node = Some("n3".into());
    denied(
        gate(&rolling, &defrag(2, false)),
        DenyRule::RolloutInProgress,
        "n3",
    );
    denied(
        gate(&healthy3(), &defrag(9, false)),
        DenyRule::UnknownMember,
        "no such member",
    );
}

#[test]
fn rule_8_a_small_cluster_pauses_writes_only_under_nospace() {
    let one = view(vec![voter(1, true)]);
    denied(
        gate(&one, &defrag(1, false)),
        DenyRule::QuorumAfterAction,
        "would not keep quorum",
    );
    assert!(gate(&one, &defrag(1, true)).is_allowed());
    // Two voters: holding one leaves 1 of 2, below quorum.
    let two = view(vec![voter(1, true), voter(2, true)]);
    denied(
        gate(&two, &defrag(2, false)),
        DenyRule::QuorumAfterAction,
        "2 voter(s)",
    );
    // Two nodes: one voter and the standby learner. Under NOSPACE the voter is defragmented;
    // without it the voter waits, as a lone voter does.
    let standby = view(vec![voter(1, true), learner(2, true, true)]);
    assert!(gate(&standby, &defrag(1, true)).is_allowed());
    denied(
        gate(&standby, &defrag(1, false)),
        DenyRule::QuorumAfterAction,
        "1 voter(s)",
    );
}

fn move_to(i: u64, to: u64) -> Action {
    Action::MovePeerUrl {
        id: id(i),
        node: format!("n{i}"),
        peer_url: url(to),
    }
}

#[test]
fn rule_9_moves_a_down_member_at_once_and_a_serving_voter_only_with_a_spare() {
    // The usual case: the node's old address is gone, so its member is down.
    let down = view(vec![voter(1, true), voter(2, true), voter(3, false)]);
    assert!(gate(&down, &move_to(3, 30)).is_allowed());
    denied(
        gate(&down, &move_to(3, 2)),
        DenyRule::AlreadyMember,
        "already belongs to member n2 (2)",
    );
    denied(
        gate(&down, &move_to(7, 30)),
        DenyRule::UnknownMember,
        "no such member",
    );
    // Without quorum nothing can be committed.
    let lost = view(vec![voter(1, true), voter(2, false), voter(3, false)]);
    denied(
        gate(&lost, &move_to(3, 30)),
        DenyRule::NoQuorum,
        "no quorum",
    );
    // Still serving on the old address: moving it cuts it off, like a restart.
    let serving = view(vec![voter(1, true), voter(2, true), voter(3, true)]);
    assert!(gate(&serving, &move_to(3, 30)).is_allowed());
    let thin = view(vec![voter(1, true), voter(2, false), voter(3, true)]);
    denied(
        gate(&thin, &move_to(3, 30)),
        DenyRule::QuorumAfterAction,
        "still serves on its old address",
    );
    let mut rolling = serving.clone();
    rolling.rolling_node = Some("n1".into());
    denied(
        gate(&rolling, &move_to(3, 30)),
        DenyRule::RolloutInProgress,
        "node n1 is still being rolled",
    );
    rolling.rolling_node = Some("n3".into());
    assert!(gate(&rolling, &move_to(3, 30)).is_allowed());
    // A learner moves at once (it is no voter).
    let joining = view(vec![voter(1, true), learner(2, true, true)]);
    assert!(gate(&joining, &move_to(2, 20)).is_allowed());
}

#[test]
fn a_lone_voter_restarts_only_with_an_approved_outage_and_past_the_preflight() {
    let mut one = view(vec![voter(1, true)]);
    one.outage_approved = true;
    assert!(gate(&one, &roll(1)).is_allowed());
    one.preflight.alarms = vec![crate::RaisedAlarm {
        member: id(1),
        kind: crate::AlarmKind::Corrupt,
    }];
    denied(gate(&one, &roll(1)), DenyRule::Preflight, "CORRUPT");
    // Two voters, one down: the approval is no licence to take the other down too.
    let mut two = view(vec![voter(1, true), voter(2, false)]);
    two.outage_approved = true;
    denied(gate(&two, &roll(1)), DenyRule::QuorumAfterAction, "n2");
    // Three voters never need it; a joining learner makes the wait worth it.
    let mut three = view(vec![voter(1, true), voter(2, true), voter(3, true)]);
    assert!(gate(&three, &roll(1)).is_allowed());
    three.members.truncate(1);
    three.members.push(learner(2, true, true));
    assert_ne!(
        gate(&three, &roll(1)),
        Verdict::Allow,
        "a learner on its way: the restart waits for it"
    );
}

/// #65: a 2-node control plane is one voter and the standby learner, for good. The standby is
/// no voter on its way, so the voter is a lone voter: held for the approval, and rolled with
/// it (before, rule 11 stepped aside for any learner and rule 6 then waited for voters that
/// never come: certificates, upgrades and CA rotations never reached that node).
#[test]
fn a_voter_beside_the_standby_learner_rolls_with_the_approval() {
    let mut two_nodes = view(vec![voter(1, true), learner(2, true, true)]);
    two_nodes.standby = Some(id(2));
    denied(
        gate(&two_nodes, &roll(1)),
        DenyRule::LoneVoter,
        "for an admin to approve the outage",
    );
    two_nodes.outage_approved = true;
    assert!(gate(&two_nodes, &roll(1)).is_allowed());
    // Its own node, the learner's, rolls as any learner's does.
    two_nodes.outage_approved = false;
    assert!(gate(&two_nodes, &roll(2)).is_allowed());
    // The same learner, not a standby (a scale-up to three): the restart waits for it to join.
    two_nodes.standby = None;
    two_nodes.outage_approved = true;
    denied(
        gate(&two_nodes, &roll(1)),
        DenyRule::QuorumAfterAction,
        "more voters to join",
    );
}
