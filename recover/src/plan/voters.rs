//! Which other voters a recovery must account for before it may act, and whether it has.
//!
//! From one node, a partition looks exactly like a lost quorum: the members on the other side do
//! not answer. If they still run and reach each other they are the majority and keep serving
//! writes; a recovery here would start a second cluster, and when the partition heals the
//! majority's members are told they were removed and stop, losing what they acknowledged
//! meanwhile. So recovery acts only when every other voter either answers (and names no leader:
//! [`super::quorum_is_lost`] refuses otherwise) or is named by the admin, after checking, as
//! down for good (`--confirm-down n2,n3`).
//!
//! | voter | named in `--confirm-down` | verdict |
//! |---|---|---|
//! | answers | no | accounted for |
//! | answers | yes | refuse: it is not down |
//! | does not answer | yes | accounted for |
//! | does not answer | no | refuse, naming it and the flag |
//! | a name no voter has | | refuse: a typo must not pass for a confirmation |

use std::collections::BTreeSet;

use membership::{Member, MemberId, MemberIds, MemberUrl};

use super::{Reached, Refusal};

/// Where the list of voters came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VotersFrom {
    /// This node's etcd listed them: the membership its own data holds.
    ThisNode,
    /// This node's etcd did not answer: the members its revision lists (`ETCD_MEMBER_IDS`,
    /// learners included: the revision does not tell them apart), with the voters any answering
    /// member lists.
    Revision,
}

impl VotersFrom {
    pub fn describe(self) -> &'static str {
        match self {
            VotersFrom::ThisNode => "this node's member list",
            VotersFrom::Revision => {
                "this node's revision (its etcd did not answer; learners included)"
            }
        }
    }
}

/// One voter recovery must account for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Voter {
    /// Empty for a member that never started (ordered by name first: the flag the refusal
    /// suggests reads as the admin would write it).
    pub name: String,
    pub id: MemberId,
    pub peer_url: Option<MemberUrl>,
}

impl Voter {
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            format!("member {} (unnamed)", self.id)
        } else {
            format!("{} (member {})", self.name, self.id)
        }
    }

    /// Whether `word` (a name or a hex member id of `--confirm-down`) names this voter.
    fn named_by(&self, word: &str) -> bool {
        (!self.name.is_empty() && self.name == word) || self.id.to_string() == word
    }
}

/// The voters of the cluster as this node knows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voters {
    pub from: VotersFrom,
    pub list: Vec<Voter>,
}

impl Voters {
    /// Every voter's label, comma-separated.
    pub fn labels(&self) -> String {
        self.list
            .iter()
            .map(Voter::label)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The voters of a member list (learners left out).
    pub fn listed(from: VotersFrom, members: &[Member]) -> Self {
        let list = members
            .iter()
            .filter(|m| !m.is_learner)
            .map(|m| Voter {
                id: m.id,
                name: m.name.clone(),
                peer_url: m.peer_urls.first().cloned(),
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        Self { from, list }
    }

    /// The revision's members (names joined by peer URL from `ETCD_INITIAL_CLUSTER`) with the
    /// voters of `listed` (another member's list), each id once.
    pub fn from_revision(
        ids: &MemberIds,
        names: &membership::InitialCluster,
        listed: &[Member],
    ) -> Self {
        let mut all: BTreeSet<Voter> = ids
            .iter()
            .map(|(id, url)| Voter {
                id,
                name: names
                    .iter()
                    .find(|(_, u)| *u == url)
                    .map(|(n, _)| n.to_owned())
                    .unwrap_or_default(),
                peer_url: Some(url.clone()),
            })
            .collect();
        let seen: BTreeSet<MemberId> = all.iter().map(|v| v.id).collect();
        all.extend(
            Self::listed(VotersFrom::Revision, listed)
                .list
                .into_iter()
                .filter(|v| !seen.contains(&v.id)),
        );
        Self {
            from: VotersFrom::Revision,
            list: all.into_iter().collect(),
        }
    }
}

/// This node's own member: by the id its data or its etcd gave, or by its name (a node whose
/// data is gone and whose etcd does not answer knows only that).
#[derive(Clone, Copy, Debug)]
pub struct Own<'a> {
    pub id: Option<MemberId>,
    pub name: &'a str,
}

impl Own<'_> {
    fn is(&self, v: &Voter) -> bool {
        Some(v.id) == self.id || (!v.name.is_empty() && v.name == self.name)
    }
}

/// Refuses unless every voter but `own` answers or is named in `confirmed_down` (see the
/// module table).
pub fn accounted_for(
    voters: &Voters,
    own: Own<'_>,
    reached: &[&Reached],
    confirmed_down: &BTreeSet<String>,
) -> Result<(), Refusal> {
    let answers = |v: &Voter| {
        reached
            .iter()
            .any(|r| r.status.as_ref().is_ok_and(|st| st.member_id == v.id.get()))
    };
    let unknown: Vec<String> = confirmed_down
        .iter()
        .filter(|w| !voters.list.iter().any(|v| v.named_by(w)))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(Refusal::UnknownConfirmedDown {
            named: unknown.join(","),
            voters: voters.labels(),
            from: voters.from.describe().to_owned(),
        });
    }
    let others = voters.list.iter().filter(|v| !own.is(v));
    let mut missing = Vec::new();
    for v in others {
        let confirmed = confirmed_down.iter().any(|w| v.named_by(w));
        match (answers(v), confirmed) {
            (true, true) => return Err(Refusal::ConfirmedDownAnswers(v.label())),
            (false, false) => missing.push(v),
            _ => {}
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Refusal::VotersUnaccounted {
        unaccounted: missing
            .iter()
            .map(|v| v.label())
            .collect::<Vec<_>>()
            .join(", "),
        from: voters.from.describe().to_owned(),
        flag: missing
            .iter()
            .map(|v| {
                if v.name.is_empty() {
                    v.id.to_string()
                } else {
                    v.name.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(","),
    })
}
