//! Where consumer Secrets go, and which are refused or deleted.

use super::*;

fn c(name: &str, ns: Option<&str>, secret: Option<&str>) -> EtcdConsumer {
    EtcdConsumer {
        name: name.into(),
        common_name: format!("{name}-cn"),
        namespace: ns.map(str::to_owned),
        secret_name: secret.map(str::to_owned),
        reload: crate::api::Reload::default(),
    }
}

#[test]
fn each_consumer_gets_its_secret_where_it_asks_and_leavers_lose_theirs() {
    let spec = [
        c(
            "kube-apiserver",
            Some("kube-system"),
            Some("apiserver-etcd-client"),
        ),
        c("backup", None, None),
        c("backup2", None, Some("etcd-client")),
        c("sneaky", Some(STATIC_POD_NAMESPACE), None),
        c("twin", Some("kube-system"), Some("apiserver-etcd-client")),
    ];
    let recorded = [
        "kube-system/apiserver-etcd-client".to_owned(),
        "tools/etcd-consumer-gone".to_owned(),
        "ops/etcd-consumer-old".to_owned(),
    ];
    let p = plan(&spec, "ops", &recorded);
    let kept: Vec<(String, &str)> = p
        .maintain
        .iter()
        .map(|t| (t.key(), t.spec.common_name.as_str()))
        .collect();
    assert_eq!(
        kept,
        [
            (
                "kube-system/apiserver-etcd-client".to_owned(),
                "kube-apiserver-cn"
            ),
            ("ops/etcd-consumer-backup".to_owned(), "backup-cn"),
        ]
    );
    assert!(
        p.maintain
            .iter()
            .all(|t| t.spec.usage == certs::Usage::CLIENT && t.spec.sans == certs::Sans::default())
    );
    assert_eq!(p.refused.len(), 3, "{:?}", p.refused);
    assert!(p.refused[0].contains("consumer backup2: Secret ops/etcd-client refused"));
    assert!(p.refused[1].contains("static-pod namespace"));
    assert!(p.refused[2].contains("consumer kube-apiserver already has it"));
    assert_eq!(
        p.delete,
        [
            ("ops".to_owned(), "etcd-consumer-old".to_owned()),
            ("tools".to_owned(), "etcd-consumer-gone".to_owned()),
        ],
        "a leaver's Secret goes by record, in any namespace; no duplicate"
    );
    // A Secret the operator never served (render's, applied before spec.clients names it) is
    // not deleted: it is adopted once its consumer is named.
    let unserved = plan(&[], "ops", &[]);
    assert!(unserved.delete.is_empty(), "{:?}", unserved.delete);
}
