//! The operator's controllers, one module each (and nothing else: a helper of one controller is
//! nested under it), walked by [`crate::driver`] in the order of [`crate::driver::steps::PASS`].
//!
//! The contract every controller follows: a `//!` paragraph naming its inputs, its decision, its
//! writes and what it never does; a pure `decide` over the pass's observed view (tested with
//! hand-built values, no client); one function that carries the decision out through the pass's
//! [`crate::writer::Writer`] (the same code runs for `etcd-operator plan`, where the writer only
//! records, so the plan text and the action cannot drift); and a [`crate::controller::ControllerError`] whose
//! [`crate::retry::ErrorKind`] says whether it is retried with back-off or waits for an input to change.
//! A controller's name ([`crate::controller::ControllerName::as_str`]) is the one used in its plan line, its metric
//! labels, its log field and (through [`crate::controller::ControllerName::degraded`]) its Degraded condition.

pub mod backup;
pub mod cert_signer;
pub mod corruption_check;
pub mod defragmentation;
pub mod etcd_observer;
pub mod host_endpoints;
pub mod installer;
pub mod learner_promotion;
pub mod membership;
pub mod quorum_guard;
pub mod revision;
pub mod target_config;
