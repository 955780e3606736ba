//! The pure rules of the pod `eviction` subresource ([`crate::eviction`] does the I/O): which
//! pods skip the budgets, the verdict of the budgets selecting a pod,
//! check-and-decrement of the one budget, the errors kube-apiserver answers with (429 with a
//! `DisruptionBudget` cause, 403, 409 on preconditions) and the `DisruptionTarget` condition an
//! evicted pod is marked with.

use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::delete::DeleteOptions;
use crate::error::{ApiError, GroupResource};
use crate::objects;
use crate::pdb::{Budget, BudgetStatus, is_ready, phase};

/// kube-apiserver refuses evictions while this many are granted and not yet seen by the
/// disruption controller.
const MAX_DISRUPTED_PODS: usize = 2000;
const POD: GroupResource<'static> = GroupResource {
    group: "",
    resource: "Pod",
};
const PDB_SINGULAR: GroupResource<'static> = GroupResource {
    group: "policy",
    resource: "poddisruptionbudget",
};

/// What the budgets say about evicting a pod that is Running (and not being deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No budget selects the pod: delete it.
    NoBudget,
    /// More than one budget selects it: the subresource refuses (500).
    MoreThanOneBudget,
    /// The pod is not Ready and its budget lets it go without using a disruption: delete it,
    /// pinned to the pod's resourceVersion (so it did not become Ready meanwhile).
    Unhealthy {
        /// The budget's name.
        budget: String,
    },
    /// The one budget must grant a disruption first ([`check_and_decrement`]).
    Decrement {
        /// Index of the budget in the list given.
        index: usize,
    },
}

/// A pod in this state is deleted without consulting any budget.
pub fn ignores_budgets(pod: &Value) -> bool {
    objects::is_deleting(pod) || matches!(phase(pod), "Succeeded" | "Failed" | "Pending")
}

/// The budget verdict for a pod, given the budgets of its namespace.
pub fn verdict(pod: &Value, budgets: &[Budget]) -> Verdict {
    let mut selecting = budgets.iter().enumerate().filter(|(_, b)| b.selects(pod));
    let Some((index, budget)) = selecting.next() else {
        return Verdict::NoBudget;
    };
    if selecting.next().is_some() {
        return Verdict::MoreThanOneBudget;
    }
    let s = &budget.status;
    let unhealthy_may_go = budget.always_allow_unhealthy
        || (s.current_healthy >= s.desired_healthy && s.desired_healthy > 0);
    if !is_ready(pod) && unhealthy_may_go {
        return Verdict::Unhealthy {
            budget: budget.name.clone(),
        };
    }
    Verdict::Decrement { index }
}

/// 429 TooManyRequests with one `DisruptionBudget` cause.
pub fn too_many_requests(cause: String, retry_after_seconds: i64) -> ApiError {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after_seconds > 0 {
        details["retryAfterSeconds"] = json!(retry_after_seconds);
    }
    ApiError {
        code: 429,
        reason: "TooManyRequests",
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        details: Some(details),
    }
}

/// 429 while a budget's spec is not yet observed (also when a pinned delete lost a race).
pub fn still_processing(budget: &str) -> ApiError {
    too_many_requests(
        format!("The disruption budget {budget} is still being processed by the server."),
        10,
    )
}

/// Grants one disruption of `budget` to `pod`: the budget's new status, or why not.
pub fn check_and_decrement(
    budget: &Budget,
    pod: &str,
    now: OffsetDateTime,
) -> Result<BudgetStatus, ApiError> {
    let s = &budget.status;
    if s.observed_generation < budget.generation {
        return Err(still_processing(&budget.name));
    }
    if s.disruptions_allowed < 0 {
        return Err(ApiError::forbidden(
            PDB_SINGULAR,
            &budget.name,
            "pdb disruptions allowed is negative",
        ));
    }
    if s.disrupted_pods.len() > MAX_DISRUPTED_PODS {
        return Err(ApiError::forbidden(
            PDB_SINGULAR,
            &budget.name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if s.disruptions_allowed == 0 {
        return Err(too_many_requests(
            format!(
                "The disruption budget {} needs {} healthy pods and has {} currently",
                budget.name, s.desired_healthy, s.current_healthy
            ),
            0,
        ));
    }
    let mut next = s.clone();
    next.disruptions_allowed -= 1;
    if next.disruptions_allowed == 0 {
        next.update_disruption_allowed(now);
    }
    let whole_seconds = now.replace_nanosecond(0).unwrap_or(now);
    next.disrupted_pods.insert(pod.to_string(), whole_seconds);
    Ok(next)
}

/// The `Status` of a granted eviction.
pub fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// 409 when the live pod is not the one the preconditions name.
pub fn check_preconditions(pod: &Value, opts: &DeleteOptions) -> Result<(), ApiError> {
    let name = objects::name(pod);
    if let Some(uid) = opts.uid.as_deref().filter(|u| !u.is_empty())
        && uid != objects::uid(pod)
    {
        return Err(ApiError::conflict(
            POD,
            name,
            &format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                objects::uid(pod)
            ),
        ));
    }
    if let Some(rv) = opts.resource_version.as_deref().filter(|r| !r.is_empty())
        && rv != objects::resource_version(pod)
    {
        return Err(ApiError::conflict(
            POD,
            name,
            &format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                objects::resource_version(pod)
            ),
        ));
    }
    Ok(())
}

/// The pod with condition `DisruptionTarget` True (`UpdatePodCondition`: the transition time
/// stays when the status does).
pub fn with_disruption_target(mut pod: Value, now: &str) -> Value {
    let status = objects::object_mut(&mut pod)
        .entry("status")
        .or_insert_with(|| json!({}));
    let conditions = objects::object_mut(status)
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return pod;
    };
    let existing = list
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionTarget"));
    let transition = existing
        .and_then(|i| list.get(i))
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| Value::String(now.to_string()));
    let condition = json!({"type": "DisruptionTarget", "status": "True",
        "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting",
        "lastTransitionTime": transition});
    match existing.and_then(|i| list.get_mut(i)) {
        Some(slot) => *slot = condition,
        None => list.push(condition),
    }
    pod
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn at(s: &str) -> OffsetDateTime {
        objects::parse_rfc3339(s).unwrap()
    }

    fn pod(phase: &str, ready: bool) -> Value {
        let ready = if ready { "True" } else { "False" };
        json!({"metadata": {"name": "p", "labels": {"app": "g"}, "uid": "u", "resourceVersion": "7"},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}})
    }

    fn budget(name: &str, spec: Value, status: Value) -> Budget {
        Budget::from_value(
            &json!({"metadata": {"name": name, "generation": 1}, "spec": spec, "status": status}),
        )
    }

    fn settled(allowed: i64, current: i64, desired: i64) -> Value {
        json!({"observedGeneration": 1, "disruptionsAllowed": allowed,
            "currentHealthy": current, "desiredHealthy": desired, "expectedPods": 3})
    }

    fn app_g() -> Value {
        json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "g"}}})
    }

    #[test]
    fn finished_pending_and_deleting_pods_skip_the_budgets() {
        assert!(ignores_budgets(&pod("Pending", false)));
        assert!(ignores_budgets(&pod("Succeeded", false)));
        assert!(ignores_budgets(&pod("Failed", true)));
        assert!(!ignores_budgets(&pod("Running", true)));
        let mut deleting = pod("Running", true);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(ignores_budgets(&deleting));
    }

    #[test]
    fn verdicts() {
        let ready = pod("Running", true);
        let unready = pod("Running", false);
        let g = budget("g", app_g(), settled(1, 3, 2));
        let other = budget(
            "o",
            json!({"selector": {"matchLabels": {"app": "x"}}}),
            json!({}),
        );
        let nil = budget("n", json!({"minAvailable": 1}), json!({}));
        let all = budget("all", json!({"selector": {}}), json!({}));
        assert_eq!(
            verdict(&ready, &[other.clone(), nil.clone()]),
            Verdict::NoBudget
        );
        assert_eq!(
            verdict(&ready, &[other.clone(), g.clone()]),
            Verdict::Decrement { index: 1 }
        );
        assert_eq!(
            verdict(&ready, &[g.clone(), all]),
            Verdict::MoreThanOneBudget
        );
        assert_eq!(
            verdict(&unready, std::slice::from_ref(&g)),
            Verdict::Unhealthy { budget: "g".into() }
        );
        // IfHealthyBudget: an unready pod of a disrupted application must use a disruption.
        let short = budget("g", app_g(), settled(0, 1, 2));
        assert_eq!(verdict(&unready, &[short]), Verdict::Decrement { index: 0 });
        let mut always = app_g();
        always["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        let always = budget("g", always, settled(0, 1, 2));
        assert_eq!(
            verdict(&unready, &[always]),
            Verdict::Unhealthy { budget: "g".into() }
        );
    }

    #[test]
    fn check_and_decrement_grants_one_disruption() {
        let now = at("2026-01-01T00:00:00Z");
        let g = budget("g", app_g(), settled(1, 3, 2));
        let next = check_and_decrement(&g, "p1", now).unwrap();
        assert_eq!(next.disruptions_allowed, 0);
        assert_eq!(next.disrupted_pods["p1"], now);
        let c = next.condition().unwrap();
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some("InsufficientPods"))
        );

        let e =
            check_and_decrement(&budget("g", app_g(), settled(0, 2, 2)), "p2", now).unwrap_err();
        assert_eq!((e.code, e.reason), (429, "TooManyRequests"));
        let details = e.details.unwrap();
        assert_eq!(details["causes"][0]["reason"], "DisruptionBudget");
        assert_eq!(
            details["causes"][0]["message"],
            "The disruption budget g needs 2 healthy pods and has 2 currently"
        );
        assert!(details.get("retryAfterSeconds").is_none());

        let mut unobserved = budget("g", app_g(), settled(1, 3, 2));
        unobserved.generation = 2;
        let e = check_and_decrement(&unobserved, "p", now).unwrap_err();
        assert_eq!((e.code, e.retry_after_seconds()), (429, Some(10)));
        assert_eq!(
            e.details.unwrap()["causes"][0]["message"],
            "The disruption budget g is still being processed by the server."
        );

        let negative = budget("g", app_g(), settled(-1, 3, 2));
        let e = check_and_decrement(&negative, "p", now).unwrap_err();
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "poddisruptionbudget.policy \"g\" is forbidden: pdb disruptions allowed is negative"
        );
    }

    #[test]
    fn preconditions_name_the_live_pod() {
        let p = pod("Running", true);
        let opts = |uid: Option<&str>, rv: Option<&str>| DeleteOptions {
            uid: uid.map(str::to_string),
            resource_version: rv.map(str::to_string),
            ..DeleteOptions::default()
        };
        assert!(check_preconditions(&p, &opts(Some("u"), Some("7"))).is_ok());
        assert_eq!(
            check_preconditions(&p, &opts(Some("x"), None))
                .unwrap_err()
                .code,
            409
        );
        assert_eq!(
            check_preconditions(&p, &opts(None, Some("6")))
                .unwrap_err()
                .code,
            409
        );
    }

    #[test]
    fn disruption_target_is_added_once() {
        let marked = with_disruption_target(pod("Running", true), "2026-01-01T00:00:00Z");
        let conditions = marked["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[1]["reason"], "EvictionByEvictionAPI");
        let again = with_disruption_target(marked.clone(), "2026-01-01T00:09:00Z");
        assert_eq!(again, marked);
        let bare = with_disruption_target(json!({"metadata": {}}), "t");
        assert_eq!(bare["status"]["conditions"][0]["type"], "DisruptionTarget");
    }
}
