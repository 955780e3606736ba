//! The model's transitions: the operator's actions (each asked of the quorum gate first), the
//! installer's, a node's `etcd-verify` deciding whether etcd starts, and the faults; and what a
//! search varies ([`Params`]). What each step does is [`super::apply`].

use std::fmt;

use etcd_verify::decide::RevisionRule;

use super::world::{Installer, World, node_name};

/// One transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    AddLearner(u8),
    Promote(u64),
    Remove(u64),
    /// The operator renders a revision from the live member list.
    Render,
    /// The operator renders a revision of a new setting (an etcd version, a certificate), which
    /// every node is moved to.
    Upgrade,
    /// The installer moves node `n` to the latest revision: with [`Restart::Atomic`] its etcd
    /// stops at once; otherwise the operator asks the gate and creates the installer pod, which
    /// restarts the node later ([`Step::Install`]).
    Roll(u8),
    /// The installer pod created for node `n` runs: the node's etcd stops and the pod's
    /// revision is laid down.
    Install(u8),
    /// The operator defragments member `id` (its store is held until [`Step::DefragDone`]).
    Defragment(u64),
    DefragDone,
    /// Node `n`'s `etcd-verify` runs; `answers`: whether a voter answered the member list.
    Verify {
        node: u8,
        answers: bool,
    },
    Reboot(u8),
    PowerLoss,
    /// Node `n`'s `member` directory is lost (the disk replaced); the marks beside it stay.
    LoseData(u8),
    /// Node `n` boots without its data disk mounted: the data dir is an empty mount point,
    /// without the member and without the marks inside the data dir; the state dir's mark
    /// stays.
    Unmount(u8),
    /// Node `n` reboots with its data disk mounted again (not a fault: the repair).
    Remount(u8),
    /// The operator can no longer reach node `n`'s member, while its peers can.
    CutOff(u8),
    /// The operator reaches every member again (not a fault).
    Reconnect,
    /// A revision the operator never made is laid down on node `n`: the live list without one
    /// other member (`omit`), or with another id for this node's member.
    Forge {
        node: u8,
        omit: bool,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |n: &u8| node_name(*n);
        match self {
            Step::AddLearner(n) => write!(f, "operator adds a learner for {}", name(n)),
            Step::Promote(id) => write!(f, "operator promotes {id:x}"),
            Step::Remove(id) => write!(f, "operator removes {id:x}"),
            Step::Render => f.write_str("operator renders a revision"),
            Step::Upgrade => f.write_str("operator renders a revision of a new setting"),
            Step::Roll(n) => write!(f, "installer moves {} to the latest revision", name(n)),
            Step::Install(n) => write!(f, "{}'s installer pod restarts its etcd", name(n)),
            Step::Defragment(id) => write!(f, "operator defragments {id:x}"),
            Step::DefragDone => f.write_str("the defragmentation ends"),
            Step::Verify { node, answers } => write!(
                f,
                "etcd-verify runs on {} (member list {})",
                name(node),
                if *answers { "answers" } else { "unanswered" }
            ),
            Step::Reboot(n) => write!(f, "{} reboots", name(n)),
            Step::PowerLoss => f.write_str("the whole control plane loses power"),
            Step::LoseData(n) => write!(f, "{} loses its member directory", name(n)),
            Step::Unmount(n) => write!(f, "{} boots without its data disk mounted", name(n)),
            Step::Remount(n) => write!(f, "{} reboots with its data disk mounted", name(n)),
            Step::CutOff(n) => write!(f, "the operator cannot reach {}'s member", name(n)),
            Step::Reconnect => f.write_str("the operator reaches every member again"),
            Step::Forge { node, omit } => write!(
                f,
                "a forged revision ({}) is laid down on {}",
                if *omit {
                    "omits a member"
                } else {
                    "another id"
                },
                name(node)
            ),
        }
    }
}

/// What a search varies: the installer's policy, who answers the member list, the rule
/// `etcd-verify` applies to a revision's member list, and the parts of the world a search
/// models beyond the first model's (each off in [`Params::new`], so a search's figures stay
/// comparable with earlier ones).
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub installer: Installer,
    pub list: MemberList,
    pub rule: RevisionRule,
    /// How the gate's check and the restart it allows relate.
    pub restart: Restart,
    /// `etcd-verify` keeps and reads the bootstrap mark in a state dir outside the data dir
    /// (#65; `false`: as before, the data dir's own mark only).
    pub state_dir: bool,
    /// Faults [`Step::Unmount`] (and its repair) are possible.
    pub unmount: bool,
    /// Faults [`Step::CutOff`] (and its repair) are possible.
    pub cut_off: bool,
    /// The operator defragments voters ([`Step::Defragment`]), and the search checks that a
    /// defragmentation is allowed whenever every member runs.
    pub defrag: bool,
    pub gate: GateRule,
}

impl Params {
    /// The first model's world with `installer`, `list` and `rule`: the check and the restart
    /// as one step, the shipped gate, no unmounted disk, no false health, no defragmentation.
    pub fn new(installer: Installer, list: MemberList, rule: RevisionRule) -> Self {
        Params {
            installer,
            list,
            rule,
            restart: Restart::Atomic,
            state_dir: true,
            unmount: false,
            cut_off: false,
            defrag: false,
            gate: GateRule::Shipped,
        }
    }

    /// What ships: the restart-free installer and `OwnData`.
    pub fn shipped(list: MemberList) -> Self {
        Params::new(Installer::Equivalent, list, RevisionRule::OwnData)
    }
}

/// How the gate's check and the restart it allows relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// One step: the node stops as the gate allows it (the model before #65 item 3).
    Atomic,
    /// The installer pod before #65's fix: the operator asks the gate and creates the pod; the
    /// pod restarts the node whenever it runs, whatever happened since, without asking again.
    Verdict,
    /// What ships (#65): the operator asks the gate again once the installer pod runs and
    /// approves the restart only while it allows it (`etcd_installer::approval`); without a
    /// fresh approval the pod restarts nothing (modelled as waiting while the gate denies).
    ReAsk,
}

/// Which quorum gate the operator asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateRule {
    /// [`membership::gate`].
    Shipped,
    /// The gate before #65: rule 2's pending learner also held every defragmentation, the
    /// standby learner of an even node count included.
    LearnerHoldsDefrag,
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

/// Every step possible from `w` (some are no-ops; [`super::apply::apply`] says so).
pub fn steps(w: &World, params: &Params) -> Vec<Step> {
    let mut out = Vec::new();
    if w.has_quorum() {
        operator_steps(w, params, &mut out);
    }
    if w.defragmenting.is_some() {
        out.push(Step::DefragDone);
    }
    out.extend(verify_steps(w, params.list));
    if w.faults_left > 0 {
        fault_steps(w, params, &mut out);
    }
    out.extend(
        (0..w.node_count())
            .filter(|&n| w.nodes[usize::from(n)].unmounted.is_some())
            .map(Step::Remount),
    );
    if w.cut_off.is_some() {
        out.push(Step::Reconnect);
    }
    out
}

/// The operator's and the installer's steps (the API answers: quorum holds).
fn operator_steps(w: &World, params: &Params, out: &mut Vec<Step>) {
    let nodes = 0..w.node_count();
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
    if w.upgrades_left > 0 {
        out.push(Step::Upgrade);
    }
    if params.restart == Restart::Atomic || w.pending.is_none() {
        out.extend(
            nodes
                .filter(|&n| w.needs_roll(n, params.installer))
                .map(Step::Roll),
        );
    }
    out.extend(w.pending.map(|(n, _)| Step::Install(n)));
    if params.defrag && w.defragmenting.is_none() {
        out.extend(
            w.members
                .iter()
                .filter(|m| w.serves(m))
                .map(|m| Step::Defragment(m.id)),
        );
    }
}

fn fault_steps(w: &World, params: &Params, out: &mut Vec<Step>) {
    let nodes = 0..w.node_count();
    let node = |n: u8| w.nodes[usize::from(n)];
    out.extend(nodes.clone().filter(|&n| node(n).running).map(Step::Reboot));
    out.push(Step::PowerLoss);
    out.extend(
        nodes
            .clone()
            .filter(|&n| node(n).data.is_some())
            .map(Step::LoseData),
    );
    if params.unmount {
        out.extend(
            nodes
                .clone()
                .filter(|&n| {
                    let d = node(n);
                    d.unmounted.is_none() && (d.data.is_some() || d.earlier)
                })
                .map(Step::Unmount),
        );
    }
    if params.cut_off && w.cut_off.is_none() {
        out.extend(nodes.clone().filter(|&n| node(n).running).map(Step::CutOff));
    }
    for n in nodes {
        out.extend([true, false].map(|omit| Step::Forge { node: n, omit }));
    }
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
