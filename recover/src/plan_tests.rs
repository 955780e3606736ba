//! The refusal table of [`crate::plan`], row by row.

use etcd_verify::decide::DataDir;
use etcd_verify::wal::{WalCommit, WalIdentity};
use membership::{EndpointStatus, Member, MemberId, MemberUrl};

use crate::plan::{Accept, Reached, Refusal, Survey, decide_from_member, table};

const CLUSTER: u64 = 0xc1;

fn losing() -> Accept {
    Accept {
        losing_newer_writes: true,
        ..Accept::default()
    }
}

fn url(n: u8) -> MemberUrl {
    format!("https://127.0.0.{n}:2379").parse().unwrap()
}

fn status(n: u8, raft_index: u64, leader: u64) -> EndpointStatus {
    EndpointStatus {
        endpoint: url(n),
        cluster_id: CLUSTER,
        member_id: u64::from(n),
        leader,
        raft_index,
        raft_term: 4,
        revision: 10,
        raft_applied_index: raft_index,
        is_learner: false,
        db_size: 1,
        db_size_in_use: 1,
        version: "3.4.23".into(),
        errors: Vec::new(),
    }
}

fn up(n: u8, raft_index: u64) -> Reached {
    Reached {
        url: url(n),
        status: Ok(status(n, raft_index, 0)),
    }
}

fn down(n: u8) -> Reached {
    Reached {
        url: url(n),
        status: Err("connection refused".into()),
    }
}

fn member(n: u8) -> Member {
    let id = MemberId::new(u64::from(n)).unwrap();
    let peer: MemberUrl = format!("https://127.0.0.{n}:2380").parse().unwrap();
    Member::voter(id, &format!("n{n}"), peer).with_client_url(url(n))
}

/// n1 survives with its data at raft index 100; n2 and n3 are down; no quorum.
fn survey() -> Survey {
    Survey {
        name: "n1".into(),
        data_dir: DataDir::Present(WalIdentity {
            member_id: 1,
            cluster_id: CLUSTER,
        }),
        own: up(1, 100),
        wal_commit: Ok(WalCommit {
            term: 2,
            commit: 100,
        }),
        others: vec![down(2), down(3)],
        members: vec![member(1), member(2), member(3)],
        quorum_read: Err("context deadline exceeded".into()),
    }
}

#[test]
fn the_only_survivor_with_data_recovers() {
    let plan = decide_from_member(&survey(), Accept::default()).unwrap();
    assert_eq!(plan.member_id, MemberId::new(1).unwrap());
    assert_eq!(plan.cluster_id, CLUSTER);
    assert_eq!(plan.raft_index, Some(100));
    assert!(plan.losing.is_empty());
}

#[test]
fn a_healthy_quorum_is_never_recovered() {
    let mut s = survey();
    s.quorum_read = Ok(url(2));
    let refusal = decide_from_member(&s, losing()).unwrap_err();
    assert_eq!(refusal, Refusal::QuorumHealthy(url(2).to_string()));
    assert!(refusal.to_string().contains("quorum is healthy"));
}

#[test]
fn a_member_that_still_follows_a_leader_stops_recovery() {
    let mut s = survey();
    s.others[0] = Reached {
        url: url(2),
        status: Ok(status(2, 100, 3)),
    };
    let refusal = decide_from_member(&s, losing()).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::LeaderStillKnown {
            member: format!("n2 ({})", url(2)),
            leader: 3
        }
    );
}

#[test]
fn no_data_or_unreadable_data_is_nothing_to_recover_from() {
    let mut s = survey();
    s.data_dir = DataDir::Absent;
    assert_eq!(
        decide_from_member(&s, Accept::default()).unwrap_err(),
        Refusal::NoData("n1".into())
    );
    s.data_dir = DataDir::Unreadable("no .wal files".into());
    assert!(matches!(
        decide_from_member(&s, Accept::default()),
        Err(Refusal::DataUnreadable(_))
    ));
}

#[test]
fn a_learner_is_not_recovered_from() {
    let mut s = survey();
    if let Ok(st) = &mut s.own.status {
        st.is_learner = true;
    }
    assert!(matches!(
        decide_from_member(&s, losing()),
        Err(Refusal::OwnIsLearner(_))
    ));
}

#[test]
fn a_survivor_further_ahead_is_named_and_only_the_flag_overrides() {
    let mut s = survey();
    s.others = vec![up(2, 120), up(3, 90)];
    let refusal = decide_from_member(&s, Accept::default()).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::Behind {
            own_index: 100,
            ahead: format!("n2 ({}) at raft index 120", url(2)),
        }
    );
    let plan = decide_from_member(&s, losing()).unwrap();
    assert_eq!(
        plan.losing,
        vec![format!("n2 ({}) at raft index 120", url(2))]
    );
}

#[test]
fn survivors_behind_or_level_do_not_stop_recovery() {
    let mut s = survey();
    s.others = vec![up(2, 100), up(3, 99)];
    assert!(decide_from_member(&s, Accept::default()).is_ok());
}

#[test]
fn an_own_etcd_that_does_not_answer_is_compared_by_its_wal() {
    let mut s = survey();
    s.own = down(1);
    // Its WAL says commit 100: ahead of n2, so it recovers without any flag.
    s.others = vec![up(2, 99), down(3)];
    assert_eq!(
        decide_from_member(&s, Accept::default())
            .unwrap()
            .raft_index,
        Some(100)
    );
    // n2 is further ahead than the WAL: refused, naming n2.
    s.others = vec![up(2, 101), down(3)];
    match decide_from_member(&s, Accept::default()) {
        Err(Refusal::Behind { own_index, ahead }) => {
            assert_eq!(own_index, 100);
            assert!(ahead.contains("raft index 101"), "{ahead}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_own_etcd_that_does_not_answer_cannot_be_compared_without_its_wal() {
    let mut s = survey();
    s.own = down(1);
    s.wal_commit = Err("no raft hard state in any WAL file".into());
    s.others = vec![up(2, 10), down(3)];
    assert!(matches!(
        decide_from_member(&s, Accept::default()),
        Err(Refusal::OwnIndexUnknown { .. })
    ));
    let plan = decide_from_member(&s, losing()).unwrap();
    assert_eq!(plan.raft_index, None);
    assert_eq!(plan.losing.len(), 1);
    // Alone, with its etcd stopped, the node recovers from its WAL.
    s.others = vec![down(2), down(3)];
    assert_eq!(
        decide_from_member(&s, Accept::default())
            .unwrap()
            .raft_index,
        None
    );
}

#[test]
fn the_table_lists_every_endpoint_and_the_quorum_verdict() {
    let text = table(&survey());
    assert!(
        text.contains(&format!("n1 ({}) [this node]", url(1))),
        "{text}"
    );
    assert!(text.contains("raft index 100"), "{text}");
    assert!(text.contains("no answer: connection refused"), "{text}");
    assert!(text.contains("quorum: lost"), "{text}");
    assert!(
        text.contains("this node's data: commit index 100 (term 2) in its WAL"),
        "{text}"
    );
}

mod from_snapshot {
    use super::{losing, survey, up, url};
    use crate::plan::{Accept, Refusal, decide_from_snapshot, observed_raft_index};
    use crate::snapshot::{Contents, Origin, REVISION_BUMP, restore_tool};

    /// A snapshot at revision 5 and raft index 50.
    fn snap() -> Contents {
        Contents {
            members: Vec::new(),
            revision: 5,
            consistent_index: 50,
        }
    }

    #[test]
    fn the_bump_covers_the_highest_raft_index_or_revision_seen() {
        let mut s = survey();
        // The survivor (raft index 100, revision 10) and the snapshot (index 50).
        assert_eq!(observed_raft_index(&s, &snap()), 100);
        let big = Contents {
            consistent_index: 2_000_000_000,
            ..snap()
        };
        assert_eq!(observed_raft_index(&s, &big), 2_000_000_000);
        // A member restored before: its raft index is below how far its revision moved.
        let mut ahead = up(2, 7);
        if let Ok(st) = ahead.status.as_mut() {
            st.revision = 3_000_000_005;
        }
        s.others[0] = ahead;
        assert_eq!(observed_raft_index(&s, &snap()), 3_000_000_000);
        let tool = restore_tool("etcd:3.5.16").unwrap();
        let ours = Origin::ThisCluster("shares n1".into());
        let plan = decide_from_snapshot(&s, &ours, &tool, &snap(), Accept::default()).unwrap();
        assert_eq!(plan.bump, Some(3_600_000_000));
        let plan = decide_from_snapshot(&survey(), &ours, &tool, &snap(), Accept::default());
        assert_eq!(plan.map(|p| p.bump), Ok(Some(REVISION_BUMP)));
    }

    #[test]
    fn a_snapshot_is_restored_only_where_quorum_is_lost() {
        let mut s = survey();
        let tool = restore_tool("etcd:3.5.10").unwrap();
        let ours = Origin::ThisCluster("shares n1".into());
        assert_eq!(
            decide_from_snapshot(&s, &ours, &tool, &snap(), Accept::default()).map(|p| p.bump),
            Ok(Some(REVISION_BUMP))
        );
        s.quorum_read = Ok(url(1));
        let every_flag = Accept {
            other_cluster: true,
            revisions_going_back: true,
            ..losing()
        };
        assert!(matches!(
            decide_from_snapshot(&s, &ours, &tool, &snap(), every_flag),
            Err(Refusal::QuorumHealthy(_))
        ));
    }

    #[test]
    fn another_clusters_snapshot_and_a_tool_that_cannot_bump_each_need_their_flag() {
        let s = survey();
        let bumping = restore_tool("etcd:3.6.0").unwrap();
        let other = Origin::OtherCluster("no shared member".into());
        assert!(matches!(
            decide_from_snapshot(&s, &other, &bumping, &snap(), Accept::default()),
            Err(Refusal::OtherCluster(_))
        ));
        let forced = Accept {
            other_cluster: true,
            ..Accept::default()
        };
        assert!(decide_from_snapshot(&s, &other, &bumping, &snap(), forced).is_ok());

        let old = restore_tool("etcd:3.4.23").unwrap();
        let ours = Origin::ThisCluster("shares n1".into());
        let refusal =
            decide_from_snapshot(&s, &ours, &old, &snap(), Accept::default()).unwrap_err();
        assert_eq!(
            refusal,
            Refusal::CannotBumpRevision {
                tool: "etcdctl 3.4.23".into()
            }
        );
        assert!(
            refusal
                .to_string()
                .contains("--accept-revisions-going-back")
        );
        let waived = Accept {
            revisions_going_back: true,
            ..Accept::default()
        };
        assert_eq!(
            decide_from_snapshot(&s, &ours, &old, &snap(), waived).map(|p| p.bump),
            Ok(None)
        );
    }
}
