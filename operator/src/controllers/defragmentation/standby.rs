//! The standby learner's renewal under `NOSPACE`: etcd refuses to defragment a learner, so one
//! whose own file is at the quota is removed (by membership) and its node joins again once the
//! leader's log has moved on ([`rejoin_wait`]).

use membership::MemberId;

use super::{View, mib};
use crate::api::StandbyRenewal;
use crate::etcd::DbSize;
use crate::pass::Pass;

/// A standby learner whose own database file must be renewed. etcd refuses `Defragment` on a
/// learner, and a learner's file grows as the voters' do: left at the quota, it raises
/// `NOSPACE` again on its next applied write after every disarm (on four nodes the cluster
/// refused every write for good, #65). So it is removed (it votes on nothing) and its node
/// joins again as a new learner once the leader's log has moved past what filled it
/// ([`rejoin_wait`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandbyDue {
    pub id: MemberId,
    pub name: String,
    pub db: DbSize,
}

impl StandbyDue {
    /// The removal's message.
    pub fn describe(&self) -> String {
        format!(
            "standby learner {} ({}): file {}, {} free; with NOSPACE raised its file is over the disarm line, so it would raise the alarm again after every disarm, and etcd refuses to defragment a learner: it is removed, and its node joins again as a new learner once the leader's log has moved {REJOIN_AFTER_ENTRIES} entries on (then it receives the leader's defragmented file)",
            self.name,
            self.id,
            mib(self.db.total),
            mib(self.db.free())
        )
    }
}

/// How far the leader's log moves on before a renewed standby's node joins again: the snapshot
/// count the operator renders (10,000, etcd 3.6's default too) and a tenth more for the
/// snapshot to be taken. Every member snapshots within that many applied entries and then
/// compacts its log (to 5,000 entries behind the snapshot), and a learner added to a leader
/// whose log was compacted is sent a snapshot of the leader's current, defragmented file: raft
/// cannot send it entries from index 1. A learner added before any compaction (a young cluster)
/// is sent the whole log instead and replays it, fill included (measured: a renewed standby came
/// back with the same 49 MiB file under a 48 MiB quota).
pub const REJOIN_AFTER_ENTRIES: u64 = 11_000;

/// The started learner whose file must be renewed now, if any ([`StandbyDue`]): under `NOSPACE`,
/// one whose file is at or over the disarm line (at once: until it goes the alarm cannot stay
/// disarmed). Without `NOSPACE` a fragmented standby is left alone: a new learner would replay
/// the same history into the same file, and the standby is defragmented as a voter once
/// promoted.
pub fn standby_due(v: &View<'_>) -> Option<StandbyDue> {
    if v.running.is_some() || !v.nospace() {
        return None;
    }
    v.obs
        .members
        .iter()
        .filter(|m| m.is_learner && m.is_started())
        .find_map(|m| {
            let db = v.obs.health.get(&m.id)?.db?;
            (db.total >= v.disarm_line()).then(|| StandbyDue {
                id: m.id,
                name: m.name.clone(),
                db,
            })
        })
}

/// The standby learner whose file must be renewed ([`standby_due`]), as this pass sees
/// it; membership removes it (it runs before this controller, and waits while a
/// defragmentation runs).
pub fn standby_due_in(p: &Pass<'_>) -> Option<StandbyDue> {
    if !p.o.managed {
        return None;
    }
    let view = View {
        obs: &p.o.etcd,
        spec: &p.o.spec.defragmentation,
        status: &p.status.defrag,
        quota_bytes: p.o.spec.quota_bytes(),
        running: p
            .status
            .defrag
            .in_progress
            .as_ref()
            .map(|r| r.member_name.as_str()),
        unsettled: None,
        now: p.o.now,
    };
    standby_due(&view)
}

/// Why the node of the standby renewed in `renewal` does not join again yet (`None`: it may),
/// from the leader's raft index (`None`: no leader known, so it waits).
pub fn rejoin_wait(renewal: &StandbyRenewal, leader_index: Option<u64>) -> Option<String> {
    let due = renewal.raft_index.saturating_add(REJOIN_AFTER_ENTRIES);
    match leader_index {
        Some(i) if i >= due => None,
        seen => Some(format!(
            "{} joins again as the standby once the leader's raft index reaches {due} (it is {}): its learner {} was removed under NOSPACE at {} with its file at the quota, and a learner added sooner would replay the entries that filled it",
            renewal.node,
            seen.map_or("unknown".to_owned(), |i| i.to_string()),
            renewal.member_id,
            renewal.raft_index
        )),
    }
}
