//! Unit tests of the certs module: generation checked with x509-parser, CA adoption, bundles,
//! inspection and Secret key names. The plan's decisions are tested in `tests_plan.rs`, which
//! shares the helpers here.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::*;

pub(super) fn t0() -> OffsetDateTime {
    // 2026-09-21T21:46:40Z; a fixed instant, never the clock.
    OffsetDateTime::from_unix_timestamp(1_790_027_200).unwrap()
}

/// One CA in both roles: what these tests check does not depend on which CA signs which kind
/// (`etcd_pki`'s tests check that, and [`two_cas_sign_their_own_kinds`] here).
pub(super) fn one(ca: &EtcdCa) -> Signers<'_> {
    Signers {
        etcd: ca,
        metrics: ca,
    }
}

pub(super) fn policy() -> CertPolicy {
    CertPolicy::default()
}

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(super) fn nodes(list: &[(&str, &[&str])]) -> DesiredNodes {
    list.iter()
        .map(|(n, ips)| ((*n).to_owned(), ips.iter().map(|i| ip(i)).collect()))
        .collect()
}

fn der_of(pem: &[u8]) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem).unwrap().1.contents
}

/// A fully populated secret for `desired`, issued at `now`.
pub(super) fn secret_for(
    ca: &EtcdCa,
    desired: &DesiredNodes,
    now: OffsetDateTime,
) -> BTreeMap<String, Vec<u8>> {
    let plan = plan_node_certs(one(ca), &policy(), &BTreeMap::new(), desired, now);
    apply_plan(one(ca), &policy(), &plan, &BTreeMap::new(), now).unwrap()
}

/// The DNS names and IP addresses in `cert`'s subjectAltName (which holds nothing else).
fn sans_of(cert: &X509Certificate<'_>) -> (BTreeSet<String>, BTreeSet<IpAddr>) {
    let san = cert.subject_alternative_name().unwrap().unwrap();
    let mut dns = BTreeSet::new();
    let mut ips = BTreeSet::new();
    for name in &san.value.general_names {
        match name {
            GeneralName::DNSName(d) => {
                dns.insert(d.to_string());
            }
            GeneralName::IPAddress(raw) => {
                let ip = match raw.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(*raw).unwrap()),
                    _ => IpAddr::from(<[u8; 16]>::try_from(*raw).unwrap()),
                };
                ips.insert(ip);
            }
            other => panic!("unexpected SAN {other:?}"),
        }
    }
    (dns, ips)
}

#[test]
fn node_certs_verify_against_the_ca_with_sans_and_usages() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let ca_der = der_of(ca.cert_pem().as_bytes());
    let (_, ca_x509) = X509Certificate::from_der(&ca_der).unwrap();
    assert!(ca_x509.is_ca());
    assert_eq!(
        ca.subject(),
        format!("CN=etcd-signer@{}", t0().unix_timestamp())
    );
    assert_eq!(ca.not_after(), t0() + Duration::days(3650));

    let ips = BTreeSet::from([ip("10.0.0.1"), ip("fd00::1")]);
    for kind in CertKind::ALL {
        let issued = ca.issue(&kind.spec("n1", &ips), &policy(), t0()).unwrap();
        let der = der_of(issued.cert_pem.as_bytes());
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        cert.verify_signature(Some(ca_x509.public_key())).unwrap();
        assert_eq!(cert.issuer(), ca_x509.subject());
        assert!(!cert.is_ca());
        assert_eq!(
            cert.subject()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            kind.name("n1")
        );

        let (dns, ips_seen) = sans_of(&cert);
        assert_eq!(
            dns,
            BTreeSet::from(["localhost".to_owned(), "n1".to_owned()])
        );
        assert_eq!(
            ips_seen,
            BTreeSet::from([ip("10.0.0.1"), ip("fd00::1"), ip("127.0.0.1"), ip("::1")])
        );

        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth, "{kind}: server auth");
        assert_eq!(
            eku.client_auth,
            kind != CertKind::Metrics,
            "{kind}: client auth"
        );

        let validity = cert.validity();
        assert_eq!(
            validity.not_after.to_datetime(),
            t0() + Duration::days(3 * 365)
        );
        assert_eq!(
            validity.not_before.to_datetime(),
            t0() - Duration::minutes(5)
        );
    }

    let client = ca
        .issue(&ClientCertKind::Operator.spec(), &policy(), t0())
        .unwrap();
    let der = der_of(client.cert_pem.as_bytes());
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    cert.verify_signature(Some(ca_x509.public_key())).unwrap();
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    assert_eq!(cert.subject().to_string(), "CN=etcd-operator");
}

#[test]
fn node_name_is_a_dns_san_only_when_it_is_a_dns_name() {
    let none = BTreeSet::new();
    assert!(
        Sans::for_node("master-0.example.com", &none)
            .dns
            .contains("master-0.example.com")
    );
    assert_eq!(
        Sans::for_node("10.0.0.7", &none).dns,
        BTreeSet::from(["localhost".to_owned()])
    );
    assert_eq!(
        Sans::for_node("Node_1", &none).dns,
        BTreeSet::from(["localhost".to_owned()])
    );
    assert!(is_dns_name("n1"));
    assert!(!is_dns_name("-n1"));
    assert!(!is_dns_name("n1..x"));
    assert!(!is_dns_name(&"a".repeat(64)));
    assert!(!is_dns_name(""));
}

#[test]
fn ca_is_adopted_from_pem_and_from_its_secret() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let (cert_pem, key_pem) = ca.to_pem();
    let adopted = EtcdCa::from_pem(&cert_pem, &key_pem).unwrap();
    assert_eq!(adopted.cert_pem(), ca.cert_pem());

    // A leaf issued by the adopted CA verifies against the original (same subject and key).
    let issued = adopted
        .issue(
            &CertKind::Peer.spec("n1", &BTreeSet::new()),
            &policy(),
            t0(),
        )
        .unwrap();
    assert!(ca.signed(&der_of(issued.cert_pem.as_bytes())));

    let (found, origin) =
        EtcdCa::adopt_or_generate(CaRole::Etcd, Some(&ca.to_secret_data()), &policy(), t0())
            .unwrap();
    assert_eq!(origin, CaOrigin::Existing);
    assert_eq!(found.to_secret_data(), ca.to_secret_data());
    assert_eq!(
        ca.to_secret_data().keys().collect::<Vec<_>>(),
        vec![CA_CERT_KEY, CA_KEY_KEY]
    );

    let (_, origin) = EtcdCa::adopt_or_generate(CaRole::Etcd, None, &policy(), t0()).unwrap();
    assert_eq!(origin, CaOrigin::Generated);

    // A Secret that exists but is broken is an error, never a reason to make a new CA.
    let broken = BTreeMap::from([(CA_CERT_KEY.to_owned(), b"garbage".to_vec())]);
    let err = EtcdCa::adopt_or_generate(CaRole::Etcd, Some(&broken), &policy(), t0()).unwrap_err();
    assert_eq!(category_of(&err), crate::category::Category::InvalidCa);

    // Key of another CA.
    let other = EtcdCa::generate(t0()).unwrap();
    let err = EtcdCa::from_pem(&cert_pem, &other.to_pem().1).unwrap_err();
    assert!(err.to_string().contains("does not belong"), "{err}");

    // A leaf certificate is not a CA.
    let err = EtcdCa::from_pem(&issued.cert_pem, &issued.key_pem).unwrap_err();
    assert!(err.to_string().contains("not a CA"), "{err}");
}

#[test]
fn bundles_hold_the_ca_under_three_keys() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let bundles = bundle_data(one(&ca));
    assert_eq!(
        bundles.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "metrics-ca-bundle.crt",
            "peer-ca-bundle.crt",
            "server-ca-bundle.crt"
        ]
    );
    for pem in bundles.values() {
        assert_eq!(pem, ca.cert_pem());
    }
    assert_eq!(bundle_data(one(&ca)), bundles);
}

#[test]
fn inspection_reports_expiry_sans_and_the_ca() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let secret = secret_for(&ca, &desired, t0());
    let infos = inspect_certs(one(&ca), &secret);
    assert_eq!(
        infos
            .iter()
            .map(|i| i.secret_key.as_str())
            .collect::<Vec<_>>(),
        [
            "etcd-peer-n1.crt",
            "etcd-serving-metrics-n1.crt",
            "etcd-serving-n1.crt"
        ]
    );
    let metrics = &infos[1];
    assert_eq!(metrics.kind, Some(CertKind::Metrics));
    assert_eq!(metrics.node.as_deref(), Some("n1"));
    assert_eq!(
        metrics.subject.as_deref(),
        Some("CN=etcd-serving-metrics-n1")
    );
    assert_eq!(metrics.dns_names, ["localhost", "n1"]);
    assert_eq!(
        metrics.ip_addresses,
        [ip("10.0.0.1"), ip("127.0.0.1"), ip("::1")]
    );
    assert!(metrics.issued_by_ca && metrics.error.is_none());
    assert_eq!(
        metrics.not_after_unix(),
        Some((t0() + Duration::days(3 * 365)).unix_timestamp())
    );
    let info = ca.info();
    assert_eq!(
        info.not_after_unix(),
        (t0() + Duration::days(3650)).unix_timestamp()
    );
    assert_eq!(
        info.to_string(),
        "CN=etcd-signer@1790027200 valid 2026-09-21T21:41:40Z to 2036-09-18T21:46:40Z"
    );
}

#[test]
fn secret_keys_parse_back_to_kind_and_node() {
    assert_eq!(
        CertKind::parse_key("etcd-serving-metrics-n1.crt"),
        Some((CertKind::Metrics, "n1"))
    );
    assert_eq!(
        CertKind::parse_key("etcd-serving-n1.key"),
        Some((CertKind::Serving, "n1"))
    );
    assert_eq!(
        CertKind::parse_key("etcd-peer-a.b.c.crt"),
        Some((CertKind::Peer, "a.b.c"))
    );
    assert_eq!(CertKind::parse_key("etcd-peer-.crt"), None);
    assert_eq!(CertKind::parse_key("etcd-peer-n1.pem"), None);
    assert_eq!(CertKind::parse_key("tls.crt"), None);
}

#[test]
fn two_cas_sign_their_own_kinds() {
    let etcd = EtcdCa::generate(t0()).unwrap();
    let metrics = EtcdCa::generate_for(CaRole::Metrics, &policy(), t0()).unwrap();
    let signers = Signers {
        etcd: &etcd,
        metrics: &metrics,
    };
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let plan = plan_node_certs(signers, &policy(), &BTreeMap::new(), &desired, t0());
    let secret = apply_plan(signers, &policy(), &plan, &BTreeMap::new(), t0()).unwrap();
    assert!(plan_node_certs(signers, &policy(), &secret, &desired, t0()).is_noop());
    for kind in CertKind::ALL {
        let der = der_of(&secret[&kind.cert_key("n1")]);
        let (signed_by_etcd, signed_by_metrics) = (etcd.signed(&der), metrics.signed(&der));
        assert_eq!(
            (signed_by_etcd, signed_by_metrics),
            (kind != CertKind::Metrics, kind == CertKind::Metrics),
            "{kind}"
        );
    }
    // A metrics leaf of the etcd CA (what an operator before the metrics CA issued) is
    // re-issued from the metrics CA; the others are kept.
    let before = apply_plan(one(&etcd), &policy(), &plan, &BTreeMap::new(), t0()).unwrap();
    let again = plan_node_certs(signers, &policy(), &before, &desired, t0());
    let changed: Vec<_> = again
        .changes()
        .map(|d| (d.kind, d.reason.clone()))
        .collect();
    assert_eq!(changed, [(CertKind::Metrics, Reason::WrongIssuer)]);
}
