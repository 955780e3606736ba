//! Checking a snapshot before it is restored: that it is whole, what it holds, which cluster it
//! comes from, and which tool of the etcd image restores it.
//!
//! * **Integrity.** A snapshot etcd streams (`etcdctl snapshot save`, the Snapshot API) ends
//!   with the SHA-256 of everything before it; [`verify`] recomputes it, so one flipped byte or a
//!   truncated copy is refused before anything changes. A record beside the snapshot
//!   (`<snapshot>.json`, [`Record`], written by the operator's backups) must agree with the
//!   file's SHA-256 as a whole.
//! * **Contents.** Members, latest revision and raft index come from the database itself
//!   ([`etcd_snapshot::bolt`]).
//! * **Origin** ([`origin`], pure). A snapshot is this cluster's when its record names this
//!   node's cluster id, or when one of its members is a member this node knows (its revision's
//!   `ETCD_MEMBER_IDS`, its data dir's member). Otherwise restoring it replaces this cluster's
//!   data with another cluster's: refused unless `--force-other-cluster`.
//! * **Tool** ([`restore_tool`], pure). etcd 3.4 restores with `etcdctl snapshot restore`, 3.5
//!   and later with `etcdutl`. Only `etcdutl` from 3.5.10 (the backport of etcd PR 16029) and
//!   3.6 can bump the store revision and mark the old ones compacted, so watchers (the API
//!   server's watch cache, every informer) never see revisions go back; with an older image
//!   recovery refuses unless `--accept-revisions-going-back`.
//! * **Margin** ([`revision_bump`], pure; what it is bumped by is decided in
//!   [`crate::plan::observed_raft_index`]). The restored revision must be above every revision a
//!   client or watcher saw of the lost cluster, including writes acknowledged after the snapshot.
//!   Each such write is one raft entry, so the writes after the snapshot are at most the lost
//!   cluster's last raft index. Recovery bumps by the larger of a billion and 1.2 × the highest
//!   raft index it sees (the snapshot's, every member that answers, and how far an answering
//!   member's revision is past the snapshot's): the rule of cluster-etcd-operator's restore
//!   (`bindata/etcd/restore-pod.yaml`: 1.2 × the `maxRaftIndex` its `etcd-rev` sidecar records
//!   every 10 s, a billion without that record). It holds unless more than a billion writes were
//!   made after the snapshot *and* the highest index seen is more than a sixth behind the lost
//!   cluster's last one.

use std::collections::BTreeSet;

pub use etcd_snapshot::bolt::{self, Contents};
pub use etcd_snapshot::file::{Record, SnapshotError, Verified, hex, record_path, verify};
pub use etcd_snapshot::tool::{REVISION_BUMP, Tool, restore_tool, revision_bump};

/// What this node knows of its own cluster.
#[derive(Clone, Debug, Default)]
pub struct LocalIdentity {
    /// From the data dir's WAL, when there is one.
    pub cluster_id: Option<u64>,
    /// The revision's `ETCD_MEMBER_IDS` and the data dir's member.
    pub member_ids: BTreeSet<u64>,
}

/// Whether a snapshot comes from this cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    ThisCluster(String),
    OtherCluster(String),
}

/// Decides [`Origin`] (see the module docs).
pub fn origin(contents: &Contents, record: Option<&Record>, local: &LocalIdentity) -> Origin {
    if let (Some(r), Some(local_id)) = (record, local.cluster_id) {
        let recorded = u64::from_str_radix(&r.cluster_id, 16).ok();
        return if recorded == Some(local_id) {
            Origin::ThisCluster(format!("its record names this cluster, {local_id:x}"))
        } else {
            Origin::OtherCluster(format!(
                "its record names cluster {}, this node's data is cluster {local_id:x}",
                r.cluster_id
            ))
        };
    }
    let shared: Vec<String> = contents
        .members
        .iter()
        .filter(|m| local.member_ids.contains(&m.id))
        .map(|m| format!("{:x}", m.id))
        .collect();
    if shared.is_empty() {
        Origin::OtherCluster(format!(
            "none of its members ({}) is a member this node knows ({})",
            contents
                .members
                .iter()
                .map(|m| format!("{:x}", m.id))
                .collect::<Vec<_>>()
                .join(", "),
            local
                .member_ids
                .iter()
                .map(|id| format!("{id:x}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        Origin::ThisCluster(format!("it lists member(s) {}", shared.join(", ")))
    }
}
