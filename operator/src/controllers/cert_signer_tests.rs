//! Expiry status and the renewal share.

use super::*;

use time::OffsetDateTime;

fn t(s: &str) -> OffsetDateTime {
    certs::parse_time(s).unwrap()
}

fn leaf(key: &str, node: Option<&str>, from: &str, to: &str) -> certs::CertInfo {
    certs::CertInfo {
        secret_key: key.into(),
        node: node.map(str::to_owned),
        kind: None,
        subject: None,
        not_before: Some(t(from)),
        not_after: Some(t(to)),
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        issued_by_ca: true,
        error: None,
    }
}

#[test]
fn renewal_comes_at_the_configured_share_of_each_lifetime() {
    let spec = crate::api::Certificates::default();
    assert_eq!((spec.leaf_validity_days, spec.renew_at_percent), (1095, 67));
    let policy = crate::certs::policy_for(&spec);
    let ca = certs::CaInfo {
        subject: "etcd-signer".into(),
        not_before: t("2026-01-01T00:00:00Z"),
        not_after: t("2036-01-01T00:00:00Z"),
    };
    let infos = [
        leaf(
            "etcd-serving-n2.crt",
            Some("n2"),
            "2026-01-01T00:00:00Z",
            "2026-04-11T00:00:00Z",
        ),
        leaf(
            "etcd-peer-n1.crt",
            Some("n1"),
            "2026-01-01T00:00:00Z",
            "2029-01-01T00:00:00Z",
        ),
        leaf(
            "etcd-operator/etcd-client/tls.crt",
            None,
            "2026-01-01T00:00:00Z",
            "2026-01-31T00:00:00Z",
        ),
    ];
    let s = expiry_status(&ca, &infos, &policy);
    assert_eq!(s.ca.not_after, "2036-01-01T00:00:00Z");
    let names: Vec<&str> = s.leaves.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "etcd-all-certs/etcd-peer-n1.crt",
            "etcd-all-certs/etcd-serving-n2.crt",
            "etcd-operator/etcd-client/tls.crt"
        ],
        "sorted, named by Secret and key"
    );
    // 100 days of life: renewed 33 days before the end, at day 67.
    assert_eq!(s.leaves[1].renew_after, "2026-03-09T00:00:00Z");
    // A 30-day certificate follows the same share: no minimum window pushes it earlier.
    assert_eq!(s.leaves[2].renew_after, "2026-01-21T02:24:00Z");
    assert_eq!(s.next_renewal, "2026-01-21T02:24:00Z");
    assert_eq!(s.leaves[0].node, "n1");
}

#[test]
fn a_later_renewal_share_moves_renewal_later() {
    let spec = crate::api::Certificates {
        leaf_validity_days: 100,
        renew_at_percent: 90,
        ca_rotation_request: String::new(),
    };
    let policy = crate::certs::policy_for(&spec);
    assert_eq!(policy.leaf_validity, time::Duration::days(100));
    let from = t("2026-01-01T00:00:00Z");
    assert_eq!(
        policy.renew_after(from, from + time::Duration::days(100)),
        from + time::Duration::days(90)
    );
}
