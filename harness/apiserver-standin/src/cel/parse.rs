//! The lexer and the recursive-descent parser: a rule's text to an [`Expr`], refusing what the
//! stand-in does not evaluate.

use super::{CelError, Expr, Macro, Method, Op, Val, err};

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
