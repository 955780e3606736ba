//! The disruption controller (kube-controller-manager's on a real cluster), run in-process: it
//! keeps every PodDisruptionBudget's `status` in step with the pods it selects, which is what
//! the eviction subresource ([`crate::eviction`]) decides on.
//!
//! One pass reads the budgets and the pods of their namespaces at a single etcd revision, asks
//! the pure [`decide`] for each budget's new status, and writes the ones that changed through
//! the `/status` write path guarded by the budget's resourceVersion (a lost race waits for the
//! next pass). Passes run when a pod or a budget is written ([`State::disruption_wake`]) and
//! every [`crate::StandInConfig::disruption_interval`].
//!
//! For each budget, as the real controller computes it:
//! - `minAvailable: N` (an integer): `expectedPods` = the selected pods, `desiredHealthy` = N;
//! - `maxUnavailable` or a percentage need the scale of the pods' controllers. Pods without a
//!   controller reference count for nothing (`expectedPods` 0, so `disruptionsAllowed` 0; the
//!   real controller also records an `UnmanagedPods` event). The stand-in serves no scalable
//!   kind, so a pod *with* a controller makes the pass fail the way the real one fails for a
//!   kind without a scale subresource: `disruptionsAllowed` 0 and `DisruptionAllowed` False,
//!   reason `SyncFailed`, with `observedGeneration` left as it was;
//! - `currentHealthy` = selected pods that are Ready, not being deleted and not in
//!   `disruptedPods`; `disruptedPods` loses pods that are gone, being deleted, or listed for
//!   longer than [`DELETION_TIMEOUT`]; `disruptionsAllowed` = `currentHealthy - desiredHealthy`
//!   (0 when negative or when `expectedPods` is 0);
//! - `observedGeneration` = `metadata.generation`, and `DisruptionAllowed` True/SufficientPods
//!   or False/InsufficientPods. Nothing is written when none of this changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use time::OffsetDateTime;

use crate::objects;
use crate::pdb::{Budget, BudgetStatus, DELETION_TIMEOUT};
use crate::resources::{Registry, ResourceInfo};
use crate::state::{State, from_storage};
use crate::store::{StoreError, Stored};
use crate::verbs::{self, Commit};

/// Kinds the stand-in serves, by (group, kind), with the group-resource the real controller
/// would name when it finds no scale subresource on them (`configmaps`, `widgets.example.com`).
pub type ServedKinds = BTreeMap<(String, String), String>;

/// The served kinds of a registry.
pub fn served_kinds(reg: &Registry) -> ServedKinds {
    reg.all()
        .map(|r| {
            let gr = if r.group.is_empty() {
                r.resource.clone()
            } else {
                format!("{}.{}", r.resource, r.group)
            };
            ((r.group.clone(), r.kind.clone()), gr)
        })
        .collect()
}

/// Whether writes of this resource can change a budget's status.
pub fn watches(info: &ResourceInfo) -> bool {
    (info.group.is_empty() && info.resource == "pods")
        || (info.group == "policy" && info.resource == "poddisruptionbudgets")
}

/// `(expectedPods, desiredHealthy)`, or why they cannot be computed (the pass then fails safe).
fn expected_and_desired(
    budget: &Budget,
    pods: &[&Value],
    served: &ServedKinds,
) -> Result<(i64, i64), String> {
    // The summed scale of the pods' controllers: unmanaged pods add nothing, and no controller
    // the stand-in knows has a scale.
    let scale = || -> Result<i64, String> {
        for pod in pods {
            let refs = pod
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array);
            let controller = refs
                .into_iter()
                .flatten()
                .find(|r| r.get("controller") == Some(&Value::Bool(true)));
            if let Some(r) = controller {
                let api_version = r
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
                let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
                return Err(match served.get(&(group.to_string(), kind.to_string())) {
                    Some(gr) => format!("{gr} does not implement the scale subresource"),
                    None => format!("found no controllers for pod {:?}", objects::name(pod)),
                });
            }
        }
        Ok(0)
    };
    if let Some(max) = budget.max_unavailable {
        let expected = scale()?;
        return Ok((expected, (expected - max.of(expected)).max(0)));
    }
    match budget.min_available {
        Some(crate::pdb::Amount::Count(n)) => Ok((pods.len() as i64, n)),
        Some(percent) => {
            let expected = scale()?;
            Ok((expected, percent.of(expected)))
        }
        None => Ok((0, 0)),
    }
}

/// The budget's new status given every pod of its namespace, or `None` when it is up to date.
pub fn decide(
    budget: &Budget,
    pods: &[Value],
    served: &ServedKinds,
    now: OffsetDateTime,
) -> Option<BudgetStatus> {
    let old = &budget.status;
    let selected: Vec<&Value> = pods.iter().filter(|p| budget.selects(p)).collect();
    let (expected, desired) = match expected_and_desired(budget, &selected, served) {
        Ok(v) => v,
        Err(message) => {
            let mut failed = old.clone();
            failed.disruptions_allowed = 0;
            failed.set_condition(false, "SyncFailed", &message, old.observed_generation, now);
            return (failed != *old).then_some(failed);
        }
    };
    let disrupted: BTreeMap<String, OffsetDateTime> = selected
        .iter()
        .filter(|p| !objects::is_deleting(p))
        .filter_map(|p| {
            let name = objects::name(p);
            let at = *old.disrupted_pods.get(name)?;
            (at + DELETION_TIMEOUT >= now).then(|| (name.to_string(), at))
        })
        .collect();
    let healthy = selected
        .iter()
        .filter(|p| !objects::is_deleting(p))
        .filter(|p| {
            disrupted
                .get(objects::name(p))
                .is_none_or(|at| *at + DELETION_TIMEOUT <= now)
        })
        .filter(|p| crate::pdb::is_ready(p))
        .count() as i64;
    let allowed = if expected <= 0 {
        0
    } else {
        (healthy - desired).max(0)
    };
    let unchanged = old.current_healthy == healthy
        && old.desired_healthy == desired
        && old.expected_pods == expected
        && old.disruptions_allowed == allowed
        && old.disrupted_pods == disrupted
        && old.observed_generation == budget.generation
        && old.condition_up_to_date(budget.generation);
    if unchanged {
        return None;
    }
    let mut next = BudgetStatus {
        observed_generation: budget.generation,
        disruptions_allowed: allowed,
        current_healthy: healthy,
        desired_healthy: desired,
        expected_pods: expected,
        disrupted_pods: disrupted,
        conditions: old.conditions.clone(),
    };
    next.update_disruption_allowed(now);
    Some(next)
}

/// One pass over every budget; returns how many statuses were written.
pub async fn pass(state: &State) -> Result<usize, StoreError> {
    let reg = state.registry();
    let (Some(pdbs), Some(pods)) = (
        reg.lookup("policy", "v1", "poddisruptionbudgets"),
        reg.lookup("", "v1", "pods"),
    ) else {
        return Ok(0);
    };
    let page = state
        .store
        .list(&pdbs.collection_prefix(state.prefix(), None), None, 0, 0)
        .await?;
    if page.items.is_empty() {
        return Ok(0);
    }
    let served = served_kinds(&reg);
    let mut pods_by_ns: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut written = 0;
    for stored in &page.items {
        let ns = objects::namespace(&stored.object).to_string();
        if !pods_by_ns.contains_key(&ns) {
            let prefix = pods.collection_prefix(state.prefix(), Some(&ns));
            let listed = state.store.list(&prefix, None, page.revision, 0).await?;
            let objects = listed
                .items
                .into_iter()
                .map(|s| from_storage(&pods, s.object));
            pods_by_ns.insert(ns.clone(), objects.collect());
        }
        let namespace_pods = pods_by_ns.get(&ns).map(Vec::as_slice).unwrap_or_default();
        let budget = Budget::from_value(&stored.object);
        let now = OffsetDateTime::now_utc();
        if let Some(status) = decide(&budget, namespace_pods, &served, now) {
            match write_status(state, &pdbs, stored, &status).await {
                Ok(()) => written += 1,
                Err(e) => tracing::debug!(namespace = %ns, name = %budget.name, error = %e,
                    "API stand-in disruption controller: status write skipped until the next pass"),
            }
        }
    }
    Ok(written)
}

/// Writes a budget's status over the version it was computed from.
pub async fn write_status(
    state: &State,
    info: &ResourceInfo,
    stored: &Stored,
    status: &BudgetStatus,
) -> Result<(), crate::ApiError> {
    let mut next = from_storage(info, stored.object.clone());
    objects::object_mut(&mut next).insert("status".into(), status.to_value());
    match verbs::commit_update(state, info, stored, next, true, &Default::default()).await? {
        Commit::Done(_) => Ok(()),
        Commit::Retry => Err(crate::ApiError::stale(
            info.gr(),
            objects::name(&stored.object),
        )),
    }
}

/// Runs the controller until the state is dropped.
pub async fn run(state: Arc<State>) {
    loop {
        if let Err(e) = pass(&state).await {
            tracing::warn!(error = %e, "API stand-in disruption controller: pass failed");
        }
        let every = state.config.disruption_interval;
        let _ = tokio::time::timeout(every, state.disruption_wake.notified()).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> OffsetDateTime {
        objects::parse_rfc3339(s).unwrap()
    }

    const NOW: &str = "2026-01-01T00:10:00Z";

    fn pod(name: &str, ready: bool) -> Value {
        let status = if ready { "True" } else { "False" };
        json!({"metadata": {"name": name, "labels": {"app": "g"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status}]}})
    }

    fn budget(spec: Value, status: Value) -> Budget {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "g"}});
        Budget::from_value(
            &json!({"metadata": {"name": "b", "generation": 2}, "spec": spec, "status": status}),
        )
    }

    fn decide_now(b: &Budget, pods: &[Value]) -> Option<BudgetStatus> {
        decide(b, pods, &served_kinds(&Registry::default()), at(NOW))
    }

    #[test]
    fn min_available_counts_ready_pods() {
        let pods = [
            pod("a", true),
            pod("b", true),
            pod("c", true),
            pod("d", false),
        ];
        let s = decide_now(&budget(json!({"minAvailable": 2}), json!({})), &pods).unwrap();
        assert_eq!(
            (
                s.expected_pods,
                s.desired_healthy,
                s.current_healthy,
                s.disruptions_allowed
            ),
            (4, 2, 3, 1)
        );
        assert_eq!(s.observed_generation, 2);
        let c = s.condition().unwrap();
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("True"), Some("SufficientPods"))
        );
        assert_eq!(c["lastTransitionTime"], NOW);
        // The same inputs again: nothing to write.
        let settled = budget(json!({"minAvailable": 2}), s.to_value());
        assert_eq!(decide_now(&settled, &pods), None);
    }

    #[test]
    fn disrupted_and_deleting_pods_are_not_healthy() {
        let mut deleting = pod("b", true);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:09:00Z");
        let pods = [pod("a", true), deleting, pod("c", true), pod("stale", true)];
        let status = json!({"observedGeneration": 2, "disruptedPods": {
            "a": "2026-01-01T00:09:30Z", "b": "2026-01-01T00:09:30Z", "stale": "2026-01-01T00:07:00Z"}});
        let s = decide_now(&budget(json!({"minAvailable": 1}), status), &pods).unwrap();
        assert_eq!(s.disrupted_pods.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!((s.current_healthy, s.disruptions_allowed), (2, 1));
    }

    #[test]
    fn unmanaged_pods_give_no_budget_for_max_unavailable_or_percentages() {
        let pods = [pod("a", true), pod("b", true)];
        for spec in [json!({"maxUnavailable": 1}), json!({"minAvailable": "50%"})] {
            let s = decide_now(&budget(spec, json!({})), &pods).unwrap();
            assert_eq!(
                (s.expected_pods, s.desired_healthy, s.current_healthy),
                (0, 0, 2)
            );
            assert_eq!(s.disruptions_allowed, 0);
            assert_eq!(s.condition().unwrap()["reason"], "InsufficientPods");
        }
        let s = decide_now(&budget(json!({"minAvailable": 1}), json!({})), &[]).unwrap();
        assert_eq!((s.expected_pods, s.disruptions_allowed), (0, 0));
    }

    #[test]
    fn controlled_pods_fail_safe_without_a_scale() {
        let mut owned = pod("a", true);
        owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": "o", "uid": "u", "controller": true}]);
        let old = json!({"disruptionsAllowed": 1, "currentHealthy": 1});
        let s = decide_now(&budget(json!({"maxUnavailable": 1}), old), &[owned.clone()]).unwrap();
        assert_eq!(
            (
                s.disruptions_allowed,
                s.current_healthy,
                s.observed_generation
            ),
            (0, 1, 0)
        );
        let c = s.condition().unwrap();
        assert_eq!(c["reason"], "SyncFailed");
        assert_eq!(
            c["message"],
            "configmaps does not implement the scale subresource"
        );
        owned["metadata"]["ownerReferences"][0]["apiVersion"] = json!("apps/v1");
        owned["metadata"]["ownerReferences"][0]["kind"] = json!("ReplicaSet");
        let s = decide_now(&budget(json!({"maxUnavailable": 1}), json!({})), &[owned]).unwrap();
        assert_eq!(
            s.condition().unwrap()["message"],
            "found no controllers for pod \"a\""
        );
    }

    #[test]
    fn a_new_generation_is_observed() {
        let pods = [pod("a", true)];
        let first = decide_now(&budget(json!({"minAvailable": 1}), json!({})), &pods).unwrap();
        let mut b = budget(json!({"minAvailable": 1}), first.to_value());
        b.generation = 3;
        let s = decide_now(&b, &pods).unwrap();
        assert_eq!(s.observed_generation, 3);
        assert_eq!(s.condition().unwrap()["observedGeneration"], 3);
        assert_eq!(s.condition().unwrap()["lastTransitionTime"], NOW);
    }
}
