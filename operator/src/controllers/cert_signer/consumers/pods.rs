//! Reads the pods of each `Restart` consumer (`spec.clients[].reload.pods`): one label-selected
//! list per consumer per pass, in the consumer's namespace (the operator watches only its own
//! namespaces, so these are never cached). A refused list is reported as such, never taken as
//! "no pods": the operator needs `list` on pods there, which ClusterRole
//! `etcd-static-operator-consumer-secrets` grants where an admin binds it.
//!
//! Pods bound to a Node that no longer exists are left out: they never run again, and they stay
//! until kube-controller-manager's pod GC deletes them (about two minutes seen on kas; for good
//! without it), so counting them would hold the gate and a CA rotation for nothing. A node the
//! operator's cache holds exists; any other a pod names is looked up (`list` with a field
//! selector, the verb the operator has on Nodes), and kept when the lookup fails.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;

use super::reload::{PodStart, PodsSeen, ReloadPolicy, label_selector};
use super::{CONSUMER_ROLE, Target};

/// Every `Restart` consumer's pods, by consumer name (others are absent); `known`: Nodes that
/// exist (the cache's).
pub async fn observe(
    client: &kube::Client,
    targets: &[Target],
    known: &BTreeSet<String>,
) -> BTreeMap<String, PodsSeen> {
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
                list(client, namespace, match_labels, known).await,
            );
        }
    }
    out
}

async fn list(
    client: &kube::Client,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    known: &BTreeSet<String>,
) -> PodsSeen {
    match list_selected(client, namespace, labels, known).await {
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

/// The pods in `namespace` carrying every one of `labels`, less those on a Node that is gone
/// (`known`: Nodes that exist).
pub async fn list_selected(
    client: &kube::Client,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    known: &BTreeSet<String>,
) -> Result<Vec<Pod>, Refused> {
    let pods = list_labelled(client, namespace, labels).await?;
    let mut gone = BTreeSet::new();
    for node in unknown_nodes(&pods, known) {
        if node_gone(client, &node).await {
            gone.insert(node);
        }
    }
    Ok(without_nodes(pods, &gone))
}

/// The Nodes `pods` are bound to that are not in `known`, sorted, each once.
fn unknown_nodes(pods: &[Pod], known: &BTreeSet<String>) -> BTreeSet<String> {
    pods.iter()
        .filter_map(node_of)
        .filter(|n| !known.contains(*n))
        .map(str::to_owned)
        .collect()
}

/// `pods` less those bound to a Node in `gone`.
fn without_nodes(pods: Vec<Pod>, gone: &BTreeSet<String>) -> Vec<Pod> {
    pods.into_iter()
        .filter(|p| node_of(p).is_none_or(|n| !gone.contains(n)))
        .collect()
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// Whether Node `name` is gone: the API lists no Node of that name. A failed lookup is not
/// taken as gone.
async fn node_gone(client: &kube::Client, name: &str) -> bool {
    let lp = ListParams::default().fields(&format!("metadata.name={name}"));
    match Api::<Node>::all(client.clone()).list(&lp).await {
        Ok(list) => !list
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(name)),
        Err(e) => {
            tracing::debug!(node = name, error = %crate::writer::describe(&e), "node lookup failed; its pods are counted");
            false
        }
    }
}

async fn list_labelled(
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(name: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn names(pods: &[Pod]) -> Vec<&str> {
        pods.iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect()
    }

    #[test]
    fn only_nodes_the_cache_lacks_are_looked_up_and_only_gone_ones_drop_their_pods() {
        let pods = vec![
            pod("kube-apiserver-n1", Some("n1")),
            pod("kube-apiserver-n4", Some("n4")),
            pod("kube-scheduler-n4", Some("n4")),
            pod("kube-apiserver-n9", Some("n9")),
            pod("pending", None),
        ];
        let known = BTreeSet::from(["n1".to_owned()]);
        let unknown = unknown_nodes(&pods, &known);
        assert_eq!(unknown, BTreeSet::from(["n4".to_owned(), "n9".to_owned()]));
        let kept = without_nodes(pods, &BTreeSet::from(["n4".to_owned()]));
        assert_eq!(
            names(&kept),
            ["kube-apiserver-n1", "kube-apiserver-n9", "pending"]
        );
    }
}
