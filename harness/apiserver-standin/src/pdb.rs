//! PodDisruptionBudgets (`policy/v1`): the typed view that the eviction subresource
//! ([`crate::eviction`]) and the disruption controller ([`crate::disruption`]) share, read
//! leniently from the stored JSON (selector, budget, unhealthy-pod policy, status), plus pod
//! readiness and the `DisruptionAllowed` condition with `metav1.SetStatusCondition`'s rule
//! (`lastTransitionTime` moves only when the condition's status does). Pure, no I/O.
//!
//! Selectors follow policy/v1: a missing (`null`) selector matches no pod, an empty one (`{}`)
//! every pod of the namespace; a selector that does not parse matches nothing.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::objects;
use crate::selectors::{LabelRequirement, LabelSelector};

/// How long an eviction's entry in `status.disruptedPods` holds a pod out of the healthy count
/// when the pod is not deleted (the disruption controller's `DeletionTimeout`).
pub const DELETION_TIMEOUT: time::Duration = time::Duration::minutes(2);

/// The condition type the disruption controller maintains.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";

/// `spec.minAvailable` / `spec.maxUnavailable`: a count or a percentage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    /// An integer.
    Count(i64),
    /// `"N%"`.
    Percent(i64),
}

impl Amount {
    /// Reads an int-or-string; `None` for anything else (validation rejects it).
    pub fn parse(v: &Value) -> Option<Self> {
        if let Some(n) = v.as_i64() {
            return Some(Self::Count(n));
        }
        let digits = v.as_str()?.strip_suffix('%')?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(Self::Percent)
    }

    /// The amount out of `total` (percentages round up, as the controller computes them).
    pub fn of(self, total: i64) -> i64 {
        match self {
            Self::Count(n) => n,
            Self::Percent(p) => (p * total + 99) / 100,
        }
    }
}

/// `status` of a PodDisruptionBudget.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BudgetStatus {
    /// `observedGeneration`.
    pub observed_generation: i64,
    /// `disruptionsAllowed`.
    pub disruptions_allowed: i64,
    /// `currentHealthy`.
    pub current_healthy: i64,
    /// `desiredHealthy`.
    pub desired_healthy: i64,
    /// `expectedPods`.
    pub expected_pods: i64,
    /// `disruptedPods`: pod name → when an eviction was granted (whole seconds).
    pub disrupted_pods: BTreeMap<String, OffsetDateTime>,
    /// `conditions`, as stored.
    pub conditions: Vec<Value>,
}

impl BudgetStatus {
    /// Reads `status` (missing fields are zero).
    pub fn from_value(status: Option<&Value>) -> Self {
        let int = |f: &str| status.and_then(|s| s.get(f)).and_then(Value::as_i64);
        let disrupted_pods = status
            .and_then(|s| s.get("disruptedPods"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), objects::parse_rfc3339(v.as_str()?)?)))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            observed_generation: int("observedGeneration").unwrap_or(0),
            disruptions_allowed: int("disruptionsAllowed").unwrap_or(0),
            current_healthy: int("currentHealthy").unwrap_or(0),
            desired_healthy: int("desiredHealthy").unwrap_or(0),
            expected_pods: int("expectedPods").unwrap_or(0),
            disrupted_pods,
            conditions: status
                .and_then(|s| s.get("conditions"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// The JSON `status`, with the real server's omissions (zero `observedGeneration`, empty
    /// `disruptedPods` and `conditions` left out).
    pub fn to_value(&self) -> Value {
        let mut out = json!({
            "disruptionsAllowed": self.disruptions_allowed,
            "currentHealthy": self.current_healthy,
            "desiredHealthy": self.desired_healthy,
            "expectedPods": self.expected_pods,
        });
        let map = objects::object_mut(&mut out);
        if self.observed_generation != 0 {
            map.insert("observedGeneration".into(), json!(self.observed_generation));
        }
        if !self.disrupted_pods.is_empty() {
            let pods: Map<String, Value> = self
                .disrupted_pods
                .iter()
                .map(|(k, t)| (k.clone(), Value::String(objects::rfc3339(*t))))
                .collect();
            map.insert("disruptedPods".into(), Value::Object(pods));
        }
        if !self.conditions.is_empty() {
            map.insert("conditions".into(), Value::Array(self.conditions.clone()));
        }
        out
    }

    /// The `DisruptionAllowed` condition, if any.
    pub fn condition(&self) -> Option<&Value> {
        self.conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(DISRUPTION_ALLOWED))
    }

    /// Sets `DisruptionAllowed` (`metav1.SetStatusCondition`): a new condition or a change of
    /// status takes `now` as `lastTransitionTime`; otherwise only reason, message and
    /// observedGeneration change.
    pub fn set_condition(
        &mut self,
        allowed: bool,
        reason: &str,
        message: &str,
        observed_generation: i64,
        now: OffsetDateTime,
    ) {
        let status = if allowed { "True" } else { "False" };
        let index = self
            .conditions
            .iter()
            .position(|c| c.get("type").and_then(Value::as_str) == Some(DISRUPTION_ALLOWED));
        let transition = match index.and_then(|i| self.conditions.get(i)) {
            Some(old) if old.get("status").and_then(Value::as_str) == Some(status) => old
                .get("lastTransitionTime")
                .cloned()
                .unwrap_or_else(|| Value::String(objects::rfc3339(now))),
            _ => Value::String(objects::rfc3339(now)),
        };
        let mut condition = json!({
            "type": DISRUPTION_ALLOWED,
            "status": status,
            "lastTransitionTime": transition,
            "reason": reason,
            "message": message,
        });
        if observed_generation != 0 {
            objects::object_mut(&mut condition)
                .insert("observedGeneration".into(), json!(observed_generation));
        }
        match index.and_then(|i| self.conditions.get_mut(i)) {
            Some(slot) => *slot = condition,
            None => self.conditions.push(condition),
        }
    }

    /// `UpdateDisruptionAllowedCondition`: True/SufficientPods when a disruption is allowed,
    /// else False/InsufficientPods.
    pub fn update_disruption_allowed(&mut self, now: OffsetDateTime) {
        let allowed = self.disruptions_allowed > 0;
        let reason = if allowed {
            "SufficientPods"
        } else {
            "InsufficientPods"
        };
        self.set_condition(allowed, reason, "", self.observed_generation, now);
    }

    /// `ConditionsAreUpToDate`: the condition exists, agrees with `disruptionsAllowed`, and
    /// the status observed `generation`.
    pub fn condition_up_to_date(&self, generation: i64) -> bool {
        let Some(c) = self.condition() else {
            return false;
        };
        let field = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or_default();
        let (status, reason) = if self.disruptions_allowed > 0 {
            ("True", "SufficientPods")
        } else {
            ("False", "InsufficientPods")
        };
        self.observed_generation == generation
            && field("status") == status
            && field("reason") == reason
    }
}

/// What eviction and the disruption controller read of a PodDisruptionBudget.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `spec.selector`; `None` matches no pod.
    pub selector: Option<LabelSelector>,
    /// `spec.minAvailable`.
    pub min_available: Option<Amount>,
    /// `spec.maxUnavailable`.
    pub max_unavailable: Option<Amount>,
    /// `spec.unhealthyPodEvictionPolicy` is `AlwaysAllow` (else `IfHealthyBudget`, the default).
    pub always_allow_unhealthy: bool,
    /// `status`.
    pub status: BudgetStatus,
}

impl Budget {
    /// Reads a stored PodDisruptionBudget.
    pub fn from_value(pdb: &Value) -> Self {
        let spec = pdb.get("spec");
        let field = |f: &str| spec.and_then(|s| s.get(f)).filter(|v| !v.is_null());
        Self {
            name: objects::name(pdb).to_string(),
            generation: objects::generation(pdb),
            selector: field("selector").and_then(parse_selector),
            min_available: field("minAvailable").and_then(Amount::parse),
            max_unavailable: field("maxUnavailable").and_then(Amount::parse),
            always_allow_unhealthy: field("unhealthyPodEvictionPolicy").and_then(Value::as_str)
                == Some("AlwaysAllow"),
            status: BudgetStatus::from_value(pdb.get("status")),
        }
    }

    /// Whether the budget's selector selects the pod (same namespace assumed).
    pub fn selects(&self, pod: &Value) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|s| s.matches(&objects::labels(pod)))
    }
}

/// A `metav1.LabelSelector` as requirements; `None` when it does not parse.
pub fn parse_selector(selector: &Value) -> Option<LabelSelector> {
    let mut reqs = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            reqs.push(LabelRequirement::In(
                k.clone(),
                vec![v.as_str()?.to_string()],
            ));
        }
    }
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    for e in expressions.into_iter().flatten() {
        let key = e.get("key").and_then(Value::as_str)?.to_string();
        let values = objects::strings(e.get("values"));
        reqs.push(match e.get("operator").and_then(Value::as_str)? {
            "In" if !values.is_empty() => LabelRequirement::In(key, values),
            "NotIn" if !values.is_empty() => LabelRequirement::NotIn(key, values),
            "Exists" if values.is_empty() => LabelRequirement::Exists(key),
            "DoesNotExist" if values.is_empty() => LabelRequirement::DoesNotExist(key),
            _ => return None,
        });
    }
    Some(LabelSelector(reqs))
}

/// The pod's `Ready` condition is `True` (kube's `IsPodReady`, what "healthy" means to a PDB).
pub fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// `status.phase`, or empty.
pub fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn at(s: &str) -> OffsetDateTime {
        objects::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn amounts_and_percentages_round_up() {
        assert_eq!(Amount::parse(&json!(2)), Some(Amount::Count(2)));
        assert_eq!(Amount::parse(&json!("50%")), Some(Amount::Percent(50)));
        assert_eq!(Amount::parse(&json!("abc")), None);
        assert_eq!(Amount::parse(&json!("%")), None);
        assert_eq!(Amount::Percent(50).of(3), 2);
        assert_eq!(Amount::Percent(50).of(0), 0);
        assert_eq!(Amount::Count(2).of(7), 2);
    }

    #[test]
    fn nil_selector_matches_nothing_empty_matches_everything() {
        let pod = json!({"metadata": {"labels": {"app": "g"}}});
        let bare = json!({"metadata": {}});
        let budget =
            |spec: Value| Budget::from_value(&json!({"metadata": {"name": "b"}, "spec": spec}));
        assert!(!budget(json!({"minAvailable": 1})).selects(&pod));
        assert!(budget(json!({"selector": {}})).selects(&bare));
        let by_label = budget(json!({"selector": {"matchLabels": {"app": "g"}}}));
        assert!(by_label.selects(&pod) && !by_label.selects(&bare));
        let expr = budget(json!({"selector": {"matchExpressions": [
            {"key": "app", "operator": "NotIn", "values": ["g"]}]}}));
        assert!(!expr.selects(&pod) && expr.selects(&bare));
        let broken =
            budget(json!({"selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}));
        assert!(!broken.selects(&bare));
    }

    #[test]
    fn status_round_trips_with_the_real_omissions() {
        let v = json!({"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
            "expectedPods": 3, "observedGeneration": 4,
            "disruptedPods": {"p1": "2026-01-01T00:00:00Z"}});
        let s = BudgetStatus::from_value(Some(&v));
        assert_eq!(s.disrupted_pods["p1"], at("2026-01-01T00:00:00Z"));
        assert_eq!(s.to_value(), v);
        let empty = BudgetStatus::default().to_value();
        assert_eq!(
            empty,
            json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
        );
    }

    #[test]
    fn condition_keeps_its_transition_time_while_the_status_holds() {
        let mut s = BudgetStatus {
            disruptions_allowed: 1,
            observed_generation: 1,
            ..BudgetStatus::default()
        };
        assert!(!s.condition_up_to_date(1));
        s.update_disruption_allowed(at("2026-01-01T00:00:00Z"));
        assert!(s.condition_up_to_date(1));
        assert!(!s.condition_up_to_date(2));
        s.update_disruption_allowed(at("2026-01-01T00:05:00Z"));
        assert_eq!(
            s.condition().unwrap()["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        s.disruptions_allowed = 0;
        assert!(!s.condition_up_to_date(1));
        s.update_disruption_allowed(at("2026-01-01T00:06:00Z"));
        let c = s.condition().unwrap();
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], "InsufficientPods");
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:06:00Z");
        assert_eq!(c["observedGeneration"], 1);
        assert_eq!(s.conditions.len(), 1);
    }

    #[test]
    fn readiness_is_the_ready_condition() {
        assert!(is_ready(
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        ));
        assert!(!is_ready(
            &json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
        ));
        assert!(!is_ready(&json!({"status": {"phase": "Running"}})));
    }
}
