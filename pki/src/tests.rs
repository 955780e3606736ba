//! Issuing a node's certificate for an address and reading it back: what `etcd-recover` does
//! when a member moves, without the operator's plan around it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Secret;
use time::OffsetDateTime;

use super::*;

#[test]
fn a_leaf_issued_for_an_address_names_it_and_is_signed_by_the_ca_of_its_secret() {
    let now = OffsetDateTime::now_utc();
    let ca = EtcdCa::generate(now).unwrap();
    let secret = Secret {
        data: Some(
            ca.to_secret_data()
                .into_iter()
                .map(|(k, v)| (k, k8s_openapi::ByteString(v)))
                .collect(),
        ),
        ..Secret::default()
    };
    let adopted = EtcdCa::from_secret(secret).unwrap();
    assert_eq!(adopted.cert_pem(), ca.cert_pem());
    let ip: IpAddr = "10.0.0.9".parse().unwrap();
    let spec = CertKind::Serving.spec("n1", &BTreeSet::from([ip]));
    let issued = adopted.issue(&spec, &CertPolicy::default(), now).unwrap();
    let info = inspect_pem(
        &ca,
        &CertKind::Serving.cert_key("n1"),
        issued.cert_pem.as_bytes(),
    );
    assert!(info.issued_by_ca, "{info:?}");
    assert_eq!(info.node.as_deref(), Some("n1"));
    assert!(info.ip_addresses.contains(&ip), "{info:?}");
    assert!(info.dns_names.contains(&"n1".to_owned()), "{info:?}");
    assert!(info.not_after.unwrap() <= ca.not_after());
    // Another CA's certificate is not taken for this one's.
    let other = EtcdCa::generate(now).unwrap();
    assert!(!inspect_pem(&other, "etcd-serving-n1.crt", issued.cert_pem.as_bytes()).issued_by_ca);
}

#[test]
fn a_secret_without_the_key_is_refused_by_name() {
    let ca = EtcdCa::generate(OffsetDateTime::now_utc()).unwrap();
    let mut data: BTreeMap<String, Vec<u8>> = ca.to_secret_data();
    data.remove(CA_KEY_KEY);
    let err = EtcdCa::from_secret_data(&data).unwrap_err().to_string();
    assert!(err.contains("has no key tls.key"), "{err}");
}

#[test]
fn each_kind_is_judged_against_the_ca_of_its_role_and_the_bundles_name_theirs() {
    let now = OffsetDateTime::now_utc();
    let policy = CertPolicy::default();
    let etcd = EtcdCa::generate(now).unwrap();
    let metrics = EtcdCa::generate_for(CaRole::Metrics, &policy, now).unwrap();
    assert!(
        metrics.subject().contains("etcd-metric-signer@"),
        "{}",
        metrics.subject()
    );
    let signers = Signers {
        etcd: &etcd,
        metrics: &metrics,
    };
    let ips = BTreeSet::from(["10.0.0.9".parse::<IpAddr>().unwrap()]);
    let mut data = BTreeMap::new();
    for kind in CertKind::ALL {
        let ca = signers.of(kind.role());
        let issued = ca.issue(&kind.spec("n1", &ips), &policy, now).unwrap();
        data.insert(kind.cert_key("n1"), issued.cert_pem.into_bytes());
    }
    let infos = inspect_certs(signers, &data);
    assert_eq!(infos.len(), 3);
    assert!(infos.iter().all(|i| i.issued_by_ca), "{infos:?}");
    // The metrics leaf is not the etcd CA's, the others are not the metrics CA's.
    let swapped = Signers {
        etcd: &metrics,
        metrics: &etcd,
    };
    assert!(
        inspect_certs(swapped, &data)
            .iter()
            .all(|i| !i.issued_by_ca)
    );
    let bundles = bundle_data(signers);
    assert_eq!(bundles[METRICS_CA_BUNDLE_KEY], pem_line(&metrics));
    assert_eq!(bundles[SERVER_CA_BUNDLE_KEY], pem_line(&etcd));
    assert_eq!(bundles[PEER_CA_BUNDLE_KEY], pem_line(&etcd));
    let err = EtcdCa::from_role_data(CaRole::Metrics, &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Secret etcd-metric-signer has no key"),
        "{err}"
    );
}
