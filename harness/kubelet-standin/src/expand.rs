//! Kubernetes `$(VAR)` expansion for `command`, `args` and `env[].value`.
//!
//! The rules are the API's (the kubelet's `expansion` package), re-implemented here:
//! - `$(NAME)` is replaced by the value of `NAME` when it is defined, and left as is
//!   (`$(NAME)`) when it is not;
//! - `$$` is an escaped `$`: `$$(NAME)` yields the literal text `$(NAME)`;
//! - a `$` followed by anything else, an unterminated `$(`, or a trailing `$` stay literal.
//!
//! Pure: no environment of the agent is consulted, only the lookup passed in.

use std::collections::BTreeMap;

/// Expands `input` with `lookup` following the Kubernetes rules described in the module docs.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let mut chars = after.chars();
        match chars.next() {
            None => {
                // Trailing `$`: literal.
                out.push('$');
                rest = after;
            }
            Some('$') => {
                out.push('$');
                rest = &after[1..];
            }
            Some('(') => match after.find(')') {
                Some(close) => {
                    let name = &after[1..close];
                    match lookup(name) {
                        Some(value) => out.push_str(&value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &after[close + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = &after[1..];
                }
            },
            Some(other) => {
                out.push('$');
                out.push(other);
                rest = &after[other.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Expands `input` against a map of already resolved variables.
pub fn expand_with(input: &str, vars: &BTreeMap<String, String>) -> String {
    expand(input, |name| vars.get(name).cloned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        [("A", "alpha"), ("B", "beta"), ("EMPTY", "")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expansion_table() {
        let cases = [
            ("plain", "plain"),
            ("$(A)", "alpha"),
            ("x$(A)y$(B)z", "xalphaybetaz"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$alpha"),
            ("$$", "$"),
            ("a$", "a$"),
            ("$A", "$A"),
            ("$(A", "$(A"),
            ("$(", "$("),
            ("$(EMPTY)|", "|"),
            ("€$(A)€", "€alpha€"),
            ("$€", "$€"),
            ("--data-dir=$(A)/$(B)", "--data-dir=alpha/beta"),
        ];
        for (input, want) in cases {
            assert_eq!(expand_with(input, &vars()), want, "input {input:?}");
        }
    }
}
