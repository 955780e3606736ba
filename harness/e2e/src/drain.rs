//! `sandbox drain` / `sandbox uncordon`: what `kubectl drain` does, through the same API calls,
//! so a drain of a sandbox node meets the quorum guard's PodDisruptionBudget exactly as an
//! admin's would.
//!
//! Like `kubectl drain`: the node is cordoned (`spec.unschedulable`), its pods are listed by
//! `spec.nodeName`, mirror pods (static pods: etcd itself) and DaemonSet pods are left alone,
//! pods that declare no controller are refused unless `force`, finished pods are deleted, and
//! every other pod is evicted through `pods/eviction`. A refusal (429: a disruption budget
//! would be violated) is retried every [`DrainOptions::retry_every`] (kubectl: 5 s) until the
//! timeout; then the drain waits until each evicted pod is gone (or replaced under a new uid).

use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};

/// How a drain behaves.
#[derive(Clone, Debug)]
pub struct DrainOptions {
    /// Between two eviction attempts of a pod a budget refused.
    pub retry_every: Duration,
    /// The whole drain (kubectl's `--timeout`).
    pub timeout: Duration,
    /// Also delete pods that declare no controller (kubectl's `--force`).
    pub force: bool,
}

impl Default for DrainOptions {
    fn default() -> Self {
        Self {
            retry_every: Duration::from_secs(5),
            timeout: Duration::from_secs(600),
            force: false,
        }
    }
}

/// What a drain did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct DrainReport {
    pub node: String,
    /// `namespace/name` of each pod evicted or deleted.
    pub evicted: Vec<String>,
    /// Pods left alone, with why.
    pub skipped: Vec<String>,
    /// Evictions a disruption budget refused (429).
    pub refusals: u32,
    /// The last refusal's message.
    pub last_refusal: Option<String>,
    /// From the first refusal to the eviction that then went through (0 when none was refused).
    pub waited_s: f64,
    pub took_s: f64,
}

/// Why a drain stopped.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("drain {node}: {source}")]
    Api { node: String, source: kube::Error },
    #[error(
        "drain {node}: cannot delete pods that declare no controller (use --force to override): {pods}"
    )]
    Unmanaged { node: String, pods: String },
    #[error("drain {node}: gave up after {timeout:?}: {what}")]
    Timeout {
        node: String,
        timeout: Duration,
        what: String,
    },
}

/// What a drain does with one pod on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    Evict,
    /// A finished pod: deleted (no budget counts it).
    Delete,
    Skip(&'static str),
    /// No controller: only with `force`.
    Unmanaged,
}

/// How `kubectl drain` treats `pod` (pure).
pub fn disposition(pod: &Pod) -> Disposition {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    if annotations.contains_key("kubernetes.io/config.mirror") {
        return Disposition::Skip("mirror pod (static pod)");
    }
    let controller = pod
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.iter().find(|r| r.controller == Some(true)));
    if controller.is_some_and(|c| c.kind == "DaemonSet") {
        return Disposition::Skip("DaemonSet pod");
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Disposition::Skip("already being deleted");
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Disposition::Delete;
    }
    if controller.is_none() {
        return Disposition::Unmanaged;
    }
    Disposition::Evict
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// A client for draining: kube's default client retries 429 answers by itself for minutes,
/// which would hide a budget's refusal; this one returns it (as kubectl's does). From
/// `kubeconfig`, or KUBECONFIG / in-cluster when `None`; `bound`, when given, bounds each wait
/// for a byte ([`kube_testapi::bound_requests`]; the stacked control plane's
/// [`kube_testapi::TestApi::request_bound`]).
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    bound: Option<std::time::Duration>,
) -> Result<Client, kube::Error> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc =
                kube::config::Kubeconfig::read_from(path).map_err(kube::Error::InferKubeconfig)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(kube::Error::InferKubeconfig)?
        }
        None => kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?,
    };
    config.default_retry = false;
    if let Some(bound) = bound {
        kube_testapi::bound_requests(&mut config, bound);
    }
    Client::try_from(config)
}

/// Cordons (`true`) or uncordons `node`.
pub async fn set_unschedulable(client: &Client, node: &str, on: bool) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch =
        serde_json::json!({ "spec": { "unschedulable": if on { Some(true) } else { None } } });
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The message of a budget's refusal, if `e` is one (429).
fn refusal(e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if s.code == 429 => {
            let causes: Vec<String> = s
                .details
                .as_ref()
                .map(|d| d.causes.iter().map(|c| c.message.clone()).collect())
                .unwrap_or_default();
            Some(if causes.is_empty() {
                s.message.clone()
            } else {
                format!("{} ({})", s.message, causes.join("; "))
            })
        }
        _ => None,
    }
}

/// One pod's eviction: retried while a budget refuses it. Returns when it went through, the
/// refusals and the time from the first refusal.
async fn evict_one(
    client: &Client,
    pod: &Pod,
    options: &DrainOptions,
    deadline: Instant,
    say: &(dyn Fn(String) + Sync),
) -> Result<(u32, Option<String>, Duration), (String, Option<kube::Error>)> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut refusals = 0;
    let mut last = None;
    let mut first_refused: Option<Instant> = None;
    loop {
        say(format!("evicting pod {ns}/{name}"));
        match api.evict(&name, &EvictParams::default()).await {
            Ok(_) => {
                let waited = first_refused.map(|t| t.elapsed()).unwrap_or_default();
                return Ok((refusals, last, waited));
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Ok((refusals, last, Duration::ZERO));
            }
            Err(e) => {
                let Some(why) = refusal(&e) else {
                    return Err((format!("evicting {ns}/{name}"), Some(e)));
                };
                refusals += 1;
                first_refused.get_or_insert_with(Instant::now);
                say(format!(
                    "error when evicting pods/{name:?} -n {ns:?} (will retry after {}s): {why}",
                    options.retry_every.as_secs()
                ));
                last = Some(why.clone());
                if Instant::now() + options.retry_every > deadline {
                    return Err((format!("evicting {ns}/{name}: {why}"), None));
                }
                tokio::time::sleep(options.retry_every).await;
            }
        }
    }
}

/// Waits until `pod` is gone or replaced by one with another uid.
async fn wait_gone(client: &Client, pod: &Pod, deadline: Instant) -> Result<(), String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    loop {
        let now = api.get_opt(&name).await.map_err(|e| e.to_string())?;
        if now.is_none_or(|p| p.metadata.uid != pod.metadata.uid) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("pod {ns}/{name} still there"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Deletes the pods no eviction applies to; an API refusal counts as done.
async fn delete_pods(
    client: &Client,
    delete: &[Pod],
    report: &mut DrainReport,
) -> Result<(), kube::Error> {
    for pod in delete {
        let api: Api<Pod> = Api::namespaced(
            client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or(""),
        );
        match api
            .delete(
                pod.metadata.name.as_deref().unwrap_or(""),
                &DeleteParams::default(),
            )
            .await
        {
            Ok(_) | Err(kube::Error::Api(_)) => report.evicted.push(key(pod)),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Evicts `evict` concurrently, each retried while refused, into `report` (of `report.node`).
async fn evict_all(
    client: &Client,
    evict: &[Pod],
    options: &DrainOptions,
    deadline: Instant,
    say: &(dyn Fn(String) + Sync),
    report: &mut DrainReport,
) -> Result<(), DrainError> {
    let node = report.node.clone();
    let results = join_all(
        evict
            .iter()
            .map(|p| evict_one(client, p, options, deadline, say)),
    )
    .await;
    for (pod, result) in evict.iter().zip(results) {
        match result {
            Ok((refusals, last, waited)) => {
                report.refusals += refusals;
                if last.is_some() {
                    report.last_refusal = last;
                }
                report.waited_s = report.waited_s.max(waited.as_secs_f64());
                report.evicted.push(key(pod));
                say(format!(
                    "pod/{} evicted",
                    pod.metadata.name.as_deref().unwrap_or("")
                ));
            }
            Err((what, Some(source))) => {
                return Err(DrainError::Api {
                    node: format!("{node} ({what})"),
                    source,
                });
            }
            Err((what, None)) => {
                return Err(DrainError::Timeout {
                    node: node.to_owned(),
                    timeout: options.timeout,
                    what,
                });
            }
        }
    }
    Ok(())
}

/// Drains `node`: cordon, then evict (see the module doc). `say` gets kubectl-like lines.
/// `client` must not retry 429s by itself ([`client`]).
pub async fn drain(
    client: &Client,
    node: &str,
    options: &DrainOptions,
    say: &(dyn Fn(String) + Sync),
) -> Result<DrainReport, DrainError> {
    let started = Instant::now();
    let deadline = started + options.timeout;
    let api_err = |source| DrainError::Api {
        node: node.to_owned(),
        source,
    };
    set_unschedulable(client, node, true)
        .await
        .map_err(api_err)?;
    say(format!("node/{node} cordoned"));
    let pods: Api<Pod> = Api::all(client.clone());
    let listed = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(api_err)?
        .items;
    let mut report = DrainReport {
        node: node.to_owned(),
        ..DrainReport::default()
    };
    let (mut evict, mut delete, mut unmanaged) = (Vec::new(), Vec::new(), Vec::new());
    for pod in listed {
        match disposition(&pod) {
            Disposition::Evict => evict.push(pod),
            Disposition::Delete => delete.push(pod),
            Disposition::Unmanaged => unmanaged.push(pod),
            Disposition::Skip(why) => report.skipped.push(format!("{}: {why}", key(&pod))),
        }
    }
    if !unmanaged.is_empty() && !options.force {
        return Err(DrainError::Unmanaged {
            node: node.to_owned(),
            pods: unmanaged.iter().map(key).collect::<Vec<_>>().join(", "),
        });
    }
    evict.append(&mut unmanaged);
    delete_pods(client, &delete, &mut report)
        .await
        .map_err(api_err)?;
    evict_all(client, &evict, options, deadline, say, &mut report).await?;
    for pod in &evict {
        wait_gone(client, pod, deadline)
            .await
            .map_err(|what| DrainError::Timeout {
                node: node.to_owned(),
                timeout: options.timeout,
                what,
            })?;
    }
    say(format!("node/{node} drained"));
    report.took_s = started.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn pods_are_treated_as_kubectl_drain_treats_them() {
        let owned = |kind: &str| serde_json::json!([{"apiVersion": "v1", "kind": kind, "name": "x", "uid": "u", "controller": true}]);
        let mirror = pod(serde_json::json!({"metadata": {"name": "etcd-n1",
            "annotations": {"kubernetes.io/config.mirror": "h"}}}));
        assert_eq!(
            disposition(&mirror),
            Disposition::Skip("mirror pod (static pod)")
        );
        let ds = pod(
            serde_json::json!({"metadata": {"name": "d", "ownerReferences": owned("DaemonSet")}}),
        );
        assert_eq!(disposition(&ds), Disposition::Skip("DaemonSet pod"));
        let guard = pod(
            serde_json::json!({"metadata": {"name": "g", "ownerReferences": owned("EtcdCluster")},
            "status": {"phase": "Running"}}),
        );
        assert_eq!(disposition(&guard), Disposition::Evict);
        let bare =
            pod(serde_json::json!({"metadata": {"name": "b"}, "status": {"phase": "Running"}}));
        assert_eq!(disposition(&bare), Disposition::Unmanaged);
        let done =
            pod(serde_json::json!({"metadata": {"name": "i"}, "status": {"phase": "Succeeded"}}));
        assert_eq!(disposition(&done), Disposition::Delete);
    }
}
