//! The decision table of `etcd-verify membership`, as one pure function from what was observed
//! (the revision's env contract, the data dir, the live member list) to what to do.
//!
//! | live list | this node's member (by peer URL) | data dir | decision |
//! |---|---|---|---|
//! | answers, the revision's list is not the live one (members added, removed or moved since) | this node's started member, listed under this URL, on its own data | holds it | on to the rows below (a restart) |
//! | answers, the revision's list is not the live one | any other | any | block: stale or forged revision |
//! | answers | any | from another cluster (WAL cluster id) | archive, wait |
//! | answers, the revision lists this node's member under its old URL | any | any | block: stale revision (the member moved since) |
//! | answers | missing, data dir's member live under another URL | present | block: the member has not moved to this revision's URL |
//! | answers | missing | present | archive, wait for the operator |
//! | answers | missing | absent | wait for the operator |
//! | answers | unstarted | absent, or this member's own partial start | start |
//! | answers | unstarted | present (stale) | archive, start |
//! | answers | started, named for another node | any | block |
//! | answers | started | absent | block: data dir lost |
//! | answers | started | holds another member id, or unreadable | block |
//! | answers | started | holds this member | start (after a node address change: only once the member moved to this revision's URL) |
//! | no answer | — | holds the member the revision lists for this URL | start (whole cluster restarting) |
//! | no answer | — | present, bootstrap render | start |
//! | no answer | — | absent, bootstrap render, but the data dir shows a member ran here (the bootstrap mark, a `member-archived-*`) | block: data dir lost (for the member the bootstrap made) |
//! | no answer | — | absent, bootstrap render | start (new cluster; the data dir is marked first) |
//! | no answer | — | other (also any other `state=new` manifest) | wait, then block at the deadline |
//! | TLS handshake failed | — | any | wait, then block at the deadline (never "no answer") |
//!
//! The first two rows are [`RevisionRule::OwnData`], the rule `etcd-verify` uses (#65): a
//! started member, named for this node, that the revision lists under this node's URL and whose
//! data dir holds it restarts whatever else the revision's member list says (members added
//! since, members removed since, another member's URL moved), since etcd restarts it from its
//! data and ignores the revision's member list: that is what lets a learner add restart no
//! healthy voter (#36), and what lets a survivor of a removal reboot on the revision it was left
//! on while no quorum is left for the operator to render another (#65). Every other row still
//! needs the revision to agree with the live list. [`RevisionRule::Exact`] (the list must be the
//! live list exactly, before #36) and [`RevisionRule::ListedAreLive`] (members added since
//! only, #36 to #65) stay for the operator's model check, which searches them all.
//!
//! The bootstrap render is the very first manifest of a cluster
//! ([`VerifyConfig::is_first_bootstrap`]): `ETCD_INITIAL_CLUSTER_STATE=new`, no `ETCD_MEMBER_IDS`
//! and this member alone in `ETCD_INITIAL_CLUSTER`. Only it starts a new cluster; a manifest
//! that says `new` but lists member ids (a recovery's, made from the bootstrap manifest) or other
//! members is treated as any revision of an existing cluster. With `state=new` and no
//! `ETCD_MEMBER_IDS` the ids comparison is skipped: a new cluster has no ids until etcd makes
//! them.
//!
//! The live list is one a quorum confirms ([`membership::EtcdClient::member_list_linearizable`]:
//! a linearizable read through the voter, then its list; #65): a member cut off from the quorum,
//! or left without one, answers nothing here rather than the view it was left with, so "no
//! answer" also covers a cluster without quorum, and its rows decide from the data dir alone.
//!
//! "No answer" means every endpoint was down, unreachable or timed out. An endpoint that answered
//! a TLS handshake which then failed (our CA does not trust its certificate, it refused ours) is
//! not down: concluding "whole cluster restarting" from it would start etcd without the
//! membership check, so it waits and then blocks. (Unloadable TLS files never get this far: they
//! are invalid input, exit 2.)

use membership::{BlockCode, LiveMembers, MemberId, MemberIds};

use crate::config::{ClusterState, VerifyConfig};
use crate::wal::WalIdentity;

mod without_live;
use without_live::decide_without_live;

/// What is in the data dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataDir {
    /// No `<data-dir>/member`.
    Absent,
    /// `<data-dir>/member` exists and its WAL names this member and cluster.
    Present(WalIdentity),
    /// `<data-dir>/member` exists but its WAL could not be read.
    Unreadable(String),
}

/// Everything one decision is made from.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub config: &'a VerifyConfig,
    pub data_dir: DataDir,
    /// The live member list, or why it could not be read.
    pub live: Result<LiveMembers, LiveError>,
    /// What shows that this node ran a member before, although `<data-dir>/member` is gone: a
    /// kept-aside `member-archived-*`, or the mark of a bootstrap started here
    /// ([`crate::datadir::BOOTSTRAP_MARK`]). `None`: nothing.
    pub earlier: Option<String>,
}

/// Why the live member list could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveError {
    /// No endpoint answered (down, unreachable, timed out), or etcd refused the call.
    NoAnswer(String),
    /// An endpoint answered but the TLS handshake failed: not a down cluster.
    Tls(String),
}

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// etcd may start (archiving the data dir first when `archive` says why).
    Start {
        reason: String,
        member_id: Option<MemberId>,
        archive: Option<String>,
    },
    /// Not yet: archive first if asked, then look again until the deadline, where it blocks
    /// as `code`.
    Wait {
        code: BlockCode,
        reason: String,
        member_id: Option<MemberId>,
        archive: Option<String>,
    },
    /// etcd must not start on this revision.
    Block {
        code: BlockCode,
        reason: String,
        member_id: Option<MemberId>,
    },
}

impl Decision {
    fn start(reason: String, member_id: Option<MemberId>) -> Self {
        Decision::Start {
            reason,
            member_id,
            archive: None,
        }
    }

    fn wait(code: BlockCode, reason: String, member_id: Option<MemberId>) -> Self {
        Decision::Wait {
            code,
            reason,
            member_id,
            archive: None,
        }
    }
}

fn hex(id: u64) -> String {
    format!("{id:x}")
}

/// Which revisions a member that has started may restart on, when the live list answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RevisionRule {
    /// `ETCD_MEMBER_IDS` must be the live member list, id for id and URL for URL: the rule
    /// before #36, kept for the model check's comparison.
    Exact,
    /// As `Exact`, except that a member that has started, named for this node and whose data
    /// dir holds it, may also restart when the live list has members the revision does not
    /// list (added after the revision was made). A listed member that is not live or a listed
    /// URL that moved still blocks it: the rule of #36 to #65, kept for the model check, which
    /// finds the outage it causes (a survivor of a removal rebooting while its revision still
    /// lists the removed member, with no quorum left for the operator to render a new one).
    ListedAreLive,
    /// What ships (#65, "never worse than plain etcd"): a member that has started, named for
    /// this node, listed under this URL by the revision and whose data dir holds it (in the
    /// live cluster) restarts whatever else the revision's list says: etcd restarts a started
    /// member from its own data and ignores the revision's member list, exactly as it would
    /// with no operator. Every start that needs the list (a member joining, a node that is not
    /// a member, a bootstrap) is checked against it as before, and so is a revision that lists
    /// this node's member under another id.
    #[default]
    OwnData,
}

/// Decides from one observation, with the rule that ships ([`RevisionRule::OwnData`]).
pub fn decide(o: &Observed<'_>) -> Decision {
    decide_by(o, RevisionRule::OwnData)
}

/// Decides from one observation with `rule` for the revision's member list.
pub fn decide_by(o: &Observed<'_>, rule: RevisionRule) -> Decision {
    match &o.live {
        Ok(live) => decide_with_live(o.config, &o.data_dir, live, rule),
        Err(LiveError::NoAnswer(why)) => {
            decide_without_live(o.config, &o.data_dir, o.earlier.as_deref(), why)
        }
        Err(LiveError::Tls(why)) => Decision::wait(
            BlockCode::TlsFailure,
            format!(
                "an etcd endpoint answered but the TLS handshake failed ({why}): the revision cannot be checked against the live membership, and a TLS failure is not a down cluster"
            ),
            o.config.member_ids.id_for_url(&o.config.peer_url),
        ),
    }
}

fn decide_with_live(
    config: &VerifyConfig,
    data: &DataDir,
    live: &LiveMembers,
    rule: RevisionRule,
) -> Decision {
    if let Some(block) = stale_revision(config, data, live, rule) {
        return block;
    }
    if let DataDir::Present(wal) = data
        && wal.cluster_id != live.cluster_id
    {
        return Decision::Wait {
            code: BlockCode::ForeignData,
            reason: format!(
                "data dir belongs to cluster {} (member {}), the live cluster is {}: archived it",
                hex(wal.cluster_id),
                hex(wal.member_id),
                hex(live.cluster_id)
            ),
            member_id: None,
            archive: Some(format!(
                "data dir of another cluster ({})",
                hex(wal.cluster_id)
            )),
        };
    }
    match live
        .members
        .iter()
        .find(|m| m.has_peer_url(&config.peer_url))
    {
        None => not_a_member(config, data, live),
        Some(own) if !own.is_started() => unstarted(config, data, own),
        Some(own) => started(config, data, own),
    }
}

/// A block when the revision's `ETCD_MEMBER_IDS` disagree with the live member list (as far
/// as `rule` cares).
fn stale_revision(
    config: &VerifyConfig,
    data: &DataDir,
    live: &LiveMembers,
    rule: RevisionRule,
) -> Option<Decision> {
    if config.state == ClusterState::New && config.member_ids.is_empty() {
        return None;
    }
    let live_ids = MemberIds::from_members(&live.members);
    let diff = config.member_ids.diff(&live_ids);
    if diff.is_empty() {
        return None;
    }
    let only_added = diff.only_left.is_empty() && diff.url_changed.is_empty();
    let passes = match rule {
        RevisionRule::Exact => false,
        RevisionRule::ListedAreLive => only_added,
        RevisionRule::OwnData => true,
    };
    if passes && restarts_on_own_data(config, data, live) {
        return None;
    }
    let mut parts = Vec::new();
    for (id, url) in &diff.only_left {
        parts.push(format!(
            "{id}={url} is in ETCD_MEMBER_IDS but not a live member"
        ));
    }
    for (id, url) in &diff.only_right {
        parts.push(format!(
            "live member {id}={url} is missing from ETCD_MEMBER_IDS"
        ));
    }
    for (id, ours, theirs) in &diff.url_changed {
        parts.push(format!(
            "member {id} has peer URL {theirs}, ETCD_MEMBER_IDS says {ours} (it moved since this revision was made)"
        ));
    }
    Some(Decision::Block {
        code: BlockCode::StaleRevision,
        reason: format!(
            "stale or forged revision: {} (live members from {}: {live_ids})",
            parts.join("; "),
            live.answered_by
        ),
        member_id: config.member_ids.id_for_url(&config.peer_url),
    })
}

/// This node's live member (by peer URL) has started under this node's name, the revision
/// lists it under this URL, and the data dir holds it, in the live cluster (or is empty: see
/// below).
/// With its data dir gone instead, the decision is the started member's own (a
/// `DataDirLost` block naming it, so the operator replaces it), not a stale revision's: the
/// revision it would block on is the one its node was left on after a learner add.
fn restarts_on_own_data(config: &VerifyConfig, data: &DataDir, live: &LiveMembers) -> bool {
    let Some(own) = live
        .members
        .iter()
        .find(|m| m.has_peer_url(&config.peer_url))
    else {
        return false;
    };
    let own_data = match data {
        DataDir::Present(wal) => wal.member_id == own.id.get() && wal.cluster_id == live.cluster_id,
        DataDir::Absent => true,
        DataDir::Unreadable(_) => false,
    };
    own.is_started()
        && own.name == config.name
        && config.member_ids.id_for_url(&config.peer_url) == Some(own.id)
        && own_data
}

/// No live member has this node's peer URL.
fn not_a_member(config: &VerifyConfig, data: &DataDir, live: &LiveMembers) -> Decision {
    let own_url = &config.peer_url;
    match data {
        DataDir::Present(wal) => {
            if let Some(m) = live.members.iter().find(|m| m.id.get() == wal.member_id) {
                let urls: Vec<String> = m.peer_urls.iter().map(ToString::to_string).collect();
                Decision::Block {
                    code: BlockCode::AddressNotMoved,
                    reason: format!(
                        "data dir holds live member {} whose peer URL is {}, not {own_url}: this node's address changed and the member has not moved yet; etcd starts here only on a revision whose peer URL is the member's live one (the operator moves it with MemberUpdate, then rolls such a revision)",
                        m.id,
                        urls.join(",")
                    ),
                    member_id: Some(m.id),
                }
            } else {
                Decision::Wait {
                    code: BlockCode::NotAMember,
                    reason: format!(
                        "no live member has peer URL {own_url}; the data dir's member {} was removed: archived it, waiting for the operator to add this node as a learner",
                        hex(wal.member_id)
                    ),
                    member_id: None,
                    archive: Some(format!(
                        "member {} is no longer in the cluster",
                        hex(wal.member_id)
                    )),
                }
            }
        }
        DataDir::Unreadable(why) => Decision::Wait {
            code: BlockCode::NotAMember,
            reason: format!(
                "no live member has peer URL {own_url} and the data dir is unreadable ({why}): archived it, waiting for the operator to add this node as a learner"
            ),
            member_id: None,
            archive: Some(format!(
                "unreadable data dir of a node that is not a member: {why}"
            )),
        },
        DataDir::Absent => Decision::wait(
            BlockCode::NotAMember,
            format!(
                "waiting for the operator to add a member with peer URL {own_url} (live members: {})",
                MemberIds::from_members(&live.members)
            ),
            None,
        ),
    }
}

/// This node's member was added and has not started yet: it joins.
fn unstarted(config: &VerifyConfig, data: &DataDir, own: &membership::Member) -> Decision {
    let kind = if own.is_learner { "learner" } else { "member" };
    let id = Some(own.id);
    let (reason, archive) = match data {
        DataDir::Absent => (
            format!(
                "joining as unstarted {kind} {} with peer URL {}",
                own.id, config.peer_url
            ),
            None,
        ),
        DataDir::Present(wal) if wal.member_id == own.id.get() => (
            format!(
                "joining as {kind} {}; the data dir is this member's own earlier start",
                own.id
            ),
            None,
        ),
        DataDir::Present(wal) => (
            format!(
                "joining as unstarted {kind} {}; archived a stale data dir of member {}",
                own.id,
                hex(wal.member_id)
            ),
            Some(format!("stale data dir of member {}", hex(wal.member_id))),
        ),
        DataDir::Unreadable(why) => (
            format!(
                "joining as unstarted {kind} {}; archived an unreadable data dir",
                own.id
            ),
            Some(format!("unreadable data dir: {why}")),
        ),
    };
    Decision::Start {
        reason,
        member_id: id,
        archive,
    }
}

/// This node's member has started before: it restarts only on its own data.
fn started(config: &VerifyConfig, data: &DataDir, own: &membership::Member) -> Decision {
    let id = Some(own.id);
    let block = |code, reason| Decision::Block {
        code,
        reason,
        member_id: id,
    };
    if own.name != config.name {
        return block(
            BlockCode::PeerUrlTaken,
            format!(
                "peer URL {} belongs to started member {} named {:?}, not {:?}",
                config.peer_url, own.id, own.name, config.name
            ),
        );
    }
    match data {
        DataDir::Absent => block(
            BlockCode::DataDirLost,
            format!(
                "data dir lost: member {} ({}) has started before but {} has no member data; the operator must remove the member and add this node again as a learner",
                own.id,
                own.name,
                config.data_dir.display()
            ),
        ),
        DataDir::Present(wal) if wal.member_id == own.id.get() => Decision::start(
            format!(
                "restarting member {} ({}) on its own data dir",
                own.id, own.name
            ),
            id,
        ),
        DataDir::Present(wal) => block(
            BlockCode::ForeignData,
            format!(
                "data dir holds member {} but this node's live member is {} ({}): refusing to start on another member's data",
                hex(wal.member_id),
                own.id,
                own.name
            ),
        ),
        DataDir::Unreadable(why) => block(
            BlockCode::DataDirUnusable,
            format!(
                "member {} ({}) has started before but its data dir is unreadable: {why}",
                own.id, own.name
            ),
        ),
    }
}
