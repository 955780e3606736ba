//! The control-plane node selector as a Kubernetes label selector. The operator watches only the
//! Nodes it selects, so a cluster with a thousand workers costs it nothing; the selector string
//! is rendered from the spec here, checked first so that a key the API server would refuse
//! becomes a precise Degraded message instead of a watch that fails forever.

use std::collections::BTreeMap;

/// A selector entry the API server would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("controlPlaneNodeSelector key {key:?} is not a valid label key: {why}")]
    Key {
        key: String,
        why: k8s_names::NameError,
    },
    #[error(
        "controlPlaneNodeSelector value {value:?} of key {key:?} is not a valid label value: {why}"
    )]
    Value {
        key: String,
        value: String,
        why: k8s_names::NameError,
    },
}

/// `key` for an empty value (the label exists, any value: the control-plane role label carries
/// none), `key=value` otherwise, in key order, joined by commas.
pub fn label_selector(selector: &BTreeMap<String, String>) -> Result<String, SelectorError> {
    let mut parts = Vec::with_capacity(selector.len());
    for (key, value) in selector {
        k8s_names::qualified_name(key).map_err(|why| SelectorError::Key {
            key: key.clone(),
            why,
        })?;
        if value.is_empty() {
            parts.push(key.clone());
        } else {
            k8s_names::label_value(value).map_err(|why| SelectorError::Value {
                key: key.clone(),
                value: value.clone(),
                why,
            })?;
            parts.push(format!("{key}={value}"));
        }
    }
    Ok(parts.join(","))
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
            "controlPlaneNodeSelector key \"a b\" is not a valid label key: it must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
        );
    }
}
