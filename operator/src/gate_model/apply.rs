//! What each [`Step`] does to a [`World`], and the safety properties checked on the way: the
//! operator's actions asked of the quorum gate (or of the gate before a fix, [`GateRule`]),
//! `etcd-verify`'s decision, and the faults.

use etcd_verify::decide::{Decision, RevisionRule, decide_by};
use membership::{Action, MemberId, Verdict, gate};

use super::steps::{GateRule, Params, Restart, Step};
use super::world::{Disk, FORGED_ID, ModelMember, Rev, RevKind, World, node_name, peer_url};

/// A broken property, found by the transition that broke it.
#[derive(Debug)]
pub struct Broken {
    pub what: String,
    /// The state the transition led to, where the search still checks it (an operator's step
    /// that lost quorum: whether the cluster comes back without an admin).
    pub after: Option<Box<World>>,
}

impl From<String> for Broken {
    fn from(what: String) -> Self {
        Broken { what, after: None }
    }
}

/// The state after `step`: `Ok(None)` when it changes nothing (or the gate denies it).
pub fn apply(w: &World, step: Step, params: &Params) -> Result<Option<World>, Broken> {
    if let Step::Verify { node, answers } = step {
        return verify(w, node, answers, params);
    }
    let mut next = w.clone();
    let changed = match step {
        Step::AddLearner(n) => add_learner(&mut next, n, params),
        Step::Promote(id) => promote(&mut next, id, params),
        Step::Remove(id) => remove(&mut next, id, params),
        Step::Render => render(&mut next, false),
        Step::Upgrade => render(&mut next, true),
        Step::Roll(n) => roll(&mut next, n, params),
        Step::Install(n) => install(&mut next, n, params),
        Step::Defragment(id) => defragment(&mut next, id, params),
        Step::DefragDone => next.defragmenting.take().is_some(),
        Step::Verify { .. } => false,
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
        Step::Unmount(n) => fault(&mut next, |w| unmount(w, n)),
        Step::Remount(n) => remount(&mut next, n),
        Step::CutOff(n) => fault(&mut next, |w| w.cut_off = Some(n)),
        Step::Reconnect => next.cut_off.take().is_some(),
        Step::Forge { node, omit } => forge(&mut next, node, omit),
    };
    // A defragmentation ends with its etcd.
    if let Some(d) = next.defragmenting
        && !next.nodes[usize::from(d)].running
    {
        next.defragmenting = None;
    }
    if !changed || next == *w {
        return Ok(None);
    }
    if is_operator(step) && w.has_quorum() && !next.has_quorum() {
        return Err(Broken {
            what: format!("{step} lost quorum"),
            after: Some(Box::new(next)),
        });
    }
    Ok(Some(next))
}

fn is_operator(step: Step) -> bool {
    matches!(
        step,
        Step::AddLearner(_)
            | Step::Promote(_)
            | Step::Remove(_)
            | Step::Render
            | Step::Upgrade
            | Step::Roll(_)
            | Step::Install(_)
            | Step::Defragment(_)
    )
}

fn mid(id: u64) -> MemberId {
    MemberId::new(id).expect("model ids are not zero")
}

/// Whether the operator's gate allows `action` in `w`.
pub fn allowed(w: &World, action: &Action, rule: GateRule) -> bool {
    if rule == GateRule::LearnerHoldsDefrag
        && matches!(action, Action::Defragment { .. })
        && w.members.iter().any(|m| m.learner)
    {
        return false;
    }
    matches!(gate(&w.view(), action), Verdict::Allow)
}

/// Applies `effect` when the gate allows `action`.
fn asked(w: &mut World, action: &Action, params: &Params, effect: impl FnOnce(&mut World)) -> bool {
    if allowed(w, action, params.gate) {
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

fn add_learner(w: &mut World, n: u8, params: &Params) -> bool {
    if w.changes_left == 0 || w.member_of(n).is_some() || w.removed_listed(n) {
        return false;
    }
    let action = Action::AddLearner {
        node: node_name(n),
        peer_url: peer_url(n),
    };
    asked(w, &action, params, |w| {
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

fn promote(w: &mut World, id: u64, params: &Params) -> bool {
    asked(w, &Action::Promote { id: mid(id) }, params, |w| {
        for m in &mut w.members {
            if m.id == id && m.started && w.nodes[usize::from(m.node)].running {
                m.learner = false;
            }
        }
    })
}

fn remove(w: &mut World, id: u64, params: &Params) -> bool {
    if w.changes_left == 0 {
        return false;
    }
    asked(w, &Action::Remove { id: mid(id) }, params, |w| {
        if let Some(m) = w.members.iter().find(|m| m.id == id).copied() {
            // A removed member's etcd exits by itself.
            w.nodes[usize::from(m.node)].running = false;
        }
        w.members.retain(|m| m.id != id);
        w.changes_left -= 1;
    })
}

/// A revision from the live member list; `upgrade`: of a new setting.
fn render(w: &mut World, upgrade: bool) -> bool {
    let list = w.member_list();
    let latest = w.latest.map(|l| &w.revs[usize::from(l)]);
    let setting = latest.map_or(0, |r| r.setting);
    if upgrade {
        if w.upgrades_left == 0 {
            return false;
        }
        w.upgrades_left -= 1;
    } else if latest.is_some_and(|r| r.members == list) {
        return false;
    }
    w.revs.push(Rev {
        kind: RevKind::Rendered,
        members: list,
        setting: setting + u8::from(upgrade),
    });
    w.latest = u8::try_from(w.revs.len() - 1).ok();
    true
}

fn roll_action(w: &World, n: u8) -> Action {
    Action::RollNode {
        node: node_name(n),
        member: w.member_of(n).map(|m| mid(m.id)),
    }
}

/// The operator asks the gate to move node `n`: the node stops at once ([`Restart::Atomic`]),
/// or an installer pod is created that restarts it later.
fn roll(w: &mut World, n: u8, params: &Params) -> bool {
    let Some(latest) = w.latest else {
        return false;
    };
    if params.restart != Restart::Atomic && w.pending.is_some() {
        return false;
    }
    let atomic = params.restart == Restart::Atomic;
    asked(w, &roll_action(w, n), params, |w| {
        w.rolling = Some(n);
        if atomic {
            lay_down(w, n, latest);
        } else {
            w.pending = Some((n, latest));
        }
    })
}

/// Node `n`'s installer pod runs: as created ([`Restart::Verdict`]) or only while the gate
/// still allows it ([`Restart::ReAsk`]).
fn install(w: &mut World, n: u8, params: &Params) -> bool {
    let Some((node, rev)) = w.pending.filter(|&(node, _)| node == n) else {
        return false;
    };
    if params.restart == Restart::ReAsk && !allowed(w, &roll_action(w, node), params.gate) {
        return false;
    }
    w.pending = None;
    lay_down(w, node, rev);
    true
}

fn lay_down(w: &mut World, n: u8, rev: u8) {
    let node = &mut w.nodes[usize::from(n)];
    node.running = false;
    node.rev = Some(rev);
}

fn defragment(w: &mut World, id: u64, params: &Params) -> bool {
    let Some(node) = w.members.iter().find(|m| m.id == id).map(|m| m.node) else {
        return false;
    };
    let action = Action::Defragment {
        id: mid(id),
        nospace: false,
    };
    asked(w, &action, params, |w| w.defragmenting = Some(node))
}

/// The node boots with its data disk unmounted: what the disk holds is out of sight.
fn unmount(w: &mut World, n: u8) {
    let node = &mut w.nodes[usize::from(n)];
    node.running = false;
    node.unmounted = Some(Disk {
        data: node.data.take(),
        earlier: std::mem::take(&mut node.earlier),
    });
}

/// The node reboots with its disk mounted: what was written on the mount point meanwhile is
/// hidden under it.
fn remount(w: &mut World, n: u8) -> bool {
    let node = &mut w.nodes[usize::from(n)];
    let Some(disk) = node.unmounted.take() else {
        return false;
    };
    node.running = false;
    node.data = disk.data;
    node.earlier = disk.earlier;
    true
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
    let setting = w.latest.map_or(0, |l| w.revs[usize::from(l)].setting);
    fault(w, |w| {
        w.revs.push(Rev {
            kind: RevKind::Forged,
            members,
            setting,
        });
        let node = &mut w.nodes[usize::from(n)];
        node.rev = u8::try_from(w.revs.len() - 1).ok();
        node.running = false;
    })
}

/// Node `n`'s `etcd-verify` decides with `params`' rule (and state dir); a start is checked
/// against the properties.
pub fn verify(w: &World, n: u8, answers: bool, params: &Params) -> Result<Option<World>, Broken> {
    let node = w.nodes[usize::from(n)];
    let Some(rev_index) = node.rev else {
        return Ok(None);
    };
    let rev = &w.revs[usize::from(rev_index)];
    let config = match w.config(n, rev) {
        Ok(c) => c,
        // etcd-verify exits 2 on an env it cannot read: etcd does not start.
        Err(_) if rev.kind == RevKind::Forged => return Ok(None),
        Err(e) => {
            return Err(format!("a rendered revision etcd-verify cannot read: {e}").into());
        }
    };
    let observed = w.observed(n, &config, answers, params.state_dir);
    let decision = decide_by(&observed, params.rule);
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
        if rev.kind == RevKind::Forged && answers && forged_list_refused(rev, w, n, params.rule) {
            return Err(format!(
                "a forged revision that disagrees with the live member list started {}'s etcd while the cluster answered: {decision:?}",
                node_name(n)
            )
            .into());
        }
        start_etcd(&mut next, n, config.is_first_bootstrap())
            .map_err(|e| Broken::from(format!("{e}: {decision:?}")))?;
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

/// etcd starts on node `n` with what its data dir holds now; `bootstrap`: on the bootstrap
/// manifest, which makes a new cluster when the data dir is empty.
fn start_etcd(w: &mut World, n: u8, bootstrap: bool) -> Result<(), String> {
    let name = node_name(n);
    let node = w.nodes[usize::from(n)];
    let data = node.data;
    let unmounted = if node.unmounted.is_some() {
        " (its data disk is only unmounted)"
    } else {
        ""
    };
    if bootstrap && data.is_none() {
        return Err(if w.members.is_empty() {
            format!("{name} bootstrapped a cluster the model never starts")
        } else {
            format!("{name} bootstrapped a second, empty cluster{unmounted}")
        });
    }
    match (w.member_of(n), data) {
        (Some(own), Some(id)) if id == own.id => {}
        (Some(own), None) if !own.started => {}
        (Some(own), data) => {
            return Err(format!(
                "{name}'s member {:x} started on data of {data:x?}{unmounted}",
                own.id
            ));
        }
        (None, Some(_)) => return Ok(()), // a removed member's etcd exits by itself
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
