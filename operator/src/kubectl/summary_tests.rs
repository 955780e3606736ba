#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::api::{
    CaRotationStatus, CertificatesStatus, ClusterIdentity, EtcdClusterSpec, EtcdVersionStatus,
};

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: "2026-11-28T00:00:00Z".into(),
    }
}

fn member(name: &str, role: &str, healthy: bool) -> MemberStatus {
    MemberStatus {
        name: name.into(),
        id: format!("{name}-id"),
        peer_url: format!("https://{name}:2380"),
        role: role.into(),
        started: !name.is_empty(),
        healthy,
        leader: name == "n1",
        version: "3.5.16".into(),
        ..MemberStatus::default()
    }
}

fn cluster() -> EtcdCluster {
    let mut c = EtcdCluster::new("cluster", EtcdClusterSpec::default());
    c.metadata.generation = Some(5);
    let mut learner = member("n3", "Learner", true);
    learner.learner_raft_index = Some(90);
    learner.leader_raft_index = Some(120);
    c.status = Some(EtcdClusterStatus {
        observed_generation: Some(4),
        latest_available_revision: 8,
        conditions: vec![
            condition("Degraded", "False", "AsExpected", ""),
            condition("Available", "True", "AsExpected", "2 of 2 voters healthy"),
            condition("Progressing", "True", "AddingMember", "n3 catching up"),
            condition("BackupReady", "False", "NoBackupYet", "no backup taken yet"),
            condition("EtcdMembersDegraded", "False", "AsExpected", ""),
            condition("CertificatesDegraded", "True", "Expiring", "n2's peer cert"),
        ],
        // Listed out of order: printed sorted.
        members: vec![
            learner,
            member("n2", "Voter", false),
            member("n1", "Voter", true),
        ],
        node_statuses: vec![
            NodeStatus {
                node_name: "n2".into(),
                current_revision: 7,
                target_revision: Some(8),
                etcd_stopped_by_admin: "disk swap".into(),
                ..NodeStatus::default()
            },
            NodeStatus {
                node_name: "n1".into(),
                current_revision: 8,
                ..NodeStatus::default()
            },
        ],
        cluster_identity: Some(ClusterIdentity {
            cluster_id: "cafe".into(),
            ..ClusterIdentity::default()
        }),
        etcd_version: Some(EtcdVersionStatus {
            cluster_version: "3.5.0".into(),
            state: "AtTarget".into(),
            ..EtcdVersionStatus::default()
        }),
        certificates: Some(CertificatesStatus {
            ca_rotation: Some(CaRotationStatus {
                trigger: "rot-1".into(),
                phase: "TrustBoth".into(),
                phase_started_at: "2026-11-28T01:00:00Z".into(),
                ..CaRotationStatus::default()
            }),
            ..CertificatesStatus::default()
        }),
        ..EtcdClusterStatus::default()
    });
    c
}

#[test]
fn the_summary_shows_members_nodes_conditions_work_and_problems() {
    let text = render(&cluster());
    let expected = "\
EtcdCluster cluster: Managed, generation 5 (status from 4), latest revision 8
etcd cluster id cafe
etcd cluster version 3.5.0 (target -: AtTarget)

MEMBER  ID     ROLE              STARTED  HEALTHY  LEADER  VERSION  PEER URL
n1      n1-id  Voter             yes      yes      *       3.5.16   https://n1:2380
n2      n2-id  Voter             yes      no               3.5.16   https://n2:2380
n3      n3-id  Learner (90/120)  yes      yes              3.5.16   https://n3:2380

NODE  REVISION  TARGET  NOTE
n1    8         -
n2    7         8       etcd stopped by an admin: disk swap

CONDITION    STATUS  REASON        MESSAGE
Available    True    AsExpected    2 of 2 voters healthy
Progressing  True    AddingMember  n3 catching up
Degraded     False   AsExpected

Under way:
  - AddingMember: n3 catching up
  - CA rotation for \"rot-1\": phase TrustBoth since 2026-11-28T01:00:00Z

Needs attention:
  - the operator has not acted on generation 5 of the spec yet (its status is from 4)
  - BackupReady False (NoBackupYet): no backup taken yet
  - CertificatesDegraded True (Expiring): n2's peer cert
";
    assert_eq!(text, expected, "\n{text}");
}

#[test]
fn a_cluster_without_status_says_so_without_failing() {
    let c = EtcdCluster::new("cluster", EtcdClusterSpec::default());
    let text = render(&c);
    assert!(text.contains("(status from none)"), "{text}");
    assert!(text.contains("Nothing needs attention."), "{text}");
}
