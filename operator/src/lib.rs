//! # etcd-operator
//!
//! Runs etcd as static pods on a cluster's control-plane nodes and changes membership through
//! one quorum gate (`membership::gate`). The crate is a library (every decision is a pure,
//! tested function) and the `etcd-operator` binary (`run`, `render`, `crd`, `plan`).
//!
//! ```text
//!   observed (API caches, then etcd) ──► controllers (decide: pure; act: through the writer)
//!                                    ──► status, events, metrics
//! ```
//!
//! Modules:
//! * [`api`]: the `EtcdCluster` custom resource (cluster-scoped singleton `cluster`).
//! * [`context`]: what every controller shares (client, config, metrics, events).
//! * [`observed`]: the one view of the world a pass decides from.
//! * [`controller`]: what a controller is (its name, error and flow), below every controller.
//! * [`pass`]: one pass in progress as the controllers see it.
//! * [`controllers`]: one module per controller (see its list and contract).
//! * [`driver`]: one pass, the controllers in their fixed order, and the status write.
//! * [`etcd_version`]: etcd versions: the image's, the upgrade policy, known-bad releases.
//! * [`status`]: typed condition types and reasons, merge and aggregates.
//! * [`writer`]: every API write (and the dry run of `plan`), the read-your-writes barrier.
//! * [`retry`]: back-off of transient controller errors.
//! * [`etcd`]: reads etcd (members, health, alarms) and keeps the client.
//! * [`certs`]: the etcd CA and per-node peer, serving and metrics certificates.
//! * [`podspec`]: renders the per-node static-pod manifests from `bindata/` (deterministic).
//! * [`bootstrap`]: `etcd-operator render`, the single-member bootstrap before the operator runs.
//! * [`run`]: the control loop of `etcd-operator run` (caches, Lease, HTTP) and `plan`.
//! * [`kubectl`]: `kubectl etcd`, the plugin the binary becomes when run as `kubectl-etcd`.
//! * [`metrics`], [`manifests`]: the Prometheus metrics; the CRD as YAML.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod api;
pub mod bootstrap;
pub mod category;
pub mod certs;
pub mod context;
pub mod controller;
pub mod controllers;
pub mod driver;
pub mod etcd;
pub mod etcd_version;
pub mod events;
#[cfg(test)]
mod gate_model;
pub mod gather;
pub mod history;
pub mod kubectl;
pub mod manifests;
pub mod metrics;
pub mod observed;
pub mod pass;
pub mod podspec;
pub mod retry;
pub mod run;
pub mod status;
pub mod writer;
