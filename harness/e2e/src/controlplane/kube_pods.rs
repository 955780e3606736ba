//! The static pods of the stacked control plane ([`super::stacked`]): kube-apiserver,
//! kube-controller-manager and kube-scheduler on every control-plane node, as kubeadm lays them
//! down (`/etc/kubernetes/manifests/`, labels `component=<name>`, `tier=control-plane`, host
//! network, their certificates and kubeconfigs from host paths). Pure: each function renders one
//! pod from what it is given, deterministically, so a manifest changes only when its input does.
//!
//! The images name the real components ([`component_images`]): under runc the node agent runs
//! the images `scripts/build-images` made of `../shared/kas`'s binaries; otherwise its image
//! table ([`kube_images`]) maps them to those binaries.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use etcd_operator::controllers::cert_signer::consumers::MATERIAL_DIGEST_ANNOTATION;
use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, HostPathVolumeSource, Pod, PodSpec, Probe, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubelet_standin::images::{ImageEntry, RepoMatch, TagMatch};

/// The Kubernetes version the images name (the binaries of `../shared/kas`).
pub const KUBE_VERSION: &str = "v1.36.2";
/// The namespace of the control plane's static pods.
pub const NAMESPACE: &str = "kube-system";
/// Host path of the Kubernetes PKI on a node (kubeadm's).
pub const PKI_DIR: &str = "/etc/kubernetes/pki";
/// Host path of the per-revision resources (here: kube-apiserver's etcd client files).
pub const RESOURCES_DIR: &str = "/etc/kubernetes/static-pod-resources";
/// The annotation carrying the digest of kube-apiserver's etcd inputs (client material and
/// `--etcd-servers`); its mirror pod shows which inputs a running kube-apiserver has.
pub const ETCD_INPUTS_ANNOTATION: &str = "sandbox.etcd-static-operator.io/etcd-inputs";
/// kube-apiserver's secure port.
pub const APISERVER_PORT: u16 = 6443;

/// The three components, by the name their pod, image and binary share.
pub const COMPONENTS: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The image reference of each component, as its static pod names it.
pub fn component_images() -> Vec<String> {
    COMPONENTS
        .iter()
        .map(|name| component_image(name))
        .collect()
}

/// The image reference of component `name`.
fn component_image(name: &str) -> String {
    format!("registry.k8s.io/{name}:{KUBE_VERSION}")
}

/// Image table entries mapping the components' images to the kas binaries in `kas_bin`.
pub fn kube_images(kas_bin: &Path) -> Vec<ImageEntry> {
    COMPONENTS
        .iter()
        .map(|name| ImageEntry {
            name: (*name).to_owned(),
            matcher: RepoMatch::OneOf(vec![(*name).to_owned()]),
            tags: TagMatch::Any,
            binaries: BTreeMap::from([((*name).to_owned(), kas_bin.join(name))]),
            entrypoint: (*name).to_owned(),
        })
        .collect()
}

/// What one node's kube-apiserver runs with, besides the node's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiServerInputs {
    /// `--etcd-servers`, in order (the node's own member first).
    pub etcd_servers: Vec<String>,
    /// Host dir holding `ca.crt`, `client.crt` and `client.key` (the consumer Secret's
    /// material), under [`RESOURCES_DIR`].
    pub etcd_dir: String,
    /// Digest of the above ([`ETCD_INPUTS_ANNOTATION`]).
    pub digest: String,
    /// The consumer Secret's material digest, set on the pod as the operator's
    /// `etcd.static-operator.io/material-digest` (`None`: the Secret carried none).
    pub material_digest: Option<String>,
}

/// kube-apiserver's static pod on the node at `ip`.
pub fn apiserver_pod(ip: IpAddr, inputs: &ApiServerInputs) -> Pod {
    let etcd = |file: &str| format!("{}/{file}", inputs.etcd_dir);
    let args = vec![
        format!("--advertise-address={ip}"),
        format!("--bind-address={ip}"),
        format!("--secure-port={APISERVER_PORT}"),
        format!("--etcd-servers={}", inputs.etcd_servers.join(",")),
        format!("--etcd-cafile={}", etcd("ca.crt")),
        format!("--etcd-certfile={}", etcd("client.crt")),
        format!("--etcd-keyfile={}", etcd("client.key")),
        "--allow-privileged=true".to_owned(),
        // Close watches at SIGTERM (rate-limited, within 2 s) instead of waiting for them until
        // the 60 s request timeout, as k0s and OpenShift configure it: without it, a restarted
        // kube-apiserver stops listening at once but exits only when its grace period ends
        // (measured: 1.2 s against 60.2 s), and its node's controller leaders lose their leases.
        "--shutdown-watch-termination-grace-period=2s".to_owned(),
        "--authorization-mode=Node,RBAC".to_owned(),
        format!("--client-ca-file={PKI_DIR}/ca.crt"),
        format!("--tls-cert-file={PKI_DIR}/apiserver.crt"),
        format!("--tls-private-key-file={PKI_DIR}/apiserver.key"),
        "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
        format!("--service-account-key-file={PKI_DIR}/sa.pub"),
        format!("--service-account-signing-key-file={PKI_DIR}/sa.key"),
        "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
    ];
    let mut pod = component_pod("kube-apiserver", args, ip, APISERVER_PORT, "/readyz");
    let mut annotations =
        BTreeMap::from([(ETCD_INPUTS_ANNOTATION.to_owned(), inputs.digest.clone())]);
    if let Some(d) = &inputs.material_digest {
        annotations.insert(MATERIAL_DIGEST_ANNOTATION.to_owned(), d.clone());
    }
    pod.metadata.annotations = Some(annotations);
    pod
}

/// kube-controller-manager's static pod on the node at `ip` (leader-elected among the nodes).
pub fn controller_manager_pod(ip: IpAddr) -> Pod {
    let args = vec![
        "--kubeconfig=/etc/kubernetes/controller-manager.conf".to_owned(),
        format!("--bind-address={ip}"),
        "--secure-port=10257".to_owned(),
        "--leader-elect=true".to_owned(),
        // The fork's OpenShift service CA publisher is played by kube-testapi's stand-in.
        "--controllers=*,-service-ca-certificate-publisher-controller".to_owned(),
        format!("--service-account-private-key-file={PKI_DIR}/sa.key"),
        format!("--root-ca-file={PKI_DIR}/ca.crt"),
        "--use-service-account-credentials=true".to_owned(),
    ];
    component_pod("kube-controller-manager", args, ip, 10257, "/healthz")
}

/// kube-scheduler's static pod on the node at `ip` (leader-elected among the nodes).
pub fn scheduler_pod(ip: IpAddr) -> Pod {
    let args = vec![
        "--kubeconfig=/etc/kubernetes/scheduler.conf".to_owned(),
        format!("--bind-address={ip}"),
        "--secure-port=10259".to_owned(),
        "--leader-elect=true".to_owned(),
    ];
    component_pod("kube-scheduler", args, ip, 10259, "/healthz")
}

/// A control-plane static pod: one container running `name` with `args`, ready when
/// `https://<ip>:<port><path>` answers, `/etc/kubernetes` mounted read-only.
fn component_pod(name: &str, args: Vec<String>, ip: IpAddr, port: u16, path: &str) -> Pod {
    let host_dir = |volume: &str, dir: &str| Volume {
        name: volume.to_owned(),
        host_path: Some(HostPathVolumeSource {
            path: dir.to_owned(),
            type_: Some("Directory".to_owned()),
        }),
        ..Default::default()
    };
    let mount = |volume: &str, dir: &str| VolumeMount {
        name: volume.to_owned(),
        mount_path: dir.to_owned(),
        read_only: Some(true),
        ..Default::default()
    };
    let command = std::iter::once(name.to_owned()).chain(args).collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            labels: Some(BTreeMap::from([
                ("component".to_owned(), name.to_owned()),
                ("tier".to_owned(), "control-plane".to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            host_network: Some(true),
            priority_class_name: Some("system-node-critical".to_owned()),
            termination_grace_period_seconds: Some(15),
            containers: vec![Container {
                name: name.to_owned(),
                image: Some(component_image(name)),
                command: Some(command),
                readiness_probe: Some(Probe {
                    http_get: Some(HTTPGetAction {
                        host: Some(ip.to_string()),
                        path: Some(path.to_owned()),
                        port: IntOrString::Int(i32::from(port)),
                        scheme: Some("HTTPS".to_owned()),
                        ..Default::default()
                    }),
                    period_seconds: Some(1),
                    failure_threshold: Some(3),
                    ..Default::default()
                }),
                volume_mounts: Some(vec![mount("kubernetes", "/etc/kubernetes")]),
                ..Default::default()
            }],
            volumes: Some(vec![host_dir("kubernetes", "/etc/kubernetes")]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(servers: &[&str]) -> ApiServerInputs {
        ApiServerInputs {
            etcd_servers: servers.iter().map(|s| (*s).to_owned()).collect(),
            etcd_dir: format!("{RESOURCES_DIR}/kube-apiserver-etcd-abc"),
            digest: "abc".to_owned(),
            material_digest: Some("0123".to_owned()),
        }
    }

    fn command(pod: &Pod) -> Vec<String> {
        pod.spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.command.clone())
            .unwrap_or_default()
    }

    #[test]
    fn kube_apiserver_lists_its_etcd_servers_in_order_and_carries_the_digest() {
        let ip: IpAddr = "127.0.0.7".parse().unwrap();
        let pod = apiserver_pod(
            ip,
            &inputs(&["https://127.0.0.7:2379", "https://127.0.0.8:2379"]),
        );
        let cmd = command(&pod);
        assert_eq!(cmd[0], "kube-apiserver");
        assert!(
            cmd.contains(
                &"--etcd-servers=https://127.0.0.7:2379,https://127.0.0.8:2379".to_owned()
            )
        );
        assert!(cmd.contains(&format!(
            "--etcd-cafile={RESOURCES_DIR}/kube-apiserver-etcd-abc/ca.crt"
        )));
        let annotations = pod.metadata.annotations.unwrap();
        assert_eq!(annotations[ETCD_INPUTS_ANNOTATION], "abc");
        assert_eq!(
            annotations[MATERIAL_DIGEST_ANNOTATION], "0123",
            "the Secret's material digest, for the operator's pickup check"
        );
        assert_eq!(pod.metadata.labels.unwrap()["component"], "kube-apiserver");
    }

    #[test]
    fn the_same_inputs_render_the_same_bytes_and_another_server_list_does_not() {
        let ip: IpAddr = "127.0.0.7".parse().unwrap();
        let a = serde_json::to_vec(&apiserver_pod(ip, &inputs(&["https://a:2379"]))).unwrap();
        let b = serde_json::to_vec(&apiserver_pod(ip, &inputs(&["https://a:2379"]))).unwrap();
        let c = serde_json::to_vec(&apiserver_pod(ip, &inputs(&["https://b:2379"]))).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn every_component_image_maps_to_its_kas_binary() {
        let table = kube_images(Path::new("/kas/bin")).into_iter().fold(
            kubelet_standin::images::ImageTable::standard(Path::new("/b")),
            |t, e| t.with_entry(e),
        );
        for pod in [
            controller_manager_pod("127.0.0.7".parse().unwrap()),
            scheduler_pod("127.0.0.7".parse().unwrap()),
        ] {
            let c = &pod.spec.unwrap().containers[0];
            let entry = table.lookup(c.image.as_deref().unwrap()).unwrap();
            let bin = &c.command.as_ref().unwrap()[0];
            assert_eq!(entry.binaries[bin], Path::new("/kas/bin").join(bin));
        }
    }
}
