//! The field rules kube-apiserver applies to PodDisruptionBudgets (policy/v1): at most one of
//! `minAvailable` / `maxUnavailable`, each a non-negative integer or a percentage of at most
//! 100%, a well-formed label selector, a known `unhealthyPodEvictionPolicy`; on status writes,
//! non-negative counters. Each failure is a [`Cause`] named like the real server's.

use serde_json::Value;

use crate::error::Cause;
use crate::validation::{is_label_value, is_qualified_name};

const PERCENT_MSG: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const LABEL_KEY_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// `field: Invalid value: <value as JSON>: message` (integers unquoted, as Go prints them).
fn invalid(field: impl Into<String>, value: &Value, message: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: format!("Invalid value: {value}: {message}"),
    }
}

/// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`.
fn int_or_percent(field: &str, value: &Value) -> Vec<Cause> {
    match value {
        Value::Number(n) if n.as_i64().is_some_and(|n| n < 0) => {
            vec![invalid(field, value, "must be greater than or equal to 0")]
        }
        Value::Number(_) => Vec::new(),
        Value::String(s) => {
            let digits = s.strip_suffix('%').unwrap_or_default();
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                vec![invalid(field, value, PERCENT_MSG)]
            } else if digits.parse::<u64>().map_or(true, |p| p > 100) {
                vec![invalid(field, value, "must not be greater than 100%")]
            } else {
                Vec::new()
            }
        }
        _ => vec![invalid(
            field,
            value,
            "must be an integer or percentage (e.g '5%')",
        )],
    }
}

/// `ValidateLabelSelector` at `spec.selector`.
fn selector(selector: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let base = "spec.selector";
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    for (i, e) in expressions.into_iter().flatten().enumerate() {
        let at = format!("{base}.matchExpressions[{i}]");
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let operator = e
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match operator {
            "In" | "NotIn" if values.is_empty() => {
                let mut c = Cause::required(format!("{at}.values"));
                c.message =
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'".into();
                causes.push(c);
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(Cause::forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(Cause::invalid(
                format!("{at}.operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        if !is_qualified_name(key) {
            causes.push(Cause::invalid(format!("{at}.key"), key, LABEL_KEY_MSG));
        }
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or_default();
            if !is_label_value(v) {
                causes.push(Cause::invalid(
                    format!("{at}.values[{j}]"),
                    v,
                    LABEL_VALUE_MSG,
                ));
            }
        }
    }
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            if !is_qualified_name(k) {
                causes.push(Cause::invalid(
                    format!("{base}.matchLabels"),
                    k,
                    LABEL_KEY_MSG,
                ));
            }
            let v = v.as_str().unwrap_or_default();
            if !is_label_value(v) {
                causes.push(Cause::invalid(
                    format!("{base}.matchLabels"),
                    v,
                    LABEL_VALUE_MSG,
                ));
            }
        }
    }
    causes
}

/// `ValidatePodDisruptionBudgetSpec` (create and update).
pub fn validate_spec(pdb: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = pdb.get("spec").cloned().unwrap_or(Value::Null);
    let field = |f: &str| spec.get(f).filter(|v| !v.is_null());
    if field("minAvailable").is_some() && field("maxUnavailable").is_some() {
        causes.push(invalid(
            "spec",
            &spec,
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for f in ["minAvailable", "maxUnavailable"] {
        if let Some(v) = field(f) {
            causes.extend(int_or_percent(&format!("spec.{f}"), v));
        }
    }
    if let Some(s) = field("selector") {
        causes.extend(selector(s));
    }
    if let Some(p) = field("unhealthyPodEvictionPolicy") {
        let p = p.as_str().unwrap_or_default();
        if p != "AlwaysAllow" && p != "IfHealthyBudget" {
            causes.push(Cause::unsupported(
                "spec.unhealthyPodEvictionPolicy",
                p,
                &["AlwaysAllow", "IfHealthyBudget"],
            ));
        }
    }
    causes
}

/// `ValidatePodDisruptionBudgetStatusUpdate` (policy/v1): the counters are non-negative.
pub fn validate_status(pdb: &Value) -> Vec<Cause> {
    [
        "disruptionsAllowed",
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
    ]
    .iter()
    .filter_map(|f| {
        let v = pdb.get("status")?.get(*f)?;
        v.as_i64().filter(|n| *n < 0).map(|_| {
            invalid(
                format!("status.{f}"),
                v,
                "must be greater than or equal to 0",
            )
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn fields(spec: Value) -> Vec<String> {
        validate_spec(&json!({"spec": spec}))
            .into_iter()
            .map(|c| c.field)
            .collect()
    }

    #[test]
    fn budget_fields_are_checked_like_kube_apiserver() {
        assert!(
            fields(json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "g"}}}))
                .is_empty()
        );
        assert!(fields(json!({"maxUnavailable": "100%", "selector": {}})).is_empty());
        assert_eq!(
            fields(json!({"minAvailable": 1, "maxUnavailable": 1})),
            ["spec"]
        );
        assert_eq!(fields(json!({"minAvailable": -1})), ["spec.minAvailable"]);
        assert_eq!(
            fields(json!({"maxUnavailable": "-10%"})),
            ["spec.maxUnavailable"]
        );
        assert_eq!(
            fields(json!({"minAvailable": "150%"})),
            ["spec.minAvailable"]
        );
        assert_eq!(
            fields(json!({"minAvailable": "abc"})),
            ["spec.minAvailable"]
        );
        assert_eq!(
            fields(json!({"unhealthyPodEvictionPolicy": "Foo"})),
            ["spec.unhealthyPodEvictionPolicy"]
        );
        assert_eq!(
            fields(json!({"selector": {"matchLabels": {"a": "-x-"}}})),
            ["spec.selector.matchLabels"]
        );
        assert_eq!(
            fields(json!({"selector": {"matchExpressions": [
                {"key": "a", "operator": "Bogus"},
                {"key": "a", "operator": "In"},
                {"key": "a", "operator": "Exists", "values": ["x"]}]}})),
            [
                "spec.selector.matchExpressions[0].operator",
                "spec.selector.matchExpressions[1].values",
                "spec.selector.matchExpressions[2].values"
            ]
        );
        let msg = &validate_spec(&json!({"spec": {"minAvailable": -1}}))[0].message;
        assert_eq!(msg, "Invalid value: -1: must be greater than or equal to 0");
    }

    #[test]
    fn status_counters_are_non_negative() {
        let pdb =
            json!({"status": {"disruptionsAllowed": -1, "currentHealthy": 0, "expectedPods": -2}});
        let got: Vec<String> = validate_status(&pdb).into_iter().map(|c| c.field).collect();
        assert_eq!(got, ["status.disruptionsAllowed", "status.expectedPods"]);
    }
}
