//! The error of an API write ([`WriteError`]): which write failed and kube's error, read as a
//! sentence ([`describe`]), classed as transient or permanent for the retry policy and given a
//! static category for metrics.

use crate::category::Category;

/// A kube error as a sentence for a condition message, an event or a log line: for an answer of
/// the API server its code, reason and message (kube's own `Display` appends the whole response
/// in Debug form, which is no message for an admin).
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", s.reason)
            };
            format!("the API server answered {}{reason}: {}", s.code, s.message)
        }
        other => other.to_string(),
    }
}

/// Errors of API writes, with their category.
#[derive(Debug, thiserror::Error)]
#[error("{action} {kind} {namespace}/{name}: {}", describe(source))]
pub struct WriteError {
    pub action: &'static str,
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub source: kube::Error,
}

impl WriteError {
    /// Transient unless the API server refused the request itself (bad, forbidden, invalid):
    /// those need an input or a permission to change.
    pub fn kind(&self) -> crate::retry::ErrorKind {
        match &self.source {
            kube::Error::Api(s) if matches!(s.code, 400 | 401 | 403 | 422) => {
                crate::retry::ErrorKind::Permanent
            }
            _ => crate::retry::ErrorKind::Transient,
        }
    }

    pub fn category(&self) -> Category {
        match &self.source {
            kube::Error::Api(s) if s.code == 409 => Category::Conflict,
            kube::Error::Api(s) if s.code == 404 => Category::NotFound,
            kube::Error::Api(s) if s.code == 403 => Category::Forbidden,
            kube::Error::Api(s) if s.code == 422 => Category::Invalid,
            kube::Error::Api(_) => Category::Api,
            _ => Category::Transport,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_read_as_sentences() {
        let status = kube::core::Status {
            code: 422,
            reason: "Invalid".into(),
            message: r#"Pod "etcd-n1" is invalid: status.qosClass: Invalid value: "BestEffort": field is immutable"#.into(),
            ..Default::default()
        };
        let e = WriteError {
            action: "update",
            kind: "Pod",
            namespace: "etcd".into(),
            name: "etcd-n1".into(),
            source: kube::Error::Api(Box::new(status)),
        };
        assert_eq!(
            e.to_string(),
            r#"update Pod etcd/etcd-n1: the API server answered 422 Invalid: Pod "etcd-n1" is invalid: status.qosClass: Invalid value: "BestEffort": field is immutable"#
        );
        assert!(!e.to_string().contains("Status {"), "no Debug dump");
    }
}
