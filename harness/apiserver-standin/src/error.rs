//! Errors: [`StandInError`] for starting and running the stand-in, [`ApiError`] for the
//! Kubernetes `Status` failures the HTTP API answers with.

use std::net::SocketAddr;

use serde_json::{Value, json};

/// Why the stand-in could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    /// No etcd endpoint was configured.
    #[error("no etcd endpoints configured for the API stand-in")]
    NoEtcdEndpoints,
    /// etcd refused or failed a call.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// An etcd call did not answer in time.
    #[error("etcd call {0} timed out")]
    EtcdTimeout(&'static str),
    /// The HTTP listener could not be bound.
    #[error("binding the API stand-in to {addr}: {source}")]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// A stored object could not be decoded or the initial state could not be written.
    #[error("initialising the API stand-in: {0}")]
    Init(String),
    /// Writing a kubeconfig failed.
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig {
        /// File written.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Building a kube client for the stand-in failed.
    #[error("building a kube client for the API stand-in: {0}")]
    Client(String),
}

/// One cause inside an `Invalid` status (`details.causes[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`, ...
    pub reason: &'static str,
    /// Field path, e.g. `metadata.name`.
    pub field: String,
    /// Human message, without the field prefix.
    pub message: String,
}

impl Cause {
    /// `field: Invalid value: "value": message`.
    pub fn invalid(field: impl Into<String>, value: &str, message: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {value:?}: {}", message.into()),
        }
    }

    /// `field: Required value`.
    pub fn required(field: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message: "Required value".to_string(),
        }
    }

    /// `field: Forbidden: message`.
    pub fn forbidden(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {}", message.into()),
        }
    }

    /// `field: Unsupported value: "v": supported values: ...`.
    pub fn unsupported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!("Unsupported value: {value:?}: supported values: {list}"),
        }
    }

    fn render(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// A failed API call, rendered as a Kubernetes `Status` object with the same HTTP code and
/// `reason` kube-apiserver uses.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...).
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details` (name, group, kind, causes), if any.
    pub details: Option<Value>,
}

/// Identity of the resource an error is about: group and plural resource name.
#[derive(Clone, Copy, Debug)]
pub struct GroupResource<'a> {
    /// API group, empty for core.
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
}

impl GroupResource<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, gr: GroupResource<'_>, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": gr.group, "kind": gr.resource}));
        self
    }

    /// 404: `pods "x" not found`.
    pub fn not_found(gr: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", gr.qualified()),
        )
        .with_details(gr, name)
    }

    /// 404 for a path the stand-in does not serve.
    pub fn no_such_resource() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_empty_details()
    }

    fn with_empty_details(mut self) -> Self {
        self.details = Some(json!({}));
        self
    }

    /// 409 AlreadyExists.
    pub fn already_exists(gr: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", gr.qualified()),
        )
        .with_details(gr, name)
    }

    /// 409 Conflict on a stale resourceVersion (or a failed precondition).
    pub fn conflict(gr: GroupResource<'_>, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                gr.qualified()
            ),
        )
        .with_details(gr, name)
    }

    /// 409 Conflict for a stale resourceVersion, with kube-apiserver's message.
    pub fn stale(gr: GroupResource<'_>, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid: `Kind.group "name" is invalid: [cause, cause]`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let rendered: Vec<String> = causes.iter().map(Cause::render).collect();
        let joined = if rendered.len() == 1 {
            rendered.join("")
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let causes_json: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        Self {
            code: 422,
            reason: "Invalid",
            message: format!("{qualified_kind} {name:?} is invalid: {joined}"),
            details: Some(
                json!({"name": name, "group": group, "kind": kind, "causes": causes_json}),
            ),
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 403 Forbidden.
    pub fn forbidden(gr: GroupResource<'_>, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{} {name:?} is forbidden: {why}", gr.qualified()),
        )
        .with_details(gr, name)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_empty_details()
    }

    /// 410 Gone / Expired: the revision a `what` (`"watch"` or `"list"`) starts from was
    /// compacted (kube-apiserver v1.36's wording; the revisions go to the log only).
    pub fn expired(what: &str) -> Self {
        Self::new(
            410,
            "Expired",
            format!("The resourceVersion for the provided {what} is too old."),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json, application/strategic-merge-patch+json, application/json-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    /// 422 from a patch that could not be applied (e.g. a failed JSON patch `test`).
    pub fn unprocessable_patch(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// 504 Timeout (etcd did not answer in time).
    pub fn timeout(what: &str) -> Self {
        Self::new(504, "Timeout", format!("Timeout: {what}"))
    }

    /// `details.retryAfterSeconds`, when the error asks the client to come back later.
    pub fn retry_after_seconds(&self) -> Option<i64> {
        self.details
            .as_ref()
            .and_then(|d| d.get("retryAfterSeconds"))
            .and_then(Value::as_i64)
            .filter(|s| *s > 0)
    }

    /// The `Status` object body.
    pub fn status_body(&self) -> Value {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if let Some(map) = body.as_object_mut() {
            // An empty reason is left out (e.g. the eviction subresource's 500).
            if !self.reason.is_empty() {
                map.insert("reason".to_string(), json!(self.reason));
            }
            if let Some(details) = &self.details {
                map.insert("details".to_string(), details.clone());
            }
        }
        body
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn not_found_matches_kube_apiserver_wording() {
        let gr = GroupResource {
            group: "",
            resource: "pods",
        };
        let e = ApiError::not_found(gr, "web");
        assert_eq!(e.message, "pods \"web\" not found");
        let body = e.status_body();
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["code"], 404);
        assert_eq!(body["details"]["kind"], "pods");
    }

    #[test]
    fn invalid_lists_causes() {
        let e = ApiError::invalid(
            "ConfigMap",
            "",
            "c",
            vec![Cause::forbidden(
                "data",
                "field is immutable when `immutable` is set",
            )],
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "ConfigMap \"c\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
        );
    }
}
