//! Rollout ordering, the one-node-at-a-time rule, failures and back-off, supersession.

use membership::{ClusterView, DenyRule, Member, MemberHealth, MemberId, MemberUrl};
use time::OffsetDateTime;

use super::*;
use crate::certs::format_time;
use crate::status::{Computed, ConditionType as C, Reason};

const GRACE: time::Duration = time::Duration::minutes(5);

fn t(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000 + secs).unwrap()
}

fn url(i: u64) -> MemberUrl {
    format!("https://10.0.0.{i}:2380").parse().unwrap()
}

fn cluster(healthy: &[bool]) -> ClusterView {
    ClusterView {
        api_servers: Vec::new(),
        control_plane: Default::default(),
        outage_approved: false,
        standby: None,
        members: healthy
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let i = i as u64 + 1;
                MemberHealth {
                    member: Member::voter(MemberId::new(i).unwrap(), &format!("n{i}"), url(i)),
                    healthy: *h,
                }
            })
            .collect(),
        rolling_node: None,
        preflight: Default::default(),
    }
}

fn node(i: u64, revision: i64, ready: bool) -> NodeView {
    NodeView {
        name: format!("n{i}"),
        member: MemberId::new(i),
        is_leader: false,
        pod: Some(PodState {
            revision,
            ready,
            running: ready,
            started_at: None,
            blocked: None,
        }),
        installer: None,
        member_healthy: ready,
        node_ready: true,
        serves_elsewhere: false,
        equivalent_to_latest: false,
        etcd_stopped: None,
        status: NodeStatus {
            node_name: format!("n{i}"),
            current_revision: if ready { revision } else { revision - 1 },
            ..Default::default()
        },
    }
}

fn installs(d: &RolloutDecision) -> (String, i64, u32) {
    match &d.action {
        RolloutAction::Install {
            node,
            revision,
            attempt,
        } => (node.clone(), *revision, *attempt),
        other => panic!("expected Install, got {other:?}"),
    }
}

#[test]
fn unready_nodes_first_leader_last() {
    let mut nodes = vec![node(1, 1, true), node(2, 1, true), node(3, 1, true)];
    nodes[0].is_leader = true;
    let d = decide(&nodes, 2, &cluster(&[true, true, true]), None, t(0), GRACE);
    assert_eq!(installs(&d), ("n2".into(), 2, 1));
    // n3's etcd is blocked by etcd-verify (and so unhealthy): it goes first, even before n2.
    nodes[2].pod.as_mut().unwrap().blocked = Some("stale or forged revision".into());
    nodes[2].pod.as_mut().unwrap().ready = false;
    let d = decide(&nodes, 2, &cluster(&[true, true, false]), None, t(0), GRACE);
    assert_eq!(installs(&d).0, "n3");
    // Only the leader is left: now it moves.
    let mut only_leader = vec![node(1, 1, true), node(2, 2, true), node(3, 2, true)];
    only_leader[0].is_leader = true;
    assert_eq!(
        installs(&decide(
            &only_leader,
            2,
            &cluster(&[true, true, true]),
            None,
            t(0),
            GRACE
        ))
        .0,
        "n1"
    );
}

#[test]
fn the_next_restart_waits_for_the_last_restarted_member_to_catch_up() {
    let nodes = vec![node(1, 2, true), node(2, 1, true), node(3, 1, true)];
    let behind = || {
        Some((
            "n1",
            "n1 is catching up (applied 10, leader committed 900)".into(),
        ))
    };
    let d = decide(
        &nodes,
        2,
        &cluster(&[true, true, true]),
        behind(),
        t(0),
        GRACE,
    );
    assert!(
        matches!(&d.action, RolloutAction::Wait { node, reason }
            if node == "n2" && reason.contains("n1 is catching up") && reason.contains("waits until it has caught up")),
        "{:?}",
        d.action
    );
    // A lagging member's own node is not held back.
    let lagging_n2 = Some(("n2", "n2 is catching up".into()));
    let d = decide(
        &nodes,
        2,
        &cluster(&[true, true, true]),
        lagging_n2,
        t(0),
        GRACE,
    );
    assert_eq!(installs(&d).0, "n2");
}

/// The next pass sees the statuses this decision wrote.
fn carry_statuses(nodes: &mut [NodeView], d: &RolloutDecision) {
    for n in nodes {
        if let Some(s) = d.statuses.iter().find(|s| s.node_name == n.name) {
            n.status = s.clone();
        }
    }
}

#[test]
fn a_vanished_static_pod_is_reported_then_installed_again_after_the_grace() {
    let mut nodes = vec![node(1, 4, true), node(2, 4, true), node(3, 4, true)];
    nodes[1].pod = None;
    nodes[1].member_healthy = false;
    let view = cluster(&[true, false, true]);
    let d = decide(&nodes, 4, &view, None, t(0), GRACE);
    assert_eq!(d.action, RolloutAction::Done);
    let n2 = &d.statuses[1];
    assert_eq!(
        (n2.current_revision, n2.etcd_pod_missing_since.as_str()),
        (4, format_time(t(0)).as_str())
    );
    let c = node_problems(&d.statuses, GRACE);
    assert!(c.status, "{c:?}");
    assert_eq!(c.reason, Reason::EtcdPodMissing);
    assert!(
        c.message.contains("n2 shows no etcd static pod since")
            && c.message.contains("revision 4 is installed again at")
            && c.message.contains(&format_time(t(300))),
        "{}",
        c.message
    );
    // Within the grace nothing moves; past it, nothing runs there: install revision 4 again.
    carry_statuses(&mut nodes, &d);
    assert_eq!(
        decide(&nodes, 4, &view, None, t(299), GRACE).action,
        RolloutAction::Done
    );
    // Its installer pod of revision 4 is still there: the new one is attempt 2 (a new name).
    nodes[1].installer = Some(InstallerState {
        revision: 4,
        attempt: 1,
        phase: InstallerPhase::Succeeded,
        approval: RestartApproval::NotRunning,
    });
    let d = decide(&nodes, 4, &view, None, t(300), GRACE);
    assert_eq!(installs(&d), ("n2".into(), 4, 2));
    assert!(
        node_problems(&d.statuses, GRACE)
            .message
            .contains("being installed again")
    );
    // Its pod back and serving: the record clears.
    let mut back = nodes.clone();
    back[1].pod = nodes[0].pod.clone();
    back[1].member_healthy = true;
    back[1].status = d.statuses[1].clone();
    let d = decide(&back, 4, &cluster(&[true, true, true]), None, t(310), GRACE);
    assert_eq!(d.statuses[1].current_revision, 4);
    assert_eq!(d.statuses[1].etcd_pod_missing_since, "");
    assert!(!node_problems(&d.statuses, GRACE).status);
}

#[test]
fn a_node_stopped_by_an_admin_or_not_ready_is_not_installed_again() {
    let mut nodes = vec![node(1, 4, true), node(2, 4, true), node(3, 4, true)];
    nodes[1].pod = None;
    nodes[1].etcd_stopped = Some("disk replacement, ticket 42".into());
    nodes[2].pod = None;
    nodes[2].node_ready = false;
    let view = cluster(&[true, false, false]);
    let first = decide(&nodes, 4, &view, None, t(0), GRACE);
    carry_statuses(&mut nodes, &first);
    let d = decide(&nodes, 4, &view, None, t(3600), GRACE);
    assert_eq!(d.action, RolloutAction::Done);
    assert_eq!(
        d.statuses
            .iter()
            .map(|s| s.current_revision)
            .collect::<Vec<_>>(),
        vec![4, 4, 4]
    );
    assert_eq!(
        d.statuses[1].etcd_stopped_by_admin,
        "disk replacement, ticket 42"
    );
    let m = node_problems(&d.statuses, GRACE).message;
    assert!(
        m.contains("stopped by an admin (etcd.static-operator.io/etcd-stopped: disk replacement, ticket 42)"),
        "{m}"
    );
}

#[test]
fn a_node_without_a_pod_goes_first() {
    let mut nodes = vec![node(1, 1, true), node(2, 1, true)];
    nodes.push(NodeView {
        name: "n0-new".into(),
        node_ready: true,
        ..Default::default()
    });
    assert_eq!(
        installs(&decide(
            &nodes,
            2,
            &cluster(&[true, true]),
            None,
            t(0),
            GRACE
        ))
        .0,
        "n0-new"
    );
}

#[test]
fn follows_one_node_to_ready_before_the_next() {
    let mut nodes = vec![node(1, 1, true), node(2, 1, true), node(3, 1, true)];
    nodes[1].status.target_revision = Some(2);
    nodes[1].installer = Some(InstallerState {
        revision: 2,
        attempt: 1,
        phase: InstallerPhase::Running,
        approval: RestartApproval::NotRunning,
    });
    let d = decide(&nodes, 2, &cluster(&[true, true, true]), None, t(0), GRACE);
    assert!(
        matches!(&d.action, RolloutAction::Wait { node, reason } if node == "n2" && reason.contains("installer")),
        "{d:?}"
    );
    nodes[1].installer.as_mut().unwrap().phase = InstallerPhase::Succeeded;
    nodes[1].pod = Some(PodState {
        revision: 2,
        ready: false,
        running: false,
        started_at: None,
        blocked: None,
    });
    nodes[1].member_healthy = false;
    let d = decide(&nodes, 2, &cluster(&[true, false, true]), None, t(0), GRACE);
    assert!(
        matches!(&d.action, RolloutAction::Wait { reason, .. } if reason.contains("serve on revision 2")),
        "{d:?}"
    );
    // Running, but etcd does not report the member healthy yet: still waiting.
    nodes[1].pod.as_mut().unwrap().running = true;
    let d = decide(&nodes, 2, &cluster(&[true, false, true]), None, t(0), GRACE);
    assert!(
        matches!(&d.action, RolloutAction::Wait { reason, .. } if reason.contains("serve on revision 2")),
        "{d:?}"
    );
    // Running on 2 and etcd reports the member healthy: served, before any probe passed; status
    // records it and the next node moves.
    nodes[1].member_healthy = true;
    let d = decide(&nodes, 2, &cluster(&[true, true, true]), None, t(0), GRACE);
    assert_eq!(d.statuses[1].current_revision, 2);
    assert_eq!(d.statuses[1].target_revision, None);
    assert_eq!(installs(&d).0, "n1");
    // Ready alone is enough too.
    nodes[1].pod = Some(PodState {
        revision: 2,
        ready: true,
        running: true,
        started_at: None,
        blocked: None,
    });
    nodes[1].member_healthy = false;
    let d = decide(&nodes, 2, &cluster(&[true, false, true]), None, t(0), GRACE);
    assert_eq!(d.statuses[1].current_revision, 2);
}

#[test]
fn an_installer_without_a_recorded_target_still_counts_as_in_flight() {
    let mut nodes = vec![node(1, 1, true), node(2, 1, true), node(3, 1, true)];
    nodes[2].installer = Some(InstallerState {
        revision: 2,
        attempt: 1,
        phase: InstallerPhase::Running,
        approval: RestartApproval::NotRunning,
    });
    let d = decide(&nodes, 2, &cluster(&[true, true, true]), None, t(0), GRACE);
    assert!(
        matches!(&d.action, RolloutAction::Wait { node, .. } if node == "n3"),
        "{d:?}"
    );
    assert_eq!(d.statuses[2].target_revision, Some(2));
}

#[test]
fn failures_are_recorded_once_and_retried_with_backoff() {
    let mut nodes = vec![node(1, 1, true), node(2, 1, true), node(3, 1, true)];
    nodes[0].status.target_revision = Some(2);
    nodes[0].installer = Some(InstallerState {
        revision: 2,
        attempt: 1,
        phase: InstallerPhase::Failed("secret missing".into()),
        approval: RestartApproval::NotRunning,
    });
    let d = decide(&nodes, 2, &cluster(&[true, true, true]), None, t(0), GRACE);
    let s = &d.statuses[0];
    assert_eq!(
        (
            s.last_failed_revision,
            s.last_failed_count,
            s.target_revision
        ),
        (Some(2), 1, None)
    );
    assert_eq!(s.last_failed_reason, "secret missing");
    assert!(
        matches!(&d.action, RolloutAction::BackOff { node, reason, .. } if node == "n1" && reason.contains("secret missing")),
        "{d:?}"
    );
    // Observing the same failed pod again changes nothing.
    nodes[0].status = d.statuses[0].clone();
    let again = decide(&nodes, 2, &cluster(&[true, true, true]), None, t(5), GRACE);
    assert_eq!(again.statuses[0], nodes[0].status);
    assert!(matches!(again.action, RolloutAction::BackOff { .. }));
    // After the back-off, attempt 2.
    assert_eq!(
        installs(&decide(
            &nodes,
            2,
            &cluster(&[true, true, true]),
            None,
            t(11),
            GRACE
        )),
        ("n1".into(), 2, 2)
    );
    assert_eq!(backoff(1), Duration::from_secs(10));
    assert_eq!(backoff(3), Duration::from_secs(40));
    assert_eq!(backoff(30), MAX_BACKOFF);
}

#[test]
fn a_newer_revision_supersedes_a_finished_install() {
    let mut nodes = vec![node(1, 1, true), node(2, 1, true), node(3, 1, true)];
    nodes[1].status.target_revision = Some(2);
    nodes[1].installer = Some(InstallerState {
        revision: 2,
        attempt: 1,
        phase: InstallerPhase::Succeeded,
        approval: RestartApproval::NotRunning,
    });
    assert_eq!(
        installs(&decide(
            &nodes,
            3,
            &cluster(&[true, false, true]),
            None,
            t(0),
            GRACE
        )),
        ("n2".into(), 3, 1)
    );
    // While the old installer still runs, wait for it.
    nodes[1].installer.as_mut().unwrap().phase = InstallerPhase::Running;
    assert!(matches!(
        decide(&nodes, 3, &cluster(&[true, true, true]), None, t(0), GRACE).action,
        RolloutAction::Wait { .. }
    ));
}

#[test]
fn the_gate_can_hold_the_rollout() {
    // Two voters: restarting either would lose quorum.
    let nodes = vec![node(1, 1, true), node(2, 1, true)];
    let d = decide(&nodes, 2, &cluster(&[true, true]), None, t(0), GRACE);
    match d.action {
        RolloutAction::Denied { node, denial } => {
            assert_eq!(node, "n1");
            assert_eq!(denial.rule, DenyRule::LoneVoter);
        }
        other => panic!("{other:?}"),
    }
    // An admin approved the outage: n1 restarts, and only one node at a time.
    let mut approved = cluster(&[true, true]);
    approved.outage_approved = true;
    let d = decide(&nodes, 2, &approved, None, t(0), GRACE);
    assert!(
        matches!(&d.action, RolloutAction::Install { node, revision: 2, .. } if node == "n1"),
        "{:?}",
        d.action
    );
}

#[test]
fn done_when_everyone_is_current() {
    let nodes = vec![node(1, 2, true), node(2, 2, true), node(3, 2, true)];
    assert_eq!(
        decide(&nodes, 2, &cluster(&[true, true, true]), None, t(0), GRACE).action,
        RolloutAction::Done
    );
}

fn failed_status(
    name: &str,
    current: i64,
    failed: Option<i64>,
    count: u32,
    reason: &str,
) -> NodeStatus {
    NodeStatus {
        node_name: name.to_owned(),
        current_revision: current,
        last_failed_revision: failed,
        last_failed_count: count,
        last_failed_reason: reason.to_owned(),
        ..Default::default()
    }
}

#[test]
fn failed_installs_table() {
    let ok = Computed::new(C::NodeInstallerDegraded, false, Reason::AsExpected, "");
    let failed = |message: &str| {
        Computed::new(
            C::NodeInstallerDegraded,
            true,
            Reason::InstallerFailed,
            message,
        )
    };
    let cases: Vec<(&str, Vec<NodeStatus>, Computed)> = vec![
        ("no nodes", vec![], ok.clone()),
        (
            "no failure",
            vec![failed_status("n1", 3, None, 0, "")],
            ok.clone(),
        ),
        (
            "failed on an older revision than it runs",
            vec![failed_status("n1", 3, Some(2), 1, "image pull")],
            ok.clone(),
        ),
        (
            "failed on the revision it now runs (a retry succeeded)",
            vec![failed_status("n1", 3, Some(3), 2, "image pull")],
            ok.clone(),
        ),
        (
            "failed on a newer revision",
            vec![
                failed_status("n1", 3, Some(4), 2, "installer exited 1"),
                failed_status("n2", 4, None, 0, ""),
            ],
            failed("n1 failed revision 4 2 time(s): installer exited 1"),
        ),
        (
            "two nodes failed, in status order",
            vec![
                failed_status("n1", 3, Some(4), 1, "a"),
                failed_status("n2", 3, Some(3), 1, "old"),
                failed_status("n3", 0, Some(1), 3, "b"),
            ],
            failed("n1 failed revision 4 1 time(s): a; n3 failed revision 1 3 time(s): b"),
        ),
    ];
    for (name, statuses, want) in cases {
        assert_eq!(node_problems(&statuses, GRACE), want, "case: {name}");
    }
}

#[test]
fn describe_each_action() {
    let cases: Vec<(RolloutAction, &str)> = vec![
        (RolloutAction::Done, "every node runs the latest revision"),
        (
            RolloutAction::Install {
                node: "n2".into(),
                revision: 5,
                attempt: 2,
            },
            "install revision 5 on n2 (attempt 2)",
        ),
        (
            RolloutAction::Wait {
                node: "n1".into(),
                reason: "installer for revision 5 is running".into(),
            },
            "waiting: n1: installer for revision 5 is running",
        ),
        (
            RolloutAction::BackOff {
                node: "n3".into(),
                revision: 5,
                until: t(70),
                reason: "install of revision 5 failed 1 time(s): boom".into(),
            },
            "backing off: n3: install of revision 5 failed 1 time(s): boom; next try after 2027-01-15T08:01:10Z",
        ),
        (
            RolloutAction::Denied {
                node: "n1".into(),
                denial: Denial {
                    rule: DenyRule::QuorumAfterAction,
                    message: "roll node n1: would leave 1 of 2 voters healthy".into(),
                },
            },
            "blocked by the quorum gate: roll node n1: would leave 1 of 2 voters healthy [quorum_after_action]",
        ),
    ];
    for (action, want) in cases {
        assert_eq!(describe(&action), want, "action: {action:?}");
    }
}

#[test]
fn etcd_starting_on_its_target_is_polled_for_a_bounded_window() {
    let mut n = node(2, 2, false);
    n.status.target_revision = Some(2);
    n.member_healthy = false;
    let pod = n.pod.as_mut().unwrap();
    pod.running = true;
    pod.started_at = Some(t(0));
    assert!(n.etcd_starting(t(1)), "started a second ago, not serving");
    assert!(
        !n.etcd_starting(t(10)),
        "past the window: the busy pace again"
    );
    assert!(
        !n.etcd_starting(t(-5)),
        "a start time ahead of the clock is not trusted"
    );
    n.member_healthy = true;
    assert!(!n.etcd_starting(t(1)), "serving");
    n.member_healthy = false;
    n.status.target_revision = Some(3);
    assert!(
        !n.etcd_starting(t(1)),
        "still on the old revision: the installer wakes us"
    );
    n.status.target_revision = Some(2);
    n.pod.as_mut().unwrap().running = false;
    assert!(!n.etcd_starting(t(1)), "not running");
}

#[test]
fn a_node_whose_member_serves_on_its_old_address_goes_first() {
    // All serve; n3's etcd still runs on the address its node had before (its member moved).
    let mut nodes = vec![node(1, 1, true), node(2, 1, true), node(3, 1, true)];
    nodes[2].serves_elsewhere = true;
    let d = decide(&nodes, 2, &cluster(&[true, true, true]), None, t(0), GRACE);
    assert_eq!(installs(&d).0, "n3", "{:?}", d.action);
}

#[test]
fn an_equivalent_node_is_not_moved_and_says_so() {
    // n4 is the learner's node, on no revision yet; n1..n3 serve revision 10, equivalent to 11.
    let mut nodes: Vec<NodeView> = (1..=3).map(|i| node(i, 10, true)).collect();
    for n in &mut nodes {
        n.equivalent_to_latest = true;
    }
    nodes.push(NodeView {
        name: "n4".into(),
        node_ready: true,
        ..Default::default()
    });
    let view = cluster(&[true, true, true]);
    let d = decide(&nodes, 11, &view, None, t(0), GRACE);
    assert_eq!(installs(&d).0, "n4");
    let equivalent: Vec<_> = d
        .statuses
        .iter()
        .map(|s| (s.node_name.as_str(), s.equivalent_to_revision))
        .collect();
    assert_eq!(
        equivalent,
        [
            ("n1", Some(11)),
            ("n2", Some(11)),
            ("n3", Some(11)),
            ("n4", None)
        ]
    );
    assert_eq!(
        equivalent_lines(&d.statuses)[0],
        "n1 runs revision 10, equivalent to revision 11 (its revision lacks only members added since): not restarted"
    );
    // Once n4 serves revision 11 the rollout is done: no voter restarted.
    nodes[3] = node(4, 11, true);
    let d = decide(&nodes, 11, &view, None, t(1), GRACE);
    assert_eq!(d.action, RolloutAction::Done);
    assert!(d.statuses.iter().all(|s| s.runs(11)), "{:?}", d.statuses);
    // Rebooting on its revision, a node found equivalent stays so (its pod is still on it).
    for n in &mut nodes {
        n.status.equivalent_to_revision = Some(11);
    }
    nodes[1].pod.as_mut().unwrap().ready = false;
    nodes[1].pod.as_mut().unwrap().running = false;
    nodes[1].member_healthy = false;
    let d = decide(&nodes, 11, &view, None, t(2), GRACE);
    assert_eq!(d.action, RolloutAction::Done);
    assert_eq!(d.statuses[1].equivalent_to_revision, Some(11));
    // One no longer found equivalent is moved to the latest revision.
    let mut moved = nodes.clone();
    moved[1].equivalent_to_latest = false;
    let d = decide(&moved, 11, &view, None, t(3), GRACE);
    assert_eq!(installs(&d), ("n2".into(), 11, 1));
    assert_eq!(d.statuses[1].equivalent_to_revision, None);
    // Its manifest moved away: nothing runs to restart, so it stays equivalent through the
    // missing-pod grace; past it, it is installed again, at the latest revision.
    nodes[1].pod = None;
    let d = decide(&nodes, 11, &view, None, t(4), GRACE);
    assert_eq!(d.action, RolloutAction::Done);
    assert_eq!(d.statuses[1].equivalent_to_revision, Some(11));
    carry_statuses(&mut nodes, &d);
    let d = decide(&nodes, 11, &view, None, t(4) + GRACE, GRACE);
    assert_eq!(installs(&d), ("n2".into(), 11, 1));
    assert_eq!(d.statuses[1].equivalent_to_revision, None);
}

/// n2's member was removed (its etcd down): n2 goes first to the revision without it, and once
/// its pod runs that revision it is on it (nothing to serve) and holds no other node's move.
#[test]
fn a_node_without_a_member_moves_first_and_rests_on_its_pod_s_revision() {
    let mut n2 = node(2, 4, false);
    n2.member = None;
    n2.member_healthy = false;
    n2.status.current_revision = 4;
    let nodes = vec![node(1, 4, true), n2.clone(), node(3, 4, true)];
    let mut two_voters = cluster(&[true, true, true]);
    two_voters
        .members
        .retain(|m| m.member.id != MemberId::new(2).unwrap());
    let d = decide(&nodes, 5, &two_voters, None, t(0), GRACE);
    assert_eq!(installs(&d), ("n2".into(), 5, 1));
    // Its installer finished and the kubelet runs revision 5 there: etcd-verify waits for the
    // learner, and n2 is on revision 5; the next node moves.
    n2.pod.as_mut().unwrap().revision = 5;
    n2.status.target_revision = Some(5);
    n2.installer = Some(InstallerState {
        revision: 5,
        attempt: 1,
        phase: InstallerPhase::Succeeded,
        approval: RestartApproval::NotRunning,
    });
    let nodes = vec![node(1, 4, true), n2, node(3, 4, true)];
    let d = decide(&nodes, 5, &two_voters, None, t(1), GRACE);
    let s2 = d.statuses.iter().find(|s| s.node_name == "n2").unwrap();
    assert_eq!((s2.current_revision, s2.target_revision), (5, None));
    // n1 is next (with two voters left, the gate holds its restart until the learner joins).
    match &d.action {
        RolloutAction::Denied { node, denial } => {
            assert_eq!((node.as_str(), denial.rule), ("n1", DenyRule::LoneVoter));
        }
        other => panic!("expected n1 to be next, got {other:?}"),
    }
}

/// #65: a node whose Node is NotReady (its kubelet gone; the node lifecycle controller marks its
/// pods unready) was picked first, as an unready node is, and its installer pod never ran: every
/// other node's rollout, and every later revision's, waited behind it. Now the Ready nodes roll,
/// and the NotReady one waits, named, without being made to move.
#[test]
fn a_not_ready_node_is_never_made_to_move() {
    let mut nodes = vec![node(1, 4, false), node(2, 4, false), node(3, 4, false)];
    for n in &mut nodes {
        n.member_healthy = true;
    }
    nodes[0].node_ready = false;
    let view = cluster(&[true, true, true]);
    let d = decide(&nodes, 5, &view, None, t(0), GRACE);
    assert_eq!(installs(&d).0, "n2", "{:?}", d.action);
    // Only the NotReady node is left below the latest revision.
    for n in &mut nodes[1..] {
        n.status.current_revision = 5;
        if let Some(p) = n.pod.as_mut() {
            p.revision = 5;
            p.ready = true;
        }
    }
    let d = decide(&nodes, 5, &view, None, t(10), GRACE);
    match &d.action {
        RolloutAction::Wait { node, reason } => {
            assert_eq!(node, "n1");
            assert!(reason.contains("is not Ready"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        d.statuses.iter().all(|s| s.target_revision.is_none()),
        "{:?}",
        d.statuses
    );
}

/// The gate is asked again right before the restart (#65): an installer whose container runs is
/// approved only while the gate still allows its node's restart; one not yet running, or already
/// approved, is waited on.
#[test]
fn a_running_installer_is_approved_only_while_the_gate_allows() {
    let mut nodes = vec![node(1, 1, true), node(2, 1, true), node(3, 1, true)];
    let d = decide(&nodes, 2, &cluster(&[true, true, true]), None, t(0), GRACE);
    assert_eq!(installs(&d), ("n1".into(), 2, 1));
    carry_statuses(&mut nodes, &d);
    nodes[0].status = with_target(d.statuses.clone(), "n1", 2)[0].clone();
    let mut at = |approval| {
        nodes[0].installer = Some(InstallerState {
            revision: 2,
            attempt: 1,
            phase: InstallerPhase::Running,
            approval,
        });
        nodes.clone()
    };
    let starting = at(RestartApproval::NotRunning);
    let awaited = at(RestartApproval::Awaited);
    let given = at(RestartApproval::Given);
    let healthy = cluster(&[true, true, true]);
    let action =
        |nodes: &[NodeView], view: &ClusterView| decide(nodes, 2, view, None, t(5), GRACE).action;
    assert!(
        matches!(action(&starting, &healthy), RolloutAction::Wait { ref reason, .. } if reason.contains("starting")),
        "{:?}",
        action(&starting, &healthy)
    );
    assert_eq!(
        action(&awaited, &healthy),
        RolloutAction::Approve {
            node: "n1".into(),
            revision: 2,
            attempt: 1
        }
    );
    assert!(matches!(
        action(&given, &healthy),
        RolloutAction::Wait { .. }
    ));
    // Between the pod's creation and its start n3's member failed: restarting n1 now would
    // leave one voter of three; the restart is not approved.
    let n3_down = cluster(&[true, true, false]);
    assert!(
        matches!(action(&awaited, &n3_down), RolloutAction::Denied { ref node, .. } if node == "n1"),
        "{:?}",
        action(&awaited, &n3_down)
    );
}
