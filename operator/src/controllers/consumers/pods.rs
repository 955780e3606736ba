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
    match list_selected(client, namespace, labels).await {
        Ok(listed) => {
            let mut pods: Vec<PodStart> = listed.iter().filter_map(PodStart::of).collect();
            pods.sort_by(|a, b| a.name.cmp(&b.name));
            PodsSeen::Listed(pods)
        }
        Err(Refused { forbidden, message }) => PodsSeen::Unreadable { forbidden, message },
    }
}

/// A pod list the API refused; `message` names the namespace, the selector and what to bind.
#[derive(Debug)]
pub struct Refused {
    pub forbidden: bool,
    pub message: String,
}

/// The pods in `namespace` carrying every one of `labels`.
pub async fn list_selected(
    client: &kube::Client,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<Pod>, Refused> {
    let selector = label_selector(labels);
    let lp = ListParams::default().labels(&selector);
    match Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&lp)
        .await
    {
        // The selector again: a server that ignored it must not widen the wait.
        Ok(list) => Ok(list
            .items
            .into_iter()
            .filter(|p| selects(p, labels))
            .collect()),
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
            Err(Refused { forbidden, message })
        }
    }
}

fn selects(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let have = pod.metadata.labels.as_ref();
    labels
        .iter()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}
