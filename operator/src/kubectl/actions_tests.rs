#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::ObjectMeta;
use serde_json::json;

use super::*;
use crate::api::{
    Backup, BackupStatus, EtcdClusterSpec, EtcdClusterStatus, MemberStatus, NodeStatus,
};

fn voter(name: &str, healthy: bool) -> MemberStatus {
    MemberStatus {
        name: name.into(),
        id: format!("id-{name}"),
        role: "Voter".into(),
        started: true,
        healthy,
        ..MemberStatus::default()
    }
}

fn cluster(healthy: &[bool]) -> EtcdCluster {
    let mut c = EtcdCluster::new("cluster", EtcdClusterSpec::default());
    c.metadata.resource_version = Some("42".into());
    let names: Vec<String> = (1..=healthy.len()).map(|i| format!("n{i}")).collect();
    c.status = Some(EtcdClusterStatus {
        latest_available_revision: 7,
        members: names
            .iter()
            .zip(healthy)
            .map(|(n, h)| voter(n, *h))
            .collect(),
        node_statuses: names
            .iter()
            .map(|n| NodeStatus {
                node_name: n.clone(),
                current_revision: 7,
                ..NodeStatus::default()
            })
            .collect(),
        ..EtcdClusterStatus::default()
    });
    c
}

fn node(name: &str, stopped: Option<&str>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            resource_version: Some("9".into()),
            annotations: stopped
                .map(|s| BTreeMap::from([(ETCD_STOPPED_ANNOTATION.to_owned(), s.to_owned())])),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

fn stop(node: &str) -> Action {
    Action::StopEtcd {
        node: node.into(),
        reason: "disk swap".into(),
    }
}

#[test]
fn requests_patch_exactly_their_field_guarded_by_the_resource_version() {
    let mut c = cluster(&[true; 3]);
    c.spec.backup = Some(Backup::default());
    let cases = [
        (
            Action::Backup {
                request: "b".into(),
            },
            json!({"backup": {"request": "b"}}),
            Done::Backup("b".into()),
        ),
        (
            Action::Defragment {
                request: "d".into(),
            },
            json!({"defragmentation": {"request": "d"}}),
            Done::Defragment("d".into()),
        ),
        (
            Action::RotateCa {
                request: "r".into(),
            },
            json!({"certificates": {"caRotationRequest": "r"}}),
            Done::CaRotation("r".into()),
        ),
        (
            Action::Redeploy { reason: "k".into() },
            json!({"forceRedeploymentReason": "k"}),
            Done::RevisionAfter(7),
        ),
    ];
    for (action, spec, done) in cases {
        let change = decide(&action, &c, None).unwrap();
        assert_eq!(change.target, Target::Cluster);
        assert_eq!(
            change.patch,
            json!({"metadata": {"resourceVersion": "42"}, "spec": spec}),
            "{action:?}"
        );
        assert_eq!(change.done, Some(done));
    }
}

#[test]
fn requests_that_would_do_nothing_are_refused() {
    let mut c = cluster(&[true; 3]);
    let backup = Action::Backup {
        request: "b".into(),
    };
    assert_eq!(decide(&backup, &c, None), Err(Refusal::NoBackups));
    c.spec.backup = Some(Backup {
        request: "b".into(),
        ..Backup::default()
    });
    assert_eq!(
        decide(&backup, &c, None),
        Err(Refusal::Unchanged {
            field: "spec.backup.request",
            value: "b".into()
        })
    );
    let blank = Action::Redeploy { reason: " ".into() };
    assert_eq!(
        decide(&blank, &c, None),
        Err(Refusal::Empty("spec.forceRedeploymentReason"))
    );
    c.spec.management_state = ManagementState::Unmanaged;
    let defrag = Action::Defragment {
        request: "d".into(),
    };
    assert_eq!(
        decide(&defrag, &c, None),
        Err(Refusal::Unmanaged { what: "defragment" })
    );
}

#[test]
fn stopping_etcd_keeps_a_quorum_and_says_what_is_left() {
    let c = cluster(&[true; 3]);
    let change = decide(&stop("n2"), &c, Some(&node("n2", None))).unwrap();
    assert_eq!(change.target, Target::Node("n2".into()));
    assert_eq!(
        change.patch,
        json!({"metadata": {"resourceVersion": "9", "annotations": {ETCD_STOPPED_ANNOTATION: "disk swap"}}})
    );
    assert!(
        change
            .summary
            .contains("2 healthy voter(s) of 3 stay, exactly a quorum"),
        "{}",
        change.summary
    );
    let five = cluster(&[true; 5]);
    let change = decide(&stop("n5"), &five, Some(&node("n5", None))).unwrap();
    assert!(
        change.summary.contains("1 more may fail"),
        "{}",
        change.summary
    );
    // n1 already down: n3's member is needed.
    let c = cluster(&[false, true, true]);
    assert_eq!(
        decide(&stop("n3"), &c, Some(&node("n3", None))),
        Err(Refusal::WouldLoseQuorum {
            node: "n3".into(),
            left: 1,
            voters: 3,
            quorum: 2
        })
    );
    // The down member's own node may be stopped.
    assert!(decide(&stop("n1"), &c, Some(&node("n1", None))).is_ok());
}

#[test]
fn node_actions_refuse_unknown_foreign_and_repeated_targets() {
    let c = cluster(&[true; 3]);
    assert_eq!(
        decide(&stop("n9"), &c, None),
        Err(Refusal::NoNode("n9".into()))
    );
    assert_eq!(
        decide(&stop("w1"), &c, Some(&node("w1", None))),
        Err(Refusal::NotControlPlane("w1".into()))
    );
    assert_eq!(
        decide(&stop("n2"), &c, Some(&node("n2", Some("earlier")))),
        Err(Refusal::AlreadyStopped {
            node: "n2".into(),
            reason: "earlier".into()
        })
    );
    let start = Action::StartEtcd { node: "n2".into() };
    assert_eq!(
        decide(&start, &c, Some(&node("n2", None))),
        Err(Refusal::NotStopped("n2".into()))
    );
    let change = decide(&start, &c, Some(&node("n2", Some("earlier")))).unwrap();
    assert_eq!(
        change.patch,
        json!({"metadata": {"resourceVersion": "9", "annotations": {ETCD_STOPPED_ANNOTATION: null}}})
    );
}

#[test]
fn progress_reads_the_handled_request_and_the_rollout() {
    let mut s = EtcdClusterStatus::default();
    let done = Done::Backup("b".into());
    assert!(progress(&done, &s).unwrap_err().contains("not done yet"));
    s.backup = Some(BackupStatus {
        handled_request: "a".into(),
        ..BackupStatus::default()
    });
    assert!(
        progress(&done, &s)
            .unwrap_err()
            .contains("last handled: \"a\"")
    );
    s.backup.as_mut().unwrap().handled_request = "b".into();
    assert_eq!(
        progress(&done, &s).unwrap(),
        "backup for request \"b\" done"
    );

    let rollout = Done::RevisionAfter(7);
    let mut s = cluster(&[true; 3]).status.unwrap();
    assert_eq!(
        progress(&rollout, &s),
        Err("no revision after 7 yet".into())
    );
    s.latest_available_revision = 8;
    s.node_statuses[0].current_revision = 8;
    assert_eq!(
        progress(&rollout, &s),
        Err("revision 8 rolling: n2 on 7, n3 on 7 behind".into())
    );
    for n in &mut s.node_statuses {
        n.current_revision = 8;
    }
    assert_eq!(
        progress(&rollout, &s).unwrap(),
        "every node runs revision 8"
    );
}
