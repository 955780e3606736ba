//! Unit tests of the certs module: generation checked with x509-parser, and the plan's decisions.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::*;

fn t0() -> OffsetDateTime {
    // 2026-09-21T21:46:40Z; a fixed instant, never the clock.
    OffsetDateTime::from_unix_timestamp(1_790_027_200).unwrap()
}

fn policy() -> CertPolicy {
    CertPolicy::default()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn nodes(list: &[(&str, &[&str])]) -> DesiredNodes {
    list.iter()
        .map(|(n, ips)| ((*n).to_owned(), ips.iter().map(|i| ip(i)).collect()))
        .collect()
}

fn der_of(pem: &[u8]) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem).unwrap().1.contents
}

/// A fully populated secret for `desired`, issued at `now`.
fn secret_for(
    ca: &EtcdCa,
    desired: &DesiredNodes,
    now: OffsetDateTime,
) -> BTreeMap<String, Vec<u8>> {
    let plan = plan_node_certs(ca, &policy(), &BTreeMap::new(), desired, now);
    apply_plan(ca, &policy(), &plan, &BTreeMap::new(), now).unwrap()
}

fn put(secret: &mut BTreeMap<String, Vec<u8>>, kind: CertKind, node: &str, cert: IssuedCert) {
    secret.insert(kind.cert_key(node), cert.cert_pem.into_bytes());
    secret.insert(kind.key_key(node), cert.key_pem.into_bytes());
}

fn decision<'a>(plan: &'a CertPlan, node: &str, kind: CertKind) -> &'a CertDecision {
    plan.decisions
        .iter()
        .find(|d| d.node == node && d.kind == kind)
        .unwrap()
}

fn changed_names(plan: &CertPlan) -> Vec<String> {
    plan.changes().map(CertDecision::name).collect()
}

#[test]
fn node_certs_verify_against_the_ca_with_sans_and_usages() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let ca_der = der_of(ca.cert_pem().as_bytes());
    let (_, ca_x509) = X509Certificate::from_der(&ca_der).unwrap();
    assert!(ca_x509.is_ca());
    assert_eq!(ca.subject(), "CN=etcd-signer");
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

        let san = cert.subject_alternative_name().unwrap().unwrap();
        let mut dns = BTreeSet::new();
        let mut ips_seen = BTreeSet::new();
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
                    ips_seen.insert(ip);
                }
                other => panic!("unexpected SAN {other:?}"),
            }
        }
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
        EtcdCa::adopt_or_generate(Some(&ca.to_secret_data()), &policy(), t0()).unwrap();
    assert_eq!(origin, CaOrigin::Existing);
    assert_eq!(found.to_secret_data(), ca.to_secret_data());
    assert_eq!(
        ca.to_secret_data().keys().collect::<Vec<_>>(),
        vec![CA_CERT_KEY, CA_KEY_KEY]
    );

    let (_, origin) = EtcdCa::adopt_or_generate(None, &policy(), t0()).unwrap();
    assert_eq!(origin, CaOrigin::Generated);

    // A Secret that exists but is broken is an error, never a reason to make a new CA.
    let broken = BTreeMap::from([(CA_CERT_KEY.to_owned(), b"garbage".to_vec())]);
    let err = EtcdCa::adopt_or_generate(Some(&broken), &policy(), t0()).unwrap_err();
    assert_eq!(err.category(), "invalid-ca");

    // Key of another CA.
    let other = EtcdCa::generate(t0()).unwrap();
    let err = EtcdCa::from_pem(&cert_pem, &other.to_pem().1).unwrap_err();
    assert!(err.to_string().contains("does not belong"), "{err}");

    // A leaf certificate is not a CA.
    let err = EtcdCa::from_pem(&issued.cert_pem, &issued.key_pem).unwrap_err();
    assert!(err.to_string().contains("not a CA"), "{err}");
}

#[test]
fn empty_secret_issues_all_three_per_node_then_keeps_them_byte_identical() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.2"])]);
    let plan = plan_node_certs(&ca, &policy(), &BTreeMap::new(), &desired, t0());
    assert_eq!(plan.decisions.len(), 6);
    assert!(plan.removals.is_empty());
    for d in &plan.decisions {
        assert_eq!(d.action(), Action::Issue, "{d}");
        assert_eq!(d.reason, Reason::Missing);
    }
    assert_eq!(
        plan.decisions
            .iter()
            .map(CertDecision::name)
            .collect::<Vec<_>>(),
        [
            "etcd-peer-n1",
            "etcd-serving-n1",
            "etcd-serving-metrics-n1",
            "etcd-peer-n2",
            "etcd-serving-n2",
            "etcd-serving-metrics-n2"
        ]
    );

    let secret = apply_plan(&ca, &policy(), &plan, &BTreeMap::new(), t0()).unwrap();
    assert_eq!(
        secret.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "etcd-peer-n1.crt",
            "etcd-peer-n1.key",
            "etcd-peer-n2.crt",
            "etcd-peer-n2.key",
            "etcd-serving-metrics-n1.crt",
            "etcd-serving-metrics-n1.key",
            "etcd-serving-metrics-n2.crt",
            "etcd-serving-metrics-n2.key",
            "etcd-serving-n1.crt",
            "etcd-serving-n1.key",
            "etcd-serving-n2.crt",
            "etcd-serving-n2.key",
        ]
    );

    // A year later: all valid, nothing to do, and applying changes nothing.
    let later = t0() + Duration::days(365);
    let again = plan_node_certs(&ca, &policy(), &secret, &desired, later);
    assert!(again.is_noop(), "{:?}", again.describe_changes());
    for d in &again.decisions {
        assert_eq!(d.action(), Action::Keep);
        assert_eq!(d.reason.category(), "valid");
        assert!(d.reason.to_string().starts_with("valid until 2029-"), "{d}");
    }
    let applied = apply_plan(&ca, &policy(), &again, &secret, later).unwrap();
    assert_eq!(applied, secret);
}

#[test]
fn a_certificate_near_expiry_is_reissued_alone() {
    // A CA made five years ago, so it can have issued certificates long ago.
    let ca = EtcdCa::generate(t0() - Duration::days(5 * 365)).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.2"])]);
    let mut secret = secret_for(&ca, &desired, t0());
    // Issued long ago: 100 days left at t0, inside the 219-day window of a 3-year certificate.
    let old = t0() - Duration::days(3 * 365 - 100);
    let ips = &desired["n2"];
    put(
        &mut secret,
        CertKind::Serving,
        "n2",
        ca.issue(&CertKind::Serving.spec("n2", ips), &policy(), old)
            .unwrap(),
    );

    let plan = plan_node_certs(&ca, &policy(), &secret, &desired, t0());
    assert_eq!(changed_names(&plan), ["etcd-serving-n2"]);
    let d = decision(&plan, "n2", CertKind::Serving);
    assert_eq!(d.action(), Action::Reissue);
    assert_eq!(d.reason.category(), "expires-soon");
    let text = d.to_string();
    assert!(
        text.starts_with("etcd-serving-n2: re-issue: expires at 2026-12-30T21:46:40Z"),
        "{text}"
    );

    let applied = apply_plan(&ca, &policy(), &plan, &secret, t0()).unwrap();
    for (key, value) in &secret {
        let same = applied[key] == *value;
        assert_eq!(same, !key.starts_with("etcd-serving-n2."), "{key}");
    }
    assert!(plan_node_certs(&ca, &policy(), &applied, &desired, t0()).is_noop());

    // Long expired: re-issued with "expired".
    put(
        &mut secret,
        CertKind::Peer,
        "n1",
        ca.issue(
            &CertKind::Peer.spec("n1", &desired["n1"]),
            &policy(),
            t0() - Duration::days(4 * 365),
        )
        .unwrap(),
    );
    let plan = plan_node_certs(&ca, &policy(), &secret, &desired, t0());
    assert_eq!(changed_names(&plan), ["etcd-peer-n1", "etcd-serving-n2"]);
    assert_eq!(
        decision(&plan, "n1", CertKind::Peer).reason.category(),
        "expired"
    );
}

#[test]
fn renewal_window_is_the_larger_of_a_fifth_and_30_days_capped_at_half() {
    let p = policy();
    let start = t0();
    assert_eq!(
        p.renew_window(start, start + Duration::days(3 * 365)),
        Duration::days(219)
    );
    assert_eq!(
        p.renew_window(start, start + Duration::days(60)),
        Duration::days(30)
    );
    assert_eq!(
        p.renew_window(start, start + Duration::days(20)),
        Duration::days(10)
    );

    // The boundary, through the plan: one second before renew_after keeps, at it re-issues.
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let secret = secret_for(&ca, &desired, t0());
    let not_before = t0() - p.backdate;
    let renew_after = p.renew_after(not_before, t0() + p.leaf_validity);
    let before = plan_node_certs(&ca, &p, &secret, &desired, renew_after - Duration::SECOND);
    assert!(before.is_noop());
    let at = plan_node_certs(&ca, &p, &secret, &desired, renew_after);
    assert_eq!(at.changes().count(), 3);
}

#[test]
fn a_changed_node_ip_reissues_that_nodes_certificates() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.2"])]);
    let secret = secret_for(&ca, &desired, t0());
    let moved = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.22"])]);
    let plan = plan_node_certs(&ca, &policy(), &secret, &moved, t0());
    assert_eq!(
        changed_names(&plan),
        ["etcd-peer-n2", "etcd-serving-n2", "etcd-serving-metrics-n2"]
    );
    let d = decision(&plan, "n2", CertKind::Peer);
    assert_eq!(
        d.reason,
        Reason::SansChanged {
            missing: vec!["IP:10.0.0.22".into()],
            unexpected: vec!["IP:10.0.0.2".into()],
        }
    );
    assert_eq!(
        d.reason.to_string(),
        "SANs changed: missing IP:10.0.0.22; no longer wanted IP:10.0.0.2"
    );
    let applied = apply_plan(&ca, &policy(), &plan, &secret, t0()).unwrap();
    let info = inspect_pem(&ca, "etcd-peer-n2.crt", &applied["etcd-peer-n2.crt"]);
    assert!(info.ip_addresses.contains(&ip("10.0.0.22")));
    assert!(!info.ip_addresses.contains(&ip("10.0.0.2")));
    assert!(plan_node_certs(&ca, &policy(), &applied, &moved, t0()).is_noop());
}

#[test]
fn a_removed_node_loses_its_keys_and_other_keys_stay() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.2"])]);
    let mut secret = secret_for(&ca, &desired, t0());
    secret.insert("unrelated".into(), b"keep me".to_vec());
    let shrunk = nodes(&[("n1", &["10.0.0.1"])]);
    let plan = plan_node_certs(&ca, &policy(), &secret, &shrunk, t0());
    assert_eq!(plan.changes().count(), 0);
    assert!(!plan.is_noop());
    assert_eq!(
        plan.removals
            .iter()
            .map(|r| r.key.as_str())
            .collect::<Vec<_>>(),
        [
            "etcd-peer-n2.crt",
            "etcd-peer-n2.key",
            "etcd-serving-metrics-n2.crt",
            "etcd-serving-metrics-n2.key",
            "etcd-serving-n2.crt",
            "etcd-serving-n2.key",
        ]
    );
    assert_eq!(
        plan.removals[0].to_string(),
        "etcd-peer-n2.crt: remove: node n2 is no longer a desired control-plane node"
    );
    let applied = apply_plan(&ca, &policy(), &plan, &secret, t0()).unwrap();
    assert_eq!(applied.len(), 7);
    assert_eq!(applied["unrelated"], b"keep me");
    assert!(applied.keys().all(|k| !k.contains("n2")));
}

#[test]
fn a_node_named_metrics_something_keeps_its_serving_cert() {
    // `etcd-serving-metrics-x.crt` is both "serving of node metrics-x" and "metrics of node x".
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("metrics-x", &["10.0.0.1"])]);
    let secret = secret_for(&ca, &desired, t0());
    assert!(plan_node_certs(&ca, &policy(), &secret, &desired, t0()).is_noop());
}

#[test]
fn a_certificate_of_another_ca_is_reissued() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let other = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let mut secret = secret_for(&ca, &desired, t0());
    put(
        &mut secret,
        CertKind::Metrics,
        "n1",
        other
            .issue(
                &CertKind::Metrics.spec("n1", &desired["n1"]),
                &policy(),
                t0(),
            )
            .unwrap(),
    );
    let plan = plan_node_certs(&ca, &policy(), &secret, &desired, t0());
    assert_eq!(changed_names(&plan), ["etcd-serving-metrics-n1"]);
    assert_eq!(
        decision(&plan, "n1", CertKind::Metrics).reason,
        Reason::WrongIssuer
    );
    let infos = inspect_certs(&ca, &secret);
    let by_key: BTreeMap<_, _> = infos.iter().map(|i| (i.secret_key.as_str(), i)).collect();
    assert!(!by_key["etcd-serving-metrics-n1.crt"].issued_by_ca);
    assert!(by_key["etcd-peer-n1.crt"].issued_by_ca);
}

#[test]
fn unreadable_or_mismatched_material_is_reissued() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let good = secret_for(&ca, &desired, t0());
    let peer_crt = CertKind::Peer.cert_key("n1");
    let peer_key = CertKind::Peer.key_key("n1");

    type Corrupt<'a> = Box<dyn Fn(&mut BTreeMap<String, Vec<u8>>) + 'a>;
    let cases: Vec<(&str, Corrupt)> = vec![
        (
            "unreadable",
            Box::new(|s| {
                s.insert(peer_crt.clone(), vec![0xde, 0xad, 0xbe, 0xef]);
            }),
        ),
        (
            "unreadable",
            Box::new(|s| {
                s.insert(
                    peer_crt.clone(),
                    b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec(),
                );
            }),
        ),
        (
            "key-missing",
            Box::new(|s| {
                s.remove(&peer_key);
            }),
        ),
        (
            "key-unreadable",
            Box::new(|s| {
                s.insert(peer_key.clone(), b"not a key".to_vec());
            }),
        ),
        (
            "key-mismatch",
            Box::new(|s| {
                let other = s[&CertKind::Serving.key_key("n1")].clone();
                s.insert(peer_key.clone(), other);
            }),
        ),
        (
            "missing",
            Box::new(|s| {
                s.remove(&peer_crt);
            }),
        ),
    ];
    for (category, corrupt) in cases {
        let mut secret = good.clone();
        corrupt(&mut secret);
        let plan = plan_node_certs(&ca, &policy(), &secret, &desired, t0());
        assert_eq!(changed_names(&plan), ["etcd-peer-n1"], "{category}");
        let d = decision(&plan, "n1", CertKind::Peer);
        assert_eq!(d.reason.category(), category, "{d}");
        let applied = apply_plan(&ca, &policy(), &plan, &secret, t0()).unwrap();
        assert!(plan_node_certs(&ca, &policy(), &applied, &desired, t0()).is_noop());
    }

    // Garbage shows up in inspection as an error, not a panic.
    let mut secret = good.clone();
    secret.insert(peer_crt.clone(), b"garbage".to_vec());
    let info = inspect_certs(&ca, &secret)
        .into_iter()
        .find(|i| i.secret_key == peer_crt)
        .unwrap();
    assert!(info.error.is_some() && info.not_after.is_none() && !info.issued_by_ca);
}

#[test]
fn a_wrong_usage_or_name_is_reissued() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let mut secret = secret_for(&ca, &desired, t0());
    // A server-only certificate where peer needs server+client.
    let mut spec = CertKind::Peer.spec("n1", &desired["n1"]);
    spec.usage = Usage::SERVER;
    put(
        &mut secret,
        CertKind::Peer,
        "n1",
        ca.issue(&spec, &policy(), t0()).unwrap(),
    );
    // The serving certificate under the wrong common name.
    let mut spec = CertKind::Serving.spec("n1", &desired["n1"]);
    spec.common_name = "someone-else".into();
    put(
        &mut secret,
        CertKind::Serving,
        "n1",
        ca.issue(&spec, &policy(), t0()).unwrap(),
    );
    let plan = plan_node_certs(&ca, &policy(), &secret, &desired, t0());
    assert_eq!(
        decision(&plan, "n1", CertKind::Peer).reason.to_string(),
        "extended key usage is server, want server+client"
    );
    assert_eq!(
        decision(&plan, "n1", CertKind::Serving).reason.to_string(),
        "common name is someone-else, want etcd-serving-n1"
    );
    assert_eq!(
        decision(&plan, "n1", CertKind::Metrics).action(),
        Action::Keep
    );
}

#[test]
fn leaf_certificates_never_outlive_the_ca_and_do_not_churn_near_its_end() {
    let short = CertPolicy {
        ca_validity: Duration::days(400),
        ..CertPolicy::default()
    };
    let ca = EtcdCa::generate_with(&short, t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let plan = plan_node_certs(&ca, &short, &BTreeMap::new(), &desired, t0());
    let secret = apply_plan(&ca, &short, &plan, &BTreeMap::new(), t0()).unwrap();
    let infos = inspect_certs(&ca, &secret);
    assert_eq!(infos.len(), 3);
    for info in &infos {
        assert_eq!(info.not_after, Some(ca.not_after()));
        assert!(info.kind.is_some() && info.node.as_deref() == Some("n1"));
    }

    // 390 days in: due for renewal, but a new one would expire with the CA just the same.
    let late = t0() + Duration::days(390);
    let plan = plan_node_certs(&ca, &short, &secret, &desired, late);
    assert!(plan.is_noop());
    let d = decision(&plan, "n1", CertKind::Peer);
    assert_eq!(d.reason.category(), "limited-by-ca-expiry");
    assert!(d.reason.to_string().contains("rotate the CA"), "{d}");

    // Once the CA has expired nothing can be issued.
    let err = ca
        .issue(
            &ClientCertKind::Operator.spec(),
            &short,
            t0() + Duration::days(401),
        )
        .unwrap_err();
    assert_eq!(err.category(), "ca-expired");
}

#[test]
fn an_unusable_node_name_is_skipped_not_written() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("bad/name", &["10.0.0.9"]), ("n1", &["10.0.0.1"])]);
    let plan = plan_node_certs(&ca, &policy(), &BTreeMap::new(), &desired, t0());
    let skipped: Vec<_> = plan
        .decisions
        .iter()
        .filter(|d| d.action() == Action::Skip)
        .collect();
    assert_eq!(skipped.len(), 3);
    let data = apply_plan(&ca, &policy(), &plan, &BTreeMap::new(), t0()).unwrap();
    assert_eq!(data.len(), 6);
    assert!(
        data.keys()
            .all(|k| k.ends_with("-n1.crt") || k.ends_with("-n1.key"))
    );
}

#[test]
fn client_certificates_are_issued_once_and_kept() {
    let ca = EtcdCa::generate(t0()).unwrap();
    for kind in ClientCertKind::ALL {
        let reason = plan_client_cert(&ca, &policy(), kind, None, t0());
        assert_eq!(reason, Reason::Missing);
        let data = apply_client_cert(&ca, &policy(), kind, &reason, None, t0()).unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["tls.crt", "tls.key"]);
        let later = t0() + Duration::days(30);
        let reason = plan_client_cert(&ca, &policy(), kind, Some(&data), later);
        assert_eq!(reason.action(), Action::Keep, "{reason}");
        let again = apply_client_cert(&ca, &policy(), kind, &reason, Some(&data), later).unwrap();
        assert_eq!(again, data);
    }
    assert_eq!(ClientCertKind::Operator.secret_name(), "etcd-client");
}

#[test]
fn bundles_hold_the_ca_under_three_keys() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let bundles = bundle_data(&ca);
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
    assert_eq!(bundle_data(&ca), bundles);
}

#[test]
fn inspection_reports_expiry_sans_and_the_ca() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let secret = secret_for(&ca, &desired, t0());
    let infos = inspect_certs(&ca, &secret);
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
        "CN=etcd-signer valid 2026-09-21T21:41:40Z to 2036-09-18T21:46:40Z"
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
