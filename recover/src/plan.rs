//! What `etcd-recover from-member` may do, decided from what it saw (pure).
//!
//! [`Survey`] is everything observed before acting: this node's data dir, its own etcd's status,
//! every other member reached with its raft index, and whether a linearizable read went through
//! (a quorum answers). [`decide_from_member`] refuses whenever acting could lose data that the
//! cluster still holds or discard a working cluster:
//!
//! | seen | verdict |
//! |---|---|
//! | a linearizable read went through | refuse: quorum is healthy |
//! | a member still names a leader it follows | refuse: quorum may still be there (retry after an election timeout) |
//! | another voter does not answer and is not named in `--confirm-down` | refuse: a partition looks the same from here ([`voters`]) |
//! | no data dir here, or its WAL cannot be read | refuse: nothing to recover from on this node |
//! | this node's member is a learner | refuse: a learner may lack committed writes |
//! | another member answers with a higher raft index | refuse, naming it, unless `--accept-losing-newer-writes` |
//! | this node's etcd does not answer | its index is the commit index of its WAL (read from disk), compared as above |
//! | that cannot be read either, while another member answers | refuse (its index cannot be compared), unless `--accept-losing-newer-writes` |
//! | otherwise | the plan: stop, copy the data aside, start once with `--force-new-cluster`, start normally |

use std::fmt::Write as _;

use etcd_verify::decide::DataDir;
use etcd_verify::wal::WalCommit;
use membership::{EndpointStatus, Member, MemberId, MemberUrl};

use crate::snapshot::{Contents, Origin, Tool, revision_bump};

pub mod voters;
pub use voters::{Voter, Voters, VotersFrom};

/// One member endpoint as recovery reached it.
#[derive(Clone, Debug)]
pub struct Reached {
    pub url: MemberUrl,
    pub status: Result<EndpointStatus, String>,
}

/// What recovery saw before acting.
#[derive(Clone, Debug)]
pub struct Survey {
    /// This member's name (the node name).
    pub name: String,
    pub data_dir: DataDir,
    /// This node's etcd, at its own client URL.
    pub own: Reached,
    /// The last commit index and term this node's WAL holds, read from disk (what etcd, and
    /// `--force-new-cluster`, restart from): this node's index when its etcd does not answer.
    pub wal_commit: Result<WalCommit, String>,
    /// Every other endpoint tried, in a stable order.
    pub others: Vec<Reached>,
    /// The members as this node's etcd lists them (empty when it does not answer).
    pub members: Vec<Member>,
    /// A linearizable read through any member: `Ok(url)` means a quorum answered.
    pub quorum_read: Result<MemberUrl, String>,
    /// The voters this node knows of, each of which must answer or be confirmed down.
    pub voters: Voters,
}

/// Why recovery refuses to act.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "quorum is healthy: a linearizable read through {0} succeeded. Recovery would throw away a working cluster; let the operator replace lost members instead"
    )]
    QuorumHealthy(String),
    #[error(
        "{member} still follows leader {leader:x}: quorum may still be there. Retry after an election timeout; recovery acts only when no member has a leader"
    )]
    LeaderStillKnown { member: String, leader: u64 },
    #[error(
        "cannot tell a lost quorum from a partition: {unaccounted} of {from} do not answer. If they still run and reach each other they are the majority and keep serving; recovering here would split the cluster, and when it heals they are told they were removed and stop, losing what they acknowledged meanwhile. Make sure each is powered off or its etcd stopped for good, then name them: --confirm-down {flag}"
    )]
    VotersUnaccounted {
        unaccounted: String,
        from: String,
        flag: String,
    },
    #[error(
        "--confirm-down names {0}, which answers: it is not down. Leave it out (a member that answers without a leader needs no confirmation)"
    )]
    ConfirmedDownAnswers(String),
    #[error(
        "--confirm-down names {named}, which is no voter of {from} ({voters}): name each voter that does not answer by its name or hex member id"
    )]
    UnknownConfirmedDown {
        named: String,
        voters: String,
        from: String,
    },
    #[error(
        "no etcd data on this node ({0}): run from-member on a node that kept its data, or recover from-snapshot"
    )]
    NoData(String),
    #[error(
        "this node's etcd data cannot be read ({0}): run from-member on another survivor, or recover from-snapshot"
    )]
    DataUnreadable(String),
    #[error(
        "this node's member {0} is a learner: it may lack committed writes; run from-member on a voter"
    )]
    OwnIsLearner(String),
    #[error(
        "another survivor is further ahead: {ahead} (this node is at raft index {own_index}). Run from-member there, or pass --accept-losing-newer-writes to lose the writes only it holds"
    )]
    Behind { own_index: u64, ahead: String },
    #[error(
        "the snapshot is not this cluster's: {0}. Restoring it replaces this cluster's data with another's; pass --force-other-cluster if that is what you mean"
    )]
    OtherCluster(String),
    #[error(
        "{tool} cannot bump the store revision after the restore, so clients that watched the lost cluster (the API server's watch cache, every informer) could see revisions go back and miss changes. Use an etcd image with etcdutl 3.5.10 or later, or pass --accept-revisions-going-back and restart every kube-apiserver after the restore"
    )]
    CannotBumpRevision { tool: String },
    #[error(
        "this node's etcd does not answer ({reason}), so its raft index cannot be compared with the survivors that do: {answered}. Start it, run from-member on a survivor that answers, or pass --accept-losing-newer-writes"
    )]
    OwnIndexUnknown { reason: String, answered: String },
}

/// What `from-member` will do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub member_id: MemberId,
    pub cluster_id: u64,
    /// This node's raft index, when its etcd answered.
    pub raft_index: Option<u64>,
    /// Survivors further ahead whose newer writes will be lost (only with the accepting flag).
    pub losing: Vec<String>,
}

/// The flags that widen what recovery accepts.
#[derive(Clone, Debug, Default)]
pub struct Accept {
    /// `--confirm-down`: the voters the admin checked are down for good (names or hex ids).
    pub confirmed_down: std::collections::BTreeSet<String>,
    /// `--accept-losing-newer-writes`.
    pub losing_newer_writes: bool,
    /// `--force-other-cluster`.
    pub other_cluster: bool,
    /// `--accept-revisions-going-back`.
    pub revisions_going_back: bool,
}

/// Refuses while a quorum answers, any member still follows a leader, or another voter neither
/// answers nor is confirmed down.
fn quorum_is_lost(s: &Survey, accept: &Accept) -> Result<(), Refusal> {
    if let Ok(url) = &s.quorum_read {
        return Err(Refusal::QuorumHealthy(url.to_string()));
    }
    for r in std::iter::once(&s.own).chain(&s.others) {
        if let Ok(st) = &r.status
            && st.leader != 0
        {
            return Err(Refusal::LeaderStillKnown {
                member: label(s, r),
                leader: st.leader,
            });
        }
    }
    let reached: Vec<&Reached> = std::iter::once(&s.own).chain(&s.others).collect();
    let own = voters::Own {
        id: own_id(s),
        name: &s.name,
    };
    voters::accounted_for(&s.voters, own, &reached, &accept.confirmed_down)
}

/// This node's member id: from its data dir, else as its etcd answered.
fn own_id(s: &Survey) -> Option<MemberId> {
    let from_data = match &s.data_dir {
        DataDir::Present(identity) => Some(identity.member_id),
        _ => None,
    };
    from_data
        .or_else(|| s.own.status.as_ref().ok().map(|st| st.member_id))
        .and_then(MemberId::new)
}

/// Decides `from-snapshot`: quorum must be lost (as for `from-member`), the snapshot must be
/// this cluster's and the tool must keep revisions from going back, each unless waived. The
/// revision moves by [`revision_bump`] of [`observed_raft_index`].
pub fn decide_from_snapshot(
    s: &Survey,
    origin: &Origin,
    tool: &Tool,
    snapshot: &Contents,
    accept: &Accept,
) -> Result<SnapshotPlan, Refusal> {
    quorum_is_lost(s, accept)?;
    if let Origin::OtherCluster(why) = origin
        && !accept.other_cluster
    {
        return Err(Refusal::OtherCluster(why.clone()));
    }
    if !tool.bumps_revision && !accept.revisions_going_back {
        let (a, b, c) = tool.version;
        return Err(Refusal::CannotBumpRevision {
            tool: format!("{} {a}.{b}.{c}", tool.binary),
        });
    }
    Ok(SnapshotPlan {
        bump: tool
            .bumps_revision
            .then(|| revision_bump(observed_raft_index(s, snapshot))),
    })
}

/// The most writes after the snapshot recovery can see evidence of: the highest of the
/// snapshot's raft index, every answering member's raft index, and how far an answering member's
/// revision is past the snapshot's (a member restored before may have a raft index below its
/// revision).
pub fn observed_raft_index(s: &Survey, snapshot: &Contents) -> u64 {
    std::iter::once(&s.own)
        .chain(&s.others)
        .filter_map(|r| r.status.as_ref().ok())
        .flat_map(|st| {
            let ahead = st.revision.saturating_sub(snapshot.revision);
            [st.raft_index, u64::try_from(ahead).unwrap_or(0)]
        })
        .chain([snapshot.consistent_index])
        .max()
        .unwrap_or(snapshot.consistent_index)
}

/// What `from-snapshot` will do beyond the fixed steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPlan {
    /// How far to bump the revision (older revisions are marked compacted); `None`: the tool
    /// cannot, and going back was accepted.
    pub bump: Option<u64>,
}

/// Decides `from-member` (see the module table).
pub fn decide_from_member(s: &Survey, accept: &Accept) -> Result<Plan, Refusal> {
    quorum_is_lost(s, accept)?;
    let identity = match &s.data_dir {
        DataDir::Absent => return Err(Refusal::NoData(s.name.clone())),
        DataDir::Unreadable(e) => return Err(Refusal::DataUnreadable(e.clone())),
        DataDir::Present(identity) => *identity,
    };
    let member_id = MemberId::new(identity.member_id)
        .ok_or_else(|| Refusal::DataUnreadable("the WAL names member id 0".into()))?;
    let answered: Vec<(&Reached, &EndpointStatus)> = s
        .others
        .iter()
        .filter_map(|r| r.status.as_ref().ok().map(|st| (r, st)))
        .filter(|(_, st)| st.member_id != identity.member_id)
        .collect();
    let describe = |list: &[(&Reached, &EndpointStatus)]| -> String {
        list.iter()
            .map(|(r, st)| format!("{} at raft index {}", label(s, r), st.raft_index))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let raft_index = match &s.own.status {
        Ok(st) => {
            if st.is_learner {
                return Err(Refusal::OwnIsLearner(format!("{member_id}")));
            }
            Some(st.raft_index)
        }
        Err(_) if s.wal_commit.is_ok() => s.wal_commit.as_ref().ok().map(|w| w.commit),
        Err(reason) if !answered.is_empty() && !accept.losing_newer_writes => {
            return Err(Refusal::OwnIndexUnknown {
                reason: format!(
                    "{reason}; its WAL: {}",
                    s.wal_commit.as_ref().err().map_or("", String::as_str)
                ),
                answered: describe(&answered),
            });
        }
        Err(_) => None,
    };
    let ahead: Vec<(&Reached, &EndpointStatus)> = answered
        .iter()
        .copied()
        .filter(|(_, st)| raft_index.is_none_or(|own| st.raft_index > own))
        .collect();
    if !ahead.is_empty() && !accept.losing_newer_writes {
        return Err(Refusal::Behind {
            own_index: raft_index.unwrap_or_default(),
            ahead: describe(&ahead),
        });
    }
    Ok(Plan {
        member_id,
        cluster_id: identity.cluster_id,
        raft_index,
        losing: ahead
            .iter()
            .map(|(r, st)| format!("{} at raft index {}", label(s, r), st.raft_index))
            .collect(),
    })
}

/// `name (url)` when the member list names the endpoint's member, else the URL.
fn label(s: &Survey, r: &Reached) -> String {
    let id = r.status.as_ref().ok().map(|st| st.member_id);
    let by_id = id.and_then(|id| s.members.iter().find(|m| m.id.get() == id));
    let by_url = || s.members.iter().find(|m| m.client_urls.contains(&r.url));
    match by_id.or_else(by_url) {
        Some(m) if !m.name.is_empty() => format!("{} ({})", m.name, r.url),
        _ => r.url.to_string(),
    }
}

/// The survey as a table an admin reads: every endpoint tried, what it answered.
pub fn table(s: &Survey) -> String {
    let mut out = String::from("member                                  answer\n");
    for (i, r) in std::iter::once(&s.own).chain(&s.others).enumerate() {
        let who = if i == 0 {
            format!("{} [this node]", label(s, r))
        } else {
            label(s, r)
        };
        let answer = match &r.status {
            Ok(st) => format!(
                "id {:x}, raft index {}, term {}, {}{}",
                st.member_id,
                st.raft_index,
                st.raft_term,
                if st.leader == 0 {
                    "no leader".to_owned()
                } else {
                    format!("leader {:x}", st.leader)
                },
                if st.is_learner { ", learner" } else { "" }
            ),
            Err(e) => format!("no answer: {e}"),
        };
        let _ = writeln!(out, "{who:<40}{answer}");
    }
    match &s.wal_commit {
        Ok(w) => {
            let _ = writeln!(
                out,
                "this node's data: commit index {} (term {}) in its WAL, read from disk",
                w.commit, w.term
            );
        }
        Err(e) => {
            let _ = writeln!(out, "this node's data: no commit index in its WAL ({e})");
        }
    }
    let _ = writeln!(
        out,
        "voters ({}): {}",
        s.voters.from.describe(),
        s.voters.labels()
    );
    match &s.quorum_read {
        Ok(url) => {
            let _ = writeln!(out, "quorum: a linearizable read through {url} succeeded");
        }
        Err(e) => {
            let _ = writeln!(out, "quorum: lost (a linearizable read failed: {e})");
        }
    }
    out
}
