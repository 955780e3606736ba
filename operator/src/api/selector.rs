//! The control-plane node selector as a Kubernetes label selector. The operator watches only the
//! Nodes it selects, so a cluster with a thousand workers costs it nothing; the selector string
//! is rendered from the spec here, checked first so that a key the API server would refuse
//! becomes a precise Degraded message instead of a watch that fails forever.

use std::collections::BTreeMap;

/// A selector entry the API server would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("controlPlaneNodeSelector key {key:?} is not a valid label key: {why}")]
    Key { key: String, why: &'static str },
    #[error(
        "controlPlaneNodeSelector value {value:?} of key {key:?} is not a valid label value: {why}"
    )]
    Value {
        key: String,
        value: String,
        why: &'static str,
    },
}

/// `key` for an empty value (the label exists, any value: the control-plane role label carries
/// none), `key=value` otherwise, in key order, joined by commas.
pub fn label_selector(selector: &BTreeMap<String, String>) -> Result<String, SelectorError> {
    let mut parts = Vec::with_capacity(selector.len());
    for (key, value) in selector {
        check_key(key).map_err(|why| SelectorError::Key {
            key: key.clone(),
            why,
        })?;
        if value.is_empty() {
            parts.push(key.clone());
        } else {
            check_name(value).map_err(|why| SelectorError::Value {
                key: key.clone(),
                value: value.clone(),
                why,
            })?;
            parts.push(format!("{key}={value}"));
        }
    }
    Ok(parts.join(","))
}

/// A qualified name: an optional DNS subdomain prefix and `/`, then a name.
fn check_key(key: &str) -> Result<(), &'static str> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            check_prefix(prefix)?;
            name
        }
        None => key,
    };
    check_name(name)
}

/// At most 63 characters, alphanumerics with `-`, `_` or `.` inside.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("the name part is empty");
    }
    if name.len() > 63 {
        return Err("longer than 63 characters");
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if !name.starts_with(alnum) || !name.ends_with(alnum) {
        return Err("must start and end with a letter or digit");
    }
    if !name
        .chars()
        .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
    {
        return Err("only letters, digits, '-', '_' and '.' are allowed");
    }
    Ok(())
}

/// A lower-case DNS subdomain of at most 253 characters.
fn check_prefix(prefix: &str) -> Result<(), &'static str> {
    if prefix.is_empty() || prefix.len() > 253 {
        return Err("the prefix must be 1 to 253 characters");
    }
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    if prefix.split('.').all(ok_label) {
        Ok(())
    } else {
        Err("the prefix must be a lower-case DNS subdomain")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn sel(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn renders_existence_and_equality_in_key_order() {
        assert_eq!(
            label_selector(&sel(&[("node-role.kubernetes.io/control-plane", "")])).unwrap(),
            "node-role.kubernetes.io/control-plane"
        );
        assert_eq!(
            label_selector(&sel(&[("zone", "a"), ("role", "etcd")])).unwrap(),
            "role=etcd,zone=a"
        );
    }

    #[test]
    fn refuses_what_the_api_server_would_refuse() {
        for (key, value) in [
            ("a b", ""),
            ("", ""),
            ("Example.com/x", ""),
            ("example.com/", ""),
            ("/x", ""),
            ("-x", ""),
            ("x,y", ""),
            ("x", "a=b"),
            ("x", "-a"),
            ("x", &"v".repeat(64)),
        ] {
            let err = label_selector(&sel(&[(key, value)])).unwrap_err();
            assert!(
                err.to_string().contains("controlPlaneNodeSelector"),
                "{err}"
            );
        }
        let err = label_selector(&sel(&[("a b", "")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "controlPlaneNodeSelector key \"a b\" is not a valid label key: only letters, digits, '-', '_' and '.' are allowed"
        );
    }
}
