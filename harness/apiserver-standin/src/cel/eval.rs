//! The evaluator: an [`Expr`] against a JSON value, with CEL's error absorption in `&&`/`||`,
//! 64-bit integer overflow as an error and `no such key` for an absent field.

use serde_json::Value;

use super::{CelError, Expr, Macro, Method, Op, Val, err};

/// Evaluates `expr` with `self` bound to `value`.
pub fn eval(expr: &Expr, value: &Value) -> Result<Val, CelError> {
    let mut env = vec![("self".to_owned(), Val::of(value))];
    ev(expr, &mut env)
}

type Env = Vec<(String, Val)>;

fn ev(e: &Expr, env: &mut Env) -> Result<Val, CelError> {
    match e {
        Expr::Lit(v) => Ok(v.clone()),
        Expr::List(items) => Ok(Val::List(
            items.iter().map(|i| ev(i, env)).collect::<Result<_, _>>()?,
        )),
        Expr::Ident(name) => env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| CelError(format!("undeclared reference to '{name}'"))),
        Expr::Select(target, field) => match ev(target, env)? {
            Val::Map(m) => m
                .into_iter()
                .find(|(k, _)| k == field)
                .map(|(_, v)| v)
                .ok_or_else(|| CelError(format!("no such key: {field}"))),
            other => err(format!("no field {field} on a {}", other.kind())),
        },
        Expr::Has(target, field) => match ev(target, env)? {
            Val::Map(m) => Ok(Val::Bool(m.iter().any(|(k, _)| k == field))),
            other => err(format!("has() on a {}", other.kind())),
        },
        Expr::Index(target, index) => index_of(ev(target, env)?, ev(index, env)?),
        Expr::Unary(op, inner) => match (op, ev(inner, env)?) {
            ('!', Val::Bool(b)) => Ok(Val::Bool(!b)),
            ('-', Val::Int(i)) => i
                .checked_neg()
                .map(Val::Int)
                .ok_or_else(|| CelError("integer overflow".into())),
            ('-', Val::Double(d)) => Ok(Val::Double(-d)),
            (op, v) => err(format!("no such overload: {op}{}", v.kind())),
        },
        Expr::Binary(l, Op::And, r) => logic(l, r, false, env),
        Expr::Binary(l, Op::Or, r) => logic(l, r, true, env),
        Expr::Binary(l, op, r) => {
            let (a, b) = (ev(l, env)?, ev(r, env)?);
            binary(a, *op, b)
        }
        Expr::Cond(c, yes, no) => match ev(c, env)? {
            Val::Bool(true) => ev(yes, env),
            Val::Bool(false) => ev(no, env),
            v => err(format!("a {} as a condition", v.kind())),
        },
        Expr::Call(target, method, args) => {
            let t = ev(target, env)?;
            let a: Vec<Val> = args.iter().map(|x| ev(x, env)).collect::<Result<_, _>>()?;
            call(t, *method, a)
        }
        Expr::Macro(target, mac, var, body) => macro_(ev(target, env)?, *mac, var, body, env),
    }
}

/// `&&` (`stop_on` false) or `||` (`stop_on` true): a side equal to `stop_on` decides even
/// when the other is an error.
fn logic(l: &Expr, r: &Expr, stop_on: bool, env: &mut Env) -> Result<Val, CelError> {
    let a = ev(l, env);
    if a == Ok(Val::Bool(stop_on)) {
        return a;
    }
    let b = ev(r, env);
    match (a, b) {
        (_, Ok(Val::Bool(v))) if v == stop_on => Ok(Val::Bool(v)),
        (Ok(Val::Bool(_)), Ok(Val::Bool(v))) => Ok(Val::Bool(v)),
        (Err(e), _) | (_, Err(e)) => Err(e),
        (Ok(x), Ok(y)) => err(format!(
            "no such overload: {} {} {}",
            x.kind(),
            if stop_on { "||" } else { "&&" },
            y.kind()
        )),
    }
}

fn index_of(target: Val, index: Val) -> Result<Val, CelError> {
    match (target, index) {
        (Val::List(items), Val::Int(i)) => usize::try_from(i)
            .ok()
            .and_then(|i| items.get(i).cloned())
            .ok_or_else(|| CelError(format!("index out of bounds: {i}"))),
        (Val::Map(m), Val::Str(k)) => m
            .into_iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v)
            .ok_or_else(|| CelError(format!("no such key: {k}"))),
        (t, i) => err(format!("no such overload: {}[{}]", t.kind(), i.kind())),
    }
}

fn binary(a: Val, op: Op, b: Val) -> Result<Val, CelError> {
    use std::cmp::Ordering;
    let order = |a: &Val, b: &Val| -> Result<Ordering, CelError> {
        match (a, b) {
            (Val::Int(x), Val::Int(y)) => Ok(x.cmp(y)),
            (Val::Str(x), Val::Str(y)) => Ok(x.cmp(y)),
            (Val::Bool(x), Val::Bool(y)) => Ok(x.cmp(y)),
            (x, y) => match (num(x), num(y)) {
                (Some(x), Some(y)) => x
                    .partial_cmp(&y)
                    .ok_or_else(|| CelError("NaN compared".into())),
                _ => err(format!("no such overload: {} < {}", x.kind(), y.kind())),
            },
        }
    };
    let int = |r: Option<i64>| {
        r.map(Val::Int)
            .ok_or_else(|| CelError("integer overflow or division by zero".into()))
    };
    match op {
        Op::Eq => Ok(Val::Bool(equal(&a, &b))),
        Op::Ne => Ok(Val::Bool(!equal(&a, &b))),
        Op::Lt => Ok(Val::Bool(order(&a, &b)? == Ordering::Less)),
        Op::Le => Ok(Val::Bool(order(&a, &b)? != Ordering::Greater)),
        Op::Gt => Ok(Val::Bool(order(&a, &b)? == Ordering::Greater)),
        Op::Ge => Ok(Val::Bool(order(&a, &b)? != Ordering::Less)),
        Op::In => match b {
            Val::List(items) => Ok(Val::Bool(items.iter().any(|i| equal(&a, i)))),
            Val::Map(m) => Ok(Val::Bool(
                matches!(&a, Val::Str(k) if m.iter().any(|(key, _)| key == k)),
            )),
            other => err(format!("no such overload: in {}", other.kind())),
        },
        _ => match (a, b) {
            (Val::Int(x), Val::Int(y)) => int(match op {
                Op::Add => x.checked_add(y),
                Op::Sub => x.checked_sub(y),
                Op::Mul => x.checked_mul(y),
                Op::Div => x.checked_div(y),
                _ => x.checked_rem(y),
            }),
            (Val::Str(x), Val::Str(y)) if op == Op::Add => Ok(Val::Str(x + &y)),
            (Val::List(x), Val::List(y)) if op == Op::Add => Ok(Val::List([x, y].concat())),
            (Val::Double(x), Val::Double(y)) => Ok(Val::Double(match op {
                Op::Add => x + y,
                Op::Sub => x - y,
                Op::Mul => x * y,
                Op::Div => x / y,
                _ => return err("no such overload: double % double"),
            })),
            (x, y) => err(format!(
                "no such overload: {} {op:?} {}",
                x.kind(),
                y.kind()
            )),
        },
    }
}

fn num(v: &Val) -> Option<f64> {
    match v {
        Val::Int(i) => Some(*i as f64),
        Val::Double(d) => Some(*d),
        _ => None,
    }
}

fn equal(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Int(_), Val::Double(_)) | (Val::Double(_), Val::Int(_)) => num(a) == num(b),
        (Val::Map(x), Val::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.iter().any(|(k2, v2)| k == k2 && equal(v, v2)))
        }
        (Val::List(x), Val::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q))
        }
        _ => a == b,
    }
}

fn call(target: Val, method: Method, args: Vec<Val>) -> Result<Val, CelError> {
    let arg = args.into_iter().next();
    let size = |n: usize| Ok(Val::Int(i64::try_from(n).unwrap_or(i64::MAX)));
    match (method, target, arg) {
        (Method::Size, Val::Str(s), None) => size(s.chars().count()),
        (Method::Size, Val::List(l), None) => size(l.len()),
        (Method::Size, Val::Map(m), None) => size(m.len()),
        (Method::Matches, Val::Str(s), Some(Val::Str(re))) => regex::Regex::new(&re)
            .map(|r| Val::Bool(r.is_match(&s)))
            .map_err(|e| CelError(format!("invalid regular expression {re:?}: {e}"))),
        (Method::StartsWith, Val::Str(s), Some(Val::Str(p))) => Ok(Val::Bool(s.starts_with(&p))),
        (Method::EndsWith, Val::Str(s), Some(Val::Str(p))) => Ok(Val::Bool(s.ends_with(&p))),
        (Method::Contains, Val::Str(s), Some(Val::Str(p))) => Ok(Val::Bool(s.contains(&p))),
        (m, t, _) => err(format!("no such overload: {}.{m:?}", t.kind())),
    }
}

fn macro_(target: Val, mac: Macro, var: &str, body: &Expr, env: &mut Env) -> Result<Val, CelError> {
    let items: Vec<Val> = match target {
        Val::List(items) => items,
        Val::Map(m) => m.into_iter().map(|(k, _)| Val::Str(k)).collect(),
        other => return err(format!("{mac:?} over a {}", other.kind())),
    };
    let mut out = Vec::new();
    let mut first_error = None;
    for item in items {
        env.push((var.to_owned(), item.clone()));
        let r = ev(body, env);
        env.pop();
        match (mac, r) {
            (Macro::Map, Ok(v)) => out.push(v),
            (Macro::Filter, Ok(Val::Bool(keep))) => {
                if keep {
                    out.push(item);
                }
            }
            (Macro::All, Ok(Val::Bool(false))) => return Ok(Val::Bool(false)),
            (Macro::Exists, Ok(Val::Bool(true))) => return Ok(Val::Bool(true)),
            (Macro::All | Macro::Exists, Ok(Val::Bool(_))) => {}
            (_, Err(e)) if matches!(mac, Macro::All | Macro::Exists) => {
                first_error.get_or_insert(e);
            }
            (_, Err(e)) => return Err(e),
            (_, Ok(v)) => return err(format!("{mac:?} predicate gave a {}", v.kind())),
        }
    }
    match (mac, first_error) {
        (Macro::All | Macro::Exists, Some(e)) => Err(e),
        (Macro::All, None) => Ok(Val::Bool(true)),
        (Macro::Exists, None) => Ok(Val::Bool(false)),
        _ => Ok(Val::List(out)),
    }
}
