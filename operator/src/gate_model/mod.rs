//! An exhaustive model check of the rules that decide when etcd's membership changes and when a
//! member may start (#36 item 2). The model calls the functions the shipped code uses, not
//! copies: the quorum gate ([`membership::gate`]) the operator asks before every disruptive
//! action, the revision renderer ([`crate::podspec::contract_env`]) whose env `etcd-verify`
//! reads, and `etcd-verify`'s decision table ([`etcd_verify::decide::decide_by`]). Around them it
//! models what they do not decide ([`world`]): nodes, revisions, members (learner or voter,
//! started or not, what each node's data dir holds), the operator's actions in *any* order the
//! gate allows (so an operator crash between two actions is just another reachable state), the
//! installer laying revisions down, and faults: a node reboot, a whole-control-plane power loss,
//! a node's member directory lost, a forged revision (and those listed below).
//!
//! The search ([`check`]) visits every state reachable within a bound (nodes, membership changes,
//! faults) and checks, in every one:
//! * **quorum is never lost by the operator's own actions**: every action the gate allows leaves a
//!   quorum of voters running;
//! * **no member starts on the wrong data**: a started member only on its own data, a joining one
//!   only on none (or its own partial start);
//! * **one cluster**: the bootstrap manifest never starts a second, empty cluster;
//! * **a forged revision never starts a member** while the cluster answers and its member list is
//!   not the live one (a forged list the cluster later comes to match is no longer forged);
//! * **after every etcd went down (a power loss, or faults that stopped the last running node),
//!   and after any other quorum loss while some etcd still runs (#65), the cluster comes back
//!   without an admin** whenever a quorum of voters still has its data: every order in which
//!   the nodes' `etcd-verify` run reaches a running quorum, whether the member list is answered by any running voter or only
//!   by a quorum ([`steps::MemberList`]). The current rules guarantee this when the rollout is
//!   settled; the states found where a power loss mid-rollout needs an admin are counted and
//!   reported (`docs/benchmarks.md`, "Why the 3 → 4 scale-up is still 5.0 s").
//!
//! Beyond that first model, a search may switch on (#65 item 3, [`steps::Params`]; each is
//! off by default, so the searches above keep their figures, and `fault_tests` searches each):
//! * **an unmounted data disk** ([`steps::Step::Unmount`]): the node boots with its data dir an
//!   empty mount point, without its member and without the marks inside the data dir; the
//!   bootstrap mark `etcd-verify` keeps in its state dir, outside the data dir, stays (unless
//!   the search models the code before that mark, `state_dir: false`). A later reboot mounts
//!   the disk again ([`steps::Step::Remount`]: a repair, not a fault) and hides whatever was
//!   written on the mount point meanwhile. The lost member directory
//!   ([`steps::Step::LoseData`]) keeps its marks, as before;
//! * **the gate's check and the restart it allows as two steps** ([`steps::Restart`]): the
//!   operator asks the gate and creates an installer pod; the pod restarts the node later, with
//!   any step in between. As shipped the pod never asks again, and the checker finds the
//!   operator's own restart losing quorum once another node went down meanwhile; a pod that
//!   asks again right before the restart (not built) keeps every property;
//! * **a false "unhealthy"** ([`steps::Step::CutOff`]): the operator cannot reach one running
//!   voter, which its peers still reach; the gate sees it unhealthy. The gate lets a node whose
//!   member is not a healthy voter restart at any time, so with another voter really down the
//!   checker finds a restart that loses quorum;
//! * **defragmentations** ([`steps::Step::Defragment`], asked of the gate; the member applies
//!   nothing until it ends, so it does not count toward quorum meanwhile, and it ends by itself,
//!   in the no-admin search too), and the property that whenever every member runs and nothing
//!   rolls, with three voters or more, the gate allows defragmenting each voter (a standby
//!   learner included: the gate before #65, [`steps::GateRule::LearnerHoldsDefrag`], fails it);
//! * **revisions of a new setting** ([`world::World::upgrades_left`]): an etcd version or a
//!   certificate, which every node is moved to, equivalent or not.
//!
//! A removed member's revision stays on its node (its manifest is not taken away, and its
//! `etcd-verify` runs again whenever the kubelet restarts the pod) in every search.
//!
//! What the model leaves out: a running voter answers with the committed member list (one whose
//! log is behind could answer an older list), etcd accepts a promotion as soon as the learner
//! runs, the kube-apiservers and alarms the gate also weighs are absent (their rules only deny
//! more), an installer pod does not run while quorum is lost (the API it fetches from is
//! served by this etcd), liveness is checked only where quorum is lost (a node blocked while
//! the cluster keeps quorum waits for the operator, whose fairness the model does not assume),
//! and the no-admin search runs no repair (a disk mounted again, the operator reaching a member
//! again).
//!
//! The installer's policy is a parameter ([`Installer`]): the search proves the current one and
//! finds the unsafe shortcut `docs/benchmarks.md` describes (voters left on the revision before a
//! learner was added), which is how the tests show the checker catches what it is for. So is the
//! rule `etcd-verify` applies to a revision's member list (`etcd_verify::decide::RevisionRule`,
//! through the same `decide_by`): the exact rule used before #36, and the rule that ships since,
//! restart-free learner adds with the installer's equivalence ([`Installer::Equivalent`], which
//! calls the controller's `equivalence::members_allow`). Up to two changes and one fault (3 → 4,
//! 3 → 5) or one change and two faults, and from one voter to three with two of each, the search
//! shows the shipped pair keeps every property, removes the shortcut's counterexample and leaves
//! no outage mid-rollout needing an admin unless a member was removed on the way. With two
//! changes and two faults, on three nodes and on four, it used to find one class of violation
//! under either rule: a removed member restarting on its own data after a power loss, when a
//! learner had been added for its node before the node's next revision. The operator's hold,
//! which the model applies through the same function ([`membership::MemberIds::removed_at`]:
//! no learner for a node whose revision lists its removed member), and an installer that moves a
//! node only if it has a member or a revision laid down (as the real one does) close it: at those
//! bounds, too, every property holds (`docs/benchmarks.md`, "The shipped rules at wider bounds";
//! `docs/architecture.md`, "A replaced node gets no learner while its revision names its removed
//! member").

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod apply;
mod check;
mod fault_tests;
mod fixtures;
mod steps;
mod tests;
mod world;
