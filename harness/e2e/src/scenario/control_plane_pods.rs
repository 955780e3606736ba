//! The control plane's own recovery between the phases of a scenario on the stacked control
//! plane (`TEST_API=kas`). A kube-apiserver restart (the kube-apiserver operator stand-in rolls
//! them when their etcd inputs change) leaves its node's kube-controller-manager and
//! kube-scheduler without an API for about 20 s: the real kube-apiserver v1.36 stops listening
//! at SIGTERM but exits only when the 15 s grace period runs out, then takes about 5 s to be
//! Ready. A leader among them cannot renew its lease within its 10 s deadline and exits; its
//! node agent restarts it on the kubelet's crash-loop schedule (10 s doubling to 5 minutes,
//! reset after 10 minutes of running). The quorum gate's control-plane preflight rightly waits
//! for those pods to be Ready, so a scenario that restarts kube-apiservers many times must allow
//! one full back-off on top of its own bounds ([`KUBELET_MAX_BACKOFF`]).
//!
//! [`observe`] lists the control-plane static pods of every Node; [`summarize`] (pure) says which
//! are not Ready and counts their container restarts per pod uid, so the restarts between two
//! looks ([`restarts_between`]) count a re-created pod's own restarts and nothing twice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};

use crate::controlplane::ControlPlaneError;
use crate::controlplane::kube_pods::{COMPONENTS, NAMESPACE};

/// The kubelet's longest crash-loop back-off (`maxContainerRestartPeriod`'s default).
pub const KUBELET_MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Bound on the wait for every control-plane pod to be Ready: one full back-off and a start.
const READY_BOUND: Duration = Duration::from_secs(360);
const POLL: Duration = Duration::from_secs(1);

/// Container restarts per pod uid.
pub type Restarts = BTreeMap<String, u64>;

/// What one look at the control-plane pods found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlPlanePods {
    /// `<component>-<node>` of every expected pod that is absent or not Ready, sorted.
    pub not_ready: Vec<String>,
    pub restarts: Restarts,
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn restarts_of(pod: &Pod) -> u64 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| {
            cs.iter().map(|c| c.restart_count.max(0) as u64).sum()
        })
}

/// The three components expected on every node in `nodes`, checked against `pods`.
pub fn summarize(pods: &[Pod], nodes: &BTreeSet<String>) -> ControlPlanePods {
    let mut ready = BTreeSet::new();
    let mut restarts = Restarts::new();
    for pod in pods {
        let spec_node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let component = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("component").cloned());
        let (Some(node), Some(component)) = (spec_node, component) else {
            continue;
        };
        if !nodes.contains(&node) || !COMPONENTS.contains(&component.as_str()) {
            continue;
        }
        if let Some(uid) = pod.metadata.uid.clone() {
            restarts.insert(uid, restarts_of(pod));
        }
        if is_ready(pod) {
            ready.insert(format!("{component}-{node}"));
        }
    }
    let not_ready = nodes
        .iter()
        .flat_map(|n| COMPONENTS.iter().map(move |c| format!("{c}-{n}")))
        .filter(|name| !ready.contains(name))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    ControlPlanePods {
        not_ready,
        restarts,
    }
}

/// Container restarts from `before` to `after`: a pod seen both times counts its increase, a
/// pod first seen in `after` counts all of its restarts.
pub fn restarts_between(before: &Restarts, after: &Restarts) -> u64 {
    after
        .iter()
        .map(|(uid, n)| n.saturating_sub(before.get(uid).copied().unwrap_or(0)))
        .sum()
}

/// The control-plane pods of every Node, as the API shows them now.
pub async fn observe(client: &Client) -> Result<ControlPlanePods, ControlPlaneError> {
    let api_err = |what: &str, e: kube::Error| ControlPlaneError::Failed(format!("{what}: {e}"));
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes: BTreeSet<String> = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| api_err("listing Nodes", e))?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pods = pods
        .list(&ListParams::default().labels("tier=control-plane"))
        .await
        .map_err(|e| api_err("listing the control-plane pods", e))?
        .items;
    Ok(summarize(&pods, &nodes))
}

/// Waits until every control-plane pod is Ready; returns how long that took and the restarts
/// seen then. Fails after [`READY_BOUND`] naming the pods still not Ready.
pub async fn wait_ready(client: &Client) -> Result<(Duration, Restarts), ControlPlaneError> {
    let started = Instant::now();
    let mut last = String::from("nothing listed yet");
    while started.elapsed() < READY_BOUND {
        match observe(client).await {
            Ok(seen) if seen.not_ready.is_empty() => return Ok((started.elapsed(), seen.restarts)),
            Ok(seen) => last = format!("not Ready: {}", seen.not_ready.join(", ")),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(POLL).await;
    }
    Err(ControlPlaneError::Failed(format!(
        "every control-plane pod Ready: not within {}s; last seen: {last}",
        READY_BOUND.as_secs()
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(component: &str, node: &str, uid: &str, ready: bool, restarts: i32) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("{component}-{node}")),
                uid: Some(uid.to_owned()),
                labels: Some(BTreeMap::from([(
                    "component".to_owned(),
                    component.to_owned(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.to_owned()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".to_owned(),
                    status: if ready { "True" } else { "False" }.to_owned(),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    restart_count: restarts,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn nodes(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn absent_and_unready_pods_of_current_nodes_are_named_and_gone_nodes_ignored() {
        let pods = [
            pod("kube-apiserver", "n1", "a1", true, 0),
            pod("kube-controller-manager", "n1", "c1", false, 3),
            pod("kube-scheduler", "n1", "s1", true, 1),
            pod("kube-scheduler", "n4", "s4", false, 9),
        ];
        let seen = summarize(&pods, &nodes(&["n1", "n2"]));
        assert_eq!(
            seen.not_ready,
            [
                "kube-apiserver-n2",
                "kube-controller-manager-n1",
                "kube-controller-manager-n2",
                "kube-scheduler-n2"
            ]
        );
        assert_eq!(
            seen.restarts,
            BTreeMap::from([("a1".into(), 0), ("c1".into(), 3), ("s1".into(), 1)])
        );
    }

    #[test]
    fn restarts_count_increases_and_new_pods_once() {
        let before = BTreeMap::from([("c1".to_owned(), 3), ("gone".to_owned(), 7)]);
        let after = BTreeMap::from([("c1".to_owned(), 5), ("new".to_owned(), 2)]);
        assert_eq!(restarts_between(&before, &after), 4);
        assert_eq!(restarts_between(&after, &after), 0);
    }
}
