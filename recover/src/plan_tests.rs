//! The refusal table of [`crate::plan`], row by row.

use etcd_verify::decide::DataDir;
use etcd_verify::wal::{WalCommit, WalIdentity};
use membership::{EndpointStatus, Member, MemberId, MemberUrl};

use crate::plan::{
    Accept, Reached, Refusal, Survey, Voters, VotersFrom, decide_from_member, table,
};

const CLUSTER: u64 = 0xc1;

/// What a careful admin passes: `--confirm-down` naming exactly the voters that do not answer.
fn admin(s: &Survey) -> Accept {
    let answering: Vec<u64> = std::iter::once(&s.own)
        .chain(&s.others)
        .filter_map(|r| r.status.as_ref().ok().map(|st| st.member_id))
        .collect();
    Accept {
        confirmed_down: s
            .voters
            .list
            .iter()
            .filter(|v| v.id.get() != 1 && !answering.contains(&v.id.get()))
            .map(|v| v.name.clone())
            .collect(),
        ..Accept::default()
    }
}

fn losing(s: &Survey) -> Accept {
    Accept {
        losing_newer_writes: true,
        ..admin(s)
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
        voters: Voters::listed(VotersFrom::ThisNode, &[member(1), member(2), member(3)]),
    }
}

#[test]
fn the_only_survivor_with_data_recovers() {
    let plan = decide_from_member(&survey(), &admin(&survey())).unwrap();
    assert_eq!(plan.member_id, MemberId::new(1).unwrap());
    assert_eq!(plan.cluster_id, CLUSTER);
    assert_eq!(plan.raft_index, Some(100));
    assert!(plan.losing.is_empty());
}

#[test]
fn a_healthy_quorum_is_never_recovered() {
    let mut s = survey();
    s.quorum_read = Ok(url(2));
    let refusal = decide_from_member(&s, &losing(&s)).unwrap_err();
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
    let refusal = decide_from_member(&s, &losing(&s)).unwrap_err();
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
        decide_from_member(&s, &admin(&s)).unwrap_err(),
        Refusal::NoData("n1".into())
    );
    s.data_dir = DataDir::Unreadable("no .wal files".into());
    assert!(matches!(
        decide_from_member(&s, &admin(&s)),
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
        decide_from_member(&s, &losing(&s)),
        Err(Refusal::OwnIsLearner(_))
    ));
}

#[test]
fn a_survivor_further_ahead_is_named_and_only_the_flag_overrides() {
    let mut s = survey();
    s.others = vec![up(2, 120), up(3, 90)];
    let refusal = decide_from_member(&s, &admin(&s)).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::Behind {
            own_index: 100,
            ahead: format!("n2 ({}) at raft index 120", url(2)),
        }
    );
    let plan = decide_from_member(&s, &losing(&s)).unwrap();
    assert_eq!(
        plan.losing,
        vec![format!("n2 ({}) at raft index 120", url(2))]
    );
}

#[test]
fn survivors_behind_or_level_do_not_stop_recovery() {
    let mut s = survey();
    s.others = vec![up(2, 100), up(3, 99)];
    assert!(decide_from_member(&s, &admin(&s)).is_ok());
}

#[test]
fn an_own_etcd_that_does_not_answer_is_compared_by_its_wal() {
    let mut s = survey();
    s.own = down(1);
    // Its WAL says commit 100: ahead of n2, so it recovers without any flag.
    s.others = vec![up(2, 99), down(3)];
    assert_eq!(
        decide_from_member(&s, &admin(&s)).unwrap().raft_index,
        Some(100)
    );
    // n2 is further ahead than the WAL: refused, naming n2.
    s.others = vec![up(2, 101), down(3)];
    match decide_from_member(&s, &admin(&s)) {
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
        decide_from_member(&s, &admin(&s)),
        Err(Refusal::OwnIndexUnknown { .. })
    ));
    let plan = decide_from_member(&s, &losing(&s)).unwrap();
    assert_eq!(plan.raft_index, None);
    assert_eq!(plan.losing.len(), 1);
    // Alone, with its etcd stopped, the node recovers from its WAL.
    s.others = vec![down(2), down(3)];
    assert_eq!(decide_from_member(&s, &admin(&s)).unwrap().raft_index, None);
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

/// #65: from n1, n2 and n3 not answering is a lost quorum or a partition with n1 on the
/// minority side; only the admin, having checked, can tell which.
#[test]
fn voters_that_do_not_answer_must_be_confirmed_down_by_name() {
    let s = survey();
    let refusal = decide_from_member(&s, &Accept::default()).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::VotersUnaccounted {
            unaccounted: "n2 (member 2), n3 (member 3)".into(),
            from: "this node's member list".into(),
            flag: "n2,n3".into(),
        }
    );
    let text = refusal.to_string();
    assert!(text.contains("--confirm-down n2,n3"), "{text}");
    assert!(text.contains("partition"), "{text}");
    // One of the two named is not enough; the flag that loses writes does not waive it.
    let one = Accept {
        losing_newer_writes: true,
        confirmed_down: ["n2".to_owned()].into(),
        ..Accept::default()
    };
    assert!(matches!(
        decide_from_member(&s, &one),
        Err(Refusal::VotersUnaccounted { flag, .. }) if flag == "n3"
    ));
    // By name or by hex member id.
    let both = Accept {
        confirmed_down: ["n2".to_owned(), "3".to_owned()].into(),
        ..Accept::default()
    };
    assert!(decide_from_member(&s, &both).is_ok());
}

#[test]
fn a_confirmation_must_name_a_voter_that_is_down() {
    let mut s = survey();
    s.others = vec![up(2, 90), down(3)];
    let answering = Accept {
        confirmed_down: ["n2".to_owned(), "n3".to_owned()].into(),
        ..Accept::default()
    };
    assert_eq!(
        decide_from_member(&s, &answering).unwrap_err(),
        Refusal::ConfirmedDownAnswers("n2 (member 2)".into())
    );
    let typo = Accept {
        confirmed_down: ["n3".to_owned(), "m3".to_owned()].into(),
        ..Accept::default()
    };
    match decide_from_member(&s, &typo) {
        Err(Refusal::UnknownConfirmedDown { named, voters, .. }) => {
            assert_eq!(named, "m3");
            assert!(voters.contains("n3 (member 3)"), "{voters}");
        }
        other => panic!("{other:?}"),
    }
    // n2 answers without a leader: only n3 needs the confirmation.
    let n3 = Accept {
        confirmed_down: ["n3".to_owned()].into(),
        ..Accept::default()
    };
    assert!(decide_from_member(&s, &n3).is_ok());
}

#[test]
fn without_its_etcd_the_node_accounts_for_the_members_of_its_revision() {
    let ids = membership::MemberIds::parse(
        "1=https://127.0.0.1:2380,2=https://127.0.0.2:2380,4=https://127.0.0.4:2380",
    )
    .unwrap();
    let names =
        membership::InitialCluster::parse("n1=https://127.0.0.1:2380,n2=https://127.0.0.2:2380")
            .unwrap();
    // n3 joined after this revision: another member's list still names it.
    let mut s = survey();
    s.own = down(1);
    s.voters = Voters::from_revision(&ids, &names, &[member(2), member(3)]);
    let refusal = decide_from_member(&s, &Accept::default()).unwrap_err();
    match &refusal {
        Refusal::VotersUnaccounted {
            unaccounted,
            from,
            flag,
        } => {
            assert_eq!(
                unaccounted,
                "member 4 (unnamed), n2 (member 2), n3 (member 3)"
            );
            assert!(from.contains("revision"), "{from}");
            assert_eq!(flag, "4,n2,n3");
        }
        other => panic!("{other:?}"),
    }
    let confirmed = Accept {
        confirmed_down: ["n2", "n3", "4"].map(str::to_owned).into(),
        ..Accept::default()
    };
    assert!(decide_from_member(&s, &confirmed).is_ok());
    assert!(
        table(&s).contains("voters (this node's revision"),
        "{}",
        table(&s)
    );
    // Its data gone too: the node is still known by its name, never asked to confirm itself.
    s.data_dir = DataDir::Absent;
    assert_eq!(
        decide_from_member(&s, &confirmed).unwrap_err(),
        Refusal::NoData("n1".into())
    );
}

mod from_snapshot {
    use super::{admin, losing, survey, up, url};
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
        let plan = decide_from_snapshot(&s, &ours, &tool, &snap(), &admin(&s)).unwrap();
        assert_eq!(plan.bump, Some(3_600_000_000));
        let plan = decide_from_snapshot(&survey(), &ours, &tool, &snap(), &admin(&survey()));
        assert_eq!(plan.map(|p| p.bump), Ok(Some(REVISION_BUMP)));
    }

    #[test]
    fn a_snapshot_is_restored_only_where_quorum_is_lost() {
        let mut s = survey();
        let tool = restore_tool("etcd:3.5.10").unwrap();
        let ours = Origin::ThisCluster("shares n1".into());
        assert!(matches!(
            decide_from_snapshot(&s, &ours, &tool, &snap(), &Accept::default()),
            Err(Refusal::VotersUnaccounted { .. })
        ));
        let tool = restore_tool("etcd:3.5.10").unwrap();
        let ours = Origin::ThisCluster("shares n1".into());
        assert_eq!(
            decide_from_snapshot(&s, &ours, &tool, &snap(), &admin(&s)).map(|p| p.bump),
            Ok(Some(REVISION_BUMP))
        );
        s.quorum_read = Ok(url(1));
        let every_flag = Accept {
            other_cluster: true,
            revisions_going_back: true,
            ..losing(&s)
        };
        assert!(matches!(
            decide_from_snapshot(&s, &ours, &tool, &snap(), &every_flag),
            Err(Refusal::QuorumHealthy(_))
        ));
    }

    #[test]
    fn another_clusters_snapshot_and_a_tool_that_cannot_bump_each_need_their_flag() {
        let s = survey();
        let bumping = restore_tool("etcd:3.6.0").unwrap();
        let other = Origin::OtherCluster("no shared member".into());
        assert!(matches!(
            decide_from_snapshot(&s, &other, &bumping, &snap(), &admin(&s)),
            Err(Refusal::OtherCluster(_))
        ));
        let forced = Accept {
            other_cluster: true,
            ..admin(&s)
        };
        assert!(decide_from_snapshot(&s, &other, &bumping, &snap(), &forced).is_ok());

        let old = restore_tool("etcd:3.4.23").unwrap();
        let ours = Origin::ThisCluster("shares n1".into());
        let refusal = decide_from_snapshot(&s, &ours, &old, &snap(), &admin(&s)).unwrap_err();
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
            ..admin(&s)
        };
        assert_eq!(
            decide_from_snapshot(&s, &ours, &old, &snap(), &waived).map(|p| p.bump),
            Ok(None)
        );
    }
}
