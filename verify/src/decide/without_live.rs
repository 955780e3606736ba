//! The rows of `etcd-verify`'s table where no etcd endpoint answered the member list: the data
//! dir and the revision alone decide (see the table in [`super`]).

use membership::{BlockCode, MemberId};

use super::{DataDir, Decision, hex};
use crate::config::VerifyConfig;

pub(super) fn decide_without_live(
    config: &VerifyConfig,
    data: &DataDir,
    earlier: Option<&str>,
    why: &str,
) -> Decision {
    let expected = config.member_ids.id_for_url(&config.peer_url);
    let bootstrap = config.is_first_bootstrap();
    let unsure = |reason| Decision::wait(BlockCode::NoEndpointAnswered, reason, expected);
    match data {
        DataDir::Present(wal) if expected.is_some_and(|id| id.get() == wal.member_id) => {
            Decision::start(
                format!(
                    "no etcd endpoint answered ({why}); the data dir holds member {} as this revision expects: starting (whole cluster restarting)",
                    hex(wal.member_id)
                ),
                expected,
            )
        }
        DataDir::Present(wal) if bootstrap => Decision::start(
            format!(
                "no etcd endpoint answered ({why}); bootstrap revision restarting on its own data dir (member {})",
                hex(wal.member_id)
            ),
            MemberId::new(wal.member_id),
        ),
        DataDir::Absent if bootstrap && earlier.is_some() => {
            bootstrap_data_lost(config, earlier.unwrap_or_default())
        }
        DataDir::Absent if bootstrap => Decision::start(
            format!("bootstrapping a new cluster (no etcd endpoint answered: {why})"),
            None,
        ),
        DataDir::Present(wal) => unsure(format!(
            "no etcd endpoint answered ({why}) and the data dir holds member {}, which ETCD_MEMBER_IDS does not list for {}: cannot confirm it is safe to start",
            hex(wal.member_id),
            config.peer_url
        )),
        DataDir::Unreadable(reason) => unsure(format!(
            "no etcd endpoint answered ({why}) and the data dir is unreadable ({reason})"
        )),
        DataDir::Absent => unsure(format!(
            "no etcd endpoint answered ({why}) and there is no data dir to start from"
        )),
    }
}

/// The bootstrap manifest, no data dir, but this node ran a member before: not the first
/// bootstrap of this cluster. Starting would make a new, empty cluster with the ids of the lost
/// one (the same peer URL and token), so it blocks as "data dir lost" for the member the
/// bootstrap made: where other members run, the operator replaces it (remove, add again as a
/// learner, a new revision); where none do, the data must come back from a snapshot.
fn bootstrap_data_lost(config: &VerifyConfig, earlier: &str) -> Decision {
    let member = config.bootstrap_member_id();
    Decision::Block {
        code: BlockCode::DataDirLost,
        reason: format!(
            "data dir lost: this node bootstrapped its cluster before ({earlier}) and {} has no member data; \
             starting the bootstrap manifest again would make a new, empty cluster. If other members run, \
             the operator removes member {} and adds this node again as a learner; if none do, restore \
             from a snapshot or backup with `etcd-recover from-snapshot` (docs/runbooks/quorum-loss.md)",
            config.data_dir.display(),
            member.map_or_else(|| "?".to_owned(), |m| m.to_string()),
        ),
        member_id: member,
    }
}
