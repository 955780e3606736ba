//! Unit tests of the certificate plan: keep / issue / re-issue decisions with their reasons,
//! removals, and applying a plan (node certificates and client certificates).

use std::collections::BTreeMap;

use time::Duration;

use super::tests::{ip, nodes, one, policy, secret_for, t0};
use super::*;

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
fn empty_secret_issues_all_three_per_node_then_keeps_them_byte_identical() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.2"])]);
    let plan = plan_node_certs(one(&ca), &policy(), &BTreeMap::new(), &desired, t0());
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

    let secret = apply_plan(one(&ca), &policy(), &plan, &BTreeMap::new(), t0()).unwrap();
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
    let again = plan_node_certs(one(&ca), &policy(), &secret, &desired, later);
    assert!(again.is_noop(), "{:?}", again.describe_changes());
    for d in &again.decisions {
        assert_eq!(d.action(), Action::Keep);
        assert_eq!(d.reason.category(), "valid");
        assert!(d.reason.to_string().starts_with("valid until 2029-"), "{d}");
    }
    let applied = apply_plan(one(&ca), &policy(), &again, &secret, later).unwrap();
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

    let plan = plan_node_certs(one(&ca), &policy(), &secret, &desired, t0());
    assert_eq!(changed_names(&plan), ["etcd-serving-n2"]);
    let d = decision(&plan, "n2", CertKind::Serving);
    assert_eq!(d.action(), Action::Reissue);
    assert_eq!(d.reason.category(), "expires-soon");
    let text = d.to_string();
    assert!(
        text.starts_with("etcd-serving-n2: re-issue: expires at 2026-12-30T21:46:40Z"),
        "{text}"
    );

    let applied = apply_plan(one(&ca), &policy(), &plan, &secret, t0()).unwrap();
    for (key, value) in &secret {
        let same = applied[key] == *value;
        assert_eq!(same, !key.starts_with("etcd-serving-n2."), "{key}");
    }
    assert!(plan_node_certs(one(&ca), &policy(), &applied, &desired, t0()).is_noop());

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
    let plan = plan_node_certs(one(&ca), &policy(), &secret, &desired, t0());
    assert_eq!(changed_names(&plan), ["etcd-peer-n1", "etcd-serving-n2"]);
    assert_eq!(
        decision(&plan, "n1", CertKind::Peer).reason.category(),
        "expired"
    );
}

#[test]
fn renewal_window_is_a_third_of_the_lifetime_by_default_or_a_minimum_capped_at_half() {
    let p = policy();
    let start = t0();
    // renewAtPercent 67: the last 33% of the lifetime.
    assert_eq!(
        p.renew_window(start, start + Duration::days(3 * 365)),
        Duration::seconds(1095 * 86400 * 33 / 100)
    );
    assert_eq!(
        p.renew_window(start, start + Duration::days(100)),
        Duration::days(33)
    );
    // A policy with a minimum window: the larger of the two, capped at half the lifetime.
    let with_min = CertPolicy {
        renew_percent: 20,
        min_renew_window: Duration::days(30),
        ..policy()
    };
    assert_eq!(
        with_min.renew_window(start, start + Duration::days(3 * 365)),
        Duration::days(219)
    );
    assert_eq!(
        with_min.renew_window(start, start + Duration::days(60)),
        Duration::days(30)
    );
    assert_eq!(
        with_min.renew_window(start, start + Duration::days(20)),
        Duration::days(10)
    );

    // The boundary, through the plan: one second before renew_after keeps, at it re-issues.
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"])]);
    let secret = secret_for(&ca, &desired, t0());
    let not_before = t0() - p.backdate;
    let renew_after = p.renew_after(not_before, t0() + p.leaf_validity);
    let before = plan_node_certs(
        one(&ca),
        &p,
        &secret,
        &desired,
        renew_after - Duration::SECOND,
    );
    assert!(before.is_noop());
    let at = plan_node_certs(one(&ca), &p, &secret, &desired, renew_after);
    assert_eq!(at.changes().count(), 3);
}

#[test]
fn a_changed_node_ip_reissues_that_nodes_certificates() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.2"])]);
    let secret = secret_for(&ca, &desired, t0());
    let moved = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.22"])]);
    let plan = plan_node_certs(one(&ca), &policy(), &secret, &moved, t0());
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
    let applied = apply_plan(one(&ca), &policy(), &plan, &secret, t0()).unwrap();
    let info = inspect_pem(&ca, "etcd-peer-n2.crt", &applied["etcd-peer-n2.crt"]);
    assert!(info.ip_addresses.contains(&ip("10.0.0.22")));
    assert!(!info.ip_addresses.contains(&ip("10.0.0.2")));
    assert!(plan_node_certs(one(&ca), &policy(), &applied, &moved, t0()).is_noop());
}

#[test]
fn a_removed_node_loses_its_keys_and_other_keys_stay() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("n1", &["10.0.0.1"]), ("n2", &["10.0.0.2"])]);
    let mut secret = secret_for(&ca, &desired, t0());
    secret.insert("unrelated".into(), b"keep me".to_vec());
    let shrunk = nodes(&[("n1", &["10.0.0.1"])]);
    let plan = plan_node_certs(one(&ca), &policy(), &secret, &shrunk, t0());
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
    let applied = apply_plan(one(&ca), &policy(), &plan, &secret, t0()).unwrap();
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
    assert!(plan_node_certs(one(&ca), &policy(), &secret, &desired, t0()).is_noop());
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
    let plan = plan_node_certs(one(&ca), &policy(), &secret, &desired, t0());
    assert_eq!(changed_names(&plan), ["etcd-serving-metrics-n1"]);
    assert_eq!(
        decision(&plan, "n1", CertKind::Metrics).reason,
        Reason::WrongIssuer
    );
    let infos = inspect_certs(one(&ca), &secret);
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
        let plan = plan_node_certs(one(&ca), &policy(), &secret, &desired, t0());
        assert_eq!(changed_names(&plan), ["etcd-peer-n1"], "{category}");
        let d = decision(&plan, "n1", CertKind::Peer);
        assert_eq!(d.reason.category(), category, "{d}");
        let applied = apply_plan(one(&ca), &policy(), &plan, &secret, t0()).unwrap();
        assert!(plan_node_certs(one(&ca), &policy(), &applied, &desired, t0()).is_noop());
    }

    // Garbage shows up in inspection as an error, not a panic.
    let mut secret = good.clone();
    secret.insert(peer_crt.clone(), b"garbage".to_vec());
    let info = inspect_certs(one(&ca), &secret)
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
    let plan = plan_node_certs(one(&ca), &policy(), &secret, &desired, t0());
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
    let plan = plan_node_certs(one(&ca), &short, &BTreeMap::new(), &desired, t0());
    let secret = apply_plan(one(&ca), &short, &plan, &BTreeMap::new(), t0()).unwrap();
    let infos = inspect_certs(one(&ca), &secret);
    assert_eq!(infos.len(), 3);
    for info in &infos {
        assert_eq!(info.not_after, Some(ca.not_after()));
        assert!(info.kind.is_some() && info.node.as_deref() == Some("n1"));
    }

    // 390 days in: due for renewal, but a new one would expire with the CA just the same.
    let late = t0() + Duration::days(390);
    let plan = plan_node_certs(one(&ca), &short, &secret, &desired, late);
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
    assert_eq!(
        super::category_of(&err),
        crate::category::Category::CaExpired
    );
}

#[test]
fn an_unusable_node_name_is_skipped_not_written() {
    let ca = EtcdCa::generate(t0()).unwrap();
    let desired = nodes(&[("bad/name", &["10.0.0.9"]), ("n1", &["10.0.0.1"])]);
    let plan = plan_node_certs(one(&ca), &policy(), &BTreeMap::new(), &desired, t0());
    let skipped: Vec<_> = plan
        .decisions
        .iter()
        .filter(|d| d.action() == Action::Skip)
        .collect();
    assert_eq!(skipped.len(), 3);
    let data = apply_plan(one(&ca), &policy(), &plan, &BTreeMap::new(), t0()).unwrap();
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
        let reason = plan_client_cert(&ca, &policy(), &kind.spec(), None, t0());
        assert_eq!(reason, Reason::Missing);
        let data = apply_client_cert(&ca, &policy(), &kind.spec(), &reason, None, t0()).unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["tls.crt", "tls.key"]);
        let later = t0() + Duration::days(30);
        let reason = plan_client_cert(&ca, &policy(), &kind.spec(), Some(&data), later);
        assert_eq!(reason.action(), Action::Keep, "{reason}");
        let again =
            apply_client_cert(&ca, &policy(), &kind.spec(), &reason, Some(&data), later).unwrap();
        assert_eq!(again, data);
    }
    assert_eq!(ClientCertKind::Operator.secret_name(), "etcd-client");
}
