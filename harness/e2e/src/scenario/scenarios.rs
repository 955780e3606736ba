//! The scenario bodies. Each takes a harness, drives the cluster through its story with waits on
//! the operator's status, and returns the harness for teardown (or `None` if it was lost).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::harness::Harness;
use crate::controlplane::ControlPlaneError;
use etcd_operator::api::EtcdClusterStatus;

mod member_changes;
use member_changes::{
    data_loss, member_removed_externally, node_replacement, odd_voters, unhealthy_member_replaced,
};
mod restarts;
use restarts::{forged_member_id, full_restart, operator_crash, rollout};

const SETTLE: Duration = Duration::from_secs(240);

type Outcome = (Result<(), String>, Option<Harness>);

/// Builds the starting point every scenario shares: three nodes, bootstrap, load, settled.
/// On failure the harness (if one was built) comes back for teardown.
pub(super) async fn prepare(name: &str) -> Result<Harness, (ControlPlaneError, Option<Harness>)> {
    if !super::NAMES.contains(&name) {
        return Err((
            ControlPlaneError::Failed(format!(
                "unknown scenario {name:?}; known: {}",
                super::NAMES.join(", ")
            )),
            None,
        ));
    }
    let on_kas = std::env::var("TEST_API").as_deref() == Ok("kas");
    if super::ONLY_STACKED.contains(&name) && !on_kas {
        return Err((
            ControlPlaneError::Failed(format!(
                "scenario {name} needs real kube-apiservers on the managed etcd: run it with TEST_API=kas"
            )),
            None,
        ));
    }
    let stacked = super::STACKED_ON_KAS.contains(&name) && on_kas;
    // The lone voter's story and the unmounted disk's start on a one-node control plane, which
    // never settles on its own (its only voter keeps the bootstrap manifest until an admin
    // approves a restart).
    let nodes = if ["lone-voter-restart", "unmounted-data-disk"].contains(&name) {
        1
    } else {
        3
    };
    let built = if super::ON_MANAGED_ETCD.contains(&name) || stacked {
        Harness::bootstrapped_on_managed_etcd(nodes, super::starting_etcd_image(name)).await
    } else {
        Harness::bootstrapped_on_etcd(nodes, super::starting_etcd_image(name)).await
    };
    let mut h = built.map_err(|e| (e, None))?;
    if let Err(e) = h.start_load().await {
        return Err((e, Some(h)));
    }
    // These two watch the bootstrap itself.
    if !["operator-crash", "api-availability"].contains(&name)
        && nodes == 3
        && let Err(e) = h.wait_settled(3, SETTLE).await
    {
        return Err((e, Some(h)));
    }
    Ok(h)
}

/// A scenario's story, boxed.
type Story<'a> = Pin<Box<dyn Future<Output = Result<(), ControlPlaneError>> + 'a>>;

/// `stories!(name => function, ...)` makes [`story`]: each scenario's future is built in a
/// function of its own and boxed there. In a debug build one function that built every
/// scenario's future (a `match` awaiting each) kept a stack slot for each of them at once, and
/// its poll overflowed a test thread's 2 MiB stack once the 36th scenario was added.
macro_rules! stories {
    ($($name:literal => $f:path,)*) => {
        /// The story of scenario `name`, if there is one.
        fn story<'a>(name: &str, h: &'a mut Harness) -> Option<Story<'a>> {
            $({
                fn one<'a>(h: &'a mut Harness) -> Story<'a> {
                    Box::pin($f(h))
                }
                if name == $name {
                    return Some(one(h));
                }
            })*
            None
        }
    };
}

stories! {
    "bootstrap" => bootstrap,
    "data-loss" => data_loss,
    "node-replacement" => node_replacement,
    "operator-crash" => operator_crash,
    "forged-member-id" => forged_member_id,
    "full-restart" => full_restart,
    "rollout" => rollout,
    "odd-voters" => odd_voters,
    "member-removed-externally" => member_removed_externally,
    "unhealthy-member-replaced" => unhealthy_member_replaced,
    "node-selector" => super::node_selector::node_selector,
    "defrag" => super::maintenance::defrag,
    "nospace" => super::maintenance::nospace,
    "corruption" => super::corruption::corruption,
    "upgrade" => super::upgrade::upgrade,
    "static-pod-removed" => super::static_pod::static_pod_removed,
    "drain" => super::drain::drain_scenario,
    "operator-failover" => super::failover::operator_failover,
    "quorum-loss" => super::quorum_loss::quorum_loss,
    "restore-from-snapshot" => super::restore::restore_from_snapshot,
    "restore-from-backup" => super::restore::restore_from_backup,
    "backups" => super::backups::backups,
    "ca-rotation" => super::ca_rotation::ca_rotation,
    "node-address-change" => super::node_address::node_address_change,
    "every-address-changed" => super::every_address::every_address_changed,
    "unreadable-spec" => super::unreadable_spec::unreadable_spec,
    "scale-down" => super::scale_down::scale_down,
    "unmanaged" => super::unmanaged::unmanaged,
    "dangling-learner" => super::dangling_learner::dangling_learner,
    "consumer-reload" => super::consumer_reload::consumer_reload,
    "lone-voter-restart" => super::lone_voter::lone_voter_restart,
    "restart-free-learner-add" => super::restart_free::restart_free_learner_add,
    "api-availability" => super::api_availability::api_availability,
    "survivor-reboot" => super::survivor_reboot::survivor_reboot,
    "unmounted-data-disk" => super::unmounted_disk::unmounted_data_disk,
    "upgrade-minors" => super::upgrade::upgrade_minors,
    "minority-recovery" => super::minority_recovery::minority_recovery,
    "not-ready-node" => super::not_ready_node::not_ready_node,
}

pub(super) async fn drive(name: &str, h: Harness) -> Outcome {
    let mut h = h;
    let result = match story(name, &mut h) {
        Some(story) => story.await,
        None => Err(ControlPlaneError::Failed(format!(
            "unknown scenario {name}"
        ))),
    };
    (result.map_err(|e| e.to_string()), Some(h))
}

/// A normal bootstrap never shows Degraded nor a member without a name.
fn clean_status(h: &Harness) -> Result<(), ControlPlaneError> {
    let seen = h.sightings();
    if seen.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = seen
        .iter()
        .map(|s| format!("[{:.1}s] {}", s.at_s, s.what))
        .collect();
    Err(failed(format!(
        "a normal bootstrap showed in its status: {}",
        lines.join("; ")
    )))
}

/// A normal bootstrap: a clean status, the certificates in status and on the nodes, the metrics
/// port behind client certificates, a consumer's client certificate.
async fn bootstrap(h: &mut Harness) -> Result<(), ControlPlaneError> {
    clean_status(h)?;
    super::endpoints::every_node_published(h).await?;
    certificate_expiries(h).await?;
    cluster_token(h).await?;
    super::metrics_port::client_certs_required(h).await?;
    super::consumers::consumer_secret(h).await
}

/// Every node's etcd manifest sets `ETCD_INITIAL_CLUSTER_TOKEN` to `token`.
pub(super) fn every_manifest_carries(h: &Harness, token: &str) -> Result<(), ControlPlaneError> {
    for n in ["n1", "n2", "n3"] {
        let manifest = h.cp.node(n)?.manifest_dir().join("etcd-pod.yaml");
        let text = std::fs::read_to_string(&manifest)
            .map_err(|e| failed(format!("reading {}: {e}", manifest.display())))?;
        let line = format!("name: ETCD_INITIAL_CLUSTER_TOKEN\n      value: \"{token}\"");
        if !text.contains(&line) {
            return Err(failed(format!(
                "{n}'s etcd manifest does not carry the cluster token {token}"
            )));
        }
    }
    Ok(())
}

/// The operator learned the token `render` made (`status.clusterIdentity`), and every node's
/// manifest carries it.
async fn cluster_token(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let file =
        h.cp.node("n1")?
            .root
            .join("etc/kubernetes/bootstrap/cluster-token");
    let rendered = std::fs::read_to_string(&file)
        .map_err(|e| failed(format!("reading {}: {e}", file.display())))?
        .trim()
        .to_owned();
    let learned = h
        .status()
        .await
        .cluster_identity
        .map(|c| c.initial_cluster_token);
    if learned.as_deref() != Some(rendered.as_str()) {
        return Err(failed(format!(
            "status.clusterIdentity names token {learned:?}, render made {rendered}"
        )));
    }
    every_manifest_carries(h, &rendered)?;
    h.step(format!(
        "status.clusterIdentity: token {rendered} (render's); every node's manifest carries it"
    ));
    Ok(())
}

/// `status.certificates` names the CA and every leaf (3 kinds per node, the operator's client
/// certificate), each renewed before it expires, none outliving the CA.
async fn certificate_expiries(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let s = h.status().await;
    let c = s
        .certificates
        .as_ref()
        .ok_or_else(|| failed("status.certificates is missing"))?;
    let per_node = |n: &str| c.leaves.iter().filter(|l| l.node == n).count();
    let counts: Vec<usize> = ["n1", "n2", "n3"].iter().map(|n| per_node(n)).collect();
    let wrong: Vec<String> = c
        .leaves
        .iter()
        .filter(|l| {
            l.renew_after.is_empty() || l.renew_after >= l.not_after || l.not_after > c.ca.not_after
        })
        .map(|l| {
            format!(
                "{} (renew {} / expires {})",
                l.name, l.renew_after, l.not_after
            )
        })
        .collect();
    if counts != [3, 3, 3] || c.leaves.len() != 10 || !wrong.is_empty() || c.next_renewal.is_empty()
    {
        return Err(failed(format!(
            "status.certificates: leaves per node {counts:?}, {} in all (expected 3 per node and the operator's client certificate); inconsistent: {wrong:?}; next renewal {:?}",
            c.leaves.len(),
            c.next_renewal
        )));
    }
    h.step(format!(
        "status.certificates: CA {} expires {}; {} leaves, the next renewal at {}",
        c.ca.name,
        c.ca.not_after,
        c.leaves.len(),
        c.next_renewal
    ));
    own_keys_only(h, &s)
}

/// Every node's directory of the revision it runs (the latest, or one equivalent to it) holds
/// only that node's private keys, each 0600.
fn own_keys_only(h: &mut Harness, s: &EtcdClusterStatus) -> Result<(), ControlPlaneError> {
    use std::os::unix::fs::PermissionsExt;
    let mut seen = Vec::new();
    for n in ["n1", "n2", "n3"] {
        let revision = s
            .node_statuses
            .iter()
            .find(|st| st.node_name == n)
            .map_or(0, |st| st.current_revision);
        let dir = h.cp.node(n)?.root.join(format!(
            "etc/kubernetes/static-pod-resources/etcd-pod-{revision}/secrets/etcd-all-certs"
        ));
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| failed(format!("listing {}: {e}", dir.display())))?;
        let mut keys = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".key") {
                continue;
            }
            let mode = e
                .metadata()
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0);
            if !name.ends_with(&format!("-{n}.key")) || mode != 0o600 {
                return Err(failed(format!(
                    "{}: {name} (mode {mode:04o}) on {n}: a node must hold only its own keys, 0600",
                    dir.display()
                )));
            }
            keys.push(name);
        }
        keys.sort();
        seen.push(format!("{n} (revision {revision}): {}", keys.join(", ")));
    }
    h.step(format!(
        "each node holds only its own private keys (0600): {}",
        seen.join("; ")
    ));
    Ok(())
}

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}
