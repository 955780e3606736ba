//! Custom resources' validation rules (`x-kubernetes-validations`), as kube-apiserver applies
//! them once schema validation found no blocking error: every rule of a schema node is
//! evaluated ([`crate::cel`]) with `self` bound to the value at that node, wherever the value
//! is present (an absent optional field is not checked). A rule that is false is a
//! `FieldValueInvalid` cause at the node's path with the rule's `message` (else `failed rule:
//! <rule>`); one that cannot be evaluated (e.g. `no such key`) is a cause too. CRDs are checked
//! when written ([`uncompilable`]): a rule outside what the stand-in evaluates refuses the CRD,
//! so no value is ever let through an unchecked rule.

use serde_json::Value;

use crate::cel;
use crate::error::Cause;
use crate::schema::{Path, type_name};

const RULES: &str = "x-kubernetes-validations";
/// What a rule may carry that changes its answer, and the stand-in does not evaluate.
const UNSUPPORTED: [&str; 3] = ["messageExpression", "reason", "fieldPath"];

/// Checks `value` against the rules of `schema` and of every schema below it.
pub fn check(value: &Value, schema: &Value, path: &Path, out: &mut Vec<Cause>) {
    if value.is_null() {
        return;
    }
    own(value, schema, path, out);
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|s| s.is_object());
            for (k, v) in map {
                let sub = props.and_then(|p| p.get(k)).or(extra);
                if let Some(sub) = sub {
                    check(v, sub, &path.child(k), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    check(v, sub, &path.index(i), out);
                }
            }
        }
        _ => {}
    }
}

/// Checks `value` against the rules of `schema` itself, not those of the schemas below it.
pub fn own(value: &Value, schema: &Value, path: &Path, out: &mut Vec<Cause>) {
    let rules = schema.get(RULES).and_then(Value::as_array);
    out.extend(
        rules
            .into_iter()
            .flatten()
            .filter_map(|rule| one(value, rule, path)),
    );
}

/// The cause one rule gives `value`, if any.
fn one(value: &Value, rule: &Value, path: &Path) -> Option<Cause> {
    let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
    let message = rule
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("failed rule: {text}"));
    let verdict = cel::compile(text).and_then(|e| cel::eval(&e, value));
    let why = match verdict {
        Ok(cel::Val::Bool(true)) => return None,
        Ok(cel::Val::Bool(false)) => message,
        Ok(other) => format!("rule gave a {other:?}, not a bool: {text}"),
        Err(e) => format!("{e} evaluating rule: {text}"),
    };
    // kube-apiserver names the root `<nil>` (a rule on the whole object).
    let field = Some(path.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("<nil>");
    Some(Cause::invalid(field, type_name(value), why))
}

/// Every rule under `schema` that does not compile or carries what the stand-in does not
/// evaluate ([`UNSUPPORTED`]), as `(path, message)`; `path` names the schema node as a CRD's
/// field path does (`...properties[spec].x-kubernetes-validations[0].rule`).
pub fn uncompilable(schema: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let Value::Object(map) = schema else {
        return;
    };
    for (i, rule) in map
        .get(RULES)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.{RULES}[{i}]");
        let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
        if let Err(e) = cel::compile(text) {
            out.push((format!("{at}.rule"), format!("compilation failed: {e}")));
        }
        for field in UNSUPPORTED {
            if rule.get(field).is_some() {
                out.push((
                    format!("{at}.{field}"),
                    "not supported by the API stand-in".to_owned(),
                ));
            }
        }
    }
    for (k, sub) in map
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        uncompilable(sub, &format!("{path}.properties[{k}]"), out);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = map.get(key) {
            uncompilable(sub, &format!("{path}.{key}"), out);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "x-kubernetes-validations": [{"rule": "self.metadata.name == 'cluster'", "message": "one per cluster"}],
            "properties": {
                "metadata": {"type": "object"},
                "spec": {"type": "object", "properties": {
                    "quota": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= 1"}]},
                    "clients": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() > 1", "message": "too short"}]}
                    }}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string",
                        "x-kubernetes-validations": [{"rule": "self != ''"}]}}
                }}
            }
        })
    }

    #[test]
    fn each_false_rule_is_a_cause_at_its_node_and_absent_fields_are_not_checked() {
        let mut out = Vec::new();
        let obj = json!({"metadata": {"name": "other"}, "spec": {
            "quota": 0, "clients": [{"name": "ab"}, {"name": "a"}], "labels": {"x": ""}}});
        check(&obj, &schema(), &Path::root(), &mut out);
        let got: Vec<(&str, &str)> = out
            .iter()
            .map(|c| (c.field.as_str(), c.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("<nil>", "Invalid value: \"object\": one per cluster"),
                (
                    "spec.clients[1].name",
                    "Invalid value: \"string\": too short"
                ),
                (
                    "spec.labels.x",
                    "Invalid value: \"string\": failed rule: self != ''"
                ),
                (
                    "spec.quota",
                    "Invalid value: \"integer\": failed rule: self >= 1"
                ),
            ]
        );
        let mut none = Vec::new();
        check(
            &json!({"metadata": {"name": "cluster"}, "spec": {}}),
            &schema(),
            &Path::root(),
            &mut none,
        );
        assert_eq!(none, Vec::new());
    }

    #[test]
    fn a_crd_with_a_rule_the_stand_in_cannot_evaluate_is_named() {
        let mut s = schema();
        s["properties"]["spec"]["properties"]["quota"]["x-kubernetes-validations"] =
            json!([{"rule": "self >= 1"}, {"rule": "isSorted(self)"}]);
        s["properties"]["spec"]["properties"]["clients"]["x-kubernetes-validations"] =
            json!([{"rule": "true", "messageExpression": "'no'"}]);
        let mut out = Vec::new();
        uncompilable(&s, "spec.versions[0].schema.openAPIV3Schema", &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(
            out[0]
                .0
                .ends_with("properties[clients].x-kubernetes-validations[0].messageExpression"),
            "{out:?}"
        );
        out.remove(0);
        assert_eq!(
            out[0].0,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[quota].x-kubernetes-validations[1].rule"
        );
    }
}
