//! node agent
pub mod agent;
pub mod api_pods;
pub mod backoff;
pub mod context;
pub mod env;
pub mod expand;
pub mod images;
pub mod mounts;
pub mod node;
pub mod probes;
pub mod publish;
pub mod runner;
pub mod static_pods;
pub mod status;
pub mod volumes;
pub mod worker;

pub use agent::{AgentError, NodeAgent, NodeAgentHandle, NodeConfig, PodSource};
pub use static_pods::PodKey;
