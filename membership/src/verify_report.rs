//! The report of `etcd-verify membership`: one versioned JSON object that the gate prints and
//! writes as its container's termination message, and that the operator reads back from the
//! etcd pod's status. Both sides use this one type, so the operator acts on a [`BlockCode`]
//! and never on the wording of `reason`, which is for people.
//!
//! Version 1 is the first versioned shape. A report the operator cannot decode (another
//! version, a hand-written message) is kept as [`VerifyReport::undecodable`]: the block is
//! still shown, with the code [`BlockCode::Unknown`], and nothing is decided from it.

use serde::{Deserialize, Serialize};

use crate::MemberId;

/// The shape version this build writes and reads.
pub const VERIFY_REPORT_VERSION: u32 = 1;

/// What the gate decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyDecision {
    /// etcd may start on this revision.
    Start,
    /// etcd must not start on this revision.
    Block,
}

impl std::fmt::Display for VerifyDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VerifyDecision::Start => "start",
            VerifyDecision::Block => "block",
        })
    }
}

/// Why the gate blocks (or, while it waits, what it blocks as when its deadline comes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BlockCode {
    /// Flags, env or key files the gate cannot use.
    InvalidInput,
    /// The revision's `ETCD_MEMBER_IDS` disagree with the live member list.
    StaleRevision,
    /// This node's member has started before and its data dir is gone: the operator replaces
    /// the member (`member_id`).
    DataDirLost,
    /// The data dir holds a member that is not this node's.
    ForeignData,
    /// The data dir cannot be read, archived or marked.
    DataDirUnusable,
    /// The data dir's member is live under another peer URL: it has not moved to this node's
    /// address yet.
    AddressNotMoved,
    /// This node's peer URL belongs to a started member of another name.
    PeerUrlTaken,
    /// No live member has this node's peer URL: the operator has not added it yet.
    NotAMember,
    /// An etcd endpoint answered but the TLS handshake failed.
    TlsFailure,
    /// No etcd endpoint answered and the data dir cannot show that starting is safe.
    NoEndpointAnswered,
    /// The gate's own deadline ran out before a look finished.
    TimedOut,
    /// Stopped by a signal before deciding.
    Stopped,
    /// The gate itself failed (its runtime did not start, its report could not be encoded).
    Internal,
    /// A code this build does not know, or a report it could not decode.
    #[serde(other)]
    Unknown,
}

/// One run's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// [`VERIFY_REPORT_VERSION`] when written by this build.
    pub version: u32,
    pub decision: VerifyDecision,
    /// Present exactly when `decision` is `block`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<BlockCode>,
    /// For people: what was seen and why it was decided so.
    pub reason: String,
    /// The member the decision is about, where there is one.
    pub member_id: Option<MemberId>,
    /// Where a data dir was archived to during this run.
    pub archived: Option<String>,
    /// The admin override this start used: its file and the reason written in it (absent
    /// where the gate itself decided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overridden: Option<String>,
}

impl VerifyReport {
    /// etcd may start.
    pub fn start(reason: String, member_id: Option<MemberId>, archived: Option<String>) -> Self {
        Self::new(VerifyDecision::Start, None, reason, member_id, archived)
    }

    /// etcd must not start, for `code`.
    pub fn block(
        code: BlockCode,
        reason: String,
        member_id: Option<MemberId>,
        archived: Option<String>,
    ) -> Self {
        Self::new(
            VerifyDecision::Block,
            Some(code),
            reason,
            member_id,
            archived,
        )
    }

    fn new(
        decision: VerifyDecision,
        code: Option<BlockCode>,
        reason: String,
        member_id: Option<MemberId>,
        archived: Option<String>,
    ) -> Self {
        Self {
            version: VERIFY_REPORT_VERSION,
            decision,
            code,
            reason,
            member_id,
            archived,
            overridden: None,
        }
    }

    /// True when etcd may start.
    pub fn may_start(&self) -> bool {
        self.decision == VerifyDecision::Start
    }

    /// Reads a termination message. One that is not a report of [`VERIFY_REPORT_VERSION`]
    /// becomes [`VerifyReport::undecodable`], judged by the container's `exit_code`.
    pub fn read(message: &str, exit_code: i32) -> Self {
        #[derive(Deserialize)]
        struct Shape {
            version: Option<u32>,
        }
        let version = match serde_json::from_str::<Shape>(message) {
            Ok(shape) => shape.version,
            Err(e) => return Self::undecodable(&e.to_string(), message, exit_code),
        };
        match version {
            Some(VERIFY_REPORT_VERSION) => serde_json::from_str::<VerifyReport>(message)
                .unwrap_or_else(|e| Self::undecodable(&e.to_string(), message, exit_code)),
            Some(v) => Self::undecodable(
                &format!("report version {v}; this build reads {VERIFY_REPORT_VERSION}"),
                message,
                exit_code,
            ),
            None => Self::undecodable("it has no version", message, exit_code),
        }
    }

    /// A termination message that is a report of [`VERIFY_REPORT_VERSION`], else `None`: for
    /// etcd's own container, whose message is the gate's report only when `etcd-verify
    /// exec-etcd` blocked (etcd's own failures leave a log tail there).
    pub fn parse(message: &str) -> Option<Self> {
        serde_json::from_str::<VerifyReport>(message)
            .ok()
            .filter(|r| r.version == VERIFY_REPORT_VERSION)
    }

    /// A message that is not a readable report: start when the gate exited 0, otherwise a block
    /// with [`BlockCode::Unknown`] whose reason quotes the message (cut to 300 characters).
    pub fn undecodable(why: &str, message: &str, exit_code: i32) -> Self {
        let quoted: String = message.chars().take(300).collect();
        let reason = format!("etcd-verify's report cannot be read ({why}): {quoted:?}");
        if exit_code == 0 {
            Self::start(reason, None, None)
        } else {
            Self::block(BlockCode::Unknown, reason, None, None)
        }
    }

    /// The member whose data dir was lost, when that is what blocks.
    pub fn data_lost_member(&self) -> Option<MemberId> {
        match (self.decision, self.code) {
            (VerifyDecision::Block, Some(BlockCode::DataDirLost)) => self.member_id,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> MemberId {
        s.parse().unwrap()
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let report = VerifyReport::block(
            BlockCode::DataDirLost,
            "data dir lost".into(),
            Some(id("8e9e05c52164694d")),
            Some("/var/lib/etcd/member-archived-1".into()),
        );
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(
            json,
            r#"{"version":1,"decision":"block","code":"DataDirLost","reason":"data dir lost","member_id":"8e9e05c52164694d","archived":"/var/lib/etcd/member-archived-1"}"#
        );
        assert_eq!(VerifyReport::read(&json, 1), report);
        assert_eq!(report.data_lost_member(), Some(id("8e9e05c52164694d")));
    }

    #[test]
    fn a_start_has_no_code_and_names_no_lost_member() {
        let report = VerifyReport::start("restarting".into(), Some(id("3")), None);
        let json = serde_json::to_string(&report).unwrap();
        assert!(!json.contains("code"), "{json}");
        assert!(report.may_start());
        assert_eq!(report.data_lost_member(), None);
    }

    #[test]
    fn only_the_code_makes_a_lost_data_dir() {
        // The words alone decide nothing: a block that says "data dir lost" under another code.
        let report = VerifyReport::block(
            BlockCode::StaleRevision,
            "data dir lost: member 3".into(),
            Some(id("3")),
            None,
        );
        assert_eq!(report.data_lost_member(), None);
    }

    #[test]
    fn a_newer_code_is_unknown_not_an_error() {
        let json = r#"{"version":1,"decision":"block","code":"SomethingNew","reason":"r","member_id":null,"archived":null}"#;
        let report = VerifyReport::read(json, 1);
        assert_eq!(report.code, Some(BlockCode::Unknown));
        assert_eq!(report.reason, "r");
    }

    #[test]
    fn an_unreadable_message_blocks_by_exit_code_and_quotes_it() {
        let old = r#"{"decision":"block","reason":"data dir lost: member 3","member_id":"3","archived":null}"#;
        let report = VerifyReport::read(old, 1);
        assert_eq!(report.code, Some(BlockCode::Unknown));
        assert!(
            report.reason.contains("it has no version"),
            "{}",
            report.reason
        );
        assert!(
            report.reason.contains("data dir lost: member 3"),
            "{}",
            report.reason
        );
        assert_eq!(report.data_lost_member(), None);
        let later = VerifyReport::read(r#"{"version":2}"#, 1);
        assert!(
            later.reason.contains("report version 2"),
            "{}",
            later.reason
        );
        assert!(VerifyReport::read("not json", 0).may_start());
        assert!(!VerifyReport::read("not json", 2).may_start());
    }
}
