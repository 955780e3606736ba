//! # etcd-verify
//!
//! The node-side helpers of the etcd pod: the start gate (`etcd-verify membership`, below) and
//! the metrics proxy ([`metrics_proxy`]: `etcd-verify metrics-proxy` serves etcd's metrics over
//! mutual TLS with a separate metrics CA, so a scraper's certificate is never one etcd's client
//! port trusts).
//!
//! `etcd-verify membership` runs as the init container of every etcd static pod and decides
//! whether etcd may start on this node, from three things only: the revision's env contract
//! (`ETCD_INITIAL_CLUSTER`, `ETCD_MEMBER_IDS`, ...), the data dir on disk (identified by etcd's
//! own WAL metadata), and the live member list. The decision table lives in [`decide`]; it is a
//! pure function, and the loop in [`run`] only observes, archives and retries.
//!
//! ```text
//!   env ──► VerifyConfig ─┐
//!   data dir ─► WAL ids ──┼─► decide() ─► Start | Wait (archive?) | Block
//!   etcd ─► member list ──┘        ▲                  │
//!                                  └──── retry ◄──────┘ (until --timeout)
//! ```
//!
//! Invariants: exit 0 only for "start"; nothing is ever deleted (a data dir is archived by
//! rename); a revision whose `ETCD_MEMBER_IDS` disagrees with the live membership never starts.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod admin_override;
pub mod config;
pub mod datadir;
pub mod decide;
pub mod handoff;
pub mod keyfiles;
pub mod metrics_proxy;
pub mod report;
pub mod run;
pub mod wal;

#[cfg(test)]
mod decide_tests;
