//! Reads the pods of each `Restart` consumer (`spec.clients[].reload.pods`): one label-selected
//! list per consumer per pass, in the consumer's namespace (the operator watches only its own
//! namespaces, so these are never cached). A refused list is reported as such, never taken as
//! "no pods": the operator needs `list` on pods there, which ClusterRole
//! `etcd-static-operator-consumer-secrets` grants where an admin binds it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use super::reload::{PodStart, PodsSeen, ReloadPolicy, label_selector};
use super::{CONSUMER_ROLE, Target};

/// Every `Restart` consumer's pods, by consumer name (others are absent).
pub async fn observe(client: &kube::Client, targets: &[Target]) -> BTreeMap<String, PodsSeen> {
    let mut out = BTreeMap::new();
    for t in targets {
        if let ReloadPolicy::Restart {
            namespace,
            match_labels,
            ..
        } = &t.reload
        {
            out.insert(
                t.consumer.clone(),
                list(client, namespace, match_labels).await,
            );
        }
    }
    out
}

async fn list(
    client: &kube::Client,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> PodsSeen {
    let selector = label_selector(labels);
    let lp = ListParams::default().labels(&selector);
    match Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await
    {
        Ok(list) => {
            let mut pods: Vec<PodStart> = list
                .items
                .iter()
                // The selector again: a server that ignored it must not widen the wait.
                .filter(|p| selects(p, labels))
                .filter_map(PodStart::of)
                .collect();
            pods.sort_by(|a, b| a.name.cmp(&b.name));
            PodsSeen::Listed(pods)
        }
        Err(e) => {
            let forbidden = matches!(&e, kube::Error::Api(s) if s.code == 403);
            let mut message = format!(
                "listing pods {selector} in namespace {namespace}: {}",
                crate::writer::describe(&e)
            );
            if forbidden {
                message.push_str(&format!(
                    " (bind ClusterRole {CONSUMER_ROLE} to the operator's ServiceAccount with a RoleBinding in namespace {namespace})"
                ));
            }
            PodsSeen::Unreadable { forbidden, message }
        }
    }
}

fn selects(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let have = pod.metadata.labels.as_ref();
    labels
        .iter()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}
