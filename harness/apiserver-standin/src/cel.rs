//! The part of CEL (the Common Expression Language) that custom resource validation rules
//! (`x-kubernetes-validations[].rule`) are written in, as far as the stand-in evaluates it:
//! literals (integers, doubles, strings with escapes, booleans, `null`, lists), `self` and
//! the variables of a macro, field selection, indexing, `has()`, `! - * / % + -`, comparisons,
//! `in`, `&& || ?:`, the methods `size`, `matches`, `startsWith`, `endsWith`, `contains` and
//! the macros `all`, `exists`, `filter`, `map`. A rule that uses anything else does not compile,
//! and the stand-in refuses the CustomResourceDefinition that carries it ([`compile`]): it
//! never lets a value through a rule it could not check. Evaluation follows CEL's semantics
//! where a rule can tell: `&&`/`||` absorb an error on one side when the other decides,
//! selecting an absent field is an error (`no such key`), integers are 64-bit and overflow is
//! an error.

use std::fmt;

use serde_json::Value;

mod eval;
mod parse;

pub use eval::eval;
pub use parse::compile;

/// Why a rule does not compile, or what went wrong evaluating it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CelError(pub String);

impl fmt::Display for CelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, CelError> {
    Err(CelError(msg.into()))
}

/// A compiled expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Lit(Val),
    List(Vec<Expr>),
    Ident(String),
    Select(Box<Expr>, String),
    Has(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Unary(char, Box<Expr>),
    Binary(Box<Expr>, Op, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Method, Vec<Expr>),
    Macro(Box<Expr>, Macro, String, Box<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Size,
    Matches,
    StartsWith,
    EndsWith,
    Contains,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Macro {
    All,
    Exists,
    Filter,
    Map,
}

/// A CEL value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(String),
    List(Vec<Val>),
    Map(Vec<(String, Val)>),
}

impl Val {
    /// A JSON value as CEL sees it (an integral JSON number is an `int`).
    pub fn of(v: &Value) -> Self {
        match v {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            // Go's decoder takes a float without a fraction (`1.0`) for an integer.
            Value::Number(n) => n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                        .map(|f| f as i64)
                })
                .map(Val::Int)
                .unwrap_or_else(|| Val::Double(n.as_f64().unwrap_or(f64::NAN))),
            Value::String(s) => Val::Str(s.clone()),
            Value::Array(a) => Val::List(a.iter().map(Val::of).collect()),
            Value::Object(m) => Val::Map(m.iter().map(|(k, v)| (k.clone(), Val::of(v))).collect()),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Val::Null => "null",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Double(_) => "double",
            Val::Str(_) => "string",
            Val::List(_) => "list",
            Val::Map(_) => "map",
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn run(rule: &str, value: Value) -> Result<Val, CelError> {
        eval(&compile(rule).unwrap(), &value)
    }

    #[test]
    fn every_rule_of_the_projects_crd_compiles() {
        let crd = include_str!("../../../manifests/01-crd.yaml");
        let rules: Vec<&str> = crd
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rule: "))
            .collect();
        assert!(rules.len() > 30, "{}", rules.len());
        for r in rules {
            let r = r.trim_matches('"');
            if r == ">-" {
                continue;
            }
            compile(r).unwrap_or_else(|e| panic!("{r}: {e}"));
        }
    }

    #[test]
    fn ranges_and_ternaries_as_the_crd_writes_them() {
        let range = "self == 0 || (self >= 10 && self <= 86400)";
        assert_eq!(run(range, json!(0)), Ok(Val::Bool(true)));
        assert_eq!(run(range, json!(5)), Ok(Val::Bool(false)));
        assert_eq!(run(range, json!(86400)), Ok(Val::Bool(true)));
        let pods = "self.mode == 'Restart' ? has(self.pods) : !has(self.pods)";
        assert_eq!(run(pods, json!({"mode": "Restart"})), Ok(Val::Bool(false)));
        assert_eq!(
            run(pods, json!({"mode": "Restart", "pods": {}})),
            Ok(Val::Bool(true))
        );
        assert_eq!(
            run(pods, json!({"mode": "Files", "pods": {}})),
            Ok(Val::Bool(false))
        );
        let timing = "self.electionTimeoutMs >= 5 * self.heartbeatIntervalMs";
        assert_eq!(
            run(
                timing,
                json!({"electionTimeoutMs": 400, "heartbeatIntervalMs": 100})
            ),
            Ok(Val::Bool(false))
        );
    }

    #[test]
    fn strings_regexes_and_macros() {
        let dns =
            r"self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";
        assert_eq!(run(dns, json!("a.b-c")), Ok(Val::Bool(true)));
        assert_eq!(run(dns, json!("a-.b")), Ok(Val::Bool(false)));
        assert_eq!(run(dns, json!("a_b")), Ok(Val::Bool(false)));
        let url = "self.startsWith('https://') || self.startsWith('http://')";
        assert_eq!(run(url, json!("ftp://x")), Ok(Val::Bool(false)));
        let unique = "self.all(c, self.filter(d, d.name == c.name).size() == 1)";
        assert_eq!(
            run(unique, json!([{"name": "a"}, {"name": "b"}])),
            Ok(Val::Bool(true))
        );
        assert_eq!(
            run(unique, json!([{"name": "a"}, {"name": "a"}])),
            Ok(Val::Bool(false))
        );
        assert_eq!(
            run("self.size() >= 3 && self.size() <= 63", json!("ab")),
            Ok(Val::Bool(false))
        );
        assert_eq!(
            run(
                "self.metadata.name == 'cluster'",
                json!({"metadata": {"name": "other"}})
            ),
            Ok(Val::Bool(false))
        );
    }

    #[test]
    fn errors_are_errors_unless_a_logical_side_decides() {
        assert!(run("self.missing == 1", json!({})).is_err(), "no such key");
        assert_eq!(
            run("has(self.x) && self.x == 1", json!({})),
            Ok(Val::Bool(false))
        );
        assert_eq!(run("self.x == 1 || true", json!({})), Ok(Val::Bool(true)));
        assert!(run("self * 2 > 0", json!(i64::MAX)).is_err(), "overflow");
        assert!(run("self > 'a'", json!(1)).is_err(), "int against string");
        assert!(run("self.all(x, x.n > 0)", json!([{"n": 1}, {}])).is_err());
    }

    #[test]
    fn what_is_not_supported_does_not_compile() {
        for rule in [
            "self.lowerAscii() == 'a'",
            "oldSelf == self",
            "self.x ==",
            "quantity(self) > 1",
            "self == 'unterminated",
            "self == `raw`",
        ] {
            assert!(compile(rule).is_err(), "{rule} compiled");
        }
    }
}
