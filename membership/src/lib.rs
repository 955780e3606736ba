//! # membership
//!
//! Everything the other crates need to know about etcd membership, and nothing about Kubernetes:
//!
//! * the member model ([`Member`], [`MemberId`], [`MemberUrl`]) as etcd's member list reports it;
//! * the two membership env vars of the static-pod contract ([`InitialCluster`] for
//!   `ETCD_INITIAL_CLUSTER`, [`MemberIds`] for `ETCD_MEMBER_IDS`), parsed strictly and formatted
//!   canonically so that rendering never churns;
//! * quorum math ([`quorum()`], [`fault_tolerance`]) where learners never count;
//! * [`gate()`], the quorum gate every disruptive action asks (one arbiter, pure), with its
//!   [`Preflight`] facts (alarms, every voter's own member list);
//! * [`EtcdClient`], a small etcd client that loads TLS from the `ETCDCTL_*` files, bounds every
//!   call with a timeout (etcd-client calls over TLS can hang past their own timeouts), tries each
//!   endpoint in turn, and never sends a learner what a learner rejects;
//! * [`VerifyReport`], what `etcd-verify membership` reports and the operator reads back.
//!
//! Invariants: member ids print as lowercase hex without `0x`; every parsed URL is canonical
//! `scheme://host:port`; formatting a parsed value gives back the same text.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

mod api_servers;
mod client;
mod client_error;
mod consistency;
mod duration;
mod env;
mod gate;
mod gate_view;
mod http_version;
mod id;
mod kv;
mod maintenance;
mod member;
mod peer_url;
mod preflight;
mod quorum;
mod tls;
mod verify_report;

pub use api_servers::{ApiServer, ControlPlanePod, ControlPlanePods};
pub use client::{
    ClientConfig, ClientError, EndpointFailure, EndpointStatus, EtcdClient, EtcdRefusal,
    FailureKind, LiveMembers, QUORUM_READ_KEY,
};
pub use consistency::{Divergence, HashVerdict, MemberHash, compare_hashes};
pub use duration::{DurationError, parse_duration};
pub use env::{
    EntryProblem, EnvFormatError, INITIAL_CLUSTER_VAR, InitialCluster, MEMBER_IDS_VAR, MemberIds,
    MemberIdsDiff,
};
pub use gate::{Action, ClusterView, Denial, DenyRule, MemberHealth, Verdict, gate};
pub use http_version::{VersionInfo, http_get};
pub use id::{IdError, MemberId, new_cluster_id, new_cluster_member_id};
pub use maintenance::KvHash;
pub use member::Member;
pub use peer_url::{MemberUrl, UrlError, url_host};
pub use preflight::{AlarmKind, Preflight, RaisedAlarm, disagreements};
pub use quorum::{fault_tolerance, is_quorate, quorum, voters};
pub use tls::{TlsFiles, TlsPem, https_config, is_tls_failure};
pub use verify_report::{BlockCode, VERIFY_REPORT_VERSION, VerifyDecision, VerifyReport};
