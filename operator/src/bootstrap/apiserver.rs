//! kube-apiserver's etcd client material, as kubeadm's `apiserver-etcd-client`: the first
//! kube-apiserver of a platform starts before any operator runs, so `render` issues it, from
//! the CA it makes, and lays it down where that kube-apiserver reads it:
//!
//! ```text
//!   <out>/kube-apiserver/etcd-ca.crt                  --etcd-cafile   (0644, the CA bundle)
//!   <out>/kube-apiserver/apiserver-etcd-client.crt    --etcd-certfile (0644)
//!   <out>/kube-apiserver/apiserver-etcd-client.key    --etcd-keyfile  (0600)
//!   <out>/manifests/etcd-consumer-kube-apiserver.json the same three as the consumer Secret
//!   <out>/manifests/etcdcluster.json                  the EtcdCluster, spec.clients naming it
//! ```
//!
//! **Adoption.** The operator treats kube-apiserver as any consumer in `spec.clients`
//! (`controllers/cert_signer/consumers.rs`): the EtcdCluster render writes names consumer
//! [`CONSUMER`] with common name [`COMMON_NAME`], and the Secret render writes is exactly the one
//! the operator maintains for it (same namespace, name, label, keys; placed by
//! `consumers::plan` itself), judged by the same function ([`certs::client_secret_data`]). A
//! valid certificate of the adopted CA is kept byte-identical, so the first kube-apiserver's
//! files and the Secret hold one certificate; the operator replaces it only when it is due
//! (renewal, CA rotation), and from then on the platform lays the files down from the Secret.
//!
//! **Re-running** `render` with the reused CA keeps the certificate and key (read back from the
//! files of the previous render and judged again: kept while valid), as it keeps the cluster
//! token; with a new CA they are issued anew.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use super::{BootstrapError, OPERATOR_NAMESPACE, OutFile, json, read_bounded, secret};
use crate::api::{
    ConsumerPods, EtcdCluster, EtcdClusterSpec, EtcdConsumer, Reload, ReloadMode, SINGLETON,
};
use crate::certs::{self, CertPolicy, ClientCertKind, EtcdCa};
use crate::controllers::cert_signer::consumers;

/// The consumer's name in `spec.clients`.
pub const CONSUMER: &str = "kube-apiserver";
/// The certificate's common name (kubeadm's).
pub const COMMON_NAME: &str = "kube-apiserver-etcd-client";
/// The trusted CAs (`--etcd-cafile`), relative to the output dir.
pub const CA_FILE: &str = "kube-apiserver/etcd-ca.crt";
/// The client certificate (`--etcd-certfile`).
pub const CERT_FILE: &str = "kube-apiserver/apiserver-etcd-client.crt";
/// Its private key (`--etcd-keyfile`), 0600.
pub const KEY_FILE: &str = "kube-apiserver/apiserver-etcd-client.key";
/// The EtcdCluster render proposes.
pub const CLUSTER_FILE: &str = "manifests/etcdcluster.json";

/// Where kube-apiserver's static pods are (kubeadm's labels; their mirror pods are listed).
pub const PODS_NAMESPACE: &str = "kube-system";
pub const PODS_LABEL: (&str, &str) = ("component", "kube-apiserver");

/// kube-apiserver as a consumer in `spec.clients`: it reads its etcd CA file only at start
/// (`docs/kube-apiserver-etcd-tls.md`), so a CA rotation waits until each of its pods restarted.
pub fn consumer() -> EtcdConsumer {
    EtcdConsumer {
        name: CONSUMER.to_owned(),
        common_name: COMMON_NAME.to_owned(),
        namespace: None,
        secret_name: None,
        reload: Reload {
            mode: ReloadMode::Restart,
            pods: Some(ConsumerPods {
                namespace: Some(PODS_NAMESPACE.to_owned()),
                match_labels: BTreeMap::from([(PODS_LABEL.0.to_owned(), PODS_LABEL.1.to_owned())]),
            }),
            ..Reload::default()
        },
    }
}

/// Where the operator keeps kube-apiserver's Secret: `(namespace, name, leaf spec)`, from the
/// consumer plan itself.
fn target() -> Result<consumers::Target, BootstrapError> {
    consumers::plan(&[consumer()], OPERATOR_NAMESPACE, &[])
        .maintain
        .into_iter()
        .next()
        .ok_or_else(|| BootstrapError::InvalidInput("no Secret for kube-apiserver".into()))
}

/// The certificate and key of a previous render in `output_dir` (client Secret keys), if both
/// files are there.
pub fn existing(output_dir: &Path) -> Result<Option<BTreeMap<String, Vec<u8>>>, BootstrapError> {
    let read = |file: &str| {
        let path = output_dir.join(file);
        read_bounded(&path).map_err(|source| BootstrapError::Io { path, source })
    };
    Ok(match (read(CERT_FILE)?, read(KEY_FILE)?) {
        (Some(cert), Some(key)) => Some(BTreeMap::from([
            (ClientCertKind::CERT_KEY.to_owned(), cert),
            (ClientCertKind::KEY_KEY.to_owned(), key),
        ])),
        _ => None,
    })
}

/// kube-apiserver's files and its consumer Secret: `previous` (a re-run's certificate and key)
/// kept while valid for `ca`, else issued anew; `bundle` is the trusted CAs.
pub fn files(
    ca: &EtcdCa,
    bundle: &str,
    previous: Option<&BTreeMap<String, Vec<u8>>>,
    now: OffsetDateTime,
) -> Result<Vec<OutFile>, BootstrapError> {
    let t = target()?;
    let (data, _) =
        certs::client_secret_data(ca, bundle, &CertPolicy::default(), &t.spec, previous, now)?;
    let get = |key: &str| data.get(key).cloned().unwrap_or_default();
    let mut s = secret(&t.name, &t.namespace, &data, false);
    s.metadata.labels = Some(consumers::labels(CONSUMER));
    s.metadata.annotations = Some(consumers::annotations(&data));
    let file = |path: &str, bytes: Vec<u8>, mode: u32| OutFile {
        path: PathBuf::from(path),
        bytes,
        mode,
    };
    Ok(vec![
        file(CA_FILE, get(ClientCertKind::CA_KEY), 0o644),
        file(CERT_FILE, get(ClientCertKind::CERT_KEY), 0o644),
        file(KEY_FILE, get(ClientCertKind::KEY_KEY), 0o600),
        file(
            &format!("manifests/{}.json", t.name),
            json("kube-apiserver's consumer Secret", &s)?,
            0o600,
        ),
    ])
}

/// The EtcdCluster to apply with the rest: defaults, the local listener as rendered, and
/// kube-apiserver in `spec.clients`.
pub fn cluster_file(local_client_listener: bool) -> Result<OutFile, BootstrapError> {
    let cluster = EtcdCluster::new(
        SINGLETON,
        EtcdClusterSpec {
            local_client_listener,
            clients: vec![consumer()],
            ..EtcdClusterSpec::default()
        },
    );
    Ok(OutFile {
        path: PathBuf::from(CLUSTER_FILE),
        bytes: json("the EtcdCluster", &cluster)?,
        mode: 0o644,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_path(files: &[OutFile]) -> BTreeMap<String, &OutFile> {
        files
            .iter()
            .map(|f| (f.path.display().to_string(), f))
            .collect()
    }

    /// The files and the Secret hold one certificate, which the operator's consumer plan keeps
    /// byte-identical (adoption), and a re-run keeps.
    #[test]
    fn the_operator_adopts_what_render_issues_and_a_rerun_keeps_it() {
        let now = OffsetDateTime::now_utc();
        let ca = EtcdCa::generate(now).unwrap();
        let bundle = ca.cert_pem().to_owned();
        let files = files(&ca, &bundle, None, now).unwrap();
        let f = by_path(&files);
        assert_eq!(f[KEY_FILE].mode, 0o600);
        assert_eq!(f[CERT_FILE].mode, 0o644);
        assert_eq!(f[CA_FILE].bytes, bundle.as_bytes());
        let secret_file = f["manifests/etcd-consumer-kube-apiserver.json"];
        assert_eq!(secret_file.mode, 0o600);
        let s: k8s_openapi::api::core::v1::Secret =
            serde_json::from_slice(&secret_file.bytes).unwrap();
        assert_eq!(s.metadata.namespace.as_deref(), Some(OPERATOR_NAMESPACE));
        let data: BTreeMap<String, Vec<u8>> = s
            .data
            .clone()
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let (labels, annotations) = (consumers::labels(CONSUMER), consumers::annotations(&data));
        let marks = crate::writer::Marks {
            labels: &labels,
            annotations: &annotations,
        };
        assert!(
            marks.carried_by(&s.metadata),
            "the operator would rewrite render's Secret for its label or digest: {:?}",
            s.metadata
        );
        assert_eq!(data["tls.crt"], f[CERT_FILE].bytes);
        assert_eq!(data["tls.key"], f[KEY_FILE].bytes);
        assert_eq!(data["ca.crt"], f[CA_FILE].bytes);

        // The operator's view: the consumer render names, its Secret, judged a pass later.
        let plan = consumers::plan(&[consumer()], OPERATOR_NAMESPACE, &[]);
        let t = &plan.maintain[0];
        assert_eq!(
            t.key(),
            format!("{OPERATOR_NAMESPACE}/etcd-consumer-kube-apiserver")
        );
        let later = now + time::Duration::minutes(5);
        let (kept, changed) = certs::client_secret_data(
            &ca,
            &bundle,
            &CertPolicy::default(),
            &t.spec,
            Some(&data),
            later,
        )
        .unwrap();
        assert_eq!(
            changed, None,
            "the operator would replace render's certificate"
        );
        assert_eq!(kept, data);

        // A re-run with the same CA keeps certificate and key; another CA's are replaced.
        let previous = BTreeMap::from([
            ("tls.crt".to_owned(), data["tls.crt"].clone()),
            ("tls.key".to_owned(), data["tls.key"].clone()),
        ]);
        let again = super::files(&ca, &bundle, Some(&previous), later).unwrap();
        assert_eq!(again, files);
        let other = EtcdCa::generate(now).unwrap();
        let other_files = super::files(&other, other.cert_pem(), Some(&previous), later).unwrap();
        assert_ne!(by_path(&other_files)[CERT_FILE].bytes, data["tls.crt"]);
    }

    #[test]
    fn the_cluster_names_kube_apiserver_as_a_consumer() {
        let f = cluster_file(true).unwrap();
        let cluster: EtcdCluster = serde_json::from_slice(&f.bytes).unwrap();
        assert_eq!(cluster.metadata.name.as_deref(), Some(SINGLETON));
        assert_eq!(cluster.spec.clients, [consumer()]);
        assert!(cluster.spec.local_client_listener);
        assert!(!cluster_file(false).unwrap().bytes.is_empty());
    }
}
