//! Scrapers' certificates of the etcd CA, revoked. Part of the certificate signer. Operator
//! versions before the metrics CA issued `etcd-metric-client` from the etcd CA, and etcd takes
//! any certificate of its CA on the client port, for every key: whoever holds that certificate
//! (Prometheus, and every copy the Prometheus Operator made of it) can read and write every
//! Kubernetes Secret. etcd cannot revoke one certificate, so the CA that signed it is rotated
//! away ([`super::ca_rotation`], trigger [`TRIGGER`]) on the upgrade, with no admin step.
//!
//! The only evidence is the Secret itself, which the signer re-issues from the metrics CA in the
//! same pass. So before anything is re-issued, [`record`] writes on Secret `etcd-signer`
//! (annotation [`ANNOTATION`]) the fingerprints of the CAs (`etcd-signer`, and
//! `etcd-signer-next` while a rotation runs) that signed it; a failed write fails the pass
//! before the re-issue. A rotation is due ([`due`]) while the CA in `etcd-signer` is one of them;
//! the rotation's swap puts one there that is not, so it runs once. A CA brought by an admin is
//! never rotated for this unless this operator issued a scraper's certificate from it.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::certs::{self, ClientCertKind, EtcdCa};
use crate::controller::ControllerError;
use crate::observed::find;
use crate::pass::Pass;
use crate::writer::Marks;

use super::{secret_bytes, write_err};

/// On Secret `etcd-signer`: the fingerprints ([`fingerprint`]) of the CAs that signed a
/// scraper's certificate, comma-separated, sorted.
pub const ANNOTATION: &str = "etcd.static-operator.io/signed-scraper-certificates";
/// The CA rotation's trigger (`status.certificates.caRotation.trigger`).
pub const TRIGGER: &str = "scraperRevocation";

/// A CA's fingerprint: the first 16 hex digits of the SHA-256 of its certificate's PEM as
/// stored.
pub fn fingerprint(ca: &EtcdCa) -> String {
    let digest = Sha256::digest(ca.cert_pem().trim().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn parse(value: Option<&str>) -> BTreeSet<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The annotation's new value when `signed` (fingerprints of the CAs that signed the scraper's
/// certificate seen now) adds to `current`; `None` when nothing is new.
pub fn recorded(current: Option<&str>, signed: &[String]) -> Option<String> {
    let mut set = parse(current);
    let before = set.len();
    set.extend(signed.iter().cloned());
    (set.len() > before).then(|| set.into_iter().collect::<Vec<_>>().join(","))
}

/// Whether `ca` (the CA in `etcd-signer`) signed a scraper's certificate, per the annotation.
pub fn due(annotation: Option<&str>, ca: &EtcdCa) -> bool {
    parse(annotation).contains(&fingerprint(ca))
}

/// Records which of the etcd CAs signed `etcd-metric-client` (Managed only), and says whether
/// the CA in `etcd-signer` (`ca`) must be rotated away for it.
pub async fn record(p: &mut Pass<'_>, ca: &EtcdCa) -> Result<bool, ControllerError> {
    let op_ns = p.ctx.config.operator_namespace.clone();
    let Some(signer) = find(&p.inputs.operator_secrets, &op_ns, certs::CA_SECRET) else {
        // Generated in this pass: it signed nothing yet.
        return Ok(false);
    };
    let current = signer
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .cloned();
    let next = find(
        &p.inputs.operator_secrets,
        &op_ns,
        super::ca_rotation::NEXT_SECRET,
    )
    .and_then(|s| EtcdCa::from_secret_data(&secret_bytes(s)).ok());
    let scraper = find(
        &p.inputs.operator_secrets,
        &op_ns,
        ClientCertKind::Metrics.secret_name(),
    )
    .and_then(|s| secret_bytes(s).remove(ClientCertKind::CERT_KEY))
    .and_then(|pem| certs::parse_cert_pem(&pem).ok())
    .map(|(_, der)| der);
    let signed: Vec<String> = scraper
        .map(|der| {
            std::iter::once(ca)
                .chain(next.as_ref())
                .filter(|c| c.signed(&der))
                .map(fingerprint)
                .collect()
        })
        .unwrap_or_default();
    let Some(value) = recorded(current.as_deref(), &signed) else {
        return Ok(due(current.as_deref(), ca));
    };
    if p.o.managed {
        let annotations = [(ANNOTATION.to_owned(), value.clone())].into();
        let marks = Marks {
            labels: &Default::default(),
            annotations: &annotations,
        };
        let data = secret_bytes(signer);
        let signer = Some(signer).cloned();
        p.w.secret(
            &op_ns,
            certs::CA_SECRET,
            signer.as_ref(),
            &data,
            None,
            marks,
        )
        .await
        .map_err(write_err)?;
    }
    p.note(format!(
        "Secret {} was issued by the etcd CA ({}): etcd takes it for every key; the CA is rotated away to revoke it",
        ClientCertKind::Metrics.secret_name(),
        signed.join(", ")
    ));
    Ok(due(Some(&value), ca))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_grows_only_with_new_signers_and_names_the_ca_it_rotates() {
        let now = time::OffsetDateTime::now_utc();
        let (a, b) = (
            EtcdCa::generate(now).unwrap(),
            EtcdCa::generate(now).unwrap(),
        );
        let (fa, fb) = (fingerprint(&a), fingerprint(&b));
        assert_eq!(fa.len(), 16);
        assert_ne!(fa, fb);
        assert_eq!(recorded(None, &[]), None);
        let one = recorded(None, std::slice::from_ref(&fa)).unwrap();
        assert_eq!(one, fa);
        assert_eq!(recorded(Some(&one), std::slice::from_ref(&fa)), None);
        let both = recorded(Some(&one), std::slice::from_ref(&fb)).unwrap();
        let mut sorted = [fa.clone(), fb.clone()];
        sorted.sort();
        assert_eq!(both, sorted.join(","));
        assert!(due(Some(&both), &a) && due(Some(&both), &b));
        // After the rotation's swap `etcd-signer` holds a CA the record does not name.
        let c = EtcdCa::generate(now).unwrap();
        assert!(!due(Some(&both), &c));
        assert!(!due(None, &a) && !due(Some(" , "), &a));
    }
}
