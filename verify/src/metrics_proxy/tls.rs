//! The proxy's TLS server: its certificate and key, and mandatory client certificates chaining
//! to `--client-ca-file`, all read and checked before the socket is bound (ring provider, TLS 1.2
//! and 1.3, HTTP/1.1 by ALPN).

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use super::{ProxyConfig, ProxyError};

/// The acceptor for `config`'s certificate, key and client CAs.
pub(super) fn acceptor(config: &ProxyConfig) -> Result<TlsAcceptor, ProxyError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = client_verifier(&config.client_ca_file, &provider)?;
    let chain = certificates("--cert-file", &config.cert_file)?;
    let key = private_key(&config.key_file)?;
    check_pair(config, &chain, &key, &provider)?;
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(server)))
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, ProxyError> {
    std::fs::read(path).map_err(|source| ProxyError::Read {
        flag,
        path: path.to_owned(),
        source,
    })
}

fn bad(flag: &'static str, path: &Path, reason: impl Into<String>) -> ProxyError {
    ProxyError::BadFile {
        flag,
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// Every certificate of the PEM file at `path`: at least one, each complete.
fn certificates(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ProxyError> {
    let bytes = read(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            bad(
                flag,
                path,
                format!("not a complete PEM certificate list: {e}"),
            )
        })?;
    if certs.is_empty() {
        return Err(bad(flag, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, ProxyError> {
    let bytes = read("--key-file", path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        bad(
            "--key-file",
            path,
            format!("no PEM private key (PKCS#8, SEC1 EC or PKCS#1 RSA): {e}"),
        )
    })
}

/// Client authentication is mandatory: a certificate chaining to one of the CAs in `path`.
fn client_verifier(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, ProxyError> {
    const FLAG: &str = "--client-ca-file";
    let mut roots = rustls::RootCertStore::empty();
    for (n, cert) in certificates(FLAG, path)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            bad(
                FLAG,
                path,
                format!("certificate {} cannot be a trust anchor: {e}", n + 1),
            )
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|e| bad(FLAG, path, format!("no client verifier: {e}")))
}

/// The key must be usable and belong to the leaf certificate.
fn check_pair(
    config: &ProxyConfig,
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<(), ProxyError> {
    let signing = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| bad("--key-file", &config.key_file, format!("unusable key: {e}")))?;
    match CertifiedKey::new(chain.to_vec(), signing).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(ProxyError::KeyMismatch {
            key: config.key_file.clone(),
            cert: config.cert_file.clone(),
        }),
        Err(e) => Err(bad(
            "--cert-file",
            &config.cert_file,
            format!("the certificate does not parse: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::metrics_proxy::Upstream;

    struct Files {
        dir: tempfile::TempDir,
        config: ProxyConfig,
    }

    fn pem(key: &rcgen::KeyPair, ca: bool) -> String {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        if ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        params.self_signed(key).unwrap().pem()
    }

    fn files() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::File::create(&path)
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            path
        };
        let (key, ca_key) = (
            rcgen::KeyPair::generate().unwrap(),
            rcgen::KeyPair::generate().unwrap(),
        );
        let config = ProxyConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            cert_file: write("tls.crt", &pem(&key, false)),
            key_file: write("tls.key", &key.serialize_pem()),
            client_ca_file: write("ca.crt", &pem(&ca_key, true)),
            upstream: "http://127.0.0.1:2382".parse::<Upstream>().unwrap(),
            upstream_timeout: std::time::Duration::from_secs(5),
        };
        Files { dir, config }
    }

    fn error(config: &ProxyConfig) -> String {
        acceptor(config).err().expect("an error").to_string()
    }

    #[test]
    fn good_material_builds_an_acceptor() {
        let f = files();
        assert!(acceptor(&f.config).is_ok());
    }

    #[test]
    fn a_missing_file_is_named_with_its_flag() {
        let mut f = files();
        f.config.cert_file = f.dir.path().join("nope.crt");
        let e = error(&f.config);
        assert!(
            e.starts_with("--cert-file ") && e.contains("nope.crt"),
            "{e}"
        );
    }

    #[test]
    fn a_key_where_a_certificate_belongs_is_refused() {
        let mut f = files();
        f.config.client_ca_file = f.config.key_file.clone();
        let e = error(&f.config);
        assert!(
            e.contains("--client-ca-file") && e.contains("no PEM certificate"),
            "{e}"
        );
        let mut f = files();
        f.config.key_file = f.config.cert_file.clone();
        let e = error(&f.config);
        assert!(
            e.contains("--key-file") && e.contains("no PEM private key"),
            "{e}"
        );
    }

    #[test]
    fn a_key_of_another_certificate_is_a_mismatch() {
        let f = files();
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(&f.config.key_file, other.serialize_pem()).unwrap();
        let e = error(&f.config);
        assert!(e.contains("does not belong to the certificate"), "{e}");
    }
}
