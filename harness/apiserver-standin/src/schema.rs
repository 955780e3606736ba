//! Validation of a custom resource against its CRD's structural OpenAPI v3 schema
//! (`openAPIV3Schema`), with the causes kube-apiserver gives: `FieldValueTypeInvalid` for a
//! wrong JSON type, `FieldValueRequired`, `FieldValueNotSupported` for an `enum`,
//! `FieldValueTooLong` (`maxLength`), `FieldValueTooMany` (`maxItems`, `maxProperties`) and
//! `FieldValueInvalid` for the other bounds (`minimum`, `maximum`, `minLength`, `pattern`,
//! `minItems`, ...), each worded as kube-openapi words it (`spec.x in body should be ...`).
//!
//! Pure functions over JSON; pruning and defaulting live in [`crate::schema_prune`]. Not
//! evaluated: `anyOf`/`allOf`/`oneOf`/`not` and string formats (the project's CRD uses only
//! integer formats, which kube-apiserver does not check either).

use serde_json::{Map, Value};

use crate::error::Cause;

/// A field path as kube-apiserver prints it: `spec.clients[0].commonName`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    /// The root (the whole object).
    pub fn root() -> Self {
        Self::default()
    }

    /// A child property (also a key of an `additionalProperties` map).
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_string())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    /// An item of a list.
    pub fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name kube-openapi uses in its messages (`spec.x in body`).
    fn in_body(&self) -> String {
        if self.0.is_empty() {
            "body in body".into()
        } else {
            format!("{} in body", self.0)
        }
    }
}

/// The JSON type of a value as kube-openapi names it.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if is_integer(n) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An integer, or a float without a fractional part (Go's decoder sees `1.0` as an integer).
fn is_integer(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
}

/// A value as Go's `%v`/`%q` prints it in `Invalid value: ...`.
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn invalid(path: &Path, value: &Value, message: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: path.as_str().to_string(),
        message: format!("Invalid value: {}: {message}", render(value)),
    }
}

fn bound(v: &Value) -> String {
    render(v)
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Validates `value` at `path` against `schema`, appending every violation to `out`.
pub fn validate(value: &Value, schema: &Value, path: &Path, out: &mut Vec<Cause>) {
    if value.is_null() {
        // Nulls the schema does not allow were pruned before validation.
        return;
    }
    if !type_matches(value, schema) {
        // Only a declared type or int-or-string can fail to match.
        let want = schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("integer or string");
        out.push(type_invalid(path, value, want));
        return;
    }
    check_enum(value, schema, path, out);
    match value {
        Value::String(s) => check_string(s, value, schema, path, out),
        Value::Number(_) => check_number(value, schema, path, out),
        Value::Array(items) => check_array(items, schema, path, out),
        Value::Object(map) => check_object(map, schema, path, out),
        _ => {}
    }
}

fn type_matches(value: &Value, schema: &Value) -> bool {
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    if int_or_string {
        return matches!(type_name(value), "integer" | "string");
    }
    match schema.get("type").and_then(Value::as_str) {
        None => true,
        Some("number") => value.is_number(),
        Some(want) => type_name(value) == want,
    }
}

fn type_invalid(path: &Path, value: &Value, want: &str) -> Cause {
    let got = type_name(value);
    Cause {
        reason: "FieldValueTypeInvalid",
        field: path.as_str().to_string(),
        message: format!(
            "Invalid value: \"{got}\": {} must be of type {want}: \"{got}\"",
            path.in_body()
        ),
    }
}

fn check_enum(value: &Value, schema: &Value, path: &Path, out: &mut Vec<Cause>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if allowed.contains(value) {
        return;
    }
    let list: Vec<String> = allowed.iter().map(render).collect();
    out.push(Cause {
        reason: "FieldValueNotSupported",
        field: path.as_str().to_string(),
        message: format!(
            "Unsupported value: {}: supported values: {}",
            render(value),
            list.join(", ")
        ),
    });
}

fn check_string(s: &str, value: &Value, schema: &Value, path: &Path, out: &mut Vec<Cause>) {
    let chars = s.chars().count();
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars as u64 > max
    {
        out.push(Cause {
            reason: "FieldValueTooLong",
            field: path.as_str().to_string(),
            message: format!("Too long: may not be more than {max} bytes"),
        });
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && (chars as u64) < min
    {
        let msg = format!("{} should be at least {min} chars long", path.in_body());
        out.push(invalid(path, value, msg));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(s))
    {
        let msg = format!("{} should match '{pattern}'", path.in_body());
        out.push(invalid(path, value, msg));
    }
}

fn check_number(value: &Value, schema: &Value, path: &Path, out: &mut Vec<Cause>) {
    let Some(v) = num(value) else { return };
    if schema.get("type").and_then(Value::as_str) == Some("integer")
        && type_name(value) != "integer"
    {
        return;
    }
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    if let Some(min) = schema.get("minimum") {
        let (fails, words) = if flag("exclusiveMinimum") {
            (num(min).is_some_and(|m| v <= m), "greater than")
        } else {
            (num(min).is_some_and(|m| v < m), "greater than or equal to")
        };
        if fails {
            let msg = format!("{} should be {words} {}", path.in_body(), bound(min));
            out.push(invalid(path, value, msg));
        }
    }
    if let Some(max) = schema.get("maximum") {
        let (fails, words) = if flag("exclusiveMaximum") {
            (num(max).is_some_and(|m| v >= m), "less than")
        } else {
            (num(max).is_some_and(|m| v > m), "less than or equal to")
        };
        if fails {
            let msg = format!("{} should be {words} {}", path.in_body(), bound(max));
            out.push(invalid(path, value, msg));
        }
    }
    if let Some(m) = schema.get("multipleOf").and_then(Value::as_f64)
        && m > 0.0
        && (v / m).fract() != 0.0
    {
        let msg = format!(
            "{} should be a multiple of {}",
            path.in_body(),
            render(&schema["multipleOf"])
        );
        out.push(invalid(path, value, msg));
    }
}

fn check_array(items: &[Value], schema: &Value, path: &Path, out: &mut Vec<Cause>) {
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        out.push(Cause {
            reason: "FieldValueTooMany",
            field: path.as_str().to_string(),
            message: format!("Too many: {}: must have at most {max} items", items.len()),
        });
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        let msg = format!("{} should have at least {min} items", path.in_body());
        out.push(Cause {
            reason: "FieldValueInvalid",
            field: path.as_str().to_string(),
            message: format!("Invalid value: {}: {msg}", items.len()),
        });
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate(item, item_schema, &path.index(i), out);
        }
    }
}

fn check_object(map: &Map<String, Value>, schema: &Value, path: &Path, out: &mut Vec<Cause>) {
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && map.len() as u64 > max
    {
        out.push(Cause {
            reason: "FieldValueTooMany",
            field: path.as_str().to_string(),
            message: format!("Too many: {}: must have at most {max} items", map.len()),
        });
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if map.get(name).is_none_or(Value::is_null) {
                out.push(Cause::required(path.child(name).as_str()));
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (key, child) in map {
        let child_path = path.child(key);
        match (properties.and_then(|p| p.get(key)), additional) {
            (Some(s), _) | (None, Some(s)) => validate(child, s, &child_path, out),
            (None, None) => {}
        }
    }
}

/// True when the schema (anywhere inside) has `x-kubernetes-validations` rules.
pub fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.contains_key("x-kubernetes-validations") || map.values().any(has_rules)
        }
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

/// kube-apiserver does not evaluate CEL rules when schema validation found a wrong type, a
/// missing required field, an unsupported enum value or a too long/too many value: it adds this
/// cause instead (only for a schema that has rules).
pub fn rules_not_checked(causes: &[Cause]) -> Option<Cause> {
    const BLOCKING: [&str; 5] = [
        "FieldValueTypeInvalid",
        "FieldValueRequired",
        "FieldValueNotSupported",
        "FieldValueTooLong",
        "FieldValueTooMany",
    ];
    causes
        .iter()
        .any(|c| BLOCKING.contains(&c.reason))
        .then(|| Cause {
            reason: "FieldValueInvalid",
            field: "<nil>".into(),
            message: "Invalid value: null: some validation rules were not checked because the \
                      object was invalid; correct the existing errors to complete validation"
                .into(),
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn causes(value: Value, schema: Value) -> Vec<Cause> {
        let mut out = Vec::new();
        validate(&value, &schema, &Path::root(), &mut out);
        out
    }

    fn clients_schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "clients": {"type": "array", "maxItems": 1, "items": {"type": "object",
                "required": ["commonName", "name"], "properties": {
                    "commonName": {"type": "string", "minLength": 1, "maxLength": 3},
                    "name": {"type": "string"}}}},
            "quota": {"type": "integer", "minimum": 0.0},
            "level": {"type": "string", "enum": ["Normal", "Debug"]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}})
    }

    #[test]
    fn a_missing_required_field_is_named_with_its_path() {
        let c = causes(
            json!({"spec": {"clients": [{"name": "kas"}]}}),
            clients_schema(),
        );
        assert_eq!(c, vec![Cause::required("spec.clients[0].commonName")]);
        assert!(rules_not_checked(&c).is_some());
    }

    #[test]
    fn wrong_types_and_bounds_are_worded_like_kube_openapi() {
        let c = causes(json!({"spec": {"quota": "eight"}}), clients_schema());
        assert_eq!(c[0].reason, "FieldValueTypeInvalid");
        assert_eq!(
            c[0].message,
            "Invalid value: \"string\": spec.quota in body must be of type integer: \"string\""
        );
        let c = causes(json!({"spec": {"quota": -1}}), clients_schema());
        assert_eq!(
            c[0].message,
            "Invalid value: -1: spec.quota in body should be greater than or equal to 0"
        );
        assert!(causes(json!({"spec": {"quota": 2.0}}), clients_schema()).is_empty());
        let c = causes(json!({"spec": {"level": "Loud"}}), clients_schema());
        assert_eq!(
            c[0].message,
            "Unsupported value: \"Loud\": supported values: \"Normal\", \"Debug\""
        );
        let c = causes(json!({"spec": {"labels": {"a": 1}}}), clients_schema());
        assert_eq!(c[0].field, "spec.labels.a");
    }

    #[test]
    fn lengths_and_counts() {
        let c = causes(
            json!({"spec": {"clients": [{"name": "a", "commonName": ""}, {"name": "b", "commonName": "abcd"}]}}),
            clients_schema(),
        );
        let got: Vec<(&str, &str)> = c.iter().map(|c| (c.reason, c.field.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("FieldValueTooMany", "spec.clients"),
                ("FieldValueInvalid", "spec.clients[0].commonName"),
                ("FieldValueTooLong", "spec.clients[1].commonName"),
            ]
        );
        assert_eq!(c[0].message, "Too many: 2: must have at most 1 items");
    }

    #[test]
    fn int_or_string_takes_both() {
        let s = json!({"x-kubernetes-int-or-string": true});
        assert!(causes(json!(1), s.clone()).is_empty());
        assert!(causes(json!("25%"), s.clone()).is_empty());
        assert_eq!(causes(json!(true), s)[0].reason, "FieldValueTypeInvalid");
    }
}
