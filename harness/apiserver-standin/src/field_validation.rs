//! Server-side field validation (`?fieldValidation=Ignore|Warn|Strict`, Warn by default), as
//! kube-apiserver does it: unknown fields (dropped by decoding a built-in kind, or pruned from a
//! custom resource) and duplicate fields of a request body are reported as `Warning: 299`
//! headers (Warn), refused (Strict: a 400 for a create or update, a 422 on `patch` for a patch)
//! or passed over (Ignore). `kubectl create/apply` ask for Strict.
//!
//! Warnings are gathered per request in a task-local list ([`collect`], [`warn`]) that the HTTP
//! front turns into headers.

use std::cell::RefCell;
use std::future::Future;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resources::ResourceInfo;

/// The `fieldValidation` directive of a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop them with a warning (kube-apiserver's default).
    #[default]
    Warn,
    /// Refuse the request.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter (absent or empty: Warn).
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value.unwrap_or_default() {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}"
            ))),
        }
    }
}

tokio::task_local! {
    static WARNINGS: RefCell<Vec<String>>;
}

/// Runs `f` with a fresh warning list; returns its output and the warnings it gave.
pub async fn collect<F: Future>(f: F) -> (F::Output, Vec<String>) {
    WARNINGS
        .scope(RefCell::new(Vec::new()), async {
            let out = f.await;
            let warnings = WARNINGS.with(|w| w.take());
            (out, warnings)
        })
        .await
}

/// Adds a warning to the current request's list (nothing outside a request).
pub fn warn(message: String) {
    let _ = WARNINGS.try_with(|w| w.borrow_mut().push(message));
}

/// What a write found wrong with its fields: `unknown field "x"`, `duplicate field "y"`.
pub fn problems(unknown: &[String], duplicates: &[String]) -> Vec<String> {
    let mut out: Vec<String> = duplicates
        .iter()
        .map(|d| format!("duplicate field {d:?}"))
        .collect();
    out.extend(unknown.iter().map(|u| format!("unknown field {u:?}")));
    out
}

/// Applies the directive to a write's field problems. `patched` is the patched object when
/// the write is a patch (its refusal is a 422 on `patch`, a body's a 400).
pub fn enforce(
    info: &ResourceInfo,
    directive: FieldValidation,
    problems: Vec<String>,
    patched: Option<&Value>,
) -> Result<(), ApiError> {
    if problems.is_empty() {
        return Ok(());
    }
    match directive {
        FieldValidation::Ignore => Ok(()),
        FieldValidation::Warn => {
            problems.into_iter().for_each(warn);
            Ok(())
        }
        FieldValidation::Strict => {
            let why = format!("strict decoding error: {}", problems.join(", "));
            Err(match patched {
                None => ApiError::bad_request(format!(
                    "{kind} in version {version:?} cannot be handled as a {kind}: {why}",
                    kind = info.kind,
                    version = info.version
                )),
                Some(obj) => {
                    let text = serde_json::to_string(obj).unwrap_or_default();
                    let message = format!("Invalid value: {text:?}: {why}");
                    ApiError {
                        code: 422,
                        reason: "Invalid",
                        message: format!(" \"\" is invalid: patch: {message}"),
                        details: Some(json!({"causes": [
                            {"reason": "FieldValueInvalid", "message": message, "field": "patch"}]})),
                    }
                }
            })
        }
    }
}

/// The fields of `sent` that decoding dropped from `decoded` (a built-in kind's unknown
/// fields), as dotted paths. `null`s are not counted: the types drop them too.
pub fn dropped_fields(sent: &Value, decoded: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(sent, decoded, "", &mut out);
    out.sort();
    out
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn diff(sent: &Value, decoded: &Value, path: &str, out: &mut Vec<String>) {
    match (sent, decoded) {
        (Value::Object(s), Value::Object(d)) => {
            for (k, v) in s {
                match d.get(k) {
                    Some(dv) => diff(v, dv, &join(path, k), out),
                    None if v.is_null() => {}
                    None => out.push(join(path, k)),
                }
            }
        }
        (Value::Array(s), Value::Array(d)) => {
            for (i, (sv, dv)) in s.iter().zip(d).enumerate() {
                diff(sv, dv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The keys a JSON body repeats inside one object, as dotted paths (`data`, `metadata.name`).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = Walk {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut de);
    out
}

struct Walk<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = join(&self.path, &key);
            if !seen.insert(key) {
                self.out.push(path.clone());
            }
            map.next_value_seed(Walk {
                path,
                out: &mut *self.out,
            })?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Walk {
                path: format!("{}[{i}]", self.path),
                out: &mut *self.out,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn duplicates_are_found_at_any_depth() {
        let body = br#"{"data": {"a": "1"}, "metadata": {"name": "x", "name": "y"}, "data": {}, "l": [{"k": 1, "k": 2}]}"#;
        assert_eq!(
            duplicate_fields(body),
            vec!["metadata.name", "data", "l[0].k"]
        );
        assert!(duplicate_fields(br#"{"a": {"a": 1}}"#).is_empty());
    }

    #[test]
    fn dropped_fields_are_what_decoding_lost() {
        let sent = json!({"metadata": {"name": "a", "bogus": 1, "labels": null}, "data": {"k": "v"}, "top": [1]});
        let decoded = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        assert_eq!(
            dropped_fields(&sent, &decoded),
            vec!["metadata.bogus", "top"]
        );
    }

    #[test]
    fn strict_refuses_a_body_with_a_400_and_a_patch_with_a_422() {
        let info = crate::resources::Registry::default()
            .lookup("", "v1", "configmaps")
            .unwrap();
        let p = problems(&["top".into()], &[]);
        let e = enforce(&info, FieldValidation::Strict, p.clone(), None).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"top\""
        );
        let e = enforce(&info, FieldValidation::Strict, p.clone(), Some(&json!({}))).unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        assert!(enforce(&info, FieldValidation::Ignore, p, None).is_ok());
    }
}
