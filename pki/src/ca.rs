//! The two CAs: the etcd CA (`etcd-signer`), which signs every certificate etcd's listeners
//! trust, and the metrics CA (`etcd-metric-signer`), which signs only the metrics proxy's serving
//! certificates and scrapers' client certificates. Each is generated once (ECDSA P-256), or
//! adopted from the Secret `etcd-operator render` wrote at bootstrap. They are separate because
//! etcd serves its metrics listener with the client TLS settings: a scraper's certificate of the
//! etcd CA could read and write every key.

use std::collections::BTreeMap;
use std::fmt;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use time::OffsetDateTime;

use crate::inspect::{ParsedCert, parse_cert_pem};
use crate::node::LeafSpec;
use crate::{CertError, CertPolicy, format_time};

/// Secret holding the CA (namespace of the operator's operands).
pub const CA_SECRET: &str = "etcd-signer";
/// Key of the CA certificate (PEM) in [`CA_SECRET`].
pub const CA_CERT_KEY: &str = "tls.crt";
/// Key of the CA private key (PKCS#8 PEM) in [`CA_SECRET`].
pub const CA_KEY_KEY: &str = "tls.key";
/// Common name of a generated CA.
/// The CA's common name is this, `@`, and the Unix time it was made (as cluster-etcd-operator
/// names its signers): two CAs trusted at once during a rotation must not share a subject, or a
/// verifier may check a leaf against the wrong one.
pub const CA_COMMON_NAME: &str = "etcd-signer";
/// Secret holding the metrics CA (operator namespace).
pub const METRICS_CA_SECRET: &str = "etcd-metric-signer";

/// Which CA: the one etcd trusts, or the one only the metrics proxy trusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CaRole {
    /// `etcd-signer`: peer and serving certificates, etcd's clients.
    Etcd,
    /// `etcd-metric-signer`: the metrics proxy's serving certificates and scrapers' clients.
    Metrics,
}

impl CaRole {
    /// The Secret holding this CA.
    pub fn secret_name(self) -> &'static str {
        match self {
            CaRole::Etcd => CA_SECRET,
            CaRole::Metrics => METRICS_CA_SECRET,
        }
    }

    /// The common name of a CA generated for this role (before `@<time>`).
    pub fn common_name(self) -> &'static str {
        match self {
            CaRole::Etcd => CA_COMMON_NAME,
            CaRole::Metrics => METRICS_CA_SECRET,
        }
    }
}

/// Whether [`EtcdCa::adopt_or_generate`] found a CA or made one (then the caller must store it,
/// with a create, never an overwrite).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaOrigin {
    Existing,
    Generated,
}

/// A certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// The etcd CA: its certificate (kept byte-identical to what was stored) and its signing key.
pub struct EtcdCa {
    cert_pem: String,
    key_pem: String,
    cert_der: Vec<u8>,
    parsed: ParsedCert,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for EtcdCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCa")
            .field("subject", &self.parsed.subject)
            .field("not_before", &format_time(self.parsed.not_before))
            .field("not_after", &format_time(self.parsed.not_after))
            .finish_non_exhaustive()
    }
}

impl EtcdCa {
    /// A new CA valid from `now` for [`CertPolicy::default`]'s 10 years.
    pub fn generate(now: OffsetDateTime) -> Result<Self, CertError> {
        Self::generate_with(&CertPolicy::default(), now)
    }

    /// A new etcd CA valid from `now - policy.backdate` to `now + policy.ca_validity`.
    pub fn generate_with(policy: &CertPolicy, now: OffsetDateTime) -> Result<Self, CertError> {
        Self::generate_for(CaRole::Etcd, policy, now)
    }

    /// A new CA for `role`, valid from `now - policy.backdate` to `now + policy.ca_validity`.
    pub fn generate_for(
        role: CaRole,
        policy: &CertPolicy,
        now: OffsetDateTime,
    ) -> Result<Self, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            DnType::CommonName,
            format!("{}@{}", role.common_name(), now.unix_timestamp()),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = now - policy.backdate;
        params.not_after = now + policy.ca_validity;
        let cert = params.self_signed(&key)?;
        Self::from_pem(&cert.pem(), &key.serialize_pem())
    }

    /// Adopts an existing CA. Checks that the certificate is a CA and that the key is its key;
    /// expiry is not checked here (see [`EtcdCa::not_after`]).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        let invalid = |what: &str, detail: &dyn fmt::Display| {
            CertError::InvalidCa(format!("{what}: {detail}"))
        };
        let (parsed, cert_der) =
            parse_cert_pem(cert_pem.as_bytes()).map_err(|e| invalid("certificate", &e))?;
        if !parsed.is_ca {
            return Err(CertError::InvalidCa(format!(
                "certificate {} is not a CA (basicConstraints CA:false or missing)",
                parsed.subject
            )));
        }
        let key = KeyPair::from_pem(key_pem).map_err(|e| invalid("private key", &e))?;
        if key.public_key_raw() != parsed.public_key.as_slice() {
            return Err(CertError::InvalidCa(
                "the private key does not belong to the CA certificate".into(),
            ));
        }
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| invalid("certificate", &e))?;
        Ok(Self {
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
            cert_der,
            parsed,
            issuer,
        })
    }

    /// Adopts the etcd CA from the data of Secret [`CA_SECRET`] (`tls.crt`, `tls.key`).
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, CertError> {
        Self::from_role_data(CaRole::Etcd, data)
    }

    /// Adopts the CA of `role` from the data of its Secret (`tls.crt`, `tls.key`).
    pub fn from_role_data(
        role: CaRole,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, CertError> {
        let secret = role.secret_name();
        let text = |key: &str| -> Result<&str, CertError> {
            let bytes = data
                .get(key)
                .ok_or_else(|| CertError::InvalidCa(format!("Secret {secret} has no key {key}")))?;
            std::str::from_utf8(bytes).map_err(|_| {
                CertError::InvalidCa(format!("Secret {secret} key {key} is not UTF-8 PEM"))
            })
        };
        Self::from_pem(text(CA_CERT_KEY)?, text(CA_KEY_KEY)?)
    }

    /// Adopts the etcd CA of a whole Secret [`CA_SECRET`] (as `kubectl get -o json` prints it).
    pub fn from_secret(secret: k8s_openapi::api::core::v1::Secret) -> Result<Self, CertError> {
        Self::from_role_secret(CaRole::Etcd, secret)
    }

    /// Adopts the CA of `role` from a whole Secret.
    pub fn from_role_secret(
        role: CaRole,
        secret: k8s_openapi::api::core::v1::Secret,
    ) -> Result<Self, CertError> {
        let data: BTreeMap<String, Vec<u8>> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        Self::from_role_data(role, &data)
    }

    /// The CA of `role` from its Secret's data if it exists, else a new one. A Secret that exists
    /// but can't be read is an error: replacing it would orphan every certificate it signed.
    pub fn adopt_or_generate(
        role: CaRole,
        existing: Option<&BTreeMap<String, Vec<u8>>>,
        policy: &CertPolicy,
        now: OffsetDateTime,
    ) -> Result<(Self, CaOrigin), CertError> {
        match existing {
            Some(data) => Ok((Self::from_role_data(role, data)?, CaOrigin::Existing)),
            None => Ok((Self::generate_for(role, policy, now)?, CaOrigin::Generated)),
        }
    }

    /// Certificate and key PEM, as stored.
    pub fn to_pem(&self) -> (String, String) {
        (self.cert_pem.clone(), self.key_pem.clone())
    }

    /// The CA certificate PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Data for the CA's Secret.
    pub fn to_secret_data(&self) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            (CA_CERT_KEY.to_owned(), self.cert_pem.as_bytes().to_vec()),
            (CA_KEY_KEY.to_owned(), self.key_pem.as_bytes().to_vec()),
        ])
    }

    /// The CA's subject, as text.
    pub fn subject(&self) -> &str {
        &self.parsed.subject
    }

    /// Start of the CA's validity.
    pub fn not_before(&self) -> OffsetDateTime {
        self.parsed.not_before
    }

    /// End of the CA's validity: no leaf outlives it.
    pub fn not_after(&self) -> OffsetDateTime {
        self.parsed.not_after
    }

    /// Whether the certificate `der` carries a valid signature by this CA.
    pub fn signed(&self, der: &[u8]) -> bool {
        let (Ok(ca), Ok(leaf)) = (
            x509_parser::parse_x509_certificate(&self.cert_der),
            x509_parser::parse_x509_certificate(der),
        ) else {
            return false;
        };
        leaf.1.issuer().as_raw() == ca.1.subject().as_raw()
            && leaf.1.verify_signature(Some(ca.1.public_key())).is_ok()
    }

    /// The `notAfter` a leaf issued at `now` gets: `now + leaf_validity`, capped at the CA's.
    pub fn leaf_not_after(&self, policy: &CertPolicy, now: OffsetDateTime) -> OffsetDateTime {
        (now + policy.leaf_validity).min(self.parsed.not_after)
    }

    /// Issues a leaf certificate for `spec` with a new ECDSA P-256 key, valid from
    /// `now - policy.backdate` to `now + policy.leaf_validity`, capped at the CA's `notAfter`.
    pub fn issue(
        &self,
        spec: &LeafSpec,
        policy: &CertPolicy,
        now: OffsetDateTime,
    ) -> Result<IssuedCert, CertError> {
        let not_after = self.leaf_not_after(policy, now);
        if not_after <= now {
            return Err(CertError::CaExpired {
                not_after: format_time(self.parsed.not_after),
            });
        }
        let key = KeyPair::generate()?;
        let mut params = spec.to_params()?;
        params.not_before = (now - policy.backdate).max(self.parsed.not_before);
        params.not_after = not_after;
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}
