//! Scenarios where etcd or the operator restarts: the operator crashing through a scale-up, a
//! forged member id on one node, a whole-control-plane restart, a rollout through an installer
//! failure.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::time::Duration;

use super::{SETTLE, failed};
use crate::controlplane::ControlPlaneError;
use crate::scenario::harness::{Harness, member_ids, member_of};

pub(super) async fn operator_crash(h: &mut Harness) -> Result<(), ControlPlaneError> {
    // Kill the operator (SIGKILL) the first time each step of the scale-up is seen.
    let mut seen: BTreeSet<&'static str> = BTreeSet::new();
    let mut last_latest = 0;
    let mut last_voters = 1;
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let s = h.status().await;
        if crate::view::settled(&s, 3) {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(failed(format!(
                "the scale-up did not complete\n{}",
                h.describe().await
            )));
        }
        let voters = s.members.iter().filter(|m| m.role == "Voter").count();
        let event = if s.members.iter().any(|m| m.role == "Learner" && !m.started)
            && !seen.contains("learner-added")
        {
            Some("learner-added")
        } else if s.latest_available_revision > last_latest
            && last_latest > 0
            && !seen.contains("revision-created")
        {
            Some("revision-created")
        } else if s.node_statuses.iter().any(|n| n.target_revision.is_some())
            && !seen.contains("rollout")
        {
            Some("rollout")
        } else if voters > last_voters && !seen.contains("promoted") {
            Some("promoted")
        } else {
            None
        };
        last_latest = last_latest.max(s.latest_available_revision);
        last_voters = last_voters.max(voters);
        if let Some(e) = event {
            seen.insert(e);
            h.cp.stop_operator(Duration::ZERO)?;
            h.step(format!("operator killed (SIGKILL) {e}"));
            h.cp.start_operator()?;
            h.step("operator restarted");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = h.wait_settled(3, SETTLE).await?;
    if s.members.iter().any(|m| !m.started) {
        return Err(failed("an unstarted learner was left behind"));
    }
    h.step(format!(
        "scale-up complete after {} operator kill(s): {seen:?}",
        seen.len()
    ));
    if seen.len() < 3 {
        return Err(failed(format!(
            "only {} kill point(s) were reached: {seen:?}",
            seen.len()
        )));
    }
    Ok(())
}

pub(super) async fn forged_member_id(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let s = h.status().await;
    let id = member_of(&s, "n2").ok_or_else(|| failed("n2 has no member"))?;
    let manifest = h.cp.node("n2")?.manifest_dir().join("etcd-pod.yaml");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| failed(format!("{}: {e}", manifest.display())))?;
    let forged_text = text.replace(&format!("{id}=https://"), "abad1dea=https://");
    if forged_text == text {
        return Err(failed("n2's manifest does not name its member id"));
    }
    let tmp = manifest.with_file_name(".etcd-pod.yaml.forged");
    std::fs::write(&tmp, forged_text).map_err(|e| failed(e.to_string()))?;
    std::fs::rename(&tmp, &manifest).map_err(|e| failed(e.to_string()))?;
    h.step(format!(
        "n2's manifest now claims member abad1dea instead of {id}"
    ));
    h.wait_status(
        "the operator reports n2 blocked by etcd-verify",
        SETTLE,
        |s| {
            s.conditions.iter().any(|c| {
                c.status == "True"
                    && c.message.contains("n2")
                    && c.message.contains("stale or forged")
            })
        },
    )
    .await?;
    let latest = s.latest_available_revision;
    h.patch_spec(serde_json::json!({"forceRedeploymentReason": "recover n2"}))
        .await?;
    // Settled on a newer revision: right after the patch the status may still show the pass
    // before it (n2's old etcd not yet stopped), which is settled on the old one.
    let s = h.wait_settled_after(3, latest, SETTLE).await?;
    if member_of(&s, "n2") != Some(id) {
        return Err(failed(
            "n2's member changed; the forged manifest must only block, never replace",
        ));
    }
    Ok(())
}

pub(super) async fn full_restart(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = member_ids(&h.status().await);
    for n in ["n1", "n2", "n3"] {
        h.cp.stop_node(n).await?;
    }
    h.step("every node stopped (all etcd members down)");
    for n in ["n1", "n2", "n3"] {
        h.cp.restart_node(n).await?;
    }
    h.step("every node started again");
    let s = h.wait_settled(3, SETTLE).await?;
    if member_ids(&s) != before {
        return Err(failed(format!(
            "members changed: {before:?} -> {:?}",
            member_ids(&s)
        )));
    }
    Ok(())
}

/// Injected failure: on every node the resource dir is replaced by a file, so the first
/// installer of a forced redeployment fails (reported in NodeInstallerDegraded); running etcd
/// keeps its mounted revision dir. The dirs are restored before returning.
async fn fail_first_install(h: &mut Harness, latest: i64) -> Result<(), ControlPlaneError> {
    let mut sabotaged = Vec::new();
    for node in &h.cp.nodes {
        let dir = node.root.join("etc/kubernetes/static-pod-resources");
        let aside = node.root.join("etc/kubernetes/static-pod-resources.aside");
        std::fs::rename(&dir, &aside)
            .map_err(|e| failed(format!("moving {}: {e}", dir.display())))?;
        std::fs::write(&dir, "not a directory").map_err(|e| failed(e.to_string()))?;
        sabotaged.push((dir, aside));
    }
    h.step("resource dirs replaced by files on every node (the next install fails)");
    h.patch_spec(serde_json::json!({"forceRedeploymentReason": "scenario rollout"}))
        .await?;
    let s = h
        .wait_status("an installer failure recorded", SETTLE, |s| {
            s.node_statuses
                .iter()
                .any(|n| n.last_failed_revision == Some(latest + 1))
        })
        .await?;
    let reported = s
        .conditions
        .iter()
        .any(|c| c.type_ == "NodeInstallerDegraded" && c.status == "True");
    if !reported {
        return Err(failed(
            "the failure is not reported in NodeInstallerDegraded",
        ));
    }
    for (dir, aside) in &sabotaged {
        std::fs::remove_file(dir).map_err(|e| failed(e.to_string()))?;
        std::fs::rename(aside, dir).map_err(|e| failed(e.to_string()))?;
    }
    Ok(())
}

pub(super) async fn rollout(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let latest = before.latest_available_revision;
    fail_first_install(h, latest).await?;
    h.step("resource dirs restored; the failed install retries after its back-off");
    // Kill the operator while a node is moving; the rollout must still finish.
    h.wait_status("a node moving to the new revision", SETTLE, |s| {
        s.node_statuses
            .iter()
            .any(|n| n.target_revision == Some(latest + 1))
    })
    .await?;
    h.cp.stop_operator(Duration::ZERO)?;
    h.step("operator killed mid-rollout");
    h.cp.start_operator()?;
    h.step("operator restarted");
    // Throughout: never two nodes moving at once.
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let s = h.status().await;
        let moving = s
            .node_statuses
            .iter()
            .filter(|n| n.target_revision.is_some())
            .count();
        if moving > 1 {
            return Err(failed(format!(
                "{moving} nodes were moving at once: {:?}",
                s.node_statuses
            )));
        }
        if crate::view::settled(&s, 3) {
            if s.latest_available_revision != latest + 1 {
                return Err(failed(format!(
                    "expected exactly one new revision ({}), got {}",
                    latest + 1,
                    s.latest_available_revision
                )));
            }
            h.step(format!("every node Ready on revision {}", latest + 1));
            let approved = restarts_approved_after_start(h, latest + 1).await?;
            h.step(format!(
                "each restart approved after its installer started: {}",
                approved.join(", ")
            ));
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(failed(format!(
                "the rollout did not finish\n{}",
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// #65: every installer that moved a node to `revision` restarted etcd on an approval the
/// operator gave after seeing its container run (the gate asked again right before the
/// restart), never on the verdict of the pod's creation alone. Returns `<pod> (+<s>s)`: the
/// approval's delay after the container's start.
async fn restarts_approved_after_start(
    h: &Harness,
    revision: i64,
) -> Result<Vec<String>, ControlPlaneError> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: kube::Api<Pod> = kube::Api::namespaced(h.cp.client(), "etcd");
    let list = pods
        .list(&kube::api::ListParams::default().labels("etcd.static-operator.io/installer"))
        .await
        .map_err(|e| failed(format!("listing installer pods: {e}")))?;
    let mut out = Vec::new();
    let mut nodes = BTreeSet::new();
    for pod in list.items.iter().filter(|p| {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        labels.get("revision") == Some(&revision.to_string())
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
    }) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let approved = etcd_installer::approval::approval_of(pod).ok_or_else(|| {
            failed(format!(
                "installer pod {name} restarted etcd without an approval"
            ))
        })?;
        let approved = k8s_openapi::jiff::Timestamp::from_str(approved)
            .map_err(|e| failed(format!("{name}: approval {approved:?}: {e}")))?;
        let started = pod
            .status
            .as_ref()
            .and_then(|s| {
                s.container_statuses
                    .as_ref()?
                    .first()?
                    .state
                    .as_ref()?
                    .terminated
                    .as_ref()?
                    .started_at
                    .clone()
            })
            .ok_or_else(|| failed(format!("{name}: no start time in its container status")))?;
        // The approval is written in whole seconds.
        let delay = approved.as_second() - started.0.as_second();
        if delay < 0 {
            return Err(failed(format!(
                "{name}: approved at {approved}, before its container started at {}",
                started.0
            )));
        }
        nodes.insert(
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
        );
        out.push(format!("{name} (+{delay}s)"));
    }
    if nodes.len() != 3 {
        return Err(failed(format!(
            "expected a succeeded installer pod of revision {revision} on each of 3 nodes, found {out:?}"
        )));
    }
    Ok(out)
}
