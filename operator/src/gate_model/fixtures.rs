//! The worlds the searches start from, and how a search's report is printed.

use super::check::{Counterexample, Report};
use super::world::{ModelMember, Node, Rev, RevKind, World};

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
        ..Node::EMPTY
    }
}

fn world(nodes: Vec<Node>, members: Vec<ModelMember>, rev: Rev, changes: u8, faults: u8) -> World {
    let latest = (rev.kind == RevKind::Rendered).then_some(0);
    World {
        nodes,
        members,
        revs: vec![rev],
        latest,
        rolling: None,
        pending: None,
        cut_off: None,
        defragmenting: None,
        next_id: 0x10,
        changes_left: changes,
        faults_left: faults,
        upgrades_left: 0,
    }
}

/// Node n1 runs the bootstrap manifest's member (marked in its data dir and in its state
/// dir); n2 and n3 are new control-plane nodes.
pub fn one_of_three(changes: u8, faults: u8) -> World {
    let n1 = Node {
        earlier: true,
        outside_mark: true,
        ..running(0, 1)
    };
    let bootstrap = Rev {
        kind: RevKind::Bootstrap,
        members: Vec::new(),
        setting: 0,
    };
    world(
        vec![n1, Node::EMPTY, Node::EMPTY],
        vec![voter(1, 0)],
        bootstrap,
        changes,
        faults,
    )
}

/// Three voters settled on one revision; n4 is a new control-plane node.
pub fn three_of_four(changes: u8, faults: u8) -> World {
    three_of(4, changes, faults)
}

/// Three voters settled on one revision on n1..n3; the other nodes up to `nodes` are new
/// control-plane nodes.
pub fn three_of(nodes: usize, changes: u8, faults: u8) -> World {
    let mut all = vec![running(0, 1), running(0, 2), running(0, 3)];
    all.resize(nodes, Node::EMPTY);
    let rev = Rev {
        kind: RevKind::Rendered,
        members: vec![(1, 0), (2, 1), (3, 2)],
        setting: 0,
    };
    world(
        all,
        vec![voter(1, 0), voter(2, 1), voter(3, 2)],
        rev,
        changes,
        faults,
    )
}

/// The same, with `upgrades` revisions of a new setting for the operator to render.
pub fn upgrading(nodes: usize, changes: u8, faults: u8, upgrades: u8) -> World {
    World {
        upgrades_left: upgrades,
        ..three_of(nodes, changes, faults)
    }
}

/// A report's figures, then its counterexamples.
pub fn show(what: &str, r: &Report) -> String {
    let mut out = format!(
        "{what}: {} states, {} outages checked, {} stuck after an outage in a settled state, {} mid-rollout ({} of them reached without a removal), {} other quorum losses checked, {} of them stuck, {} safety violations",
        r.states,
        r.outages,
        r.stuck_settled.len(),
        r.stuck_in_flight,
        r.stuck_in_flight_without_removal,
        r.quorum_losses,
        r.stuck_after_quorum_loss_count,
        r.violation_count,
    );
    if r.defrag_checked > 0 {
        out.push_str(&format!(
            ", {} states with a defragmentation due, {} of them denied",
            r.defrag_checked, r.defrag_denied_count
        ));
    }
    out.push('\n');
    let listed = r
        .violations
        .iter()
        .chain(&r.stuck_settled)
        .chain(&r.stuck_after_quorum_loss)
        .chain(&r.defrag_denied);
    for c in listed {
        push_trace(&mut out, &format!("  {}", c.broken), c);
    }
    if let Some(c) = r.in_flight_examples.first() {
        push_trace(
            &mut out,
            "  the first outage mid-rollout that needs an admin:",
            c,
        );
    }
    out
}

fn push_trace(out: &mut String, head: &str, c: &Counterexample) {
    out.push_str(head);
    out.push('\n');
    for step in &c.trace {
        out.push_str(&format!("    {step}\n"));
    }
}
