//! The pass's changes to etcd, made in one place like its writes to the API: a controller states
//! what it wants as an [`EtcdIntent`] (a membership change, a leadership handover, a disarmed
//! alarm) or asks to start a long [`Task`] off the pass (a defragmentation, a HashKV comparison,
//! a snapshot), and [`EtcdWriter`] alone decides whether anything reaches etcd: in `plan`'s dry
//! run nothing does (the intent is recorded as planned), and without a connection this pass
//! nothing can. No controller checks for a dry run itself.

use std::fmt;
use std::sync::Arc;

use membership::{ClientError, EtcdClient, Member, MemberId, MemberUrl};

use crate::etcd::EtcdConnection;

/// One change to etcd a controller asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdIntent {
    /// `MemberAdd` of `peer_url` as a learner.
    AddLearner { peer_url: MemberUrl },
    /// `MemberPromote` of learner `id`.
    Promote { id: MemberId },
    /// `MemberRemove` of `id`.
    Remove { id: MemberId },
    /// `MemberUpdate`: member `id`'s peer URL becomes `to`.
    MovePeerUrl { id: MemberId, to: MemberUrl },
    /// `MoveLeader`, asked of the leader at `leader_url`: voter `to` leads next.
    MoveLeader { leader_url: MemberUrl, to: MemberId },
    /// Disarms member `id`'s `NOSPACE` alarm.
    DisarmNoSpace { id: MemberId },
    /// Appends `entries` raft entries that change nothing (alarm reads), so every member takes
    /// its next snapshot sooner.
    AdvanceLog { entries: u64 },
}

/// Alarm reads in flight at once while the log is advanced.
const ADVANCE_PARALLEL: usize = 32;

impl fmt::Display for EtcdIntent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdIntent::AddLearner { peer_url } => write!(f, "add learner {peer_url}"),
            EtcdIntent::Promote { id } => write!(f, "promote learner {id}"),
            EtcdIntent::Remove { id } => write!(f, "remove member {id}"),
            EtcdIntent::MovePeerUrl { id, to } => write!(f, "move member {id}'s peer URL to {to}"),
            EtcdIntent::MoveLeader { leader_url, to } => {
                write!(f, "move leadership to {to} (asked of {leader_url})")
            }
            EtcdIntent::DisarmNoSpace { id } => write!(f, "disarm the NOSPACE alarm of {id}"),
            EtcdIntent::AdvanceLog { entries } => write!(
                f,
                "advance the raft log by {entries} entries that change nothing (alarm reads)"
            ),
        }
    }
}

/// A long piece of etcd work a controller runs off the pass, with the client it is handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// Defragments one member, then reads its new size.
    Defragment,
    /// Compares the voters' `HashKV` at one revision.
    CompareHashKv,
    /// Writes a marker key, streams a snapshot and checks it.
    Snapshot,
}

impl Task {
    pub fn as_str(self) -> &'static str {
        match self {
            Task::Defragment => "defragment",
            Task::CompareHashKv => "compare HashKV",
            Task::Snapshot => "snapshot",
        }
    }
}

/// What became of an intent or a task.
#[derive(Debug)]
pub enum Outcome<T> {
    /// It was made (or may start), with its result.
    Made(T),
    /// A dry run: recorded in [`EtcdWriter::planned`], not made.
    Planned,
    /// No etcd connection this pass (etcd was not reached): not made.
    NoClient,
}

/// What etcd answered to an intent that was made.
#[derive(Debug, PartialEq, Eq)]
pub enum Made {
    Done,
    /// An added learner's member record.
    Added(Member),
}

/// The one way the pass changes etcd.
#[derive(Debug, Default)]
pub struct EtcdWriter {
    dry_run: bool,
    /// The intents and tasks a dry run would have made, in order.
    pub planned: Vec<String>,
}

impl EtcdWriter {
    pub fn new(dry_run: bool) -> Self {
        Self {
            dry_run,
            planned: Vec::new(),
        }
    }

    /// The client `conn` holds, unless this is a dry run (recorded as `what`).
    fn client(&mut self, conn: &EtcdConnection, what: String) -> Outcome<Arc<EtcdClient>> {
        if self.dry_run {
            self.planned.push(format!("would {what}"));
            return Outcome::Planned;
        }
        conn.current().map_or(Outcome::NoClient, Outcome::Made)
    }

    /// Makes `intent` through `conn`'s client. etcd's refusal is the error, for the controller
    /// to read as an [`membership::EtcdRefusal`].
    pub async fn apply(
        &mut self,
        conn: &EtcdConnection,
        intent: &EtcdIntent,
    ) -> Result<Outcome<Made>, ClientError> {
        let client = match self.client(conn, intent.to_string()) {
            Outcome::Made(c) => c,
            Outcome::Planned => return Ok(Outcome::Planned),
            Outcome::NoClient => return Ok(Outcome::NoClient),
        };
        let made = match intent {
            EtcdIntent::AddLearner { peer_url } => Made::Added(client.add_learner(peer_url).await?),
            EtcdIntent::Promote { id } => client.promote(*id).await.map(|()| Made::Done)?,
            EtcdIntent::Remove { id } => client.remove(*id).await.map(|()| Made::Done)?,
            EtcdIntent::MovePeerUrl { id, to } => {
                client.update_peer_url(*id, to).await.map(|()| Made::Done)?
            }
            EtcdIntent::MoveLeader { leader_url, to } => client
                .move_leader(leader_url, *to)
                .await
                .map(|()| Made::Done)?,
            EtcdIntent::DisarmNoSpace { id } => {
                client.disarm_nospace(*id).await.map(|()| Made::Done)?
            }
            EtcdIntent::AdvanceLog { entries } => client
                .advance_log(*entries, ADVANCE_PARALLEL)
                .await
                .map(|_| Made::Done)?,
        };
        Ok(Outcome::Made(made))
    }

    /// The client `task` (on `subject`) runs with, unless this is a dry run or etcd was not
    /// reached.
    pub fn start(
        &mut self,
        conn: &EtcdConnection,
        task: Task,
        subject: &str,
    ) -> Outcome<Arc<EtcdClient>> {
        self.client(conn, format!("start: {} {subject}", task.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> MemberId {
        MemberId::new(n).unwrap()
    }

    #[tokio::test]
    async fn a_dry_run_makes_nothing_and_records_each_intent() {
        let mut w = EtcdWriter::new(true);
        let conn = EtcdConnection::default();
        let intents = [
            EtcdIntent::AddLearner {
                peer_url: "https://10.0.0.4:2380".parse().unwrap(),
            },
            EtcdIntent::Remove { id: id(0xa) },
        ];
        for i in &intents {
            assert!(matches!(w.apply(&conn, i).await, Ok(Outcome::Planned)));
        }
        assert!(matches!(
            w.start(&conn, Task::Defragment, "m1"),
            Outcome::Planned
        ));
        assert_eq!(
            w.planned,
            [
                "would add learner https://10.0.0.4:2380",
                "would remove member a",
                "would start: defragment m1",
            ]
        );
    }

    #[tokio::test]
    async fn without_a_connection_nothing_is_made_or_recorded() {
        let mut w = EtcdWriter::new(false);
        let conn = EtcdConnection::default();
        let intent = EtcdIntent::Promote { id: id(0xb) };
        assert!(matches!(
            w.apply(&conn, &intent).await,
            Ok(Outcome::NoClient)
        ));
        assert!(matches!(
            w.start(&conn, Task::Snapshot, "b"),
            Outcome::NoClient
        ));
        assert!(w.planned.is_empty());
    }
}
