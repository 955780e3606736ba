//! Whether the first member may move to the next minor version: only once every member's raft
//! log, from its last snapshot on, holds nothing an older minor wrote.
//!
//! On start etcd loads its newest snapshot and replays every WAL entry after it, and a newer
//! minor cannot replay some entries older ones wrote: 3.6 panics on the v2 requests 3.4 wrote
//! (a `QGET` on every `/health` call, "detected disallowed v2 WAL", etcd-io/etcd#20809), and 3.7
//! cannot decode the v2 requests every 3.5 member writes (its attributes at each start, the
//! cluster version: "unmarshal should never fail"). Both crash the first member restarted onto the
//! new minor (found by running them: `docs/etcd-versions.md`). etcd has no "snapshot now" call,
//! but it snapshots whenever it applied more than `--snapshot-count` ([`SNAPSHOT_COUNT`], what
//! `podspec::flags` renders for 3.4 and 3.5 and etcd's default from 3.6) entries past its last
//! snapshot, so a member that has applied index `a` has a snapshot at or past `a -
//! SNAPSHOT_COUNT`.
//!
//! The boundary: every member runs the cluster's minor once etcd reports it as the cluster
//! version, so nothing an older minor wrote lies past the raft index the log had reached when
//! the operator first saw that cluster version (`status.etcdVersion.clusterVersionRaftIndex`;
//! first seen late, it is only higher, which asks more and stays safe). Decision ([`decide`],
//! pure): a move to 3.6 or later that has not started waits until every member has applied
//! past `boundary + SNAPSHOT_COUNT`; the operator then advances the log with entries that change
//! nothing (alarm reads, through raft) instead of waiting for client traffic to do it.

use super::Version;

/// Entries past its last snapshot after which etcd takes the next one.
pub const SNAPSHOT_COUNT: u64 = 10_000;

/// The first minor that cannot replay every entry the minor before it wrote (3.5 still applies
/// each v2 request 3.4 writes; 3.6 only two kinds of them, 3.7 none).
const FIRST_PICKY_MINOR: (u32, u32) = (3, 6);

/// What the log check says about a move to the next minor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MinorLog {
    /// Not a move to the next minor, one already under way, or every member's log is clear.
    Clear,
    /// The raft index at which the cluster version was first seen is not recorded yet (it is
    /// recorded this pass).
    Unrecorded { cluster: Version },
    /// A member did not say how far it has applied (it did not answer).
    Unknown { member: String },
    /// `member` has applied up to `applied`; its snapshot is past the boundary once it has
    /// applied `needed`.
    Behind {
        member: String,
        applied: u64,
        needed: u64,
        cluster: Version,
        boundary: u64,
    },
}

/// The check for a move to `target` from cluster version `cluster` (first seen at raft index
/// `boundary`), given each member's applied index by name; `started` when a member runs the
/// target's minor already (the move is under way: every member was clear before it began,
/// and a snapshot index never goes back).
pub fn decide(
    target: Version,
    cluster: Option<Version>,
    boundary: Option<u64>,
    applied: &[(String, Option<u64>)],
    started: bool,
) -> MinorLog {
    let Some(cluster) = cluster else {
        return MinorLog::Clear;
    };
    if started
        || target.minor_line() <= cluster.minor_line()
        || target.minor_line() < FIRST_PICKY_MINOR
    {
        return MinorLog::Clear;
    }
    let Some(boundary) = boundary else {
        return MinorLog::Unrecorded { cluster };
    };
    let needed = boundary.saturating_add(SNAPSHOT_COUNT + 1);
    if let Some((member, _)) = applied.iter().find(|(_, a)| a.is_none()) {
        return MinorLog::Unknown {
            member: member.clone(),
        };
    }
    applied
        .iter()
        .filter_map(|(m, a)| Some((m, (*a)?)))
        .filter(|(_, a)| *a < needed)
        .min_by_key(|(_, a)| *a)
        .map_or(MinorLog::Clear, |(member, applied)| MinorLog::Behind {
            member: member.clone(),
            applied,
            needed,
            cluster,
            boundary,
        })
}

impl MinorLog {
    /// The `plan`/status line of a held move to `target`.
    pub fn line(&self, target: Version) -> Option<String> {
        let next = format!("{}.{}", target.major, target.minor);
        Some(match self {
            MinorLog::Clear => return None,
            MinorLog::Unrecorded { cluster } => format!(
                "holding the move to {next}: the raft index at which the cluster version {cluster} was first seen is recorded this pass"
            ),
            MinorLog::Unknown { member } => format!(
                "holding the move to {next}: member {member} did not say how far its raft log is applied, so it cannot be shown to have snapshotted past the entries an older etcd wrote"
            ),
            MinorLog::Behind {
                member,
                applied,
                needed,
                cluster,
                boundary,
            } => format!(
                "holding the move to {next}: member {member} has applied raft index {applied}; etcd {next} cannot replay entries an older etcd wrote, which lie up to index {boundary} (cluster version {cluster} first seen), so every member must have snapshotted past them (applied {needed}: one snapshot every {SNAPSHOT_COUNT} entries); advancing the log with entries that change nothing"
            ),
        })
    }

    /// How many entries to append so the member furthest behind reaches what it needs.
    pub fn entries_short(&self) -> u64 {
        match self {
            MinorLog::Behind {
                applied, needed, ..
            } => needed - applied,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn applied(a: &[(&str, Option<u64>)]) -> Vec<(String, Option<u64>)> {
        a.iter().map(|(m, i)| ((*m).to_owned(), *i)).collect()
    }

    #[test]
    fn a_move_to_the_next_minor_waits_until_every_member_snapshotted_past_the_boundary() {
        let c36 = Some(v("3.6.0"));
        let all = applied(&[
            ("n1", Some(10_600)),
            ("n2", Some(10_450)),
            ("n3", Some(10_700)),
        ]);
        let held = decide(v("3.7.3"), c36, Some(500), &all, false);
        assert_eq!(
            held,
            MinorLog::Behind {
                member: "n2".into(),
                applied: 10_450,
                needed: 10_501,
                cluster: v("3.6.0"),
                boundary: 500
            }
        );
        assert_eq!(held.entries_short(), 51);
        assert!(
            held.line(v("3.7.3"))
                .unwrap()
                .contains("member n2 has applied raft index 10450")
        );
        let past = applied(&[
            ("n1", Some(10_501)),
            ("n2", Some(10_501)),
            ("n3", Some(20_000)),
        ]);
        assert_eq!(
            decide(v("3.7.3"), c36, Some(500), &past, false),
            MinorLog::Clear
        );
    }

    #[test]
    fn only_a_move_to_the_next_minor_not_yet_started_is_held() {
        let behind = applied(&[("n1", Some(20))]);
        let c35 = Some(v("3.5.0"));
        // A patch move, a move under way, an unread cluster version, a move to 3.5 (which
        // replays what 3.4 wrote): nothing to hold.
        assert_eq!(
            decide(v("3.5.16"), Some(v("3.4.0")), Some(10), &behind, false),
            MinorLog::Clear
        );
        assert_eq!(
            decide(v("3.5.36"), c35, Some(10), &behind, false),
            MinorLog::Clear
        );
        assert_eq!(
            decide(v("3.6.16"), c35, Some(10), &behind, true),
            MinorLog::Clear
        );
        assert_eq!(
            decide(v("3.6.16"), None, Some(10), &behind, false),
            MinorLog::Clear
        );
        assert_eq!(
            decide(v("3.6.16"), c35, None, &behind, false),
            MinorLog::Unrecorded {
                cluster: v("3.5.0")
            }
        );
        let silent = applied(&[("n1", Some(20_000)), ("n2", None)]);
        assert_eq!(
            decide(v("3.6.16"), c35, Some(10), &silent, false),
            MinorLog::Unknown {
                member: "n2".into()
            }
        );
    }
}
