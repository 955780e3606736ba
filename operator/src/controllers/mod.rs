//! The operator's controllers. Each module owns one concern and opens with its role; the
//! decisions are pure functions of an observed view, and a thin layer does the I/O.

pub mod member_status;
pub mod membership;
pub mod remediation;
pub mod revisions;
pub mod rollout;
pub mod status;
