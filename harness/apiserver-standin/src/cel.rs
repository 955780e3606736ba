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

/// Compiles `rule`; an expression outside the supported part is an error naming what.
pub fn compile(rule: &str) -> Result<Expr, CelError> {
    let tokens = lex(rule)?;
    if tokens.contains(&Tok::Ident("oldSelf".into())) {
        return err("transition rules (oldSelf) are not supported");
    }
    let mut p = Parser { tokens, at: 0 };
    let e = p.expr()?;
    match p.peek() {
        None => Ok(e),
        Some(t) => err(format!("unexpected {t:?} at the end of the rule")),
    }
}

/// Evaluates `expr` with `self` bound to `value`.
pub fn eval(expr: &Expr, value: &Value) -> Result<Val, CelError> {
    let mut env = vec![("self".to_owned(), Val::of(value))];
    ev(expr, &mut env)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(i64),
    Double(f64),
    Str(String),
    Ident(String),
    Sym(&'static str),
}

/// Operators and punctuation, two-character ones first (`in` is read as a word).
const SYMBOLS: [&str; 22] = [
    "&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "%", "?", ":", ".", ",",
    "(", ")", "[", "]",
];

fn lex(src: &str) -> Result<Vec<Tok>, CelError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            out.push(number(&text)?);
        } else if c == '\'' || c == '"' {
            let (s, next) = string(&chars, i)?;
            out.push(Tok::Str(s));
            i = next;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(if word == "in" {
                Tok::Sym("in")
            } else {
                Tok::Ident(word)
            });
        } else {
            let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let Some(sym) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) else {
                return err(format!("unexpected character {c:?}"));
            };
            out.push(Tok::Sym(sym));
            i += sym.len();
        }
    }
    Ok(out)
}

fn number(text: &str) -> Result<Tok, CelError> {
    if text.contains('.') {
        text.parse()
            .map(Tok::Double)
            .map_err(|_| CelError(format!("bad number {text}")))
    } else {
        text.parse()
            .map(Tok::Int)
            .map_err(|_| CelError(format!("integer {text} out of range")))
    }
}

/// The string literal opening at `chars[start]`, unescaped, and the index after it.
fn string(chars: &[char], start: usize) -> Result<(String, usize), CelError> {
    let quote = chars[start];
    let mut out = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            c if c == quote => return Ok((out, i + 1)),
            '\\' => {
                let Some(&e) = chars.get(i + 1) else {
                    break;
                };
                out.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '\\' | '\'' | '"' | '`' | '?' => e,
                    _ => return err(format!("unsupported escape \\{e}")),
                });
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    err("unterminated string literal")
}

struct Parser {
    tokens: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, sym: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Sym(s)) if *s == sym) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, sym: &str) -> Result<(), CelError> {
        if self.eat(sym) {
            Ok(())
        } else {
            err(format!("expected {sym:?}, found {:?}", self.peek()))
        }
    }

    fn expr(&mut self) -> Result<Expr, CelError> {
        let cond = self.binary(0)?;
        if !self.eat("?") {
            return Ok(cond);
        }
        let yes = self.expr()?;
        self.expect(":")?;
        let no = self.expr()?;
        Ok(Expr::Cond(Box::new(cond), Box::new(yes), Box::new(no)))
    }

    /// Binary operators by precedence level (0: `||`, 1: `&&`, 2: relations, 3: `+ -`,
    /// 4: `* / %`).
    fn binary(&mut self, level: usize) -> Result<Expr, CelError> {
        const LEVELS: [&[(&str, Op)]; 5] = [
            &[("||", Op::Or)],
            &[("&&", Op::And)],
            &[
                ("==", Op::Eq),
                ("!=", Op::Ne),
                ("<=", Op::Le),
                (">=", Op::Ge),
                ("<", Op::Lt),
                (">", Op::Gt),
                ("in", Op::In),
            ],
            &[("+", Op::Add), ("-", Op::Sub)],
            &[("*", Op::Mul), ("/", Op::Div), ("%", Op::Rem)],
        ];
        let Some(ops) = LEVELS.get(level) else {
            return self.unary();
        };
        let mut left = self.binary(level + 1)?;
        'more: loop {
            for (sym, op) in ops.iter() {
                if self.eat(sym) {
                    let right = self.binary(level + 1)?;
                    left = Expr::Binary(Box::new(left), *op, Box::new(right));
                    continue 'more;
                }
            }
            return Ok(left);
        }
    }

    fn unary(&mut self) -> Result<Expr, CelError> {
        for op in ['!', '-'] {
            if self.eat(&op.to_string()) {
                return Ok(Expr::Unary(op, Box::new(self.unary()?)));
            }
        }
        self.member()
    }

    fn member(&mut self) -> Result<Expr, CelError> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                let name = self.ident()?;
                e = if self.eat("(") {
                    self.method(e, &name)?
                } else {
                    Expr::Select(Box::new(e), name)
                };
            } else if self.eat("[") {
                let index = self.expr()?;
                self.expect("]")?;
                e = Expr::Index(Box::new(e), Box::new(index));
            } else {
                return Ok(e);
            }
        }
    }

    fn ident(&mut self) -> Result<String, CelError> {
        match self.peek().cloned() {
            Some(Tok::Ident(name)) => {
                self.at += 1;
                Ok(name)
            }
            other => err(format!("expected a name, found {other:?}")),
        }
    }

    /// `target.name(` read: the rest of a method call or macro.
    fn method(&mut self, target: Expr, name: &str) -> Result<Expr, CelError> {
        let target = Box::new(target);
        let mac = match name {
            "all" => Some(Macro::All),
            "exists" => Some(Macro::Exists),
            "filter" => Some(Macro::Filter),
            "map" => Some(Macro::Map),
            _ => None,
        };
        if let Some(mac) = mac {
            let var = self.ident()?;
            self.expect(",")?;
            let body = self.expr()?;
            self.expect(")")?;
            return Ok(Expr::Macro(target, mac, var, Box::new(body)));
        }
        let (method, arity) = match name {
            "size" => (Method::Size, 0),
            "matches" => (Method::Matches, 1),
            "startsWith" => (Method::StartsWith, 1),
            "endsWith" => (Method::EndsWith, 1),
            "contains" => (Method::Contains, 1),
            _ => return err(format!("unsupported function {name}")),
        };
        let args = self.args()?;
        if args.len() != arity {
            return err(format!("{name} takes {arity} argument(s)"));
        }
        Ok(Expr::Call(target, method, args))
    }

    /// Arguments up to and including `)`.
    fn args(&mut self) -> Result<Vec<Expr>, CelError> {
        let mut args = Vec::new();
        if self.eat(")") {
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            if self.eat(")") {
                return Ok(args);
            }
            self.expect(",")?;
        }
    }

    fn primary(&mut self) -> Result<Expr, CelError> {
        let Some(tok) = self.peek().cloned() else {
            return err("unexpected end of the rule");
        };
        self.at += 1;
        match tok {
            Tok::Int(i) => Ok(Expr::Lit(Val::Int(i))),
            Tok::Double(d) => Ok(Expr::Lit(Val::Double(d))),
            Tok::Str(s) => Ok(Expr::Lit(Val::Str(s))),
            Tok::Sym("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Sym("[") => {
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.expr()?);
                        if self.eat("]") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(Expr::List(items))
            }
            Tok::Ident(name) => self.named(name),
            other => err(format!("unexpected {other:?}")),
        }
    }

    fn named(&mut self, name: String) -> Result<Expr, CelError> {
        match name.as_str() {
            "true" => return Ok(Expr::Lit(Val::Bool(true))),
            "false" => return Ok(Expr::Lit(Val::Bool(false))),
            "null" => return Ok(Expr::Lit(Val::Null)),
            _ => {}
        }
        if !self.eat("(") {
            return Ok(Expr::Ident(name));
        }
        match name.as_str() {
            "has" => match self.expr()? {
                Expr::Select(target, field) => {
                    self.expect(")")?;
                    Ok(Expr::Has(target, field))
                }
                _ => err("has() takes a field selection, e.g. has(self.field)"),
            },
            "size" => {
                let args = self.args()?;
                let [arg]: [Expr; 1] = args
                    .try_into()
                    .map_err(|_| CelError("size takes 1 argument".into()))?;
                Ok(Expr::Call(Box::new(arg), Method::Size, Vec::new()))
            }
            _ => err(format!("unsupported function {name}")),
        }
    }
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
