//! The exhaustive search: every state reachable from the start within the bound, each step
//! checked as [`super::steps::apply`] does, and every state where quorum is lost (no etcd runs,
//! or too few voters do) followed by every order of the nodes' `etcd-verify` runs to see whether
//! the cluster comes back without an admin.

use std::collections::{HashMap, VecDeque};

use membership::Action;

use super::apply::{allowed, apply};
use super::steps::{Params, Step, steps, verify_steps};
use super::world::World;

/// A property the search found broken, with the steps that lead there from the start.
#[derive(Debug)]
pub struct Counterexample {
    pub broken: String,
    pub trace: Vec<String>,
}

/// What one search found.
#[derive(Debug, Default)]
pub struct Report {
    pub states: usize,
    /// Safety broken (the first few).
    pub violations: Vec<Counterexample>,
    /// How many steps broke safety in all.
    pub violation_count: usize,
    /// Outages (every etcd down) in a settled state after which some order of starts leaves
    /// quorum lost.
    pub stuck_settled: Vec<Counterexample>,
    /// The same for outages while a rollout or a change was in flight.
    pub stuck_in_flight: usize,
    /// Of those, the ones reached without any member removal (a learner add's window).
    pub stuck_in_flight_without_removal: usize,
    /// The first few of those, shortest first.
    pub in_flight_examples: Vec<Counterexample>,
    /// Outages checked (a quorum of voters had its data).
    pub outages: usize,
    /// States where quorum is lost while some etcd still runs (a reboot, a lost data dir, with
    /// a quorum of voters still holding its data), checked the same way: no operator (the API
    /// is down with its etcd), only the nodes' `etcd-verify` runs.
    pub quorum_losses: usize,
    /// Of those, the ones after which some order of starts leaves quorum lost: an outage only
    /// an admin can end where plain etcd would have come back (#65).
    pub stuck_after_quorum_loss: Vec<Counterexample>,
    /// How many of those there were in all (the list keeps the first few).
    pub stuck_after_quorum_loss_count: usize,
    /// States where a defragmentation is due to be allowed (every member started, serving and
    /// reachable, nothing rolling or held, three voters or more), with [`Params::defrag`].
    pub defrag_checked: usize,
    /// Of those, the ones where the gate denies defragmenting a voter (the first few).
    pub defrag_denied: Vec<Counterexample>,
    pub defrag_denied_count: usize,
}

const KEEP: usize = 3;

/// Searches every state reachable from `start` with `params`.
pub fn search(start: &World, params: Params) -> Report {
    let mut report = Report::default();
    let mut parent: HashMap<World, Option<(World, Step)>> = HashMap::new();
    parent.insert(start.clone(), None);
    let mut queue = VecDeque::from([start.clone()]);
    while let Some(w) = queue.pop_front() {
        for step in steps(&w, &params) {
            match apply(&w, step, &params) {
                Ok(None) => {}
                Ok(Some(next)) => {
                    if parent.contains_key(&next) {
                        continue;
                    }
                    parent.insert(next.clone(), Some((w.clone(), step)));
                    if next.nodes.iter().all(|n| !n.running) {
                        after_outage(&next, params, &parent, &mut report);
                    } else if !next.has_quorum() {
                        after_quorum_loss(&next, params, &parent, &mut report);
                    }
                    if params.defrag {
                        defrag_due(&next, params, &parent, &mut report);
                    }
                    queue.push_back(next);
                }
                Err(broken) => {
                    report.violation_count += 1;
                    if report.violations.len() < KEEP {
                        let mut trace = trace(&parent, &w);
                        trace.push(step.to_string());
                        let broken = broken.what.clone();
                        report.violations.push(Counterexample { broken, trace });
                    }
                    if let Some(after) = broken.after
                        && !parent.contains_key(&after)
                    {
                        // Not searched on, but whether it comes back without an admin is.
                        parent.insert((*after).clone(), Some((w.clone(), step)));
                        if after.nodes.iter().all(|n| !n.running) {
                            after_outage(&after, params, &parent, &mut report);
                        } else {
                            after_quorum_loss(&after, params, &parent, &mut report);
                        }
                    }
                }
            }
        }
    }
    report.states = parent.len();
    report
}

/// The steps the search took from the start to `w`, in order.
fn path(parent: &HashMap<World, Option<(World, Step)>>, w: &World) -> Vec<Step> {
    let mut out = Vec::new();
    let mut at = w;
    while let Some(Some((before, step))) = parent.get(at) {
        out.push(*step);
        at = before;
    }
    out.reverse();
    out
}

/// The same steps, as a counterexample prints them.
fn trace(parent: &HashMap<World, Option<(World, Step)>>, w: &World) -> Vec<String> {
    path(parent, w).iter().map(Step::to_string).collect()
}

/// Checks a newly found state in which no etcd runs (a power loss, or the last running node
/// going down by any fault): whether every order of starts brings quorum back. Whether the
/// rollout was settled is read from the state itself, which a fault leaves as it was.
fn after_outage(
    down: &World,
    params: Params,
    parent: &HashMap<World, Option<(World, Step)>>,
    report: &mut Report,
) {
    let Some(stuck) = recoverable_but_stuck(down, params, &mut report.outages) else {
        return;
    };
    let settled = down.settled(params.installer);
    if !settled {
        report.stuck_in_flight += 1;
        if !path(parent, down)
            .iter()
            .any(|s| matches!(s, Step::Remove(_)))
        {
            report.stuck_in_flight_without_removal += 1;
        }
    }
    let kept = if settled {
        &mut report.stuck_settled
    } else {
        &mut report.in_flight_examples
    };
    if kept.len() < KEEP {
        let mut trace = trace(parent, down);
        trace.extend(stuck);
        kept.push(Counterexample {
            broken:
                "after every etcd went down the cluster stays without quorum until an admin acts"
                    .to_owned(),
            trace,
        });
    }
}

/// Checks a newly found state in which quorum is lost but some etcd still runs (or an operator's
/// step that lost quorum led to, a violation itself): whether every order of the stopped
/// nodes' starts brings quorum back, in a settled state or not.
fn after_quorum_loss(
    down: &World,
    params: Params,
    parent: &HashMap<World, Option<(World, Step)>>,
    report: &mut Report,
) {
    let Some(stuck) = recoverable_but_stuck(down, params, &mut report.quorum_losses) else {
        return;
    };
    report.stuck_after_quorum_loss_count += 1;
    if report.stuck_after_quorum_loss.len() < KEEP {
        let mut trace = trace(parent, down);
        trace.extend(stuck);
        report.stuck_after_quorum_loss.push(Counterexample {
            broken: "after quorum was lost the cluster stays without quorum until an admin acts, though a quorum of voters has its data".to_owned(),
            trace,
        });
    }
}

/// For a state without quorum where a quorum of voters still has its data (counted in
/// `checked`): the steps to where it stays stuck without an admin, if some order of starts
/// gets there. `None` for a state no start could bring back, or one that always comes back.
fn recoverable_but_stuck(down: &World, params: Params, checked: &mut usize) -> Option<Vec<String>> {
    if down.voters_with_data() < membership::quorum(down.voters()) {
        return None;
    }
    *checked += 1;
    stuck_without_admin(down, params)
}

/// Runs only the nodes' `etcd-verify` from `w` (no operator: the API is down without quorum; no
/// further fault; a blocked or waiting init container is run again by the kubelet), and the end
/// of a defragmentation under way, in every order; returns the steps to a state where nothing more starts and
/// quorum is still lost, if there is one.
fn stuck_without_admin(w: &World, params: Params) -> Option<Vec<String>> {
    let mut seen: HashMap<World, Vec<String>> = HashMap::new();
    seen.insert(w.clone(), Vec::new());
    // A state is queued once, when first seen.
    let mut queue = VecDeque::from([w.clone()]);
    while let Some(at) = queue.pop_front() {
        if at.has_quorum() {
            continue;
        }
        let path = seen.get(&at).cloned().unwrap_or_default();
        let mut moved = false;
        let mut by_itself = verify_steps(&at, params.list);
        if at.defragmenting.is_some() {
            by_itself.push(Step::DefragDone);
        }
        for step in by_itself {
            let Ok(Some(next)) = apply(&at, step, &params) else {
                continue;
            };
            moved = true;
            if !seen.contains_key(&next) {
                let mut p = path.clone();
                p.push(step.to_string());
                seen.insert(next.clone(), p);
                queue.push_back(next);
            }
        }
        if !moved {
            return Some(path);
        }
    }
    None
}

/// Checks a newly found state in which every member is started, serving and reachable, no node
/// is being rolled and none is held, with three voters or more: the gate must allow
/// defragmenting each voter (a defragmentation that is due waits for nothing that will pass).
fn defrag_due(
    w: &World,
    params: Params,
    parent: &HashMap<World, Option<(World, Step)>>,
    report: &mut Report,
) {
    let quiet = w.rolling.is_none() && w.pending.is_none() && w.defragmenting.is_none();
    let all_serve = w
        .members
        .iter()
        .all(|m| w.serves(m) && w.cut_off != Some(m.node));
    if !quiet || !all_serve || w.voters() < 3 {
        return;
    }
    report.defrag_checked += 1;
    let denied = w.members.iter().filter(|m| !m.learner).find(|m| {
        let Some(id) = membership::MemberId::new(m.id) else {
            return false;
        };
        !allowed(w, &Action::Defragment { id, nospace: false }, params.gate)
    });
    let Some(denied) = denied else {
        return;
    };
    report.defrag_denied_count += 1;
    if report.defrag_denied.len() < KEEP {
        report.defrag_denied.push(Counterexample {
            broken: format!(
                "every member runs, yet the gate denies defragmenting voter {:x}",
                denied.id
            ),
            trace: trace(parent, w),
        });
    }
}
