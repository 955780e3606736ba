//! A stand-in for OpenShift's service CA publisher, run beside every kas control plane.
//!
//! kas's kube-apiserver is the OpenShift fork: its ServiceAccount admission adds an
//! `openshift-service-ca.crt` ConfigMap (key `service-ca.crt`) to every pod's
//! `kube-api-access-*` token volume, and the controller that publishes that ConfigMap into each
//! namespace does not run there, so without this no pod with a token could start. It watches
//! the `kube-root-ca.crt` ConfigMaps the controller-manager publishes and, in each namespace
//! that has one, creates `openshift-service-ca.crt` holding the same CA (kas has no separate
//! service CA).

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

const ROOT_CA: &str = "kube-root-ca.crt";
const SERVICE_CA: &str = "openshift-service-ca.crt";

/// The ConfigMap to create beside `root` (a namespace's `kube-root-ca.crt`), if it has a CA.
pub fn service_ca_for(root: &ConfigMap) -> Option<ConfigMap> {
    let ca = root.data.as_ref()?.get("ca.crt")?.clone();
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(SERVICE_CA.to_owned()),
            namespace: root.namespace(),
            ..Default::default()
        },
        data: Some([("service-ca.crt".to_owned(), ca)].into()),
        ..Default::default()
    })
}

/// Runs until aborted: publishes `openshift-service-ca.crt` wherever `kube-root-ca.crt` appears.
pub async fn publish(client: Client) {
    let roots: Api<ConfigMap> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={ROOT_CA}"));
    let mut stream = watcher(roots, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = stream.next().await {
        let root = match event {
            Ok(root) => root,
            Err(e) => {
                tracing::debug!(error = %e, "service CA publisher: watch error");
                continue;
            }
        };
        let (Some(ns), Some(cm)) = (root.namespace(), service_ca_for(&root)) else {
            continue;
        };
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => tracing::debug!(%ns, "published {SERVICE_CA}"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => tracing::warn!(%ns, error = %e, "could not publish {SERVICE_CA}"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_service_ca_copies_the_root_ca_into_the_same_namespace() {
        let root = ConfigMap {
            metadata: ObjectMeta {
                name: Some(ROOT_CA.into()),
                namespace: Some("etcd".into()),
                ..Default::default()
            },
            data: Some([("ca.crt".to_owned(), "PEM".to_owned())].into()),
            ..Default::default()
        };
        let cm = service_ca_for(&root).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some(SERVICE_CA));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("etcd"));
        assert_eq!(cm.data.unwrap()["service-ca.crt"], "PEM");
        assert!(service_ca_for(&ConfigMap::default()).is_none());
    }
}
