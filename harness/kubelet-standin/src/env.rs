//! Container environment: literal values with `$(VAR)` expansion against earlier entries,
//! and the downward API `fieldRef`s the node agent supports.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;

use crate::expand::expand_with;

/// An env var the stand-in cannot resolve.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("env {name}: fieldRef {path:?} is not supported by the node agent stand-in")]
    UnsupportedField { name: String, path: String },
    #[error("env {name}: {kind} is not supported by the node agent stand-in")]
    UnsupportedSource { name: String, kind: &'static str },
    #[error("envFrom is not supported by the node agent stand-in")]
    EnvFrom,
}

/// The facts about a pod that `fieldRef`s can name.
#[derive(Debug, Clone, Default)]
pub struct PodFacts {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub node_name: String,
    pub pod_ip: String,
    pub host_ip: String,
    pub service_account: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `KUBECONFIG` for the container (the node agent's stand-in for in-cluster credentials);
    /// not given when the pod has a ServiceAccount token ([`PodFacts::in_cluster`]).
    pub kubeconfig: Option<String>,
    /// The pod has a ServiceAccount token volume: its clients use in-cluster config.
    pub in_cluster: bool,
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
    pub api_service: Option<(String, u16)>,
    /// `HOME`: an empty per-pod directory, standing in for the image's own home, so nothing in
    /// the host's home (a `~/.kube/config`) reaches the container; `/root` when unset.
    pub home: Option<String>,
}

impl PodFacts {
    pub(crate) fn field(&self, path: &str) -> Option<String> {
        let keyed = |prefix: &str, map: &BTreeMap<String, String>| {
            path.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix("']"))
                .map(|k| map.get(k).cloned().unwrap_or_default())
        };
        match path {
            "metadata.name" => Some(self.name.clone()),
            "metadata.namespace" => Some(self.namespace.clone()),
            "metadata.uid" => Some(self.uid.clone()),
            "spec.nodeName" => Some(self.node_name.clone()),
            "spec.serviceAccountName" => Some(self.service_account.clone()),
            "status.podIP" | "status.podIPs" => Some(self.pod_ip.clone()),
            "status.hostIP" | "status.hostIPs" => Some(self.host_ip.clone()),
            _ => keyed("metadata.labels['", &self.labels)
                .or_else(|| keyed("metadata.annotations['", &self.annotations)),
        }
    }
}

/// The default environment a container starts with before the pod's `env`.
pub fn base_env(facts: &PodFacts) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("HOSTNAME".into(), facts.node_name.clone()),
        (
            "HOME".into(),
            facts.home.clone().unwrap_or_else(|| "/root".into()),
        ),
    ];
    if let Some((host, port)) = &facts.api_service {
        env.push(("KUBERNETES_SERVICE_HOST".into(), host.clone()));
        env.push(("KUBERNETES_SERVICE_PORT".into(), port.to_string()));
        env.push(("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string()));
    }
    if let Some(k) = facts.kubeconfig.as_ref().filter(|_| !facts.in_cluster) {
        env.push(("KUBECONFIG".into(), k.clone()));
    }
    env
}

/// Host and port of an `https://` URL (default port 443); `None` for anything else, since
/// in-cluster clients always speak TLS.
pub fn api_service_of(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        match after.strip_prefix(':') {
            Some(p) => (host, p.parse().ok()?),
            None if after.is_empty() => (host, 443),
            None => return None,
        }
    } else {
        match authority.split_once(':') {
            Some((host, p)) => (host, p.parse().ok()?),
            None => (authority, 443),
        }
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Resolves the container's `env` in order (later entries may reference earlier ones).
/// Returns the full environment (base first, pod entries override).
pub fn container_env(
    container: &Container,
    facts: &PodFacts,
) -> Result<Vec<(String, String)>, EnvError> {
    if container.env_from.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(EnvError::EnvFrom);
    }
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |vars: &mut BTreeMap<String, String>, k: String, v: String| {
        if !order.contains(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    for (k, v) in base_env(facts) {
        set(&mut vars, k, v);
    }
    // `$(VAR)` in env values only sees the pod's own earlier entries, not the base env.
    let mut declared: BTreeMap<String, String> = BTreeMap::new();
    for e in container.env.iter().flatten() {
        let value = if let Some(vf) = &e.value_from {
            if let Some(f) = &vf.field_ref {
                facts
                    .field(&f.field_path)
                    .ok_or_else(|| EnvError::UnsupportedField {
                        name: e.name.clone(),
                        path: f.field_path.clone(),
                    })?
            } else {
                let kind = if vf.secret_key_ref.is_some() {
                    "secretKeyRef"
                } else if vf.config_map_key_ref.is_some() {
                    "configMapKeyRef"
                } else if vf.resource_field_ref.is_some() {
                    "resourceFieldRef"
                } else {
                    "valueFrom"
                };
                return Err(EnvError::UnsupportedSource {
                    name: e.name.clone(),
                    kind,
                });
            }
        } else {
            expand_with(e.value.as_deref().unwrap_or(""), &declared)
        };
        declared.insert(e.name.clone(), value.clone());
        set(&mut vars, e.name.clone(), value);
    }
    Ok(order
        .into_iter()
        .filter_map(|k| vars.get(&k).map(|v| (k, v.clone())))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

    fn lit(n: &str, v: &str) -> EnvVar {
        EnvVar {
            name: n.into(),
            value: Some(v.into()),
            ..Default::default()
        }
    }

    fn field(n: &str, path: &str) -> EnvVar {
        EnvVar {
            name: n.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_api_service_is_the_host_and_port_of_an_https_url() {
        let of = |u: &str| api_service_of(u);
        assert_eq!(
            of("https://127.0.90.10:6443"),
            Some(("127.0.90.10".into(), 6443))
        );
        assert_eq!(
            of("https://api.example/"),
            Some(("api.example".into(), 443))
        );
        assert_eq!(of("https://[::1]:6443/x"), Some(("::1".into(), 6443)));
        assert_eq!(of("http://127.0.0.1:8080"), None);
        assert_eq!(of("https://h:notaport"), None);
        assert_eq!(of("https://"), None);
    }

    #[test]
    fn pods_with_a_token_get_the_service_env_and_no_kubeconfig() {
        let mut facts = PodFacts {
            kubeconfig: Some("/srv/kubeconfig".into()),
            api_service: Some(("127.0.90.10".into(), 6443)),
            ..Default::default()
        };
        let env: BTreeMap<_, _> = base_env(&facts).into_iter().collect();
        assert_eq!(env["KUBECONFIG"], "/srv/kubeconfig");
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "127.0.90.10");
        facts.in_cluster = true;
        facts.home = Some("/pods/u/home".into());
        let env: BTreeMap<_, _> = base_env(&facts).into_iter().collect();
        assert!(!env.contains_key("KUBECONFIG"), "{env:?}");
        assert_eq!(env["HOME"], "/pods/u/home");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "6443");
    }

    #[test]
    fn env_resolves_fields_and_expands_in_order() {
        let facts = PodFacts {
            name: "etcd-n1".into(),
            namespace: "etcd".into(),
            node_name: "n1".into(),
            pod_ip: "127.0.0.2".into(),
            host_ip: "127.0.0.2".into(),
            ..Default::default()
        };
        let c = Container {
            name: "c".into(),
            env: Some(vec![
                lit("LATER", "$(IP)"),
                field("NODE", "spec.nodeName"),
                field("IP", "status.podIP"),
                field("HOST", "status.hostIP"),
                field("POD", "metadata.name"),
                field("NS", "metadata.namespace"),
                lit("URL", "https://$(IP):2379"),
                lit("ESC", "$$(IP)"),
                lit("HOSTNAME", "custom"),
            ]),
            ..Default::default()
        };
        let env: BTreeMap<_, _> = container_env(&c, &facts).unwrap().into_iter().collect();
        assert_eq!(env["LATER"], "$(IP)");
        assert_eq!(env["NODE"], "n1");
        assert_eq!(env["IP"], "127.0.0.2");
        assert_eq!(env["HOST"], "127.0.0.2");
        assert_eq!(env["POD"], "etcd-n1");
        assert_eq!(env["NS"], "etcd");
        assert_eq!(env["URL"], "https://127.0.0.2:2379");
        assert_eq!(env["ESC"], "$(IP)");
        assert_eq!(env["HOSTNAME"], "custom");
        assert!(env["PATH"].contains("/usr/bin"));
        let with_kc = PodFacts {
            kubeconfig: Some("/srv/kubeconfig".into()),
            ..facts.clone()
        };
        let env: BTreeMap<_, _> = container_env(&c, &with_kc).unwrap().into_iter().collect();
        assert_eq!(env["KUBECONFIG"], "/srv/kubeconfig");
        let bad = Container {
            name: "c".into(),
            env: Some(vec![field("X", "status.phase")]),
            ..Default::default()
        };
        assert!(container_env(&bad, &facts).is_err());
    }
}
