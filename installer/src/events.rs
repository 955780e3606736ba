//! Kubernetes Events about the installer's own pod: `StaticPodInstallerCompleted` (Normal) or
//! `StaticPodInstallerFailed` (Warning), emitted only when the installer runs in a pod, which it
//! knows from `POD_NAME` and `POD_NAMESPACE` (the downward API). A failure to emit is logged and
//! never changes the installer's result.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

/// Reason of the event after a successful run.
pub const COMPLETED: &str = "StaticPodInstallerCompleted";
/// Reason of the event after a failed run.
pub const FAILED: &str = "StaticPodInstallerFailed";
/// The event source and reporting component.
pub const COMPONENT: &str = "etcd-installer";

/// The installer's own pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub name: String,
    pub namespace: String,
}

impl PodRef {
    /// From `POD_NAME` / `POD_NAMESPACE`; `None` outside a pod.
    pub fn from_env() -> Option<Self> {
        let get = |k| std::env::var(k).ok().filter(|v: &String| !v.is_empty());
        Some(Self {
            name: get("POD_NAME")?,
            namespace: get("POD_NAMESPACE")?,
        })
    }
}

/// Builds the event (pure apart from the timestamp passed in).
pub fn event(
    pod: &PodRef,
    uid: Option<String>,
    node: &str,
    ok: bool,
    message: &str,
    now: Timestamp,
) -> Event {
    let (reason, type_) = if ok {
        (COMPLETED, "Normal")
    } else {
        (FAILED, "Warning")
    };
    Event {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{:x}",
                pod.name,
                now.as_nanosecond().unsigned_abs()
            )),
            namespace: Some(pod.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid,
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.chars().take(1024).collect()),
        type_: Some(type_.into()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.into()),
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        action: Some("Install".into()),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.into()),
        ..Default::default()
    }
}

/// Emits the event about `pod`, with the pod's uid when it can be read.
pub async fn emit(
    client: &Client,
    pod: &PodRef,
    node: &str,
    ok: bool,
    message: &str,
) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let uid = match pods.get_opt(&pod.name).await {
        Ok(found) => found.and_then(|p| p.metadata.uid),
        Err(e) => {
            tracing::debug!(error = %e, "reading the installer pod for its uid");
            None
        }
    };
    let ev = event(pod, uid, node, ok, message, Timestamp::now());
    Api::<Event>::namespaced(client.clone(), &pod.namespace)
        .create(&PostParams::default(), &ev)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_names_the_pod_and_the_outcome() {
        let pod = PodRef {
            name: "installer-3-n1".into(),
            namespace: "etcd".into(),
        };
        let ev = event(&pod, None, "n1", false, "boom", Timestamp::UNIX_EPOCH);
        assert_eq!(ev.reason.as_deref(), Some(FAILED));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.involved_object.name.as_deref(), Some("installer-3-n1"));
        assert_eq!(ev.involved_object.kind.as_deref(), Some("Pod"));
        assert_eq!(ev.metadata.namespace.as_deref(), Some("etcd"));
        let ok = event(&pod, None, "n1", true, "done", Timestamp::UNIX_EPOCH);
        assert_eq!(ok.reason.as_deref(), Some(COMPLETED));
        assert_eq!(ok.type_.as_deref(), Some("Normal"));
    }
}
