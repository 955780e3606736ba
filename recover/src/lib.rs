//! # etcd-recover
//!
//! Node-local disaster recovery for the etcd static pod, run by an admin on one control-plane
//! node while the Kubernetes API is down (in a real control plane the API is served from this
//! very etcd, so nothing declarative can start a recovery once quorum is lost).
//!
//! * `etcd-recover status` lists every member this node can reach, with its raft index, the
//!   commit index this node's WAL holds (read from disk: there when its etcd cannot start), and
//!   whether a quorum answers. It changes nothing.
//! * `etcd-recover from-member [--dry-run]` makes this node's surviving data a one-member
//!   cluster: it refuses while quorum is healthy, when another survivor is further ahead and
//!   while another voter neither answers nor is named in `--confirm-down` (a partition looks
//!   like a lost quorum from one side: [`plan::voters`]; the table in [`plan`]), prints the survey and the plan, then acts ([`act`]): the data dir is
//!   copied aside, never deleted, and every manifest lands atomically. With `--address IP
//!   --signer FILE` the member starts at the node's new address ([`readdress`]): for when every
//!   member's address changed at once and no peer URL can move through a quorum.
//!
//! Once the API is back, the operator adopts the one-member cluster and adds the other nodes
//! back as learners; `etcd-verify` archives their stale data. The runbook
//! `docs/runbooks/quorum-loss.md` walks through it, and the `quorum-loss` scenario runs its
//! commands.
//!
//! ```text
//!   manifest ─► EtcdPod ─┐
//!   data dir (WAL ids) ──┼─► Survey ─► decide_from_member() ─► Refusal | Plan ─► act::from_member
//!   every member status ─┤
//!   linearizable read ───┘
//! ```
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod act;
pub mod command;
pub mod fetch;
mod from_member;
pub mod plan;
pub mod pod;
pub mod probe;
pub mod readdress;
pub mod restore;
pub mod restore_steps;
pub mod snapshot;
pub mod wait;

#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod pod_tests;
