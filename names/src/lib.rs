//! Kubernetes name syntax, as kube-apiserver checks it (apimachinery's `IsDNS1123Label`,
//! `IsDNS1123Subdomain`, `IsQualifiedName` and `IsValidLabelValue`): one module every crate of
//! the project uses, so a name the operator, the installer or `render` accepts is exactly one the
//! API server accepts. `harness/testapi/tests/names.rs` holds every verdict here to kube-apiserver's own
//! answers.
//!
//! Each check returns the first rule broken as a [`NameError`], whose `Display` is a short
//! reason for people and whose [`NameError::api_message`] is the sentence kube-apiserver puts
//! in a 422 (the API stand-in answers with it).
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

/// The longest DNS-1123 label, qualified-name part and label value.
pub const MAX_LABEL: usize = 63;
/// The longest DNS-1123 subdomain (and prefix of a qualified name).
pub const MAX_SUBDOMAIN: usize = 253;

/// Which rule a name broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("it is empty")]
    Empty,
    #[error("it is longer than {max} characters")]
    TooLong { max: usize },
    /// A qualified name's name part, or a label value, longer than 63 bytes.
    #[error("it is longer than {max} characters")]
    PartTooLong { max: usize },
    #[error(
        "it must be lowercase letters, digits and '-', starting and ending with a letter or digit"
    )]
    NotLabel,
    #[error("it must not contain dots")]
    Dots,
    #[error(
        "it must be lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit"
    )]
    NotSubdomain,
    #[error(
        "it must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
    )]
    NotNamePart,
    #[error("the prefix before '/' is empty")]
    EmptyPrefix,
    #[error("the prefix before '/': {0}")]
    Prefix(Box<NameError>),
    #[error("it holds more than one '/'")]
    TooManySlashes,
}

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
/// kube-apiserver words it "a valid label key must ..." for a label and "a qualified name
/// must ..." elsewhere; this is the part both share.
const QUALIFIED_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

impl NameError {
    /// kube-apiserver's sentence for this error, as its 422 `Invalid` details carry it.
    pub fn api_message(&self) -> String {
        match self {
            NameError::Empty => "name part must be non-empty".into(),
            NameError::TooLong { max } => format!("must be no more than {max} characters"),
            NameError::PartTooLong { max } => format!("name part must be no more than {max} bytes"),
            NameError::NotLabel => LABEL_MSG.into(),
            NameError::Dots => "must not contain dots".into(),
            NameError::NotSubdomain => SUBDOMAIN_MSG.into(),
            NameError::NotNamePart => NAME_PART_MSG.into(),
            NameError::EmptyPrefix => "prefix part must be non-empty".into(),
            NameError::Prefix(e) => match e.as_ref() {
                NameError::TooLong { max } => {
                    format!("prefix part must be no more than {max} bytes")
                }
                other => format!("prefix part {}", other.api_message()),
            },
            NameError::TooManySlashes => QUALIFIED_MSG.into(),
        }
    }
}

fn lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` over the whole of `s`.
fn label_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().copied().is_some_and(lower_alnum)
        && b.last().copied().is_some_and(lower_alnum)
        && b.iter().all(|c| lower_alnum(*c) || *c == b'-')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` over the whole of `s`.
fn name_part_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// An RFC 1123 label (a Namespace's name, a Service's): at most 63 characters.
pub fn dns1123_label(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s.len() > MAX_LABEL {
        return Err(NameError::TooLong { max: MAX_LABEL });
    }
    if label_shaped(s) {
        Ok(())
    } else if s.split('.').all(label_shaped) {
        // A valid subdomain that is no label: it has dots (kube-apiserver says just that).
        Err(NameError::Dots)
    } else {
        Err(NameError::NotLabel)
    }
}

/// An RFC 1123 subdomain (most objects' names, a Node's): dot-separated label-shaped parts, at
/// most 253 characters in all. As in kube-apiserver, a part itself may be longer than 63.
pub fn dns1123_subdomain(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s.len() > MAX_SUBDOMAIN {
        return Err(NameError::TooLong { max: MAX_SUBDOMAIN });
    }
    s.split('.')
        .all(label_shaped)
        .then_some(())
        .ok_or(NameError::NotSubdomain)
}

/// The name part of a qualified name.
fn name_part(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s.len() > MAX_LABEL {
        return Err(NameError::PartTooLong { max: MAX_LABEL });
    }
    name_part_shaped(s)
        .then_some(())
        .ok_or(NameError::NotNamePart)
}

/// A qualified name (a label key, an annotation key, a finalizer): an optional DNS-subdomain
/// prefix and `/`, then a name part of at most 63 characters.
pub fn qualified_name(s: &str) -> Result<(), NameError> {
    let mut parts = s.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => name_part(name),
        (Some(""), Some(_), None) => Err(NameError::EmptyPrefix),
        (Some(prefix), Some(name), None) => {
            dns1123_subdomain(prefix).map_err(|e| NameError::Prefix(Box::new(e)))?;
            name_part(name)
        }
        _ => Err(NameError::TooManySlashes),
    }
}

/// A label value: empty, or a name part of at most 63 characters.
pub fn label_value(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Ok(());
    }
    name_part(s)
}

/// kube-apiserver's sentence for a label value that is not one (its wording differs from a
/// qualified name's).
pub fn label_value_message(e: &NameError) -> String {
    match e {
        NameError::NotNamePart => LABEL_VALUE_MSG.into(),
        NameError::PartTooLong { max } => format!("must be no more than {max} bytes"),
        other => other.api_message(),
    }
}

#[cfg(test)]
mod tests;
