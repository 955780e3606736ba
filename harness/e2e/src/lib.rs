//! # e2e
//!
//! The local control plane and everything that runs on it: the `sandbox` command (the project's
//! main job), scenarios and benchmarks.
//!
//! * [`controlplane`]: the Kubernetes API (stand-in or real), simulated nodes (node agents),
//!   the bootstrap with `etcd-operator render`, the operator as a local process;
//! * [`drain`]: `sandbox drain`, `kubectl drain`'s API calls (cordon, evictions retried while a
//!   budget refuses);
//! * [`view`]: the live status view;
//! * [`status_watch`]: watches the status for what a normal run must never show (Degraded, a
//!   missing name);
//! * [`scenario`]: named scenarios under a write load, with `report.json`;
//! * [`mod@bench`]: `sandbox bench`, scale-up vs the etcd floor, write availability, operator cost;
//! * [`verify_demo`]: `sandbox demo-verify`, the `etcd-verify` gate on a throw-away cluster.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod bench;
pub mod binaries;
pub mod container_runtime;
pub mod controlplane;
pub mod drain;
pub mod scenario;
pub mod status_watch;
pub mod verify_demo;
pub mod view;
