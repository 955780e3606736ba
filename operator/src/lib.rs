//! # etcd-operator
//!
//! Runs etcd as static pods on a cluster's control-plane nodes and changes membership through
//! one quorum gate (`membership::gate`). The crate is a library (every decision is a pure,
//! tested function) and the `etcd-operator` binary (`run`, `render`, `crd`, `plan`).
//!
//! ```text
//!   observe (API + etcd) ──► decide (pure) ──► act (API / etcd) ──► status, events, metrics
//! ```
//!
//! Modules:
//! * [`api`]: the `EtcdCluster` custom resource (cluster-scoped singleton `cluster`).
//! * [`certs`]: the etcd CA and per-node peer, serving and metrics certificates.
//! * [`podspec`]: renders the per-node static-pod manifests from `bindata/` (deterministic).
//! * [`bootstrap`]: `etcd-operator render`, the single-member bootstrap before the operator runs.

pub mod api;
pub mod bootstrap;
pub mod certs;
pub mod controllers;
pub mod manifests;
pub mod metrics;
pub mod observe;
pub mod podspec;
pub mod reconcile;
pub mod run;
