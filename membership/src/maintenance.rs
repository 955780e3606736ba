//! Calls beyond membership changes that the operator's checks and maintenance need: one
//! member's own view of the member list, the cluster's alarms (and disarming one), one member's
//! hash of its key-value store at a revision (members that applied the same revision must agree
//! on it), defragmenting one member, and advancing the raft log by entries that change nothing. Each is bounded like every other client call; a
//! defragmentation by the caller's own limit.

use std::time::Duration;

use etcd_client::{AlarmAction, AlarmOptions, AlarmType};

use crate::client::convert_members;
use crate::preflight::{AlarmKind, RaisedAlarm};
use crate::{ClientError, EtcdClient, Member, MemberId, MemberUrl};

/// One member's `HashKV` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvHash {
    /// The member's current revision when it answered.
    pub current_revision: i64,
    /// The hash of every key-value revision up to the one asked for.
    pub hash: u32,
    /// The member's compact revision (the hash covers revisions after it).
    pub compact_revision: i64,
}

impl EtcdClient {
    /// The hash of the key-value store of the member at `endpoint`, up to `revision` (0: its
    /// current revision). etcd answers "required revision is a future revision" from a member
    /// that has not applied `revision` yet, and refuses learners in 3.4.
    pub async fn hash_kv_at(
        &self,
        endpoint: &MemberUrl,
        revision: i64,
    ) -> Result<KvHash, ClientError> {
        self.hash_kv_within(endpoint, revision, self.call_timeout)
            .await
    }

    /// [`EtcdClient::hash_kv_at`], waiting at most `limit` (hashing a large store takes a while).
    pub async fn hash_kv_within(
        &self,
        endpoint: &MemberUrl,
        revision: i64,
        limit: Duration,
    ) -> Result<KvHash, ClientError> {
        let resp = self
            .on_within(
                endpoint,
                limit,
                |mut c| async move { c.hash_kv(revision).await },
            )
            .await
            .map_err(ClientError::Endpoint)?;
        Ok(KvHash {
            current_revision: resp.header().map_or(0, |h| h.revision()),
            hash: resp.hash(),
            compact_revision: resp.compact_version(),
        })
    }

    /// The member list as the member at `endpoint` sees it (etcd 3.4 serves it from the
    /// member's local view, so two members can disagree while a change propagates).
    pub async fn member_list_at(&self, endpoint: &MemberUrl) -> Result<Vec<Member>, ClientError> {
        let resp = self
            .on(endpoint, |mut c| async move { c.member_list().await })
            .await
            .map_err(ClientError::Endpoint)?;
        convert_members(endpoint, resp.members())
    }

    /// Every raised alarm, sorted (asked of a voter: alarm reads go through raft).
    pub async fn alarms(&self) -> Result<Vec<RaisedAlarm>, ClientError> {
        let (resp, by) = self
            .on_any_voter("alarm list", |mut c| async move {
                c.alarm(AlarmAction::Get, AlarmType::None, None).await
            })
            .await?;
        let mut out = Vec::new();
        for a in resp.alarms() {
            let Some(kind) = AlarmKind::from_code(a.alarm() as i32) else {
                continue;
            };
            let member = MemberId::new(a.member_id()).ok_or_else(|| ClientError::BadAnswer {
                endpoint: by.clone(),
                reason: format!("alarm {kind} names member id 0"),
            })?;
            out.push(RaisedAlarm { member, kind });
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Defragments the member at `endpoint`, waiting at most `limit`. While it runs the member
    /// applies nothing (etcd holds its store), so it answers reads and writes late; a timed-out
    /// call leaves the defragmentation running inside etcd.
    pub async fn defragment(
        &self,
        endpoint: &MemberUrl,
        limit: Duration,
    ) -> Result<(), ClientError> {
        self.on_within(endpoint, limit, |mut c| async move { c.defragment().await })
            .await
            .map(|_| ())
            .map_err(ClientError::Endpoint)
    }

    /// Streams a snapshot of the member at `endpoint`'s store into `out`, the whole stream
    /// bounded by `limit`; returns the bytes written. etcd ends the stream with the SHA-256 of
    /// the database, which `etcd_snapshot::file::verify` checks. A write to `out` that fails
    /// ends the call with that error.
    pub async fn snapshot_into<W>(
        &self,
        endpoint: &MemberUrl,
        out: &mut W,
        limit: Duration,
    ) -> Result<u64, ClientError>
    where
        W: tokio::io::AsyncWrite + Unpin + Send,
    {
        use tokio::io::AsyncWriteExt;
        self.on_within(endpoint, limit, |mut c| async move {
            let mut stream = c.snapshot().await?;
            let mut total = 0u64;
            while let Some(part) = stream.message().await? {
                out.write_all(part.blob())
                    .await
                    .map_err(etcd_client::Error::IoError)?;
                total += part.blob().len() as u64;
            }
            out.flush().await.map_err(etcd_client::Error::IoError)?;
            Ok(total)
        })
        .await
        .map_err(ClientError::Endpoint)
    }

    /// Appends `entries` entries that change nothing to the raft log: alarm reads, which etcd
    /// puts through raft like every alarm request and which move no revision (so no watcher sees
    /// them), `parallel` in flight at a time on one voter. Each member then applies them and
    /// takes its next snapshot as it would after as many writes. Returns how many were
    /// committed; stops at the first failure.
    pub async fn advance_log(&self, entries: u64, parallel: usize) -> Result<u64, ClientError> {
        use futures::StreamExt;
        let ((), by) = self
            .on_any_voter("log advance", |mut c| async move {
                c.alarm(AlarmAction::Get, AlarmType::None, None)
                    .await
                    .map(|_| ())
            })
            .await?;
        let by = &by;
        let mut calls = futures::stream::iter(1..entries)
            .map(|_| async move {
                self.on(by, |mut c| async move {
                    c.alarm(AlarmAction::Get, AlarmType::None, None).await
                })
                .await
            })
            .buffer_unordered(parallel.max(1));
        let mut done = 1;
        while let Some(answer) = calls.next().await {
            answer.map_err(ClientError::Endpoint)?;
            done += 1;
        }
        Ok(done)
    }

    /// Disarms the `NOSPACE` alarm of `member` (asked of a voter: alarm changes go through
    /// raft). Disarming an alarm that is not raised is a no-op in etcd.
    pub async fn disarm_nospace(&self, member: MemberId) -> Result<(), ClientError> {
        self.on_any_voter("alarm disarm", |mut c| async move {
            let mut options = AlarmOptions::new();
            options.with_member(member.get());
            c.alarm(AlarmAction::Deactivate, AlarmType::Nospace, Some(options))
                .await
        })
        .await
        .map(|_| ())
    }
}
