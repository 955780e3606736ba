//! The `unmanaged` scenario: with `spec.managementState: Unmanaged` the operator observes and
//! reports, and writes nothing but the EtcdCluster's status. While it is Unmanaged a forced
//! redeployment is asked for and a fourth node joins: no revision is made, no installer pod, no
//! certificate, no ConfigMap, Secret or budget changes (every object of the operator's and the
//! static-pod namespaces keeps what a writer sets, everything but its status: the etcd and
//! agent-written mirror pods aside), and etcd's member list stays as it was. Set `Managed` again, the operator resumes
//! cleanly: the held redeployment becomes one new revision on every node and n4 joins as the
//! standby learner, the three voters keeping their member ids.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};

use super::harness::{Harness, member_ids};
use crate::controlplane::{ControlPlaneError, OPERATOR_NS, STATIC_NS};

const SETTLE: Duration = Duration::from_secs(240);
/// How long nothing may be written while Unmanaged.
const HOLD: Duration = Duration::from_secs(15);
const MIRROR: &str = "kubernetes.io/config.mirror";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// `"<Kind> <ns>/<name>"` → what a writer of the object sets: the object without its status
/// and without the bookkeeping every update moves (`resourceVersion`, `managedFields`). A pod's
/// status is the kubelet's and a budget's the disruption controller's: a quorum guard turning
/// unready and back while the machine is loaded moved both resourceVersions once, which is no
/// write of the operator's.
async fn versions<K>(h: &Harness, ns: &str) -> Result<BTreeMap<String, String>, ControlPlaneError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(h.cp.client(), ns);
    let list = api.list(&ListParams::default()).await?;
    let mut out = BTreeMap::new();
    for o in list
        .items
        .iter()
        .filter(|o| !o.annotations().contains_key(MIRROR))
    {
        let mut written = serde_json::to_value(o).map_err(|e| failed(e.to_string()))?;
        if let Some(all) = written.as_object_mut() {
            all.remove("status");
            if let Some(meta) = all.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.remove("resourceVersion");
                meta.remove("managedFields");
            }
        }
        out.insert(
            format!("{} {ns}/{}", K::kind(&()), o.name_any()),
            written.to_string(),
        );
    }
    Ok(out)
}

/// What the operator may write besides the EtcdCluster: ConfigMaps, Secrets, budgets and the pods
/// it makes (installer and quorum-guard pods; mirror pods are the node agents').
async fn written(h: &Harness) -> Result<BTreeMap<String, String>, ControlPlaneError> {
    let mut all = BTreeMap::new();
    for ns in [STATIC_NS, OPERATOR_NS] {
        all.extend(versions::<ConfigMap>(h, ns).await?);
        all.extend(versions::<Secret>(h, ns).await?);
    }
    all.extend(versions::<PodDisruptionBudget>(h, STATIC_NS).await?);
    all.extend(versions::<Pod>(h, STATIC_NS).await?);
    Ok(all)
}

/// The keys that differ between two snapshots.
fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| format!("{k}: {:?}\n  -> {:?}", before.get(k), after.get(k)))
        .collect()
}

async fn acted_on(h: &mut Harness, what: &str) -> Result<(), ControlPlaneError> {
    let wanted = h.generation().await?;
    h.wait_status(what, SETTLE, |s| s.observed_generation >= Some(wanted))
        .await?;
    Ok(())
}

pub async fn unmanaged(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = h.status().await;
    let (voters, revision) = (member_ids(&before), before.latest_available_revision);
    h.patch_spec(serde_json::json!({ "managementState": "Unmanaged" }))
        .await?;
    acted_on(h, "the operator saw Unmanaged").await?;
    let snapshot = written(h).await?;
    h.step(format!(
        "Unmanaged; {} objects of the operator's and static-pod namespaces recorded",
        snapshot.len()
    ));
    h.patch_spec(serde_json::json!({ "forceRedeploymentReason": "unmanaged-held" }))
        .await?;
    acted_on(h, "the operator saw the redeployment request").await?;
    h.cp.add_node("n4").await?;
    h.step("node n4 added while Unmanaged");
    let until = Instant::now() + HOLD;
    while Instant::now() < until {
        let s = h.status().await;
        if s.latest_available_revision != revision || member_ids(&s) != voters {
            return Err(failed(format!(
                "Unmanaged, yet revision {} (was {revision}) and members {:?} (were {voters:?})",
                s.latest_available_revision,
                member_ids(&s)
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let listed = h
        .etcd()
        .await?
        .member_list()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let live: std::collections::BTreeSet<String> =
        listed.members.iter().map(|m| m.id.to_string()).collect();
    if live != voters {
        return Err(failed(format!(
            "etcd's member list changed while Unmanaged: {live:?} (was {voters:?})"
        )));
    }
    let diff = changed(&snapshot, &written(h).await?);
    if !diff.is_empty() {
        return Err(failed(format!(
            "written while Unmanaged: {}",
            diff.join("; ")
        )));
    }
    h.step(format!(
        "for {}s nothing was written: revision {revision}, etcd's members and every object unchanged",
        HOLD.as_secs()
    ));
    h.patch_spec(serde_json::json!({ "managementState": "Managed" }))
        .await?;
    let s = h
        .wait_status(
            "a new revision on every node, n4 the standby learner",
            SETTLE,
            |s| {
                s.latest_available_revision > revision && crate::view::settled_with_standby(s, 3, 1)
            },
        )
        .await?;
    let kept = member_ids(&s);
    if !voters.is_subset(&kept) {
        return Err(failed(format!(
            "a voter was replaced on resume: {kept:?} (voters were {voters:?})"
        )));
    }
    h.step(format!(
        "Managed again: revision {} on every node, n4 a standby learner, the voters kept",
        s.latest_available_revision
    ));
    Ok(())
}
