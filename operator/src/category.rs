//! What kind of failure a controller step hit ([`Category`]): one closed list, used as the
//! `category` label of `etcd_operator_reconcile_errors_total` (snake_case) and, in CamelCase,
//! as the reason of the controller's Degraded condition. No free-form strings: a new kind of
//! failure is a new variant here, so the metric's label values and the condition reasons an
//! alert or a runbook can name are exactly these.

/// A failure's category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// The API server answered 409: the object changed under the write.
    Conflict,
    /// The API server answered 404.
    NotFound,
    /// The API server answered 403: a permission is missing.
    Forbidden,
    /// The API server answered 422: the object was refused as invalid.
    Invalid,
    /// Any other answer of the API server.
    Api,
    /// No answer from the API server (connection, timeout, TLS).
    Transport,
    /// A manifest or object could not be rendered from the spec.
    Render,
    /// An object could not be encoded.
    Encode,
    /// etcd refused or did not answer a call.
    Etcd,
    /// The spec names an etcd version (or change of version) etcd cannot take.
    EtcdVersion,
    /// A CA rotation step failed.
    CaRotation,
    /// No etcd CA exists and the cluster is Unmanaged.
    NoCa,
    /// The spec cannot be used as written.
    Spec,
    /// A consumer's Secret could not be written or read.
    ConsumerSecret,
    /// A certificate or key could not be generated.
    Generate,
    /// The etcd CA is unusable.
    InvalidCa,
    /// The etcd CA has expired.
    CaExpired,
    /// A backed-off failure whose category was not kept.
    Unknown,
}

impl Category {
    /// Every category, in declaration order.
    pub const ALL: [Category; 18] = [
        Category::Conflict,
        Category::NotFound,
        Category::Forbidden,
        Category::Invalid,
        Category::Api,
        Category::Transport,
        Category::Render,
        Category::Encode,
        Category::Etcd,
        Category::EtcdVersion,
        Category::CaRotation,
        Category::NoCa,
        Category::Spec,
        Category::ConsumerSecret,
        Category::Generate,
        Category::InvalidCa,
        Category::CaExpired,
        Category::Unknown,
    ];

    /// The condition reason (CamelCase, as Kubernetes condition reasons are).
    pub fn reason(self) -> &'static str {
        match self {
            Category::Conflict => "Conflict",
            Category::NotFound => "NotFound",
            Category::Forbidden => "Forbidden",
            Category::Invalid => "Invalid",
            Category::Api => "ApiError",
            Category::Transport => "TransportError",
            Category::Render => "RenderFailed",
            Category::Encode => "EncodeFailed",
            Category::Etcd => "EtcdError",
            Category::EtcdVersion => "EtcdVersionRefused",
            Category::CaRotation => "CARotationFailed",
            Category::NoCa => "NoCA",
            Category::Spec => "SpecInvalid",
            Category::ConsumerSecret => "ConsumerSecretFailed",
            Category::Generate => "CertificateGenerationFailed",
            Category::InvalidCa => "InvalidCA",
            Category::CaExpired => "CAExpired",
            Category::Unknown => "Unknown",
        }
    }

    /// The metric label (snake_case).
    pub fn label(self) -> &'static str {
        match self {
            Category::Conflict => "conflict",
            Category::NotFound => "not_found",
            Category::Forbidden => "forbidden",
            Category::Invalid => "invalid",
            Category::Api => "api",
            Category::Transport => "transport",
            Category::Render => "render",
            Category::Encode => "encode",
            Category::Etcd => "etcd",
            Category::EtcdVersion => "etcd_version",
            Category::CaRotation => "ca_rotation",
            Category::NoCa => "no_ca",
            Category::Spec => "spec",
            Category::ConsumerSecret => "consumer_secret",
            Category::Generate => "generate",
            Category::InvalidCa => "invalid_ca",
            Category::CaExpired => "ca_expired",
            Category::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_condition_reason(s: &str) -> bool {
        // metav1.Condition's reason: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$, CamelCase by habit.
        s.starts_with(|c: char| c.is_ascii_uppercase())
            && s.chars().all(|c| c.is_ascii_alphanumeric())
    }

    #[test]
    fn reasons_are_condition_reasons_and_labels_are_snake_case() {
        let mut reasons = std::collections::BTreeSet::new();
        let mut labels = std::collections::BTreeSet::new();
        for c in Category::ALL {
            assert!(is_condition_reason(c.reason()), "{c:?}: {}", c.reason());
            assert!(
                c.label()
                    .chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch == '_'),
                "{c:?}: {}",
                c.label()
            );
            assert!(
                reasons.insert(c.reason()) && labels.insert(c.label()),
                "{c:?}"
            );
        }
    }
}
