//! The Node object (the kubelet's node status manager stand-in): registration and heartbeat.
//!
//! The agent creates its Node (label `node-role.kubernetes.io/control-plane=""`) if missing,
//! then patches `status` every heartbeat interval: InternalIP and Hostname addresses, a
//! `Ready=True` condition whose `lastHeartbeatTime` moves and whose `lastTransitionTime`
//! stays, and the usual pressure conditions `False`. On shutdown it reports
//! `Ready=Unknown` (what the node lifecycle controller would do after missed heartbeats;
//! there is no controller-manager to do it here). It also renews a Lease
//! `kube-node-lease/<node>` when that namespace exists (kube-apiserver creates it; the API
//! stand-in may not, in which case the Node condition is the only heartbeat).

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::probes::cancelled_sleep;

/// The control-plane role label.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// The Node to create (pure).
pub fn node_object(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                [
                    (CONTROL_PLANE_LABEL.to_string(), String::new()),
                    ("kubernetes.io/hostname".to_string(), name.to_string()),
                    ("kubernetes.io/os".to_string(), "linux".to_string()),
                ]
                .into_iter()
                .collect(),
            ),
            annotations: Some(
                [(
                    "kubelet-standin.etcd-static-operator.io/stand-in".to_string(),
                    "kubelet stand-in (kubelet-standin), pods run as local processes".to_string(),
                )]
                .into_iter()
                .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Node readiness as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    Stopped,
}

/// The Node status to publish (pure): `ready_since` is the Ready condition's transition time.
pub fn node_status(
    name: &str,
    ip: IpAddr,
    readiness: Readiness,
    ready_since: Timestamp,
    now: Timestamp,
) -> NodeStatus {
    let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(ready_since)),
    };
    let ready = match readiness {
        Readiness::Ready => cond(
            "Ready",
            "True",
            "KubeletReady",
            "node agent (kubelet stand-in) is posting ready status",
        ),
        Readiness::Stopped => cond(
            "Ready",
            "Unknown",
            "NodeStatusUnknown",
            "node agent (kubelet stand-in) stopped",
        ),
    };
    let capacity = [
        ("cpu".to_string(), Quantity("2".into())),
        ("memory".to_string(), Quantity("8Gi".into())),
        ("pods".to_string(), Quantity("110".into())),
    ]
    .into_iter()
    .collect::<std::collections::BTreeMap<_, _>>();
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: name.to_string(),
            },
        ]),
        conditions: Some(vec![
            cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "stand-in",
            ),
            cond(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "stand-in",
            ),
            cond(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "stand-in",
            ),
            ready,
        ]),
        capacity: Some(capacity.clone()),
        allocatable: Some(capacity),
        node_info: Some(NodeSystemInfo {
            architecture: std::env::consts::ARCH.into(),
            operating_system: "linux".into(),
            kubelet_version: "v1.36.0-kubelet-standin-standin".into(),
            kube_proxy_version: String::new(),
            container_runtime_version: "kubelet-standin://processes".into(),
            os_image: "kubelet-standin stand-in".into(),
            kernel_version: String::new(),
            machine_id: name.to_string(),
            system_uuid: name.to_string(),
            boot_id: name.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The owner reference the kubelet puts on mirror pods and node leases.
pub fn node_owner(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.to_string(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// The node lease (pure).
pub fn lease_object(name: &str, uid: &str, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: Some(vec![node_owner(name, uid)]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Where node leases live.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Renews (or creates) the node lease. `Ok(false)` when the lease namespace does not exist.
pub async fn renew_lease(api: &Api<Lease>, name: &str, uid: &str) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let patch = serde_json::json!({"spec": {"holderIdentity": name, "renewTime": MicroTime(now)}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_not_found() => {
            match api
                .create(&PostParams::default(), &lease_object(name, uid, now))
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(true),
                Err(kube::Error::Api(s)) if s.is_not_found() => Ok(false),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Creates the Node if it does not exist and makes sure the control-plane label is set.
pub async fn register(api: &Api<Node>, name: &str) -> Result<Node, kube::Error> {
    match api.get_opt(name).await? {
        Some(n) => {
            let has_label = n
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL));
            if has_label {
                return Ok(n);
            }
            let patch = serde_json::json!({"metadata": {"labels": {CONTROL_PLANE_LABEL: ""}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        }
        None => match api.create(&PostParams::default(), &node_object(name)).await {
            Err(kube::Error::Api(s)) if s.is_already_exists() => api.get(name).await,
            other => other,
        },
    }
}

/// Patches the Node status.
pub async fn post_status(
    api: &Api<Node>,
    name: &str,
    status: &NodeStatus,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// The heartbeat's state between rounds.
struct Beat {
    name: String,
    ip: IpAddr,
    since: Timestamp,
    interval: Duration,
    registered: bool,
    use_lease: bool,
}

impl Beat {
    /// One round: register if needed, post the status, renew the Lease. Returns the wait
    /// before the next round.
    async fn once(
        &mut self,
        api: &Api<Node>,
        leases: &Api<Lease>,
        uid: &watch::Sender<Option<String>>,
    ) -> Duration {
        let retry = self.interval.min(Duration::from_secs(1));
        let name = self.name.as_str();
        if !self.registered {
            match register(api, name).await {
                Ok(node) => {
                    self.registered = true;
                    uid.send_replace(node.metadata.uid.clone());
                }
                Err(e) => tracing::warn!(node = %name, error = %e, "registering node failed"),
            }
        }
        if !self.registered {
            return retry;
        }
        let mut wait = self.interval;
        let st = node_status(
            name,
            self.ip,
            Readiness::Ready,
            self.since,
            Timestamp::now(),
        );
        if let Err(e) = post_status(api, name, &st).await {
            tracing::warn!(node = %name, error = %e, "node heartbeat failed");
            if matches!(&e, kube::Error::Api(s) if s.is_not_found()) {
                self.registered = false;
            }
            wait = retry;
        }
        let node_uid = uid.borrow().clone().unwrap_or_default();
        if self.use_lease {
            match renew_lease(leases, name, &node_uid).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(node = %name, "no {LEASE_NAMESPACE} namespace; heartbeat is the Node's Ready condition only");
                    self.use_lease = false;
                }
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "renewing node lease failed")
                }
            }
        }
        wait
    }
}

/// Registers the node, then heartbeats until cancelled; reports `Ready=Unknown` at the end
/// unless `silent` is set by then (a simulated crash).
/// The Node's UID is published on `uid` once known (mirror pods name the Node as owner).
pub async fn heartbeat_loop(
    client: kube::Client,
    name: String,
    ip: IpAddr,
    interval: Duration,
    uid: watch::Sender<Option<String>>,
    silent: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cancel: CancellationToken,
) {
    let api: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut beat = Beat {
        name: name.clone(),
        ip,
        since: Timestamp::now(),
        interval,
        registered: false,
        use_lease: true,
    };
    loop {
        // A call to an API that accepts and never answers must not hold the agent's stop.
        let wait = tokio::select! {
            w = beat.once(&api, &leases, &uid) => w,
            _ = cancel.cancelled() => break,
        };
        if cancelled_sleep(&cancel, wait).await {
            break;
        }
    }
    if silent.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let now = Timestamp::now();
    let st = node_status(&name, ip, Readiness::Stopped, now, now);
    if let Err(e) = tokio::time::timeout(Duration::from_secs(5), post_status(&api, &name, &st))
        .await
        .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))
    {
        tracing::warn!(node = %name, error = %e, "reporting node stopped failed");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn status_has_addresses_and_ready() {
        let t0 = Timestamp::from_second(10).unwrap();
        let t1 = Timestamp::from_second(20).unwrap();
        let st = node_status("n1", "127.0.0.3".parse().unwrap(), Readiness::Ready, t0, t1);
        let addrs = st.addresses.unwrap();
        assert_eq!(addrs[0].type_, "InternalIP");
        assert_eq!(addrs[0].address, "127.0.0.3");
        assert_eq!(addrs[1].address, "n1");
        let ready = st
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_heartbeat_time, Some(Time(t1)));
        assert_eq!(ready.last_transition_time, Some(Time(t0)));
        let n = node_object("n1");
        assert_eq!(n.metadata.labels.unwrap()[CONTROL_PLANE_LABEL], "");
    }
}
