//! Reading certificates back: the parser the plan relies on, and [`CertInfo`] / [`CaInfo`] for
//! status, the `etcd_operator_certificate_expiry_timestamp_seconds` metric and alerts.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::node::{CertKind, Signers, Usage};
use crate::{CaRole, EtcdCa, format_time};

/// The fields of a certificate the operator cares about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCert {
    pub subject: String,
    pub common_name: Option<String>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub dns: BTreeSet<String>,
    pub ips: BTreeSet<IpAddr>,
    /// Extended key usages; `None` when the extension is absent (any usage).
    pub usage: Option<Usage>,
    /// Other EKUs than server/client auth are present.
    pub other_usage: bool,
    pub is_ca: bool,
    /// The raw subject public key (for matching a private key).
    pub public_key: Vec<u8>,
}

/// Parses the first PEM block of `bytes` as a certificate; returns it and its DER.
pub fn parse_cert_pem(bytes: &[u8]) -> Result<(ParsedCert, Vec<u8>), String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(bytes).map_err(|e| format!("not PEM: {e}"))?;
    if pem.label != "CERTIFICATE" {
        return Err(format!("PEM block is a {:?}, not a CERTIFICATE", pem.label));
    }
    let parsed = parse_cert_der(&pem.contents)?;
    Ok((parsed, pem.contents))
}

/// `notAfter` (Unix seconds) of a DER certificate, e.g. one a TLS handshake showed.
pub fn not_after_of_der(der: &[u8]) -> Result<i64, String> {
    parse_cert_der(der).map(|c| c.not_after.unix_timestamp())
}

/// Parses a DER certificate.
pub fn parse_cert_der(der: &[u8]) -> Result<ParsedCert, String> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| format!("not X.509: {e}"))?;
    let mut dns = BTreeSet::new();
    let mut ips = BTreeSet::new();
    let san = cert
        .subject_alternative_name()
        .map_err(|e| format!("bad subjectAltName: {e}"))?;
    for name in san.iter().flat_map(|s| s.value.general_names.iter()) {
        match name {
            GeneralName::DNSName(d) => {
                dns.insert((*d).to_owned());
            }
            GeneralName::IPAddress(raw) => {
                let ip = match raw.len() {
                    4 => <[u8; 4]>::try_from(*raw).map(IpAddr::from).ok(),
                    16 => <[u8; 16]>::try_from(*raw).map(IpAddr::from).ok(),
                    _ => None,
                };
                ips.insert(ip.ok_or_else(|| format!("bad IP SAN of {} bytes", raw.len()))?);
            }
            _ => {}
        }
    }
    let eku = cert
        .extended_key_usage()
        .map_err(|e| format!("bad extendedKeyUsage: {e}"))?;
    let (usage, other_usage) = match eku {
        None => (None, false),
        Some(e) => {
            let v = e.value;
            let other = v.any
                || v.code_signing
                || v.email_protection
                || v.time_stamping
                || v.ocsp_signing
                || !v.other.is_empty();
            (
                Some(Usage {
                    server: v.server_auth,
                    client: v.client_auth,
                }),
                other,
            )
        }
    };
    let is_ca = cert
        .basic_constraints()
        .map_err(|e| format!("bad basicConstraints: {e}"))?
        .is_some_and(|b| b.value.ca);
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned);
    Ok(ParsedCert {
        subject: cert.subject().to_string(),
        common_name,
        not_before: cert.validity().not_before.to_datetime(),
        not_after: cert.validity().not_after.to_datetime(),
        dns,
        ips,
        usage,
        other_usage,
        is_ca,
        public_key: cert.public_key().subject_public_key.data.to_vec(),
    })
}

/// One certificate of a Secret, for status, metrics and alerts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// The Secret key (`etcd-peer-n1.crt`).
    pub secret_key: String,
    /// Node and kind read from the key name, if it follows `<kind>-<node>.crt`.
    pub node: Option<String>,
    pub kind: Option<CertKind>,
    pub subject: Option<String>,
    pub not_before: Option<OffsetDateTime>,
    pub not_after: Option<OffsetDateTime>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    /// Signed by the current CA.
    pub issued_by_ca: bool,
    /// Why the certificate could not be read (then the optional fields are empty).
    pub error: Option<String>,
}

impl CertInfo {
    /// `notAfter` as a Unix timestamp (the expiry metric's value).
    pub fn not_after_unix(&self) -> Option<i64> {
        self.not_after.map(OffsetDateTime::unix_timestamp)
    }
}

/// The CA, for status and the CA expiry metric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaInfo {
    pub subject: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

impl CaInfo {
    /// `notAfter` as a Unix timestamp.
    pub fn not_after_unix(&self) -> i64 {
        self.not_after.unix_timestamp()
    }
}

impl std::fmt::Display for CaInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} valid {} to {}",
            self.subject,
            format_time(self.not_before),
            format_time(self.not_after)
        )
    }
}

impl EtcdCa {
    /// The CA's subject and validity.
    pub fn info(&self) -> CaInfo {
        CaInfo {
            subject: self.subject().to_owned(),
            not_before: self.not_before(),
            not_after: self.not_after(),
        }
    }
}

/// Every `*.crt` entry of a Secret's data, sorted by key, each judged against the CA of its
/// kind (the etcd CA for a key that names no kind).
pub fn inspect_certs(signers: Signers<'_>, data: &BTreeMap<String, Vec<u8>>) -> Vec<CertInfo> {
    data.iter()
        .filter(|(key, _)| key.ends_with(".crt"))
        .map(|(key, value)| {
            let role = CertKind::parse_key(key).map_or(CaRole::Etcd, |(kind, _)| kind.role());
            inspect_pem(signers.of(role), key, value)
        })
        .collect()
}

/// One certificate (PEM bytes) stored under `secret_key`.
pub fn inspect_pem(ca: &EtcdCa, secret_key: &str, pem: &[u8]) -> CertInfo {
    let (kind, node) = match CertKind::parse_key(secret_key) {
        Some((kind, node)) => (Some(kind), Some(node.to_owned())),
        None => (None, None),
    };
    let mut info = CertInfo {
        secret_key: secret_key.to_owned(),
        node,
        kind,
        subject: None,
        not_before: None,
        not_after: None,
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        issued_by_ca: false,
        error: None,
    };
    match parse_cert_pem(pem) {
        Ok((parsed, der)) => {
            info.issued_by_ca = ca.signed(&der);
            info.subject = Some(parsed.subject);
            info.not_before = Some(parsed.not_before);
            info.not_after = Some(parsed.not_after);
            info.dns_names = parsed.dns.into_iter().collect();
            info.ip_addresses = parsed.ips.into_iter().collect();
        }
        Err(e) => info.error = Some(e),
    }
    info
}
