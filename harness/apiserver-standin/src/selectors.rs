//! Label and field selectors, parsed and matched the way kube-apiserver does for the forms the
//! project uses.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k`
//! (does not exist), and `k>n` / `k<n` (integer compare), joined by `,` (logical AND). As in
//! Kubernetes, `!=` and `notin` also match objects without the label.
//!
//! Field selectors: `f=v`, `f==v`, `f!=v` joined by `,`, on `metadata.name` and
//! `metadata.namespace` for every resource plus the per-resource fields that
//! [`crate::resources::ResourceInfo::field_selectable`] lists (e.g. pods' `spec.nodeName`). An
//! unsupported field is a 400, as on the real server.

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::objects;

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelRequirement {
    /// `k=v` / `k==v` / `k in (..)`.
    In(String, Vec<String>),
    /// `k!=v` / `k notin (..)`.
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    DoesNotExist(String),
    /// `k>n`.
    Gt(String, i64),
    /// `k<n`.
    Lt(String, i64),
}

/// A parsed label selector (all requirements must hold).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<LabelRequirement>);

/// One field requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// Dotted field path.
    pub field: String,
    /// `true` for `=`/`==`, `false` for `!=`.
    pub equals: bool,
    /// Value compared against (missing fields compare as empty).
    pub value: String,
}

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<FieldRequirement>);

fn bad(selector: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unable to parse requirement: {why} (selector {selector:?})"
    ))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_label_key(key: &str) -> bool {
    crate::validation::is_qualified_name(key)
}

fn valid_label_value(v: &str) -> bool {
    crate::validation::is_label_value(v)
}

fn parse_set(selector: &str, rest: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(selector, "expected a parenthesised set of values"))?;
    let mut values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(|v| !valid_label_value(v)) {
        return Err(bad(selector, "invalid label value in set"));
    }
    values.sort();
    values.dedup();
    Ok(values)
}

impl LabelSelector {
    /// Parses a `labelSelector` query value; empty means "everything".
    pub fn parse(selector: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for raw in split_top_level(selector) {
            let term = raw.trim();
            if term.is_empty() {
                return Err(bad(selector, "empty requirement"));
            }
            let req = if let Some(key) = term.strip_prefix('!') {
                let key = key.trim();
                check_key(selector, key)?;
                LabelRequirement::DoesNotExist(key.to_string())
            } else if let Some((key, value)) = term.split_once("!=") {
                let (key, value) = (key.trim(), value.trim());
                check_key(selector, key)?;
                check_value(selector, value)?;
                LabelRequirement::NotIn(key.to_string(), vec![value.to_string()])
            } else if let Some((key, value)) =
                term.split_once("==").or_else(|| term.split_once('='))
            {
                let (key, value) = (key.trim(), value.trim());
                check_key(selector, key)?;
                check_value(selector, value)?;
                LabelRequirement::In(key.to_string(), vec![value.to_string()])
            } else if let Some((key, value)) = term.split_once('>') {
                let n = value
                    .trim()
                    .parse()
                    .map_err(|_| bad(selector, "value for > must be an integer"))?;
                check_key(selector, key.trim())?;
                LabelRequirement::Gt(key.trim().to_string(), n)
            } else if let Some((key, value)) = term.split_once('<') {
                let n = value
                    .trim()
                    .parse()
                    .map_err(|_| bad(selector, "value for < must be an integer"))?;
                check_key(selector, key.trim())?;
                LabelRequirement::Lt(key.trim().to_string(), n)
            } else if let Some((key, rest)) = split_word(term, "notin") {
                check_key(selector, key)?;
                LabelRequirement::NotIn(key.to_string(), parse_set(selector, rest)?)
            } else if let Some((key, rest)) = split_word(term, "in") {
                check_key(selector, key)?;
                LabelRequirement::In(key.to_string(), parse_set(selector, rest)?)
            } else {
                check_key(selector, term)?;
                LabelRequirement::Exists(term.to_string())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.0.iter().all(|req| {
            let get = |k: &str| labels.get(k).and_then(Value::as_str);
            match req {
                LabelRequirement::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
                LabelRequirement::NotIn(k, vs) => get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
                LabelRequirement::Exists(k) => labels.contains_key(k),
                LabelRequirement::DoesNotExist(k) => !labels.contains_key(k),
                LabelRequirement::Gt(k, n) => get(k)
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                LabelRequirement::Lt(k, n) => get(k)
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }
}

/// `key <word> (set)`: the word must stand alone between whitespace.
fn split_word<'a>(term: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let paren = term.find('(')?;
    let head = term[..paren].trim_end();
    let key = head.strip_suffix(word)?;
    if !key.ends_with(char::is_whitespace) {
        return None;
    }
    Some((key.trim(), &term[paren..]))
}

fn check_key(selector: &str, key: &str) -> Result<(), ApiError> {
    if valid_label_key(key) {
        Ok(())
    } else {
        Err(bad(selector, &format!("invalid label key {key:?}")))
    }
}

fn check_value(selector: &str, value: &str) -> Result<(), ApiError> {
    if valid_label_value(value) {
        Ok(())
    } else {
        Err(bad(selector, &format!("invalid label value {value:?}")))
    }
}

impl FieldSelector {
    /// Parses a `fieldSelector`, accepting only fields in `supported`.
    pub fn parse(selector: &str, supported: &[&str]) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for raw in selector.split(',') {
            let term = raw.trim();
            let (field, equals, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{selector}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push(FieldRequirement {
                field: field.to_string(),
                equals,
                value: value.trim().to_string(),
            });
        }
        Ok(Self(reqs))
    }

    /// Whether an object satisfies every requirement (a missing field reads as `""`).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let actual = objects::path(obj, &r.field)
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            (actual == r.value) == r.equals
        })
    }

    /// The single `metadata.name=<x>` this selector pins, if any (lets a watch narrow its key).
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.equals && r.field == "metadata.name")
            .map(|r| r.value.as_str())
    }
}

/// Both selectors of a list or watch.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether an object matches both.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(&objects::labels(obj)) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn parses_every_operator() {
        let s = LabelSelector::parse("a=1,b==2,c!=3,d in (x, y),e notin (z),f,!g,h>4,i<5").unwrap();
        assert_eq!(
            s.0,
            vec![
                LabelRequirement::In("a".into(), vec!["1".into()]),
                LabelRequirement::In("b".into(), vec!["2".into()]),
                LabelRequirement::NotIn("c".into(), vec!["3".into()]),
                LabelRequirement::In("d".into(), vec!["x".into(), "y".into()]),
                LabelRequirement::NotIn("e".into(), vec!["z".into()]),
                LabelRequirement::Exists("f".into()),
                LabelRequirement::DoesNotExist("g".into()),
                LabelRequirement::Gt("h".into(), 4),
                LabelRequirement::Lt("i".into(), 5),
            ]
        );
    }

    #[test]
    fn matching_follows_kubernetes_semantics() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "7"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&l);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app=db"));
        assert!(m("app!=db"));
        assert!(m("missing!=x"), "!= matches objects without the label");
        assert!(m("app in (db, web)"));
        assert!(!m("app notin (db, web)"));
        assert!(m("missing notin (a)"));
        assert!(m("tier"));
        assert!(!m("!tier"));
        assert!(m("!missing"));
        assert!(m("n>6,n<8"));
        assert!(!m("app=web,tier=back"));
        assert!(m("example.com/role!=x"));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(LabelSelector::parse("a in x").unwrap_err().code, 400);
        assert_eq!(LabelSelector::parse("-bad-=1").unwrap_err().code, 400);
        assert_eq!(LabelSelector::parse("a=1,,b=2").unwrap_err().code, 400);
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}});
        let supported = ["metadata.name", "metadata.namespace", "spec.nodeName"];
        let m = |s: &str| FieldSelector::parse(s, &supported).unwrap().matches(&pod);
        assert!(m("spec.nodeName=n1"));
        assert!(m("spec.nodeName==n1,metadata.name=p"));
        assert!(!m("spec.nodeName!=n1"));
        assert!(m("metadata.namespace!=other"));
        let unscheduled = json!({"metadata": {"name": "q"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.nodeName=", &supported)
                .unwrap()
                .matches(&unscheduled)
        );
        let err = FieldSelector::parse("spec.bogus=1", &supported).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            FieldSelector::parse("metadata.name=p", &supported)
                .unwrap()
                .pinned_name(),
            Some("p")
        );
    }
}
