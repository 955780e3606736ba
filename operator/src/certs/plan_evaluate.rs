//! Judging one certificate against what it should be: [`evaluate`] and its checks, in the order
//! they apply (presence, key, issuer, usage, subject, SANs, then the validity period).

use time::OffsetDateTime;

use super::Reason;
use crate::certs::{CertPolicy, EtcdCa};
use crate::certs::{LeafSpec, Sans};
use crate::certs::{ParsedCert, parse_cert_pem};

/// Judges one certificate (`cert`, `key`: PEM bytes as stored) against `spec` at `now`.
pub fn evaluate(
    ca: &EtcdCa,
    policy: &CertPolicy,
    spec: &LeafSpec,
    cert: Option<&[u8]>,
    key: Option<&[u8]>,
    now: OffsetDateTime,
) -> Reason {
    match check_identity(ca, spec, cert, key) {
        Ok(parsed) => validity(ca, policy, &parsed, now),
        Err(reason) => reason,
    }
}

/// Checks all but the validity period (presence, key, issuer, usage, subject, SANs), in order.
fn check_identity(
    ca: &EtcdCa,
    spec: &LeafSpec,
    cert: Option<&[u8]>,
    key: Option<&[u8]>,
) -> Result<ParsedCert, Reason> {
    let cert = cert.ok_or(Reason::Missing)?;
    let (parsed, der) = parse_cert_pem(cert).map_err(Reason::Unreadable)?;
    let key = key.ok_or(Reason::KeyMissing)?;
    let key = std::str::from_utf8(key)
        .map_err(|_| "not UTF-8 PEM".to_owned())
        .and_then(|k| rcgen::KeyPair::from_pem(k).map_err(|e| e.to_string()))
        .map_err(Reason::KeyUnreadable)?;
    if key.public_key_raw() != parsed.public_key.as_slice() {
        return Err(Reason::KeyMismatch);
    }
    if !ca.signed(&der) {
        return Err(Reason::WrongIssuer);
    }
    check_contents(spec, &parsed)?;
    Ok(parsed)
}

/// Checks the extended key usage, the common name and the SANs against `spec`, in that order.
fn check_contents(spec: &LeafSpec, parsed: &ParsedCert) -> Result<(), Reason> {
    if parsed.usage != Some(spec.usage) || parsed.other_usage {
        let have = match (parsed.usage, parsed.other_usage) {
            (None, _) => "absent".to_owned(),
            (Some(u), false) => u.to_string(),
            (Some(u), true) => format!("{u} plus others"),
        };
        return Err(Reason::UsageChanged {
            have,
            want: spec.usage,
        });
    }
    if parsed.common_name.as_deref() != Some(spec.common_name.as_str()) {
        return Err(Reason::SubjectChanged {
            have: parsed.common_name.clone(),
            want: spec.common_name.clone(),
        });
    }
    if parsed.ips != spec.sans.ips || parsed.dns != spec.sans.dns {
        let have = Sans {
            ips: parsed.ips.clone(),
            dns: parsed.dns.clone(),
        };
        return Err(Reason::SansChanged {
            missing: spec.sans.missing_from(&have),
            unexpected: have.missing_from(&spec.sans),
        });
    }
    Ok(())
}

/// Judges the validity period of a certificate that is otherwise as wanted, at `now`.
fn validity(ca: &EtcdCa, policy: &CertPolicy, parsed: &ParsedCert, now: OffsetDateTime) -> Reason {
    if now < parsed.not_before {
        return Reason::NotYetValid {
            not_before: parsed.not_before,
        };
    }
    let renew_after = policy.renew_after(parsed.not_before, parsed.not_after);
    if now < renew_after {
        return Reason::Valid {
            not_after: parsed.not_after,
            renew_after,
        };
    }
    if ca.leaf_not_after(policy, now) <= parsed.not_after {
        return Reason::RenewalLimitedByCa {
            not_after: parsed.not_after,
            ca_not_after: ca.not_after(),
        };
    }
    if now >= parsed.not_after {
        Reason::Expired {
            not_after: parsed.not_after,
        }
    } else {
        Reason::ExpiresSoon {
            not_after: parsed.not_after,
            renew_after,
        }
    }
}
