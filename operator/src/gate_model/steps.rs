//! The model's transitions: the operator's actions (each asked of the quorum gate first), the
//! installer's, a node's `etcd-verify` deciding whether etcd starts, and the faults.

use std::fmt;

use etcd_verify::decide::{Decision, RevisionRule, decide_by};
use membership::{Action, MemberId, Verdict, gate};

use super::world::{FORGED_ID, Installer, ModelMember, Rev, RevKind, World, node_name, peer_url};

/// One transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    AddLearner(u8),
    Promote(u64),
    Remove(u64),
    /// The operator renders a revision from the live member list.
    Render,
    /// The installer moves node `n` to the latest revision (its etcd stops).
    Roll(u8),
    /// Node `n`'s `etcd-verify` runs; `answers`: whether a voter answered the member list.
    Verify {
        node: u8,
        answers: bool,
    },
    Reboot(u8),
    PowerLoss,
    /// Node `n`'s `member` directory is lost (the disk replaced); the marks beside it stay.
    LoseData(u8),
    /// A revision the operator never made is laid down on node `n`: the live list without one
    /// other member (`omit`), or with another id for this node's member.
    Forge {
        node: u8,
        omit: bool,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::AddLearner(n) => write!(f, "operator adds a learner for {}", node_name(*n)),
            Step::Promote(id) => write!(f, "operator promotes {id:x}"),
            Step::Remove(id) => write!(f, "operator removes {id:x}"),
            Step::Render => f.write_str("operator renders a revision"),
            Step::Roll(n) => write!(
                f,
                "installer moves {} to the latest revision",
                node_name(*n)
            ),
            Step::Verify { node, answers } => write!(
                f,
                "etcd-verify runs on {} (member list {})",
                node_name(*node),
                if *answers { "answers" } else { "unanswered" }
            ),
            Step::Reboot(n) => write!(f, "{} reboots", node_name(*n)),
            Step::PowerLoss => f.write_str("the whole control plane loses power"),
            Step::LoseData(n) => write!(f, "{} loses its member directory", node_name(*n)),
            Step::Forge { node, omit } => write!(
                f,
                "a forged revision ({}) is laid down on {}",
                if *omit {
                    "omits a member"
                } else {
                    "another id"
                },
                node_name(*node)
            ),
        }
    }
}

/// A broken property, found by the transition that broke it.
pub type Broken = String;

/// Every step possible from `w` (some are no-ops; [`apply`] says so).
pub fn steps(w: &World, policy: Installer, list: MemberList) -> Vec<Step> {
    let mut out = Vec::new();
    let nodes = 0..w.node_count();
    if w.has_quorum() {
        if w.changes_left > 0 {
            out.extend(
                nodes
                    .clone()
                    .filter(|&n| w.member_of(n).is_none())
                    .map(Step::AddLearner),
            );
            out.extend(w.members.iter().map(|m| Step::Remove(m.id)));
        }
        out.extend(
            w.members
                .iter()
                .filter(|m| m.learner)
                .map(|m| Step::Promote(m.id)),
        );
        out.push(Step::Render);
        out.extend(
            nodes
                .clone()
                .filter(|&n| w.needs_roll(n, policy))
                .map(Step::Roll),
        );
    }
    out.extend(verify_steps(w, list));
    if w.faults_left > 0 {
        let node = |n: u8| w.nodes[usize::from(n)];
        out.extend(nodes.clone().filter(|&n| node(n).running).map(Step::Reboot));
        out.push(Step::PowerLoss);
        out.extend(
            nodes
                .clone()
                .filter(|&n| node(n).data.is_some())
                .map(Step::LoseData),
        );
        for n in nodes {
            out.extend([true, false].map(|omit| Step::Forge { node: n, omit }));
        }
    }
    out
}

/// What a search varies: the installer's policy, who answers the member list, and the rule
/// `etcd-verify` applies to a revision's member list.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub installer: Installer,
    pub list: MemberList,
    pub rule: RevisionRule,
}

/// Who answers `etcd-verify`'s member list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberList {
    /// Any running voter, from its own copy: what the project's client asks for on every etcd
    /// version (etcd-client sends `linearizable: false`), and all etcd 3.4 serves.
    AnyVoter,
    /// Only a cluster with quorum: etcd 3.5+'s linearizable read, when asked for.
    Quorum,
}

/// The `etcd-verify` runs possible now, on every node whose etcd is down.
pub fn verify_steps(w: &World, list: MemberList) -> Vec<Step> {
    let answers = match list {
        MemberList::AnyVoter => w.running_voters() > 0,
        MemberList::Quorum => w.has_quorum(),
    };
    (0..w.node_count())
        .filter(|&n| !w.nodes[usize::from(n)].running && w.nodes[usize::from(n)].rev.is_some())
        .map(|node| Step::Verify { node, answers })
        .collect()
}

/// The state after `step`: `Ok(None)` when it changes nothing (or the gate denies it).
pub fn apply(w: &World, step: Step, rule: RevisionRule) -> Result<Option<World>, Broken> {
    let mut next = w.clone();
    let changed = match step {
        Step::AddLearner(n) => add_learner(&mut next, n),
        Step::Promote(id) => asked(&mut next, &Action::Promote { id: mid(id) }, |w| {
            for m in &mut w.members {
                if m.id == id && m.started && w.nodes[usize::from(m.node)].running {
                    m.learner = false;
                }
            }
        }),
        Step::Remove(id) => remove(&mut next, id),
        Step::Render => render(&mut next),
        Step::Roll(n) => roll(&mut next, n),
        Step::Verify { node, answers } => return verify(w, node, answers, rule),
        Step::Reboot(n) => fault(&mut next, |w| w.nodes[usize::from(n)].running = false),
        Step::PowerLoss => fault(&mut next, |w| {
            w.nodes.iter_mut().for_each(|x| x.running = false)
        }),
        Step::LoseData(n) => fault(&mut next, |w| {
            let node = &mut w.nodes[usize::from(n)];
            node.running = false;
            node.earlier |= node.data.is_some();
            node.data = None;
        }),
        Step::Forge { node, omit } => forge(&mut next, node, omit),
    };
    if !changed || next == *w {
        return Ok(None);
    }
    if is_operator(step) && !next.has_quorum() {
        return Err(format!("{step} lost quorum"));
    }
    Ok(Some(next))
}

fn is_operator(step: Step) -> bool {
    matches!(
        step,
        Step::AddLearner(_) | Step::Promote(_) | Step::Remove(_) | Step::Render | Step::Roll(_)
    )
}

fn mid(id: u64) -> MemberId {
    MemberId::new(id).expect("model ids are not zero")
}

/// Applies `effect` when the gate allows `action`.
fn asked(w: &mut World, action: &Action, effect: impl FnOnce(&mut World)) -> bool {
    if matches!(gate(&w.view(), action), Verdict::Allow) {
        effect(w);
        true
    } else {
        false
    }
}

fn fault(w: &mut World, effect: impl FnOnce(&mut World)) -> bool {
    if w.faults_left == 0 {
        return false;
    }
    w.faults_left -= 1;
    effect(w);
    true
}

fn add_learner(w: &mut World, n: u8) -> bool {
    if w.changes_left == 0 || w.member_of(n).is_some() || w.removed_listed(n) {
        return false;
    }
    let action = Action::AddLearner {
        node: node_name(n),
        peer_url: peer_url(n),
    };
    asked(w, &action, |w| {
        w.members.push(ModelMember {
            id: w.next_id,
            node: n,
            learner: true,
            started: false,
        });
        w.members.sort();
        w.next_id += 1;
        w.changes_left -= 1;
    })
}

fn remove(w: &mut World, id: u64) -> bool {
    if w.changes_left == 0 {
        return false;
    }
    asked(w, &Action::Remove { id: mid(id) }, |w| {
        if let Some(m) = w.members.iter().find(|m| m.id == id).copied() {
            // A removed member's etcd exits by itself.
            w.nodes[usize::from(m.node)].running = false;
        }
        w.members.retain(|m| m.id != id);
        w.changes_left -= 1;
    })
}

fn render(w: &mut World) -> bool {
    let list = w.member_list();
    if w.latest
        .is_some_and(|l| w.revs[usize::from(l)].members == list)
    {
        return false;
    }
    w.revs.push(Rev {
        kind: RevKind::Rendered,
        members: list,
    });
    w.latest = u8::try_from(w.revs.len() - 1).ok();
    true
}

fn roll(w: &mut World, n: u8) -> bool {
    let action = Action::RollNode {
        node: node_name(n),
        member: w.member_of(n).map(|m| mid(m.id)),
    };
    asked(w, &action, |w| {
        let node = &mut w.nodes[usize::from(n)];
        node.running = false;
        node.rev = w.latest;
        w.rolling = Some(n);
    })
}

fn forge(w: &mut World, n: u8, omit: bool) -> bool {
    let own = w.member_of(n);
    let mut members = w.member_list();
    if omit {
        let Some(pos) = members.iter().position(|&(_, node)| node != n) else {
            return false;
        };
        members.remove(pos);
    } else {
        let Some(own) = own else { return false };
        for m in &mut members {
            if m.0 == own.id {
                m.0 = FORGED_ID;
            }
        }
    }
    fault(w, |w| {
        w.revs.push(Rev {
            kind: RevKind::Forged,
            members,
        });
        let node = &mut w.nodes[usize::from(n)];
        node.rev = u8::try_from(w.revs.len() - 1).ok();
        node.running = false;
    })
}

/// Node `n`'s `etcd-verify` decides with `rule`; a start is checked against the properties.
pub fn verify(
    w: &World,
    n: u8,
    answers: bool,
    rule: RevisionRule,
) -> Result<Option<World>, Broken> {
    let node = w.nodes[usize::from(n)];
    let Some(rev_index) = node.rev else {
        return Ok(None);
    };
    let rev = &w.revs[usize::from(rev_index)];
    let config = match w.config(n, rev) {
        Ok(c) => c,
        // etcd-verify exits 2 on an env it cannot read: etcd does not start.
        Err(_) if rev.kind == RevKind::Forged => return Ok(None),
        Err(e) => return Err(format!("a rendered revision etcd-verify cannot read: {e}")),
    };
    let decision = decide_by(&w.observed(n, &config, answers), rule);
    let mut next = w.clone();
    let (archive, start) = match &decision {
        Decision::Start { archive, .. } => (archive.is_some(), true),
        Decision::Wait { archive, .. } => (archive.is_some(), false),
        Decision::Block { .. } => (false, false),
    };
    if archive {
        let node = &mut next.nodes[usize::from(n)];
        node.earlier |= node.data.is_some();
        node.data = None;
    }
    if start {
        if rev.kind == RevKind::Forged && answers && forged_list_refused(rev, w, n, rule) {
            return Err(format!(
                "a forged revision that disagrees with the live member list started {}'s etcd while the cluster answered: {decision:?}",
                node_name(n)
            ));
        }
        start_etcd(&mut next, n, config.is_first_bootstrap())
            .map_err(|e| format!("{e}: {decision:?}"))?;
    }
    Ok((next != *w).then_some(next))
}

/// Whether `rule` must keep a forged revision's member list from starting node `n`'s etcd while
/// the cluster answers: with `Exact`, any list that is not the live one (a forged list the
/// cluster later comes to match is no longer forged); with `ListedAreLive`, a list naming a
/// member that is not live (a forged list that only omits live members reads as a stale one,
/// on which a started member restarts from its own data, as etcd ignores the list then); with
/// `OwnData`, any list that is not the live one unless it lists node `n`'s started member under
/// its own id (etcd restarts that member from its data whatever the list says). What such a
/// start may not do is checked as for every start.
fn forged_list_refused(rev: &Rev, w: &World, n: u8, rule: RevisionRule) -> bool {
    let live = w.member_list();
    match rule {
        RevisionRule::Exact => rev.members != live,
        RevisionRule::ListedAreLive => rev.members.iter().any(|m| !live.contains(m)),
        RevisionRule::OwnData => {
            let own_started = w
                .member_of(n)
                .is_some_and(|m| m.started && rev.members.contains(&(m.id, n)));
            rev.members != live && !own_started
        }
    }
}

/// etcd starts on node `n` with what its data dir holds now.
fn start_etcd(w: &mut World, n: u8, bootstrap: bool) -> Result<(), Broken> {
    let name = node_name(n);
    let data = w.nodes[usize::from(n)].data;
    match (w.member_of(n), data) {
        (Some(own), Some(id)) if id == own.id => {}
        (Some(own), None) if !own.started => {}
        (Some(own), data) => {
            return Err(format!(
                "{name}'s member {:x} started on data of {data:x?}",
                own.id
            ));
        }
        (None, Some(_)) => return Ok(()), // a removed member's etcd exits by itself
        (None, None) if bootstrap && w.members.is_empty() => {
            return Err(format!(
                "{name} bootstrapped a cluster the model never starts"
            ));
        }
        (None, None) if bootstrap => {
            return Err(format!("{name} bootstrapped a second, empty cluster"));
        }
        (None, None) => return Err(format!("{name} started etcd without a member or data")),
    }
    for m in &mut w.members {
        if m.node == n {
            m.started = true;
            w.nodes[usize::from(n)].data = Some(m.id);
        }
    }
    w.nodes[usize::from(n)].running = true;
    if w.rolling == Some(n) && w.nodes[usize::from(n)].rev == w.latest {
        w.rolling = None;
    }
    Ok(())
}
