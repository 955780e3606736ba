//! # e2e
//!
//! The local control plane and everything that runs on it: the `sandbox` command (the project's
//! main job), scenarios and benchmarks. Today it holds the `etcd-verify` demonstration
//! ([`verify_demo`]); the API stand-in and node agents join as their crates land.

pub mod binaries;
pub mod verify_demo;
