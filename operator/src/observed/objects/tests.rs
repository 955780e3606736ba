//! The objects the operator reads: Nodes, etcd pods and their gate reports, installer pods.

use super::*;
use membership::MemberId;

fn pod(json: serde_json::Value) -> Pod {
    serde_json::from_value(json).unwrap()
}

/// The report of a gate that found n3's data dir lost.
const DATA_DIR_LOST: &str = r#"{"version":1,"decision":"block","code":"DataDirLost","reason":"data dir lost: member 3 (n3) has started before","member_id":"3","archived":null}"#;

/// n3's pod is blocked on its lost data dir, and its member is the one to replace.
fn blocked_on_lost_data(pods: &BTreeMap<String, (PodState, Option<VerifyReport>)>) {
    let (state, report) = &pods["n3"];
    assert!(
        state
            .blocked
            .as_deref()
            .unwrap()
            .starts_with("data dir lost"),
        "{state:?}"
    );
    assert_eq!(
        report.as_ref().unwrap().data_lost_member(),
        MemberId::new(3)
    );
}

#[test]
fn the_remove_member_annotation_makes_a_node_leave() {
    let node = |annotations: serde_json::Value| -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n2", "labels": {"cp": ""}, "annotations": annotations},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }))
        .unwrap()
    };
    let selector = BTreeMap::from([("cp".to_owned(), String::new())]);
    let asked = node(serde_json::json!({ REMOVE_MEMBER_ANNOTATION: "rack 7 retired" }));
    let nodes = control_plane_nodes(&[asked], &selector);
    assert_eq!(
        nodes[0].leaving(),
        Some(Leaving::RemovalRequested("rack 7 retired".into()))
    );
    let certs = BTreeSet::from(["n2".to_owned()]);
    let infos = node_infos(&nodes, &certs);
    assert!(!infos[0].eligible, "a leaving node gets no member");
    let empty = node(serde_json::json!({ REMOVE_MEMBER_ANNOTATION: " " }));
    assert_eq!(
        control_plane_nodes(&[empty], &selector)[0].leaving(),
        Some(Leaving::RemovalRequested(
            "asked by an admin (no reason given)".into()
        ))
    );
    let plain = node(serde_json::json!({}));
    let nodes = control_plane_nodes(&[plain], &selector);
    assert_eq!(nodes[0].leaving(), None);
    assert!(node_infos(&nodes, &certs)[0].eligible);
}

/// The mirror pod of n3's etcd at revision 4, not Ready, with these container statuses.
fn unready_etcd_pod(statuses: serde_json::Value) -> Pod {
    let mut status = serde_json::json!({"conditions": [{"type": "Ready", "status": "False"}]});
    if let (Some(status), Some(statuses)) = (status.as_object_mut(), statuses.as_object()) {
        status.extend(statuses.clone());
    }
    pod(serde_json::json!({
        "metadata": {"name": "etcd-n3", "labels": {"app": "etcd", "revision": "4"}},
        "spec": {"nodeName": "n3", "containers": []},
        "status": status
    }))
}

/// An etcd pod on n3 whose `etcd-verify` exited 1 with `message`.
fn blocked_pod(message: &str) -> Pod {
    unready_etcd_pod(serde_json::json!({
        "initContainerStatuses": [{
            "name": "etcd-verify", "image": "x", "imageID": "", "ready": false, "restartCount": 2,
            "lastState": {"terminated": {"exitCode": 1, "message": message}}
        }]
    }))
}

#[test]
fn a_blocked_verify_is_read_from_the_termination_message() {
    let pods = etcd_pods(&[blocked_pod(DATA_DIR_LOST)]);
    let (state, _) = &pods["n3"];
    assert_eq!(state.revision, 4);
    assert!(!state.ready);
    blocked_on_lost_data(&pods);
}

/// An etcd pod on n3 whose init container passed and whose etcd container is `etcd`.
fn restarted_in_place(etcd: serde_json::Value) -> Pod {
    unready_etcd_pod(serde_json::json!({
        "initContainerStatuses": [{
            "name": "etcd-verify", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "message":
                r#"{"version":1,"decision":"start","reason":"member 3 has data","member_id":"3","archived":null}"#}}
        }],
        "containerStatuses": [etcd]
    }))
}

#[test]
fn the_gate_of_a_restart_in_place_is_read_from_etcd_s_container_while_it_does_not_run() {
    let backing_off = restarted_in_place(serde_json::json!({
        "name": "etcd", "image": "x", "imageID": "", "ready": false, "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "message": DATA_DIR_LOST}}
    }));
    blocked_on_lost_data(&etcd_pods(&[backing_off]));
    // Once etcd runs again, an old block in its last state is history: the start stands.
    let running = restarted_in_place(serde_json::json!({
        "name": "etcd", "image": "x", "imageID": "", "ready": false, "restartCount": 4,
        "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 1, "message": DATA_DIR_LOST}}
    }));
    let pods = etcd_pods(&[running]);
    let (state, report) = &pods["n3"];
    assert_eq!(state.blocked, None);
    assert!(report.as_ref().unwrap().may_start());
    // etcd's own crash leaves a log tail there: not a report, the init container's stands.
    let crashed = restarted_in_place(serde_json::json!({
        "name": "etcd", "image": "x", "imageID": "", "ready": false, "restartCount": 1,
        "state": {"terminated": {"exitCode": 2, "message": "panic: boom"}}
    }));
    let pods = etcd_pods(&[crashed]);
    assert!(pods["n3"].1.as_ref().unwrap().may_start());
}

#[test]
fn an_unreadable_verify_report_blocks_visibly_and_decides_nothing() {
    // The words of a lost data dir, without the versioned shape: shown, never acted on.
    let p = blocked_pod(
        r#"{"decision":"block","reason":"data dir lost: member 3 (n3) has started before","member_id":"3"}"#,
    );
    let pods = etcd_pods(&[p]);
    let (state, report) = &pods["n3"];
    let blocked = state.blocked.as_deref().unwrap();
    assert!(
        blocked.contains("cannot be read") && blocked.contains("data dir lost"),
        "{blocked}"
    );
    assert_eq!(report.as_ref().unwrap().data_lost_member(), None);
}

/// Installer pod `installer-<rev>-n1-<attempt>` in `phase`.
fn installer_pod(rev: i64, attempt: u32, phase: &str) -> Pod {
    pod(serde_json::json!({
        "metadata": {"name": format!("installer-{rev}-n1-{attempt}"),
            "labels": {INSTALLER_LABEL: "true", "revision": rev.to_string(), "attempt": attempt.to_string()}},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": phase}
    }))
}

#[test]
fn only_finished_superseded_installers_are_pruned() {
    let mk = installer_pod;
    let pods = [
        mk(1, 1, "Succeeded"),
        mk(2, 1, "Failed"),
        mk(2, 2, "Succeeded"),
        mk(3, 1, "Running"),
    ];
    let current = BTreeMap::from([("n1".to_owned(), 2)]);
    // Revision 3 is running (newest, kept); 2/2 and 2/1 and 1/1 are finished and passed.
    assert_eq!(
        prunable_installers(&pods, &current),
        ["installer-1-n1-1", "installer-2-n1-1", "installer-2-n1-2"]
    );
    // The node is still on 1: revision 2's attempts are kept.
    let on_one = BTreeMap::from([("n1".to_owned(), 1)]);
    assert_eq!(prunable_installers(&pods, &on_one), ["installer-1-n1-1"]);
}

/// The operator approves a restart only once it has seen the installer's container run (#65):
/// a pending pod, or one whose container has not started, awaits nothing yet.
#[test]
fn an_installer_awaits_approval_only_once_its_container_runs() {
    let with = |status: serde_json::Value, annotated: bool| {
        let mut p = installer_pod(2, 1, "Running");
        p.status = serde_json::from_value(status).unwrap();
        if annotated {
            p.metadata.annotations = Some(BTreeMap::from([(
                etcd_installer::approval::RESTART_APPROVED.to_owned(),
                "2026-12-07T20:00:00Z".to_owned(),
            )]));
        }
        installers(&[p])["n1"].approval
    };
    let running = serde_json::json!({"phase": "Running", "containerStatuses": [
        {"name": "installer", "ready": true, "restartCount": 0, "image": "", "imageID": "",
         "state": {"running": {"startedAt": "2026-12-07T20:00:00Z"}}}]});
    let waiting = serde_json::json!({"phase": "Pending", "containerStatuses": [
        {"name": "installer", "ready": false, "restartCount": 0, "image": "", "imageID": "",
         "state": {"waiting": {"reason": "ContainerCreating"}}}]});
    assert_eq!(with(running.clone(), false), RestartApproval::Awaited);
    assert_eq!(with(running, true), RestartApproval::Given);
    assert_eq!(with(waiting, false), RestartApproval::NotRunning);
    assert_eq!(
        with(serde_json::json!({"phase": "Pending"}), false),
        RestartApproval::NotRunning
    );
}

#[test]
fn newest_installer_per_node_wins() {
    let mk = installer_pod;
    let got = installers(&[
        mk(2, 1, "Failed"),
        mk(2, 2, "Running"),
        mk(1, 1, "Succeeded"),
    ]);
    assert_eq!(
        got["n1"],
        InstallerState {
            revision: 2,
            attempt: 2,
            phase: InstallerPhase::Running,
            approval: RestartApproval::NotRunning,
        }
    );
}

#[test]
fn selects_control_plane_nodes_with_an_address() {
    let node = |name: &str, label: bool, ip: Option<&str>, ready: &str| -> Node {
        let mut labels = serde_json::Map::new();
        if label {
            labels.insert(crate::api::CONTROL_PLANE_LABEL.into(), "".into());
        }
        let addresses: Vec<serde_json::Value> = ip
            .map(|ip| vec![serde_json::json!({"type": "InternalIP", "address": ip})])
            .unwrap_or_default();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"addresses": addresses, "conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    };
    let nodes = [
        node("b", true, Some("10.0.0.2"), "True"),
        node("a", true, Some("10.0.0.1"), "False"),
        node("worker", false, Some("10.0.0.9"), "True"),
        node("noip", true, None, "True"),
    ];
    let selector = crate::api::EtcdClusterSpec::default().node_selector();
    let got = control_plane_nodes(&nodes, &selector);
    let names: Vec<(&str, bool)> = got
        .iter()
        .map(|n| (n.target.name.as_str(), n.ready))
        .collect();
    assert_eq!(names, [("a", false), ("b", true)]);
}
