//! Pods as the quorum gate sees them: a kube-apiserver's `--etcd-servers` for gate rule 10
//! ([`api_server`], from the consumers' pods the pickup check in [`super::reload`] lists) and
//! a control-plane component's readiness for the control-plane preflight
//! ([`control_plane_pod`], from `controllers/membership/control_plane.rs`'s list).

use k8s_openapi::api::core::v1::Pod;

/// `pod` as a kube-apiserver: one of its containers takes `--etcd-servers` (in `command` or
/// `args`, as `--etcd-servers=<urls>` or `--etcd-servers <urls>`).
pub fn api_server(pod: &Pod) -> Option<membership::ApiServer> {
    let spec = pod.spec.as_ref()?;
    let servers = spec.containers.iter().find_map(|c| {
        let words: Vec<&String> = c.command.iter().chain(c.args.iter()).flatten().collect();
        words.iter().enumerate().find_map(|(i, w)| {
            w.strip_prefix("--etcd-servers=")
                .map(str::to_owned)
                .or_else(|| {
                    (w.as_str() == "--etcd-servers")
                        .then(|| words.get(i + 1).map(|s| s.to_string()))?
                })
        })
    })?;
    Some(membership::ApiServer {
        pod: pod_key(pod),
        node: spec.node_name.clone(),
        ready: is_ready(pod),
        etcd_servers: servers
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
    })
}

/// `pod` as the gate's control-plane preflight sees it; `None` for a pod that ended (a
/// finished installer-like pod holds nothing up).
pub fn control_plane_pod(pod: &Pod) -> Option<membership::ControlPlanePod> {
    if has_ended(pod) {
        return None;
    }
    Some(membership::ControlPlanePod {
        pod: pod_key(pod),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        ready: is_ready(pod),
        component: pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("component").cloned()),
    })
}

/// Its phase is `Succeeded` or `Failed`: it holds no connection and runs nothing.
pub(super) fn has_ended(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// Its `Ready` condition is True.
fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `<namespace>/<name>`.
pub(super) fn pod_key(pod: &Pod) -> String {
    let meta = &pod.metadata;
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_taking_etcd_servers_is_a_kube_apiserver_for_the_gate() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-apiserver-n2", "namespace": "kube-system"},
            "spec": {"nodeName": "n2", "containers": [
                {"name": "setup", "command": ["sh"]},
                {"name": "kube-apiserver", "command": ["kube-apiserver", "--secure-port=6443"],
                 "args": ["--etcd-servers", "https://10.0.0.2:2379,https://10.0.0.1:2379"]}
            ]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let api = api_server(&pod).unwrap();
        assert_eq!(api.pod, "kube-system/kube-apiserver-n2");
        assert_eq!(api.node.as_deref(), Some("n2"));
        assert!(api.ready);
        assert_eq!(
            api.etcd_servers,
            ["https://10.0.0.2:2379", "https://10.0.0.1:2379"]
        );
        let mut other = pod.clone();
        other.spec.as_mut().unwrap().containers.remove(1);
        assert_eq!(api_server(&other), None);
    }

    #[test]
    fn a_control_plane_pod_carries_its_node_readiness_and_component_and_an_ended_one_is_left_out() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-scheduler-n3", "namespace": "kube-system",
                         "labels": {"component": "kube-scheduler", "tier": "control-plane"}},
            "spec": {"nodeName": "n3", "containers": [{"name": "kube-scheduler"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .unwrap();
        let seen = control_plane_pod(&pod).unwrap();
        assert_eq!(
            seen,
            membership::ControlPlanePod {
                pod: "kube-system/kube-scheduler-n3".into(),
                node: Some("n3".into()),
                ready: false,
                component: Some("kube-scheduler".into()),
            }
        );
        let mut ended = pod;
        ended.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(control_plane_pod(&ended), None);
    }
}
