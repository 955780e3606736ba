//! Client TLS material for etcd, checked completely before any connection is tried.
//!
//! A TLS input that cannot be used must fail as *invalid input* naming the variable, never as a
//! connection failure: `etcd-verify` starts etcd when no endpoint answers (the whole cluster is
//! restarting), so a truncated key that only failed at connect time once opened the gate and
//! skipped the forged-revision check. So [`TlsFiles::load`] (and [`TlsPem`]) check that:
//! * the CA file is a complete PEM list of certificates that each can anchor trust;
//! * the client certificate file is a complete PEM chain whose certificates parse;
//! * the key file is a complete PEM private key of a kind rustls signs with, and it belongs to
//!   the client certificate (its public key is the certificate's).
//!
//! [`is_tls_failure`] tells a TLS handshake failure (an endpoint answered, but its certificate
//! is not trusted or it refused ours) from an endpoint that is down.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use etcd_client::{Certificate, Identity, TlsOptions};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::ClientError;

/// Paths of the client TLS material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// Builds from the three `ETCDCTL_*` values: all three set (non-empty), or none.
    pub fn from_parts(
        ca: Option<String>,
        cert: Option<String>,
        key: Option<String>,
    ) -> Result<Option<Self>, ClientError> {
        let parts = [
            ("ETCDCTL_CACERT", ca),
            ("ETCDCTL_CERT", cert),
            ("ETCDCTL_KEY", key),
        ];
        let (set, unset): (Vec<_>, Vec<_>) = parts
            .into_iter()
            .map(|(name, v)| (name, v.filter(|s| !s.is_empty())))
            .partition(|(_, v)| v.is_some());
        if set.is_empty() {
            return Ok(None);
        }
        if !unset.is_empty() {
            return Err(ClientError::PartialTls {
                set: set.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
                unset: unset.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            });
        }
        let mut paths = set.into_iter().filter_map(|(_, v)| v.map(PathBuf::from));
        match (paths.next(), paths.next(), paths.next()) {
            (Some(ca), Some(cert), Some(key)) => Ok(Some(Self { ca, cert, key })),
            _ => Ok(None),
        }
    }

    /// Reads the three files and checks them completely (see the module docs).
    pub(crate) fn load(&self) -> Result<Loaded, ClientError> {
        let ca = Input::file("ETCDCTL_CACERT", &self.ca, "CERTIFICATE")?;
        let cert = Input::file("ETCDCTL_CERT", &self.cert, "CERTIFICATE")?;
        let key = Input::file("ETCDCTL_KEY", &self.key, "PRIVATE KEY")?;
        check(&ca, &cert, &key)
    }
}

/// Client TLS material held in memory (PEM), for a process that issued its own certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPem {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPem").finish_non_exhaustive()
    }
}

impl TlsPem {
    /// Checks the material as [`TlsFiles::load`] does.
    pub(crate) fn load(&self) -> Result<Loaded, ClientError> {
        let input = |var, bytes: &Vec<u8>| Input {
            var,
            origin: "(in memory)".into(),
            bytes: bytes.clone(),
        };
        check(
            &input("CA certificate", &self.ca),
            &input("client certificate", &self.cert),
            &input("client key", &self.key),
        )
    }
}

/// Checked TLS material, in the two forms the client uses: the gRPC client's options and a
/// rustls configuration for the plain HTTPS endpoints (`/version`).
#[derive(Clone)]
pub(crate) struct Loaded {
    pub options: TlsOptions,
    pub https: Arc<rustls::ClientConfig>,
}

/// One TLS input: which variable named it, where it came from, its bytes.
struct Input {
    var: &'static str,
    origin: String,
    bytes: Vec<u8>,
}

impl Input {
    fn file(var: &'static str, path: &std::path::Path, label: &str) -> Result<Self, ClientError> {
        let bytes = std::fs::read(path).map_err(|source| ClientError::ReadTls {
            var,
            path: path.to_owned(),
            source,
        })?;
        let text = String::from_utf8_lossy(&bytes);
        if !text.contains("-----BEGIN ") || !text.contains(label) {
            return Err(ClientError::NotPem {
                var,
                path: path.to_owned(),
                label: label.to_owned(),
            });
        }
        Ok(Self {
            var,
            origin: path.display().to_string(),
            bytes,
        })
    }

    fn bad(&self, reason: impl Into<String>) -> ClientError {
        ClientError::BadTls {
            var: self.var,
            origin: self.origin.clone(),
            reason: reason.into(),
        }
    }

    /// Every certificate of a complete PEM list; at least one.
    fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, ClientError> {
        let certs = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.bad(format!("not a complete PEM certificate list: {e}")))?;
        if certs.is_empty() {
            return Err(self.bad("holds no certificate"));
        }
        Ok(certs)
    }
}

/// The checks of the module docs; the material in the forms of [`Loaded`].
fn check(ca: &Input, cert: &Input, key: &Input) -> Result<Loaded, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    for (n, c) in ca.certificates()?.into_iter().enumerate() {
        roots.add(c).map_err(|e| {
            ca.bad(format!(
                "certificate {} cannot be a trust anchor: {e}",
                n + 1
            ))
        })?;
    }
    let chain = cert.certificates()?;
    let private = PrivateKeyDer::from_pem_slice(&key.bytes)
        .map_err(|e| key.bad(format!("not a complete PEM private key: {e}")))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&private)
        .map_err(|e| key.bad(format!("not a usable private key: {e}")))?;
    CertifiedKey::new(chain.clone(), signing)
        .keys_match()
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => key.bad(format!(
                "does not belong to the certificate in {} ({})",
                cert.var, cert.origin
            )),
            other => cert.bad(format!("the certificate does not parse: {other}")),
        })?;
    let https = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| cert.bad(format!("no TLS version to offer: {e}")))?
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, private)
    .map_err(|e| key.bad(format!("not usable as a client identity: {e}")))?;
    Ok(Loaded {
        options: TlsOptions::new()
            .ca_certificate(Certificate::from_pem(&ca.bytes))
            .identity(Identity::from_pem(&cert.bytes, &key.bytes)),
        https: Arc::new(https),
    })
}

/// A TLS client configuration trusting `ca_pem`, presenting `identity` (certificate and key
/// PEM) when given: for checks that a listener requires client certificates.
pub fn https_config(
    ca_pem: &[u8],
    identity: Option<(&[u8], &[u8])>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        roots
            .add(c.map_err(|e| format!("CA: {e}"))?)
            .map_err(|e| format!("CA: {e}"))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// True when `error` (or anything in its source chain) is a TLS failure: a handshake that an
/// endpoint answered but that failed (its certificate not trusted, ours refused, a fatal alert).
pub fn is_tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if e.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
        {
            return true;
        }
        current = e.source();
    }
    mentions_tls(&error.to_string())
}

/// Text a TLS failure leaves when its type is lost on the way (tonic flattens some errors to
/// strings).
pub(crate) fn mentions_tls(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "invalid peer certificate",
        "received fatal alert",
        "tls handshake",
        "certificate required",
        "unknownissuer",
        "bad certificate",
    ]
    .iter()
    .any(|p| m.contains(p))
}
