use super::*;
use crate::api::{Condition, NodeStatus};
use crate::etcd::{DbSize, MemberObs};
use membership::{Member, MemberId, MemberUrl};

#[test]
fn etcd_lists_every_member_with_its_numbers() {
    let url = |s: &str| s.parse::<MemberUrl>().unwrap();
    let id = MemberId::new(0x1a).unwrap();
    let mut obs = EtcdObservation {
        members: vec![
            Member::voter(id, "n1", url("https://10.0.0.1:2380"))
                .with_client_url(url("https://10.0.0.1:2379")),
        ],
        leader: Some(id),
        cluster_version: Some("3.4.0".into()),
        ..Default::default()
    };
    obs.health.insert(
        id,
        MemberObs {
            healthy: true,
            raft_index: Some(120),
            applied_index: Some(119),
            revision: Some(77),
            version: Some("3.4.23".into()),
            db: Some(DbSize {
                total: 4096,
                in_use: 2048,
            }),
            error: None,
            serving_not_after: None,
        },
    );
    let text = etcd(&obs);
    for want in [
        "cluster version: 3.4.0",
        "n1 voter LEADER healthy=true raft index 120 applied 119 revision 77 db 4096 bytes (2048 in use) version 3.4.23",
        "alarms: none",
        "member lists: every voter agrees",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    let down = EtcdObservation {
        error: Some("no etcd endpoint answered".into()),
        ..Default::default()
    };
    assert!(etcd(&down).contains("etcd could not be read: no etcd endpoint answered"));
}

#[test]
fn nodes_and_conditions_read_as_tables() {
    let status = EtcdClusterStatus {
        latest_available_revision: 4,
        node_statuses: vec![NodeStatus {
            node_name: "n2".into(),
            current_revision: 3,
            target_revision: Some(4),
            etcd_pod_missing_since: "2026-11-25T10:00:00Z".into(),
            ..Default::default()
        }],
        conditions: vec![Condition {
            type_: "NodeInstallerDegraded".into(),
            status: "True".into(),
            reason: "EtcdPodMissing".into(),
            message: "n2 shows no etcd static pod".into(),
            last_transition_time: "2026-11-25T10:00:01Z".into(),
        }],
        ..Default::default()
    };
    let n = nodes(&status, &[]);
    assert!(n.contains("latest available revision: 4"), "{n}");
    assert!(
        n.contains("== n2\nstatus: current revision 3, target Some(4)"),
        "{n}"
    );
    assert!(n.contains("no etcd pod since 2026-11-25T10:00:00Z"), "{n}");
    let c = conditions(&status);
    assert!(
        c.starts_with("NodeInstallerDegraded")
            && c.contains("EtcdPodMissing")
            && c.contains("n2 shows no etcd static pod"),
        "{c}"
    );
}
