//! The model checks: the current rules from two starting points, and the unsafe shortcut caught.

use super::check::{Report, search};
use super::steps::MemberList;
use super::world::{Installer, ModelMember, Node, Rev, RevKind, World};

fn voter(id: u64, node: u8) -> ModelMember {
    ModelMember {
        id,
        node,
        learner: false,
        started: true,
    }
}

fn running(rev: u8, id: u64) -> Node {
    Node {
        rev: Some(rev),
        running: true,
        data: Some(id),
        earlier: false,
    }
}

const EMPTY: Node = Node {
    rev: None,
    running: false,
    data: None,
    earlier: false,
};

/// Node n1 runs the bootstrap manifest's member; n2 and n3 are new control-plane nodes.
fn one_of_three(changes: u8, faults: u8) -> World {
    World {
        nodes: vec![
            Node {
                earlier: true,
                ..running(0, 1)
            },
            EMPTY,
            EMPTY,
        ],
        members: vec![voter(1, 0)],
        revs: vec![Rev {
            kind: RevKind::Bootstrap,
            members: Vec::new(),
        }],
        latest: None,
        rolling: None,
        next_id: 0x10,
        changes_left: changes,
        faults_left: faults,
    }
}

/// Three voters settled on one revision; n4 is a new control-plane node.
fn three_of_four(changes: u8, faults: u8) -> World {
    World {
        nodes: vec![running(0, 1), running(0, 2), running(0, 3), EMPTY],
        members: vec![voter(1, 0), voter(2, 1), voter(3, 2)],
        revs: vec![Rev {
            kind: RevKind::Rendered,
            members: vec![(1, 0), (2, 1), (3, 2)],
        }],
        latest: Some(0),
        rolling: None,
        next_id: 0x10,
        changes_left: changes,
        faults_left: faults,
    }
}

fn show(what: &str, r: &Report) -> String {
    let mut out = format!(
        "{what}: {} states, {} outages checked, {} stuck after an outage in a settled state, {} mid-rollout, {} safety violations\n",
        r.states,
        r.outages,
        r.stuck_settled.len(),
        r.stuck_in_flight,
        r.violations.len()
    );
    for c in r.violations.iter().chain(&r.stuck_settled) {
        out.push_str(&format!("  {}\n", c.broken));
        for step in &c.trace {
            out.push_str(&format!("    {step}\n"));
        }
    }
    out
}

fn holds(what: &str, start: &World) {
    for list in [MemberList::AnyVoter, MemberList::Quorum] {
        let report = search(start, Installer::Current, list);
        let text = show(&format!("{what}, member list from {list:?}"), &report);
        eprintln!("{text}");
        assert!(
            report.violations.is_empty() && report.stuck_settled.is_empty(),
            "{text}"
        );
        assert!(report.outages > 0, "no outage was checked: {text}");
    }
}

#[test]
fn current_rules_hold_growing_one_voter_to_three() {
    holds("1 -> 3, 2 changes, 2 faults", &one_of_three(2, 2));
}

#[test]
fn current_rules_hold_adding_a_fourth_member_and_removing_one() {
    holds("3 -> 4, 2 changes, 1 fault", &three_of_four(2, 1));
}

#[test]
fn current_rules_hold_adding_a_fourth_member_through_two_faults() {
    holds("3 -> 4, 1 change, 2 faults", &three_of_four(1, 2));
}

/// With the member list as the project reads it (any running voter answers), the voters left on the revision
/// before the learner block each other after a power loss.
#[test]
fn the_checker_finds_the_naive_learner_add_unsafe() {
    let report = search(
        &three_of_four(1, 1),
        Installer::NaiveLearnerAdd,
        MemberList::AnyVoter,
    );
    let text = show("naive 3 -> 4", &report);
    eprintln!("{text}");
    let found = report.stuck_settled.first().expect(&text);
    assert!(
        found.trace.iter().any(|s| s.contains("loses power")),
        "{text}"
    );
}
