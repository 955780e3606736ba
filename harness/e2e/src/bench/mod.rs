//! `sandbox bench`: the operator's figures, each measured in the same run as its baseline.
//!
//! 1. **Scale-up vs the etcd floor**, per database size: the floor is a learner added, started
//!    and promoted directly with etcd's API on a fresh 3-member mTLS fixture cluster holding the
//!    same data ([`floor`]); the operator case adds a node to the settled 3-node local control
//!    plane and times Node Ready → member promoted and every node on the final revision
//!    ([`scaleup`]).
//! 2. **Write availability** under the scenario write load during bootstrap 1 → 3, a forced
//!    revision rollout and a member replacement ([`availability`]).
//! 3. **Operator cost**: RSS/CPU from `/proc`, API requests through a counting proxy
//!    ([`proxy`], [`opproc`]), etcd requests from the members' gRPC metrics ([`idle`]).
//! 4. **Timeline SVG** of one scale-up ([`svg`]).
//!
//! Writes `<out>/bench.json`, `<out>/summary.json` (the headline figures, [`summary`]),
//! `<out>/bench.md` (the tables for `docs/benchmarks.md`) and the SVG.

pub mod availability;
pub mod fill;
pub mod floor;
pub mod idle;
pub mod opproc;
pub mod probe;
pub mod procstat;
pub mod proxy;
pub mod report;
pub mod run;
pub mod scale;
pub mod scaleup;
pub mod scrape;
pub mod steps;
pub mod summary;
pub mod svg;
pub mod workers;

pub use fill::Size;
pub use run::{BenchArgs, run};
