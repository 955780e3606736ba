//! Target config: the static-pod manifest every node with a member should run.
//!
//! Inputs: the control-plane nodes, etcd's members, the spec, the images, the cluster's
//! initial-cluster token ([`super::etcd_observer::cluster_token`]; none while not known). Decision
//! ([`render_all`], pure): one manifest per node that has a member, rendered with the revision
//! left as a token (the revision controller fills it in), deterministic so an unchanged input
//! never makes a new revision. Writes: ConfigMap `etcd-pod` (one key per node). A node without
//! a member gets no manifest (it first joins as a learner), except one that still runs an etcd
//! pod after its member was removed: its manifest lists the live members and none of its own,
//! so `etcd-verify` there archives the removed member's data and waits for the new learner
//! ([`crate::observed::Observed::rolled_nodes`]). Nothing else follows while no node has a
//! member. An etcd image the version policy refuses ([`crate::etcd_version`]: below the
//! cluster version, skipping a minor, below the patch floor of an upgrade, a known-bad release,
//! no version known) is a permanent error before anything is rendered, so no revision is made
//! and no etcd restarts.

use std::collections::{BTreeMap, BTreeSet};

use membership::Member;

use crate::api::EtcdClusterSpec;
use crate::category::Category;
use crate::controller::{ControllerError, ControllerName};
use crate::etcd_version;
use crate::events::EventReason;
use crate::observed::{ControlPlaneNode, find};
use crate::pass::Pass;
use crate::podspec::paths::POD_CONFIGMAP;
use crate::podspec::{
    Images, NodeTarget, PodInput, RenderError, STATIC_POD_NAMESPACE as NS, render_pod,
};
use crate::retry::ErrorKind;

const NAME: ControllerName = ControllerName::TargetConfig;

/// `pod-<node>.yaml` → manifest, for every node in `rolled`
/// ([`crate::observed::Observed::rolled_nodes`]).
pub fn render_all(
    nodes: &[ControlPlaneNode],
    rolled: &BTreeSet<String>,
    members: &[Member],
    spec: &EtcdClusterSpec,
    images: &Images,
    cluster_token: Option<&str>,
) -> Result<BTreeMap<String, String>, RenderError> {
    let all: Vec<NodeTarget> = nodes.iter().map(|n| n.target.clone()).collect();
    let mut out = BTreeMap::new();
    for t in all.iter().filter(|t| rolled.contains(&t.name)) {
        let text = render_pod(&PodInput {
            node: t,
            nodes: &all,
            members,
            revision: None,
            bootstrap: false,
            cluster_token,
            spec,
            images,
            resource_host_dir: None,
        })?;
        out.insert(format!("pod-{}.yaml", t.name), text);
    }
    Ok(out)
}

/// Renders and writes `etcd-pod`; `None` (the pass ends) when no node has a member yet.
/// Whether an etcd upgrade may render its first new-version pod: with `spec.backup`, only once a
/// good backup taken for it exists ([`super::backup::preop`]); one under way never waits.
pub async fn upgrade_may_start(p: &mut Pass<'_>) -> bool {
    use super::backup::preop::{self, Operation};
    let target = etcd_version::resolve(&p.etcd_image(), &p.o.spec.etcd_image_version).ok();
    let running: Vec<etcd_version::Version> =
        p.o.etcd
            .member_versions()
            .into_iter()
            .map(|(_, v)| v)
            .collect();
    match etcd_version::upgrade_state(target, &running) {
        None => {
            preop::done(p, Operation::EtcdUpgrade);
            true
        }
        Some(under_way) => {
            if let Some(target) = target
                && !minor_log_clear(p, target, under_way).await
            {
                return false;
            }
            preop::gate(p, NAME, Operation::EtcdUpgrade, under_way).await
        }
    }
}

/// Whether every member's log is clear of entries an older minor wrote, for a move to
/// `target` ([`etcd_version::minor_log`]); when a member is behind, advances the log by what it
/// lacks (at most [`ADVANCE_AT_MOST`] a pass) and asks for the next pass soon.
async fn minor_log_clear(p: &mut Pass<'_>, target: etcd_version::Version, under_way: bool) -> bool {
    use crate::writer::etcd::{EtcdIntent, Outcome};
    use etcd_version::minor_log;
    let status = p.status.etcd_version.as_ref();
    let cluster = status.and_then(|s| etcd_version::Version::parse(&s.cluster_version));
    let boundary = status.and_then(|s| s.cluster_version_raft_index);
    let applied: Vec<(String, Option<u64>)> =
        p.o.etcd
            .members
            .iter()
            .map(|m| {
                let a = p.o.etcd.health.get(&m.id).and_then(|h| h.applied_index);
                (m.name.clone(), a)
            })
            .collect();
    let check = minor_log::decide(target, cluster, boundary, &applied, under_way);
    let Some(line) = check.line(target) else {
        return true;
    };
    p.busy = true;
    p.next(NAME, line.clone());
    let entries = check.entries_short().min(ADVANCE_AT_MOST);
    if entries == 0 {
        return false;
    }
    let intent = EtcdIntent::AdvanceLog { entries };
    match p.change_etcd(&intent).await {
        Ok(Outcome::Made(_)) => {
            let done = format!("{line}: appended {entries}");
            p.note(done.clone());
            p.event(EventReason::EtcdLogAdvanced, done).await;
        }
        Ok(_) => {}
        Err(e) => p.note(format!("{line}: advancing the log failed: {e}")),
    }
    false
}

/// The most entries one pass appends to advance the log (a few seconds of alarm reads).
const ADVANCE_AT_MOST: u64 = 12_000;

pub async fn reconcile(
    p: &mut Pass<'_>,
) -> Result<Option<BTreeMap<String, String>>, ControllerError> {
    let _t = p.ctx.metrics.time(NAME.as_str());
    let image = p.etcd_image();
    let running = p.o.etcd.member_versions();
    let cluster = p.o.etcd.cluster_version();
    match etcd_version::check(
        &image,
        &p.o.spec.etcd_image_version,
        cluster,
        &running,
        &p.o.spec.accept_known_bad_etcd_release,
    ) {
        Ok(v) => p.next(
            NAME,
            format!("etcd image {image} (etcd {v}) passes the version policy"),
        ),
        Err(e) => {
            return Err(ControllerError::new(
                NAME,
                ErrorKind::Permanent,
                Category::EtcdVersion,
                e.to_string(),
            ));
        }
    }
    let pods = render_all(
        &p.o.nodes,
        &p.o.rolled_nodes(),
        &p.o.etcd.members,
        &p.o.spec,
        &p.ctx.config.images,
        p.status
            .cluster_identity
            .as_ref()
            .map(|c| c.initial_cluster_token.as_str()),
    )
    .map_err(|e| {
        ControllerError::new(NAME, ErrorKind::Permanent, Category::Render, e.to_string())
    })?;
    let n = pods.len();
    let written = !pods.is_empty()
        && p.w
            .configmap(
                NS,
                POD_CONFIGMAP,
                find(&p.inputs.configmaps, NS, POD_CONFIGMAP),
                &pods,
                None,
            )
            .await
            .map_err(|e| ControllerError::write(NAME, &e))?;
    if written {
        p.note(format!("rendered etcd-pod for {n} node(s)"));
        p.next(NAME, format!("update etcd-pod for {n} node(s)"));
    } else if n > 0 {
        p.next(NAME, format!("etcd-pod is up to date for {n} node(s)"));
    }
    p.succeeded(NAME);
    if pods.is_empty() {
        let line = "no node has a member yet; nothing to render";
        p.note(line);
        p.next(NAME, line);
        return Ok(None);
    }
    Ok(Some(pods))
}

#[cfg(test)]
#[path = "target_config_tests.rs"]
mod tests;
