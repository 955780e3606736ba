//! What can go wrong talking to etcd, endpoint by endpoint: [`ClientError`] (the whole call),
//! [`EndpointFailure`] (one endpoint) and its [`FailureKind`], and [`classify`], which tells a
//! TLS failure (an endpoint answered: not a down cluster) from an unreachable endpoint and from
//! etcd refusing the call, and [`EtcdRefusal`], which refusal it was.

use std::fmt;
use std::path::PathBuf;

use crate::MemberUrl;
use crate::tls::{is_tls_failure, mentions_tls};

/// What went wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "TLS must be configured with all three of ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY or none: {set} set but {unset} not"
    )]
    PartialTls { set: String, unset: String },
    #[error("{var}: cannot read {path}: {source}")]
    ReadTls {
        var: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{var}: {path} is not a PEM file holding a {label}")]
    NotPem {
        var: &'static str,
        path: PathBuf,
        label: String,
    },
    #[error("{var}: {origin}: {reason}")]
    BadTls {
        var: &'static str,
        origin: String,
        reason: String,
    },
    #[error("no etcd endpoints configured")]
    NoEndpoints,
    #[error("https endpoint {0} needs TLS material (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY)")]
    HttpsWithoutTls(MemberUrl),
    #[error("no etcd endpoint answered {op}: {}", join_failures(.failures))]
    NoEndpointAnswered {
        op: &'static str,
        failures: Vec<EndpointFailure>,
    },
    #[error("{0}")]
    Endpoint(EndpointFailure),
    #[error("etcd returned an unusable answer from {endpoint}: {reason}")]
    BadAnswer { endpoint: MemberUrl, reason: String },
}

impl ClientError {
    /// The gRPC failures of the endpoints, if the error came from etcd answering.
    pub fn failures(&self) -> &[EndpointFailure] {
        match self {
            ClientError::NoEndpointAnswered { failures, .. } => failures,
            ClientError::Endpoint(f) => std::slice::from_ref(f),
            _ => &[],
        }
    }

    /// True when some endpoint's etcd refused the call for `refusal`.
    pub fn refused(&self, refusal: EtcdRefusal) -> bool {
        self.failures()
            .iter()
            .any(|f| f.kind == FailureKind::Rejected(refusal))
    }
}

fn join_failures(failures: &[EndpointFailure]) -> String {
    failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// One endpoint's failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointFailure {
    pub endpoint: MemberUrl,
    pub kind: FailureKind,
    pub message: String,
}

/// Class of an endpoint failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// No answer within the call timeout.
    Timeout,
    /// Could not connect or the transport broke.
    Unreachable,
    /// The endpoint answered but the TLS handshake failed (its certificate is not trusted by
    /// our CA, or it refused our client certificate): not a down endpoint.
    Tls,
    /// The endpoint is a learner and the call is one learners reject; not sent.
    Learner,
    /// etcd answered with an error.
    Rejected(EtcdRefusal),
}

/// Why etcd refused a call: the gRPC errors etcd's server returns, told apart by their fixed
/// descriptions (etcd's `api/v3rpc/rpctypes`, the same table etcd's own Go client matches on;
/// unchanged from 3.4 to 3.6). Anything else etcd answers is [`EtcdRefusal::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtcdRefusal {
    /// Membership changes wait until every voter has been connected to the leader for 5 s
    /// (strict reconfiguration check), e.g. right after a cluster starts.
    UnhealthyCluster,
    /// A learner is promoted only once its log is in sync with the leader's.
    LearnerNotInSync,
    /// Only a learner can be promoted.
    NotALearner,
    /// etcd allows one learner at a time (3.4 and 3.5 by default).
    TooManyLearners,
    /// The member id is already in the cluster.
    MemberExists,
    /// Another member has that peer URL.
    PeerUrlExists,
    /// No member has that id.
    MemberNotFound,
    /// The change would leave too few started members for quorum.
    NotEnoughStartedMembers,
    /// The cluster has no leader (an election is under way, or quorum is lost).
    NoLeader,
    /// Leadership changed while the request was in flight.
    LeaderChanged,
    /// The request timed out inside etcd (also after a leader failure or a lost connection).
    TimedOut,
    /// The `NOSPACE` alarm is raised: the database is over its quota.
    NoSpace,
    /// The `CORRUPT` alarm is raised.
    Corrupt,
    /// The member is a learner, which serves only status and serializable reads.
    NotForLearner,
    /// The member is stopping.
    Stopped,
    /// Any other error etcd answered with.
    Other,
}

impl EtcdRefusal {
    /// The refusal for a gRPC status etcd answered with.
    pub fn from_status(code: tonic::Code, message: &str) -> Self {
        use tonic::Code as C;
        match (code, message) {
            (C::Unavailable, "etcdserver: unhealthy cluster") => Self::UnhealthyCluster,
            (
                C::FailedPrecondition,
                "etcdserver: can only promote a learner member which is in sync with leader",
            ) => Self::LearnerNotInSync,
            (C::FailedPrecondition, "etcdserver: can only promote a learner member") => {
                Self::NotALearner
            }
            (C::FailedPrecondition, "etcdserver: too many learner members in cluster") => {
                Self::TooManyLearners
            }
            (C::FailedPrecondition, "etcdserver: member ID already exist") => Self::MemberExists,
            (C::FailedPrecondition, "etcdserver: Peer URLs already exists") => Self::PeerUrlExists,
            (C::NotFound, "etcdserver: member not found") => Self::MemberNotFound,
            (
                C::FailedPrecondition,
                "etcdserver: re-configuration failed due to not enough started members",
            ) => Self::NotEnoughStartedMembers,
            (C::Unavailable, "etcdserver: no leader") => Self::NoLeader,
            (C::Unavailable, "etcdserver: leader changed") => Self::LeaderChanged,
            (
                C::Unavailable,
                "etcdserver: request timed out"
                | "etcdserver: request timed out, possibly due to previous leader failure"
                | "etcdserver: request timed out, possibly due to connection lost"
                | "etcdserver: request timed out, waiting for the applied index took too long",
            ) => Self::TimedOut,
            (C::ResourceExhausted, "etcdserver: mvcc: database space exceeded") => Self::NoSpace,
            (C::DataLoss, "etcdserver: corrupt cluster") => Self::Corrupt,
            (C::Unavailable, "etcdserver: rpc not supported for learner") => Self::NotForLearner,
            (C::Unavailable, "etcdserver: server stopped") => Self::Stopped,
            _ => Self::Other,
        }
    }
}

impl fmt::Display for EndpointFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.endpoint, self.message)
    }
}

pub(crate) fn classify(endpoint: &MemberUrl, error: etcd_client::Error) -> EndpointFailure {
    let (kind, message) = match &error {
        etcd_client::Error::GRpcStatus(status)
            if is_tls_failure(status) || mentions_tls(status.message()) =>
        {
            (
                FailureKind::Tls,
                format!("TLS handshake failed: {}", chain(status)),
            )
        }
        etcd_client::Error::TransportError(e) if is_tls_failure(e) => (
            FailureKind::Tls,
            format!("TLS handshake failed: {}", chain(e)),
        ),
        etcd_client::Error::GRpcStatus(status) => match status.code() {
            tonic::Code::Unavailable if status.message().contains("connect") => (
                FailureKind::Unreachable,
                format!("unreachable: {}", status.message()),
            ),
            code => (
                FailureKind::Rejected(EtcdRefusal::from_status(code, status.message())),
                format!("{code:?}: {}", status.message()),
            ),
        },
        etcd_client::Error::TransportError(e) => {
            (FailureKind::Unreachable, format!("transport: {e}"))
        }
        other => (FailureKind::Unreachable, other.to_string()),
    };
    EndpointFailure {
        endpoint: endpoint.clone(),
        kind,
        message,
    }
}

/// An error and its sources, `: `-joined (TLS causes sit deep in the chain).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut current = error.source();
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}
