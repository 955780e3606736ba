//! `operator-failover`: two operator instances compete for the Lease; the leader is killed in
//! the middle of a scale-up from 3 to 5 voters, right after etcd lists the first new learner;
//! a standby takes over once the Lease expires and completes the scale-up, and no membership
//! action is done twice. The instances are local processes (the scenario) or the Deployment's
//! pods on the real control plane (`harness/e2e/tests/platform.rs`): see [`OperatorInstances`].
//!
//! The takeover bound, from `operator/src/run/leader.rs` and `run/mod.rs`, for a lease duration
//! D (6 s for the local processes, 15 s for the Deployment): the leader renews every D/3, so its
//! last renewal R is at most D/3 (plus one API round trip) before the kill. A standby reads the
//! Lease every D/3 and may take it once it has seen it unchanged for more than D on its own
//! clock; it sees the renewal R at its next read (at most D/3 after R), so it takes the Lease D
//! after that read at the latest (its reads fall D/3 apart from there): at most D + D/3 after
//! the kill, plus 1 s of clock granularity and API round trips on a loaded machine (1 s):
//! [`takeover_bound`] (10 s for D = 6 s, 22 s for D = 15 s). It must not hold it before R + D
//! either (that would be a stolen lease).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use membership::EtcdClient;

use super::failover_audit::{self as audit, MemberLedger};
pub use super::failover_instances::{OperatorInstances, STANDBY};
use super::harness::{Harness, member_of};
use crate::controlplane::{ControlPlaneError, OPERATOR_NS};
use etcd_operator::run::leader::LEASE_NAME;

const SETTLE: Duration = Duration::from_secs(240);
const NEW_NODES: [&str; 2] = ["n4", "n5"];

/// Lease duration D + 1 s (clock granularity) + one renew period (D/3) + 1 s of API latency.
pub fn takeover_bound(lease_duration: Duration) -> Duration {
    lease_duration + Duration::from_secs(2) + lease_duration / 3
}

/// The survivor's first status write, after the kill: it runs a whole pass as soon as it takes
/// the Lease; within that pass one etcd call may wait `--etcd-timeout` (3 s).
fn act_bound(lease_duration: Duration) -> Duration {
    takeover_bound(lease_duration) + Duration::from_secs(3)
}

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// The `operator-failover` scenario: local processes.
pub(super) async fn operator_failover(h: &mut Harness) -> Result<(), ControlPlaneError> {
    kill_leader_mid_scale_up(h, OperatorInstances::LocalProcesses).await
}

/// From a settled 3-voter cluster: two instances, n4 and n5 join, the leader is killed as soon
/// as etcd lists the first new learner; a standby takes over within [`takeover_bound`] and the
/// cluster settles at 5 voters with no membership action done twice. Everything measured goes
/// to the step log.
pub async fn kill_leader_mid_scale_up(
    h: &mut Harness,
    instances: OperatorInstances,
) -> Result<(), ControlPlaneError> {
    let leases: Api<Lease> = Api::namespaced(h.cp.client(), OPERATOR_NS);
    let settled = h.status().await;
    let identities = instances.ready(h).await?;
    let before = lease(&leases).await?;
    let holder = before.holder_identity.clone().unwrap_or_default();
    if !identities.contains(&holder) {
        return Err(failed(format!(
            "the Lease names {holder:?}, none of the instances {identities:?}"
        )));
    }
    h.step(format!(
        "operator instances {identities:?} running; {holder} holds the Lease"
    ));
    let etcd = h.etcd().await?;
    let mut ledger = MemberLedger::new(&h.cp);
    for n in NEW_NODES {
        h.cp.add_node(n).await?;
    }
    ledger.know_nodes(&h.cp);
    h.step("nodes n4 and n5 added: the scale-up to 5 voters starts");

    // The kill point: the first new learner in etcd's member list.
    let (node, id) = first_new_learner(h, &etcd, &mut ledger).await?;
    let leader = lease(&leases)
        .await?
        .holder_identity
        .ok_or_else(|| failed("the Lease names no holder"))?;
    let standbys: Vec<String> = identities.into_iter().filter(|i| *i != leader).collect();
    let rv_at_kill = cluster_version(h).await;
    let killed_at = Instant::now();
    let killed_wall = Timestamp::now();
    let how = instances.kill(h, &leader).await?;
    let last = lease(&leases).await?;
    let renewed = last.renew_time.as_ref().map(|t| t.0);
    let duration =
        Duration::from_secs(u64::try_from(last.lease_duration_seconds.unwrap_or(15)).unwrap_or(15));
    h.step(format!(
        "leader {leader} killed ({how}) right after etcd listed learner {id} for {node}; its \
         last Lease renewal {} before the kill, lease duration {duration:?}",
        ms_between(renewed, Some(killed_wall)),
    ));

    let t = takeover(h, &leases, &leader, killed_at, &rv_at_kill, duration).await?;
    let survivor = t.lease.holder_identity.clone().unwrap_or_default();
    // On the Deployment the pod that replaces the killed one competes too.
    let role = if standbys.contains(&survivor) {
        "the standby"
    } else {
        "a new instance"
    };
    let acquired = t.lease.acquire_time.as_ref().map(|a| a.0);
    let expiry = renewed.and_then(|r| r.checked_add(duration).ok());
    h.step(format!(
        "takeover: the Lease names {survivor} ({role}) {:.2}s after the kill (acquireTime {} after it, \
         {} after the killed leader's lease expired); first status write {:.2}s after the kill",
        t.lease_s,
        ms_between(Some(killed_wall), acquired),
        ms_between(expiry, acquired),
        t.write_s,
    ));
    check_takeover_bounds(&t, &survivor, acquired, expiry, duration)?;

    let s = settle_sampling(h, &etcd, &mut ledger).await?;
    for n in ["n1", "n2", "n3"] {
        if member_of(&s, n) != member_of(&settled, n) {
            return Err(failed(format!(
                "{n}'s member changed: {:?} -> {:?}",
                member_of(&settled, n),
                member_of(&s, n)
            )));
        }
    }
    audit::check_no_action_twice(h, &etcd, &ledger, &NEW_NODES, &survivor, acquired).await?;
    check_single_takeover(h, &leases, &before, &survivor, instances).await?;
    Ok(())
}

/// A leader stopped with SIGTERM (a rolling update, a drain) gives the Lease up on its way out,
/// so the next instance need not wait the lease out.
async fn released_on_sigterm(
    h: &mut Harness,
    leases: &Api<Lease>,
    survivor: &str,
) -> Result<(), ControlPlaneError> {
    let stopped = Instant::now();
    h.cp.stop_operator_named(survivor, Duration::from_secs(5))?;
    let spec = lease(leases).await?;
    let holder = spec.holder_identity.unwrap_or_default();
    h.step(format!(
        "{survivor} stopped with SIGTERM in {:.1}s; the Lease names {holder:?}",
        stopped.elapsed().as_secs_f64()
    ));
    if !holder.is_empty() {
        return Err(failed(format!(
            "{survivor} stopped with SIGTERM but the Lease still names {holder:?}"
        )));
    }
    Ok(())
}

/// Polls etcd's member list until a learner of a new node shows; the ledger sees every list.
async fn first_new_learner(
    h: &Harness,
    etcd: &EtcdClient,
    ledger: &mut MemberLedger,
) -> Result<(String, String), ControlPlaneError> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let last = match etcd.member_list().await {
            Ok(list) => {
                ledger.observe(&list);
                let learner = list
                    .members
                    .iter()
                    .map(|m| (ledger.node_of(m), m))
                    .find(|(n, m)| m.is_learner && NEW_NODES.contains(&n.as_str()));
                if let Some((n, m)) = learner {
                    return Ok((n, m.id.to_string()));
                }
                format!("{} member(s), no new learner", list.members.len())
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(failed(format!(
                "no learner for n4 or n5 in {SETTLE:?}; last seen: {last}\n{}",
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The survivor took the Lease within [`takeover_bound`], not before it expired, and wrote within [`act_bound`].
fn check_takeover_bounds(
    t: &Takeover,
    survivor: &str,
    acquired: Option<Timestamp>,
    expiry: Option<Timestamp>,
    duration: Duration,
) -> Result<(), ControlPlaneError> {
    if t.lease_s > takeover_bound(duration).as_secs_f64() {
        return Err(failed(format!(
            "the takeover took {:.2}s, more than {:?} (lease duration + 1 s rounding + renew \
             period + 1 s)",
            t.lease_s,
            takeover_bound(duration)
        )));
    }
    if let (Some(a), Some(e)) = (acquired, expiry)
        && a < e
    {
        return Err(failed(format!(
            "{survivor} took the Lease at {a}, before it expired at {e}"
        )));
    }
    if t.write_s > act_bound(duration).as_secs_f64() {
        return Err(failed(format!(
            "{survivor}'s first status write came {:.2}s after the kill, more than {:?}",
            t.write_s,
            act_bound(duration)
        )));
    }
    Ok(())
}

/// Exactly one takeover happened, by the survivor, which keeps the Lease (and releases it on SIGTERM locally).
async fn check_single_takeover(
    h: &mut Harness,
    leases: &Api<Lease>,
    before: &LeaseSpec,
    survivor: &str,
    instances: OperatorInstances,
) -> Result<(), ControlPlaneError> {
    let after = lease(leases).await?;
    let transitions = after.lease_transitions.unwrap_or(0) - before.lease_transitions.unwrap_or(0);
    h.step(format!(
        "Lease: holder {:?}, {transitions} transition(s) since the instances were up",
        after.holder_identity
    ));
    if after.holder_identity.as_deref() != Some(survivor) || transitions != 1 {
        return Err(failed(
            "expected exactly one takeover, by the survivor, which keeps the Lease",
        ));
    }
    if instances == OperatorInstances::LocalProcesses {
        let gains = audit::leadership_gains(&h.cp, survivor);
        let relists = audit::takeover_relists(&h.cp, survivor);
        h.step(format!(
            "{survivor}'s log: took the lead {gains} time(s), listed its caches anew before \
             acting {relists} time(s)"
        ));
        if gains != 1 || relists != gains {
            return Err(failed(format!(
                "{survivor} took the lead {gains} times and listed its caches anew {relists} \
                 times: each takeover must wait for a fresh list (its predecessor's writes)"
            )));
        }
        released_on_sigterm(h, leases, survivor).await?;
    }
    Ok(())
}

/// What the takeover looked like.
struct Takeover {
    lease: LeaseSpec,
    /// Kill → the Lease names another instance (as polled).
    lease_s: f64,
    /// Kill → the EtcdCluster changed while the Lease names that instance.
    write_s: f64,
}

async fn takeover(
    h: &Harness,
    leases: &Api<Lease>,
    leader: &str,
    killed_at: Instant,
    rv_at_kill: &str,
    duration: Duration,
) -> Result<Takeover, ControlPlaneError> {
    let mut held: Option<(LeaseSpec, f64)> = None;
    // The EtcdCluster as it was before a standby could write: a write of the killed leader
    // still in flight at the kill moves it too.
    let mut baseline = rv_at_kill.to_owned();
    let mut last = String::new();
    while killed_at.elapsed() < act_bound(duration) + Duration::from_secs(30) {
        // The resourceVersion first: read before a Lease that names the old holder, it cannot
        // hold a standby's write.
        let rv = cluster_version(h).await;
        let spec = lease(leases).await?;
        let elapsed = killed_at.elapsed().as_secs_f64();
        if held.is_none() {
            if spec
                .holder_identity
                .as_deref()
                .is_some_and(|i| !i.is_empty() && i != leader)
            {
                held = Some((spec.clone(), elapsed));
            } else {
                baseline = rv.clone();
            }
        }
        if let Some((lease, lease_s)) = &held
            && rv != baseline
        {
            return Ok(Takeover {
                lease: lease.clone(),
                lease_s: *lease_s,
                write_s: elapsed,
            });
        }
        last = format!(
            "Lease holder {:?} renewed {:?}; EtcdCluster resourceVersion {rv} (before the \
             takeover {baseline})",
            spec.holder_identity,
            spec.renew_time.map(|t| t.0.to_string())
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(failed(format!(
        "no instance took over from {leader} and acted; last seen: {last}\n{}",
        h.describe().await
    )))
}

/// Waits for 5 settled voters, sampling etcd's member list into the ledger on the way.
async fn settle_sampling(
    h: &mut Harness,
    etcd: &EtcdClient,
    ledger: &mut MemberLedger,
) -> Result<etcd_operator::api::EtcdClusterStatus, ControlPlaneError> {
    let started = Instant::now();
    loop {
        if let Ok(list) = etcd.member_list().await {
            ledger.observe(&list);
        }
        let s = h.status().await;
        if crate::view::settled(&s, 5) {
            h.step(format!(
                "5 healthy voters, every node on the latest revision (after {:.1}s; etcd's \
                 member list sampled {} times)",
                started.elapsed().as_secs_f64(),
                ledger.samples
            ));
            return Ok(s);
        }
        if started.elapsed() > SETTLE {
            return Err(failed(format!(
                "the scale-up did not complete in {SETTLE:?}\n{}",
                h.describe().await
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Lease's spec as the API has it now.
async fn lease(leases: &Api<Lease>) -> Result<LeaseSpec, ControlPlaneError> {
    Ok(leases
        .get_opt(LEASE_NAME)
        .await?
        .and_then(|l| l.spec)
        .unwrap_or_default())
}

/// The EtcdCluster's resourceVersion (empty when it cannot be read).
async fn cluster_version(h: &Harness) -> String {
    h.cp.cluster()
        .await
        .ok()
        .flatten()
        .and_then(|c| c.metadata.resource_version)
        .unwrap_or_default()
}

/// `b - a` as "1.234s" ("?" when either is unknown).
fn ms_between(a: Option<Timestamp>, b: Option<Timestamp>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!(
            "{:.3}s",
            (b.as_millisecond() - a.as_millisecond()) as f64 / 1000.0
        ),
        _ => "?".into(),
    }
}
