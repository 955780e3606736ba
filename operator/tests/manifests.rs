//! `manifests/`, what a cluster admin applies, checked four ways:
//!
//! 1. `01-crd.yaml` is exactly what `etcd-operator crd` prints (scripts/gen-manifests makes it);
//! 2. every document of every file reads as its Kubernetes API type with nothing dropped on the
//!    way (a misspelt or misplaced field fails), and the files agree with the code (namespaces,
//!    images, ServiceAccount names, ports, the sample's defaults);
//! 3. the RBAC grants exactly what the operator's and the installer's code does with the API:
//!    the tables [`OPERATOR`] and [`INSTALLER`] name each verb and the code that uses it, and the
//!    grants must equal them (nothing missing, nothing extra, no wildcard);
//! 4. an API server accepts every object, the rendered etcd static pod (as the kubelet posts its
//!    mirror pod), an installer pod and the Deployment's pod (Pod Security applies to pods):
//!    server-side dry-run creates against a real cluster when `KUBECONFIG` is set, and always
//!    against the project's API stand-in (which serves no RBAC or apps/v1 kinds; those are
//!    reported and left to the real cluster).
//!
//! Against a real cluster the dry runs need a few objects to exist for real: the namespaces (a
//! namespaced dry run is refused in a missing namespace), the ServiceAccounts (a pod's
//! ServiceAccount must exist) and the CRD (an EtcdCluster needs it). The test creates those that
//! are missing and, when it passes, deletes what it created; what already exists is left alone
//! (the dry run then answers AlreadyExists, which the API server gives only after validation and
//! admission passed).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_operator::api::{CONTROL_PLANE_LABEL, EtcdCluster, EtcdClusterSpec, GROUP, SINGLETON};
use etcd_operator::bootstrap::OPERATOR_NAMESPACE;
use etcd_operator::podspec::{
    Images, NodeTarget, PodInput, STATIC_POD_NAMESPACE, parse_pod, render_installer, render_pod,
};
use etcd_operator::run::leader::LEASE_NAME;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::Scope;
use kube::{Api, Client, CustomResourceExt};
use kube_testapi::TestApi;
use membership::{Member, MemberId};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

#[path = "support/kubectl.rs"]
mod support;

// ---------------------------------------------------------------------------------------------
// The files
// ---------------------------------------------------------------------------------------------

/// Every file of `manifests/` this test owns, in apply order, with the kinds each may hold.
/// `kustomization.yaml` lists them (less the sample: see [`kustomization_applies_every_object_file`]).
const FILES: &[(&str, &[&str])] = &[
    ("00-namespaces.yaml", &["Namespace"]),
    ("01-crd.yaml", &["CustomResourceDefinition"]),
    (
        "02-rbac-operator.yaml",
        &[
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ],
    ),
    (
        "03-rbac-installer.yaml",
        &["ServiceAccount", "Role", "RoleBinding"],
    ),
    ("04-deployment.yaml", &["Deployment"]),
    ("05-sample-etcdcluster.yaml", &["EtcdCluster"]),
];

const CRD_FILE: &str = "01-crd.yaml";
const KUSTOMIZATION: &str = "kustomization.yaml";
/// kustomize's image transformer configuration: where else than `image:` images are named.
const KUSTOMIZE_IMAGES: &str = "kustomize-images.yaml";
/// Left out of the kustomization: a custom resource cannot be created in the apply that creates
/// its CRD, and the operator creates the singleton with these defaults itself.
const SAMPLE_FILE: &str = "05-sample-etcdcluster.yaml";
const OPERATOR_SA: &str = "etcd-operator";
const INSTALLER_SA: &str = "etcd-installer";

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

fn read(file: &str) -> String {
    let path = manifests_dir().join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One document of one file, as YAML gave it and as its API type.
#[derive(Clone, Debug)]
struct Doc {
    file: &'static str,
    value: Value,
    object: Object,
}

#[derive(Clone, Debug)]
enum Object {
    Namespace(Namespace),
    Crd(Box<CustomResourceDefinition>),
    ServiceAccount(ServiceAccount),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
    Deployment(Box<Deployment>),
    EtcdCluster(Box<EtcdCluster>),
}

impl Doc {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }

    fn namespace(&self) -> Option<&str> {
        self.value["metadata"]["namespace"].as_str()
    }

    fn label(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{} {} {ns}/{}", self.file, self.kind(), self.name()),
            None => format!("{} {} {}", self.file, self.kind(), self.name()),
        }
    }
}

/// Reads `value` as `K`; unless `exact` is false, writing `K` back must give `value` again, so
/// a field the API type doesn't know (a typo, a wrong indentation) cannot slip through.
fn typed<K: DeserializeOwned + Serialize>(file: &str, value: &Value, exact: bool) -> K {
    let what = format!(
        "{file}: {} {:?}",
        value["kind"].as_str().unwrap_or("?"),
        value["metadata"]["name"].as_str().unwrap_or("?")
    );
    let object: K = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{what} is not a valid object of its kind: {e}"));
    if exact {
        let back = serde_json::to_value(&object).unwrap();
        if let Some(at) = first_difference(value, &back, String::new()) {
            panic!("{what}: {at} (an unknown or misplaced field?)");
        }
    }
    object
}

/// Where `written` (the file) and `read` (the file read as its API type and written back)
/// first differ, as a path like `spec.template.spec.containers[0].imagePullPolicy`.
fn first_difference(written: &Value, read: &Value, path: String) -> Option<String> {
    let at = |p: &str| {
        if p.is_empty() {
            "the top".to_owned()
        } else {
            p.to_owned()
        }
    };
    match (written, read) {
        (Value::Object(w), Value::Object(r)) => {
            let keys: BTreeSet<&String> = w.keys().chain(r.keys()).collect();
            keys.into_iter().find_map(|k| {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (w.get(k), r.get(k)) {
                    (Some(_), None) => Some(format!("{p} is not part of the API type")),
                    (None, Some(_)) => Some(format!("{p} appeared when read")),
                    (Some(a), Some(b)) => first_difference(a, b, p),
                    (None, None) => None,
                }
            })
        }
        (Value::Array(w), Value::Array(r)) if w.len() == r.len() => w
            .iter()
            .zip(r)
            .enumerate()
            .find_map(|(i, (a, b))| first_difference(a, b, format!("{path}[{i}]"))),
        (a, b) if a == b => None,
        (a, b) => Some(format!("{}: written {a}, read back as {b}", at(&path))),
    }
}

/// Every document of `file` (YAML with strict booleans: `yes`/`on` stay strings).
fn load(file: &'static str) -> Vec<Doc> {
    let text = read(file);
    let options = serde_saphyr::options! { strict_booleans: true };
    let values: Vec<Value> = serde_saphyr::from_multiple_with_options(&text, options)
        .unwrap_or_else(|e| panic!("{file}: not YAML: {e}"));
    assert!(!values.is_empty(), "{file}: no documents");
    values
        .into_iter()
        .map(|value| {
            let object = match value["kind"].as_str().unwrap_or_default() {
                "Namespace" => Object::Namespace(typed(file, &value, true)),
                // Compared byte for byte with `etcd-operator crd` instead (numbers in its schema
                // may come back as floats).
                "CustomResourceDefinition" => Object::Crd(Box::new(typed(file, &value, false))),
                "ServiceAccount" => Object::ServiceAccount(typed(file, &value, true)),
                "ClusterRole" => Object::ClusterRole(typed(file, &value, true)),
                "ClusterRoleBinding" => Object::ClusterRoleBinding(typed(file, &value, true)),
                "Role" => Object::Role(typed(file, &value, true)),
                "RoleBinding" => Object::RoleBinding(typed(file, &value, true)),
                "Deployment" => Object::Deployment(Box::new(typed(file, &value, true))),
                "EtcdCluster" => Object::EtcdCluster(Box::new(typed(file, &value, true))),
                other => panic!("{file}: unexpected kind {other:?}"),
            };
            Doc {
                file,
                value,
                object,
            }
        })
        .collect()
}

/// All documents, in apply order.
fn all_docs() -> Vec<Doc> {
    FILES
        .iter()
        .flat_map(|(file, kinds)| {
            let docs = load(file);
            for d in &docs {
                assert!(
                    kinds.contains(&d.kind()),
                    "{}: {} does not belong in this file (expected {kinds:?})",
                    d.file,
                    d.kind()
                );
            }
            docs
        })
        .collect()
}

fn deployment(docs: &[Doc]) -> Deployment {
    let found: Vec<&Deployment> = docs
        .iter()
        .filter_map(|d| match &d.object {
            Object::Deployment(x) => Some(x.as_ref()),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 1, "exactly one Deployment");
    found[0].clone()
}

/// The operator container of the Deployment's pod template.
fn operator_container(d: &Deployment) -> &Container {
    &d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}

/// The value of env var `name` of the operator container.
fn env_value(d: &Deployment, name: &str) -> String {
    let c = operator_container(d);
    c.env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
        .unwrap_or_else(|| panic!("04-deployment.yaml: no literal env {name}"))
}

/// The images the Deployment hands the operator (what installer and static pods will run).
fn deployed_images(docs: &[Doc]) -> Images {
    let d = deployment(docs);
    Images {
        etcd: env_value(&d, "ETCD_IMAGE"),
        operator: env_value(&d, "OPERATOR_IMAGE"),
    }
}

/// The container image of the Deployment's pod template.
fn container_image(d: &Deployment) -> String {
    operator_container(d).image.clone().unwrap()
}

/// True when the manifests create ServiceAccount `namespace/name`.
fn has_service_account(docs: &[Doc], namespace: &str, name: &str) -> bool {
    docs.iter().any(|d| match &d.object {
        Object::ServiceAccount(sa) => {
            sa.metadata.name.as_deref() == Some(name)
                && sa.metadata.namespace.as_deref() == Some(namespace)
        }
        _ => false,
    })
}

// ---------------------------------------------------------------------------------------------
// 1. The generated CRD
// ---------------------------------------------------------------------------------------------

#[test]
fn crd_file_is_what_etcd_operator_crd_prints() {
    let want = etcd_operator::manifests::crd_yaml(&EtcdCluster::crd()).unwrap();
    let have = read(CRD_FILE);
    if have != want {
        let first = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || "one is a prefix of the other".to_owned(),
                |i| format!("first difference at line {}", i + 1),
            );
        panic!("manifests/{CRD_FILE} is stale ({first}): run scripts/gen-manifests and commit it");
    }
    // And it reads back as the same object.
    let docs = load(CRD_FILE);
    assert_eq!(docs.len(), 1);
    match &docs[0].object {
        Object::Crd(crd) => assert_eq!(**crd, EtcdCluster::crd()),
        other => panic!("{CRD_FILE}: {other:?}"),
    }
}

/// Every property of `node` (and of the objects in its lists and maps) without a description, as
/// paths below `path` (`.spec.timing.heartbeatIntervalMs`, `.status.members[].role`).
fn undescribed(node: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(props) = node["properties"].as_object() {
        for (name, child) in props {
            let at = format!("{path}.{name}");
            let said = child["description"].as_str().unwrap_or_default();
            if said.trim().is_empty() {
                out.push(at.clone());
            }
            undescribed(child, &at, out);
        }
    }
    if node.get("items").is_some() {
        undescribed(&node["items"], &format!("{path}[]"), out);
    }
    if node["additionalProperties"].is_object() {
        undescribed(&node["additionalProperties"], &format!("{path}{{}}"), out);
    }
}

/// `kubectl explain etcdcluster[.field...]` shows each description: the resource and every field
/// of the generated CRD have one of their own (not kube-derive's placeholder), and the printer
/// columns end with `Age`, as built-in kinds do.
#[test]
fn the_crd_explains_itself() {
    let docs = load(CRD_FILE);
    let crd = &docs[0].value;
    let version = &crd["spec"]["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"];
    let top = schema["description"].as_str().unwrap_or_default();
    assert!(
        top.contains("EtcdCluster") || top.contains("etcd cluster"),
        "the resource's description: {top:?}"
    );
    let text = read(CRD_FILE);
    assert!(
        !text.contains("Auto-generated derived type"),
        "kube-derive's placeholder description is still in {CRD_FILE}"
    );
    let mut missing = Vec::new();
    undescribed(schema, "", &mut missing);
    assert!(
        missing.is_empty(),
        "{CRD_FILE}: {} field(s) without a description (write a doc comment on the Rust field): \
         \n  {}",
        missing.len(),
        missing.join("\n  ")
    );
    let columns = version["additionalPrinterColumns"].as_array().unwrap();
    let age = columns.last().unwrap();
    assert_eq!(age["name"], "Age", "{columns:?}");
    assert_eq!(age["type"], "date");
    assert_eq!(age["jsonPath"], ".metadata.creationTimestamp");
}

/// The path of `to` relative to the directory `from` (kustomize takes no absolute resource).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let up = std::iter::repeat_n(std::path::Component::ParentDir, from.len() - common);
    up.chain(to[common..].iter().copied()).collect()
}

/// Every image a pod's containers and init containers name.
fn pod_images(pod: &Pod) -> BTreeSet<String> {
    let spec = pod.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.image.clone().unwrap())
        .collect()
}

/// `kustomize edit set image` (an overlay's `images:`, the way a platform pins what it pushed)
/// names both images by digest: the Deployment's container, `OPERATOR_IMAGE` and `ETCD_IMAGE`
/// change together and nothing else does, and everything the operator renders from that env
/// (the etcd static pod's etcd and etcd-verify, installer pods, quorum guards) runs the pinned
/// images.
#[test]
fn kustomize_images_pin_the_deployment_and_what_the_operator_renders() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let overlay = tmp.path().join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    let base = relative(&overlay, &manifests_dir().canonicalize().unwrap());
    let (operator_digest, etcd_digest) = (
        format!("sha256:{}", "1".repeat(64)),
        format!("sha256:{}", "2".repeat(64)),
    );
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n\
         images:\n  - name: etcd-static-operator/etcd-static-operator\n    \
         newName: registry.example/platform/etcd-static-operator\n    digest: {operator_digest}\n  \
         - name: etcd-static-operator/etcd\n    newName: registry.example/platform/etcd\n    \
         newTag: 3.5.30\n    digest: {etcd_digest}\n",
        base.display()
    );
    std::fs::write(overlay.join(KUSTOMIZATION), &kustomization).unwrap();
    let Some(built) = support::kustomize(&overlay, tmp.path()) else {
        return;
    };
    let text = built.unwrap_or_else(|e| panic!("{e}\n{kustomization}"));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Deployment").collect();
    assert_eq!(found.len(), 1, "{text}");
    let pinned: Deployment = serde_json::from_value(found[0].clone()).unwrap();
    let operator = format!("registry.example/platform/etcd-static-operator@{operator_digest}");
    let etcd = format!("registry.example/platform/etcd:3.5.30@{etcd_digest}");
    assert_eq!(container_image(&pinned), operator);
    assert_eq!(env_value(&pinned, "OPERATOR_IMAGE"), operator);
    assert_eq!(env_value(&pinned, "ETCD_IMAGE"), etcd);
    let other_env = |d: &Deployment| {
        let c = operator_container(d);
        let env = c.env.clone().unwrap();
        env.into_iter()
            .filter(|e| !e.name.ends_with("_IMAGE"))
            .collect::<Vec<_>>()
    };
    let shipped = deployment(&all_docs());
    assert_eq!(
        other_env(&pinned),
        other_env(&shipped),
        "only the images change"
    );
    let images = Images {
        etcd: etcd.clone(),
        operator: operator.clone(),
    };
    assert_eq!(
        pod_images(&mirror_pod(&images)),
        BTreeSet::from([etcd, operator.clone()]),
        "the etcd static pod runs etcd and etcd-verify from the pinned images"
    );
    let installer = render_installer("n1", 1, 1, &images).unwrap();
    assert_eq!(pod_images(&installer), BTreeSet::from([operator.clone()]));
    let target = NodeTarget::new("n1", "10.0.0.1".parse().unwrap());
    let guard = etcd_operator::podspec::render_guard(&target, &images, true).unwrap();
    assert_eq!(pod_images(&guard), BTreeSet::from([operator]));
}

// ---------------------------------------------------------------------------------------------
// 2. Types, and agreement with the code
// ---------------------------------------------------------------------------------------------

/// `kubectl apply -k manifests/` applies every object file but the sample, each once; the
/// order is kustomize's own (by kind), which the platform test runs on a real kube-apiserver.
#[test]
fn kustomization_applies_every_object_file() {
    let text = std::fs::read_to_string(manifests_dir().join(KUSTOMIZATION)).unwrap();
    let k: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(k["kind"], "Kustomization", "{text}");
    let listed: Vec<&str> = k["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("no resources in {KUSTOMIZATION}"))
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    let want: Vec<&str> = FILES
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| *f != SAMPLE_FILE)
        .collect();
    assert_eq!(listed, want, "{KUSTOMIZATION} must list the object files");
    let keys: BTreeSet<&str> = k.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["apiVersion", "kind", "resources", "configurations"]),
        "{KUSTOMIZATION} transforms nothing: the objects apply as checked here"
    );
    assert_eq!(k["configurations"], serde_json::json!([KUSTOMIZE_IMAGES]));
}

#[test]
fn every_manifest_reads_as_its_api_type() {
    let docs = all_docs();
    // No file this test doesn't know about (it would be applied unchecked).
    let known: BTreeSet<&str> = FILES.iter().map(|(f, _)| *f).collect();
    for entry in std::fs::read_dir(manifests_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        assert!(
            !yaml
                || [KUSTOMIZATION, KUSTOMIZE_IMAGES].contains(&name.as_str())
                || known.contains(name.as_str()),
            "manifests/{name} is not checked by operator/tests/manifests.rs: add it to FILES"
        );
    }
    // Names are unique per kind and namespace.
    let mut seen = BTreeSet::new();
    for d in &docs {
        assert!(
            seen.insert((d.kind().to_owned(), d.namespace(), d.name().to_owned())),
            "{} appears twice",
            d.label()
        );
    }
}

#[test]
fn namespaces_are_the_ones_the_code_uses() {
    let docs = all_docs();
    let namespaces: BTreeSet<&str> = docs
        .iter()
        .filter_map(|d| match &d.object {
            Object::Namespace(n) => n.metadata.name.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(
        namespaces,
        BTreeSet::from([OPERATOR_NAMESPACE, STATIC_POD_NAMESPACE])
    );
    // Every namespaced object lands in one of them, in `default` (events about the
    // cluster-scoped EtcdCluster), or in `kube-system` (kube-apiserver's pods, read only).
    for d in &docs {
        if let Some(ns) = d.namespace() {
            assert!(
                namespaces.contains(ns) || ns == "default" || ns == "kube-system",
                "{}: unexpected namespace",
                d.label()
            );
        }
    }
}

#[test]
fn the_deployment_runs_the_operator_as_designed() {
    let docs = all_docs();
    let d = deployment(&docs);
    assert_eq!(d.metadata.namespace.as_deref(), Some(OPERATOR_NAMESPACE));
    let spec = d.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(2), "two replicas, one leads");
    let pod = spec.template.spec.clone().unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(OPERATOR_SA));
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    assert_ne!(
        pod.host_network,
        Some(true),
        "the pod network reaches node IPs"
    );
    assert_eq!(
        pod.node_selector,
        Some(BTreeMap::from([(
            CONTROL_PLANE_LABEL.to_owned(),
            String::new()
        )]))
    );
    assert!(
        pod.tolerations.unwrap_or_default().iter().any(|t| {
            t.key.as_deref() == Some(CONTROL_PLANE_LABEL)
                && t.operator.as_deref() == Some("Exists")
                && t.effect.as_deref() == Some("NoSchedule")
        }),
        "tolerates the control-plane taint"
    );
    let anti = pod
        .affinity
        .clone()
        .and_then(|a| a.pod_anti_affinity)
        .and_then(|a| a.required_during_scheduling_ignored_during_execution)
        .unwrap_or_default();
    assert!(
        anti.iter()
            .any(|t| t.topology_key == "kubernetes.io/hostname"
                && t.label_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.as_ref())
                    .and_then(|m| m.get("app.kubernetes.io/name"))
                    .is_some_and(|v| v == "etcd-operator")),
        "replicas are required to be on different nodes: {anti:?}"
    );
    let psc = pod.security_context.unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert!(psc.run_as_user.is_some_and(|u| u != 0));
    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    // The operator's own image is the one it hands to installer pods and etcd-verify.
    assert_eq!(c.image, Some(env_value(&d, "OPERATOR_IMAGE")));
    assert_eq!(
        c.args
            .clone()
            .unwrap_or_default()
            .first()
            .map(String::as_str),
        Some("run")
    );
    let env = c.env.clone().unwrap();
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_IP", "status.podIP"),
    ] {
        let e = env.iter().find(|e| e.name == name).unwrap();
        let field = e
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        assert_eq!(field, Some(path), "{name} from the downward API");
    }
    let port = c.ports.clone().unwrap();
    assert_eq!(port.len(), 1);
    assert_eq!(port[0].container_port, 8443, "operator's --listen default");
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        let get = p.as_ref().unwrap().http_get.clone().unwrap();
        let port_ok = match &get.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => *n == 8443,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => {
                Some(s) == port[0].name.as_ref()
            }
        };
        assert!(port_ok, "probe on the operator's port");
        get.path.unwrap()
    };
    assert_eq!(probe_path(&c.liveness_probe), "/healthz");
    assert_eq!(probe_path(&c.readiness_probe), "/readyz");
    assert!(c.resources.as_ref().is_some_and(|r| r.requests.is_some()));
    let sc = c.security_context.clone().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_owned()])
    );
}

#[test]
fn the_sample_is_the_singleton_with_every_default_spelled_out() {
    let docs = all_docs();
    let samples: Vec<&EtcdCluster> = docs
        .iter()
        .filter_map(|d| match &d.object {
            Object::EtcdCluster(c) => Some(c.as_ref()),
            _ => None,
        })
        .collect();
    assert_eq!(samples.len(), 1);
    assert_eq!(samples[0].metadata.name.as_deref(), Some(SINGLETON));
    assert_eq!(
        samples[0].spec,
        EtcdClusterSpec::default(),
        "05-sample-etcdcluster.yaml shows the defaults the operator uses when it creates the \
         singleton itself; keep them in step with api.rs"
    );
}

#[test]
fn guard_pods_name_the_service_account_the_manifests_create() {
    let docs = all_docs();
    let target = etcd_operator::podspec::NodeTarget::new("n1", "10.0.0.1".parse().unwrap());
    let pod = etcd_operator::podspec::render_guard(&target, &deployed_images(&docs), true).unwrap();
    let sa = pod.spec.unwrap().service_account_name.unwrap();
    assert!(
        has_service_account(&docs, STATIC_POD_NAMESPACE, &sa),
        "manifests create ServiceAccount {STATIC_POD_NAMESPACE}/{sa}"
    );
}

#[test]
fn installer_pods_name_the_service_account_the_manifests_create() {
    let docs = all_docs();
    let pod = render_installer("n1", 1, 1, &deployed_images(&docs)).unwrap();
    let sa = pod.spec.unwrap().service_account_name.unwrap();
    assert_eq!(sa, INSTALLER_SA);
    assert!(
        has_service_account(&docs, STATIC_POD_NAMESPACE, &sa),
        "manifests create ServiceAccount {STATIC_POD_NAMESPACE}/{sa}"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. RBAC: exactly what the code does
// ---------------------------------------------------------------------------------------------

/// Where a grant applies: cluster-wide, or one namespace.
const CLUSTER: &str = "<cluster-wide>";

/// One thing a component does with the API, and the code that does it.
#[derive(Debug)]
struct Need {
    scope: &'static str,
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
    /// Limited to these names (empty: any name).
    names: &'static [&'static str],
    why: &'static str,
}

const fn need(
    scope: &'static str,
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
    names: &'static [&'static str],
    why: &'static str,
) -> Need {
    Need {
        scope,
        group,
        resource,
        verbs,
        names,
        why,
    }
}

/// The operator (`etcd-operator run`). Compare with `operator/src/run/*.rs` and
/// `operator/src/{pass,writer}.rs` and `operator/src/controllers/*.rs`.
const OPERATOR: &[Need] = &[
    need(
        CLUSTER,
        GROUP,
        "etcdclusters",
        &["list", "watch"],
        &[],
        "run/stores.rs: reflector on Api::<EtcdCluster>::all",
    ),
    need(
        CLUSTER,
        GROUP,
        "etcdclusters",
        &["create"],
        &[],
        "driver create_singleton: the singleton with the default spec when none exists",
    ),
    need(
        CLUSTER,
        GROUP,
        "etcdclusters",
        &["get"],
        &[SINGLETON],
        "run/mod.rs read_inputs: `etcd-operator plan`, run in the operator pod (kubectl exec); \
         the other reads of `plan` are the lists below",
    ),
    need(
        CLUSTER,
        GROUP,
        "etcdclusters/status",
        &["patch"],
        &[SINGLETON],
        "writer.rs cluster_status: patch_status (merge) of the singleton",
    ),
    need(
        CLUSTER,
        "",
        "nodes",
        &["list", "watch"],
        &[],
        "run/stores.rs: reflector on Api::<Node>::all",
    ),
    need(
        CLUSTER,
        "config.openshift.io",
        "clusteroperators",
        &["get"],
        &["etcd"],
        "driver/cluster_operator.rs mirror: get_opt of ClusterOperator etcd (where served)",
    ),
    need(
        CLUSTER,
        "config.openshift.io",
        "clusteroperators",
        &["create"],
        &[],
        "driver/cluster_operator.rs mirror: ClusterOperator etcd when missing",
    ),
    need(
        CLUSTER,
        "config.openshift.io",
        "clusteroperators/status",
        &["patch"],
        &["etcd"],
        "driver/cluster_operator.rs mirror: its status (merge patch)",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "pods",
        &["list", "watch"],
        &[],
        "run/stores.rs: reflector (mirror pods, installer pods, quorum guard pods)",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "pods",
        &["create"],
        &[],
        "controllers/installer.rs, quorum_guard.rs → writer.rs Writer::create: installer pods, \
         quorum guard pods",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "pods",
        &["delete"],
        &[],
        "controllers/installer.rs, quorum_guard.rs → writer.rs Writer::delete: finished installer \
         pods a node moved past, guards of nodes that left",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "pods",
        &["patch"],
        &[],
        "controllers/installer/act.rs → writer.rs Writer::annotate: an installer pod's restart \
         approval",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "policy",
        "poddisruptionbudgets",
        &["list", "watch"],
        &[],
        "run/stores.rs: reflector (the quorum guard's budget)",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "policy",
        "poddisruptionbudgets",
        &["create", "update"],
        &[],
        "controllers/quorum_guard.rs → writer.rs Writer::pdb: etcd-quorum-guard (create/replace)",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "configmaps",
        &["list", "watch"],
        &[],
        "run/stores.rs: reflector",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "configmaps",
        &["create", "update", "delete"],
        &[],
        "writer.rs Writer::configmap (create/replace), Writer::delete (pruning)",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "secrets",
        &["list", "watch"],
        &[],
        "run/stores.rs: reflector",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "secrets",
        &["create", "update", "delete"],
        &[],
        "writer.rs Writer::secret (etcd-all-certs, copies), Writer::delete (pruning)",
    ),
    need(
        OPERATOR_NAMESPACE,
        "",
        "secrets",
        &["list", "watch"],
        &[],
        "run/stores.rs: reflector (CA etcd-signer, client certificate)",
    ),
    need(
        OPERATOR_NAMESPACE,
        "",
        "secrets",
        &["create", "update", "delete"],
        &[],
        "controllers/cert_signer.rs → writer.rs Writer::secret: the CA, the client certs (operator, metrics, spec.clients); Writer::delete: a consumer that left spec.clients",
    ),
    need(
        OPERATOR_NAMESPACE,
        "coordination.k8s.io",
        "leases",
        &["create"],
        &[],
        "run/leader.rs try_lead: first instance creates the Lease",
    ),
    need(
        OPERATOR_NAMESPACE,
        "coordination.k8s.io",
        "leases",
        &["get", "update"],
        &[LEASE_NAME],
        "run/leader.rs try_lead: get_opt, replace",
    ),
    need(
        "kube-system",
        "",
        "pods",
        &["list"],
        &[],
        "controllers/cert_signer/consumers/pods.rs: render's kube-apiserver consumer (reload Restart, \
         component=kube-apiserver), its mirror pods listed once per pass",
    ),
    need(
        "default",
        "events.k8s.io",
        "events",
        &["create", "patch"],
        &[],
        "events.rs EventSink: long-lived kube-runtime Recorders on the cluster-scoped \
         EtcdCluster publish in `default`, and patch the series of the same Event repeated",
    ),
];

/// The installer (`etcd-installer` in its pod). Compare with `installer/src/fetch.rs` and
/// `installer/src/events.rs`.
const INSTALLER: &[Need] = &[
    need(
        STATIC_POD_NAMESPACE,
        "",
        "configmaps",
        &["get"],
        &[],
        "fetch.rs: get_opt <name>-<revision>",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "secrets",
        &["get"],
        &[],
        "fetch.rs: get_opt <name>-<revision>",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "pods",
        &["get"],
        &[],
        "events.rs: its own pod's uid",
    ),
    need(
        STATIC_POD_NAMESPACE,
        "",
        "events",
        &["create"],
        &[],
        "events.rs: core/v1 Event about its own pod",
    ),
];

/// One permission: (scope, group, resource, verb, names joined by `,`).
type Grant = (String, String, String, String, String);

fn expand_needs(needs: &[Need]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for n in needs {
        for v in n.verbs {
            out.insert((
                n.scope.to_owned(),
                n.group.to_owned(),
                n.resource.to_owned(),
                (*v).to_owned(),
                n.names.join(","),
            ));
        }
    }
    out
}

fn expand_rules(scope: &str, rules: &[PolicyRule], origin: &str) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for r in rules {
        assert!(
            r.non_resource_urls.as_ref().is_none_or(Vec::is_empty),
            "{origin}: grants non-resource URLs"
        );
        let groups = r.api_groups.clone().unwrap_or_default();
        let resources = r.resources.clone().unwrap_or_default();
        let mut names = r.resource_names.clone().unwrap_or_default();
        names.sort();
        for word in groups
            .iter()
            .chain(&resources)
            .chain(&r.verbs)
            .chain(&names)
        {
            assert!(!word.contains('*'), "{origin}: wildcard {word:?}");
        }
        for g in &groups {
            for res in &resources {
                for v in &r.verbs {
                    out.insert((
                        scope.to_owned(),
                        g.clone(),
                        res.clone(),
                        v.clone(),
                        names.join(","),
                    ));
                }
            }
        }
    }
    out
}

/// What the manifests grant ServiceAccount `namespace/name`, resolving every binding.
fn granted(docs: &[Doc], namespace: &str, name: &str) -> BTreeSet<Grant> {
    let is_subject = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == name
                && s.namespace.as_deref() == Some(namespace)
        })
    };
    let cluster_role = |role: &str| -> Vec<PolicyRule> {
        docs.iter()
            .find_map(|d| match &d.object {
                Object::ClusterRole(r) if r.metadata.name.as_deref() == Some(role) => {
                    assert!(
                        r.aggregation_rule.is_none(),
                        "ClusterRole {role} aggregates"
                    );
                    Some(r.rules.clone().unwrap_or_default())
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("a binding refers to ClusterRole {role}, not in manifests/"))
    };
    let mut out = BTreeSet::new();
    for d in docs {
        match &d.object {
            Object::ClusterRoleBinding(b) if is_subject(&b.subjects) => {
                assert_eq!(b.role_ref.kind, "ClusterRole", "{}", d.label());
                let origin = format!("ClusterRole {}", b.role_ref.name);
                out.extend(expand_rules(
                    CLUSTER,
                    &cluster_role(&b.role_ref.name),
                    &origin,
                ));
            }
            Object::RoleBinding(b) if is_subject(&b.subjects) => {
                let ns = b.metadata.namespace.clone().unwrap();
                let rules = match b.role_ref.kind.as_str() {
                    "ClusterRole" => cluster_role(&b.role_ref.name),
                    "Role" => docs
                        .iter()
                        .find_map(|d| match &d.object {
                            Object::Role(r)
                                if r.metadata.name == Some(b.role_ref.name.clone())
                                    && r.metadata.namespace.as_deref() == Some(&ns) =>
                            {
                                Some(r.rules.clone().unwrap_or_default())
                            }
                            _ => None,
                        })
                        .unwrap_or_else(|| {
                            panic!("{}: Role {ns}/{} not found", d.label(), b.role_ref.name)
                        }),
                    other => panic!("{}: roleRef kind {other}", d.label()),
                };
                let origin = format!("{} {ns}/{}", b.role_ref.kind, b.role_ref.name);
                out.extend(expand_rules(&ns, &rules, &origin));
            }
            _ => {}
        }
    }
    out
}

fn check_rbac(docs: &[Doc], namespace: &str, sa: &str, needs: &[Need]) {
    assert!(
        has_service_account(docs, namespace, sa),
        "ServiceAccount {namespace}/{sa} is not in manifests/"
    );
    let want = expand_needs(needs);
    let have = granted(docs, namespace, sa);
    let missing: Vec<&Grant> = want.difference(&have).collect();
    let extra: Vec<&Grant> = have.difference(&want).collect();
    let table: Vec<String> = needs
        .iter()
        .map(|n| {
            format!(
                "  {:<16} {:<24} {:<20} {:<22} {:<20} {}",
                n.scope,
                if n.group.is_empty() { "core" } else { n.group },
                n.resource,
                n.verbs.join(","),
                n.names.join(","),
                n.why
            )
        })
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "RBAC of {namespace}/{sa} differs from what its code does\n  \
         missing (scope, group, resource, verb, names): {missing:#?}\n  \
         not needed: {extra:#?}\nthe table:\n{}",
        table.join("\n")
    );
}

#[test]
fn operator_rbac_is_exactly_what_the_operator_does() {
    check_rbac(&all_docs(), OPERATOR_NAMESPACE, OPERATOR_SA, OPERATOR);
}

#[test]
fn installer_rbac_is_exactly_what_the_installer_does() {
    check_rbac(&all_docs(), STATIC_POD_NAMESPACE, INSTALLER_SA, INSTALLER);
}

/// The RBAC table in manifests/README.md says, per component, namespace and resource, the same
/// verbs as the code's needs (it once said installer pods are never deleted while the code
/// deleted them).
#[test]
fn the_readme_rbac_table_matches_the_needs() {
    const VERBS: [&str; 8] = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/README.md"),
    )
    .unwrap();
    let rows: Vec<Vec<String>> = readme
        .lines()
        .filter(|l| l.starts_with("| operator |") || l.starts_with("| installer |"))
        .map(|l| l.split('|').map(|c| c.trim().to_owned()).collect())
        .collect();
    let mut problems = Vec::new();
    for (who, needs) in [("operator", OPERATOR), ("installer", INSTALLER)] {
        let mut want: std::collections::BTreeMap<(String, &str), BTreeSet<&str>> =
            std::collections::BTreeMap::new();
        for n in needs {
            let scope = if n.scope == CLUSTER {
                "cluster".to_owned()
            } else {
                format!("`{}`", n.scope)
            };
            want.entry((scope, n.resource))
                .or_default()
                .extend(n.verbs.iter().copied());
        }
        for ((scope, resource), verbs) in &want {
            let quoted = format!("`{resource}`");
            let said: BTreeSet<&str> = rows
                .iter()
                .filter(|r| r[1] == who && r[2] == *scope)
                .filter(|r| r[3].split([',', ' ']).any(|w| w == quoted))
                .flat_map(|r| {
                    r[4].split(|c: char| !c.is_ascii_alphabetic())
                        .filter_map(|w| VERBS.iter().find(|v| **v == w).copied())
                        .collect::<Vec<_>>()
                })
                .collect();
            if said != *verbs {
                problems.push(format!(
                    "{who} {scope} {resource}: README says {said:?}, the code needs {verbs:?}"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "manifests/README.md RBAC table:\n{}",
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 4. An API server's validation (server-side dry run)
// ---------------------------------------------------------------------------------------------

const RETRY_FOR: Duration = Duration::from_secs(30);

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn gvk_of(v: &Value) -> GroupVersionKind {
    let api_version = v["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, v["kind"].as_str().unwrap())
}

/// The API for `doc`'s kind, or `None` when the server doesn't serve it. The operator's own group
/// is retried for a while (discovery lags a new CRD).
async fn api_for(client: &Client, doc: &Doc) -> Option<Api<DynamicObject>> {
    let gvk = gvk_of(&doc.value);
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
    let (ar, caps) = loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(found) => break found,
            Err(_) if gvk.group == GROUP && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => return None,
        }
    };
    Some(match caps.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            doc.namespace()
                .unwrap_or_else(|| panic!("{}: namespaced kind without a namespace", doc.label())),
            &ar,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    })
}

/// What a dry-run create said.
#[derive(Debug, PartialEq, Eq)]
enum DryRun {
    /// Accepted (201/200).
    Accepted,
    /// AlreadyExists: validated and admitted, refused only by storage.
    Exists,
}

/// Dry-run creates `obj`, retrying what a just-established CRD answers for a moment (404, 429,
/// 503); panics with the server's message on a refusal.
async fn dry_run_create<K>(api: &Api<K>, obj: &K, label: &str) -> DryRun
where
    K: kube::Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
    loop {
        match api.create(&dry_run(), obj).await {
            Ok(_) => {
                // A dry run leaves nothing behind.
                let name = obj.meta().name.clone().unwrap();
                assert!(
                    api.get_opt(&name).await.unwrap().is_none(),
                    "{label}: the dry run stored the object"
                );
                return DryRun::Accepted;
            }
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                return DryRun::Exists;
            }
            Err(e)
                if matches!(code(&e), Some(404 | 429 | 503))
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{label}: the API server refused it: {e}"),
        }
    }
}

/// An object the test created for real (deleted again at the end).
struct Created {
    api: Api<DynamicObject>,
    name: String,
    label: String,
}

async fn wait_established(client: &Client, name: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
    loop {
        let crd = crds.get(name).await.unwrap();
        let established = crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        if established {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "CRD {name} not Established within {RETRY_FOR:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The etcd static pod for n1 (of n1..n3, n3 a learner), as the kubelet posts its mirror pod.
fn mirror_pod(images: &Images) -> Pod {
    let ip = |i: u8| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i));
    let nodes: Vec<NodeTarget> = (1..=3)
        .map(|i| NodeTarget::new(&format!("n{i}"), ip(i)))
        .collect();
    let url = |i: u8, port: u16| -> membership::MemberUrl {
        format!("https://10.0.0.{i}:{port}").parse().unwrap()
    };
    let members = vec![
        Member::voter(MemberId::new(0x11).unwrap(), "n1", url(1, 2380))
            .with_client_url(url(1, 2379)),
        Member::voter(MemberId::new(0x22).unwrap(), "n2", url(2, 2380))
            .with_client_url(url(2, 2379)),
        Member::unstarted_learner(MemberId::new(0x33).unwrap(), url(3, 2380)),
    ];
    let spec = EtcdClusterSpec::default();
    let text = render_pod(&PodInput {
        node: &nodes[0],
        nodes: &nodes,
        members: &members,
        revision: Some(3),
        bootstrap: false,
        cluster_token: None,
        spec: &spec,
        images,
        resource_host_dir: None,
    })
    .unwrap();
    let mut pod = parse_pod(&text).unwrap();
    let node = "n1";
    pod.metadata.namespace = Some(STATIC_POD_NAMESPACE.to_owned());
    pod.metadata.name = Some(format!("{}-{node}", pod.metadata.name.clone().unwrap()));
    let annotations = pod.metadata.annotations.get_or_insert_default();
    for (k, v) in [
        ("kubernetes.io/config.mirror", "0123456789abcdef"),
        ("kubernetes.io/config.hash", "0123456789abcdef"),
        ("kubernetes.io/config.source", "file"),
    ] {
        annotations.insert(k.to_owned(), v.to_owned());
    }
    pod.spec.as_mut().unwrap().node_name = Some(node.to_owned());
    pod
}

/// Dry-run creates every manifest, then a rendered etcd mirror pod and an installer pod.
/// `real`: a missing kind is a failure (on the stand-in it is reported and skipped).
async fn validate(client: &Client, real: bool) {
    let who = if real { "cluster" } else { "stand-in" };
    let docs = all_docs();
    let mut created: Vec<Created> = Vec::new();
    let mut not_served: Vec<String> = Vec::new();
    for doc in &docs {
        let label = doc.label();
        let Some(api) = api_for(client, doc).await else {
            assert!(
                !real,
                "{label}: the cluster does not serve {:?}",
                gvk_of(&doc.value)
            );
            not_served.push(label);
            continue;
        };
        let obj: DynamicObject = serde_json::from_value(doc.value.clone()).unwrap();
        let said = dry_run_create(&api, &obj, &label).await;
        eprintln!("{who}: {label}: {said:?}");
        // What later dry runs need in place for real.
        let needed = matches!(
            doc.object,
            Object::Namespace(_) | Object::ServiceAccount(_) | Object::Crd(_)
        );
        if needed {
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => created.push(Created {
                    api: api.clone(),
                    name: doc.name().to_owned(),
                    label: label.clone(),
                }),
                Err(e) if code(&e) == Some(409) => {}
                Err(e) => panic!("{label}: creating it: {e}"),
            }
            if matches!(doc.object, Object::Crd(_)) {
                wait_established(client, doc.name()).await;
            }
        }
    }
    let images = deployed_images(&docs);
    let pods: Api<Pod> = Api::namespaced(client.clone(), STATIC_POD_NAMESPACE);
    let etcd = mirror_pod(&images);
    let said = dry_run_create(&pods, &etcd, "rendered etcd static pod (mirror pod)").await;
    assert_eq!(said, DryRun::Accepted, "etcd mirror pod");
    let installer = render_installer("n1", 3, 1, &images).unwrap();
    let said = dry_run_create(&pods, &installer, "rendered installer pod").await;
    assert_eq!(said, DryRun::Accepted, "installer pod");
    let target = etcd_operator::podspec::NodeTarget::new("n1", "10.0.0.1".parse().unwrap());
    let guard = etcd_operator::podspec::render_guard(&target, &images, true).unwrap();
    let said = dry_run_create(&pods, &guard, "rendered quorum guard pod").await;
    assert_eq!(said, DryRun::Accepted, "quorum guard pod");
    // The Deployment's pod as its ReplicaSet would create it: Pod Security is enforced on pods
    // (a Deployment only warns), and the stand-in checks pods but serves no Deployments.
    let d = deployment(&docs);
    let template = d.spec.clone().unwrap().template;
    let operator_pod = Pod {
        metadata: kube::api::ObjectMeta {
            name: Some("etcd-operator-manifests-test".to_owned()),
            namespace: d.metadata.namespace.clone(),
            labels: template.metadata.and_then(|m| m.labels),
            ..Default::default()
        },
        spec: template.spec,
        ..Default::default()
    };
    let operator_pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let said = dry_run_create(&operator_pods, &operator_pod, "the Deployment's pod").await;
    assert_eq!(said, DryRun::Accepted, "the Deployment's pod");
    eprintln!("{who}: rendered etcd mirror pod, installer pod, the Deployment's pod: accepted");
    if !not_served.is_empty() {
        eprintln!(
            "{who}: does not serve these kinds, so they were not validated here (a real cluster \
             does: set KUBECONFIG):\n  {}",
            not_served.join("\n  ")
        );
    }
    if real {
        for c in created.iter().rev() {
            match c.api.delete(&c.name, &DeleteParams::default()).await {
                Ok(_) => eprintln!("{who}: deleted {} (the test created it)", c.label),
                Err(e) => eprintln!("{who}: could not delete {}: {e}", c.label),
            }
        }
    }
}

/// On the cluster in `KUBECONFIG`, else on a kas control plane of its own, else skipped loudly.
#[tokio::test]
async fn a_real_api_server_accepts_the_manifests_and_rendered_pods() {
    let api = match std::env::var("KUBECONFIG") {
        Ok(path) if !path.is_empty() => Some(TestApi::start().await.unwrap()),
        _ => TestApi::kas(kube_testapi::KasOptions::default())
            .await
            .unwrap(),
    };
    let Some(api) = api else {
        eprintln!(
            "SKIPPED: needs a real cluster (KUBECONFIG, or ../shared/kas beside the repository): \
             manifests and rendered pods were not dry-run against a real kube-apiserver"
        );
        return;
    };
    assert!(api.is_real());
    tokio::time::timeout(Duration::from_secs(180), validate(&api.client(), true))
        .await
        .expect("validation against the cluster took over 180s");
}

#[tokio::test]
async fn the_api_stand_in_accepts_the_manifests_and_rendered_pods() {
    let api = TestApi::stand_in().await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), validate(&api.client(), false))
        .await
        .expect("validation against the stand-in took over 120s");
}

/// The role an admin binds in a consumer's namespace grants the Secret verbs
/// `controllers/cert_signer/consumers/` uses there and the pods list of `reload: Restart`, nothing else,
/// and the manifests bind it nowhere.
#[test]
fn the_consumer_secrets_role_is_exactly_what_consumers_rs_does_and_unbound() {
    use etcd_operator::controllers::cert_signer::consumers::CONSUMER_ROLE;
    let docs = all_docs();
    let rules = docs
        .iter()
        .find_map(|d| match &d.object {
            Object::ClusterRole(r) if r.metadata.name.as_deref() == Some(CONSUMER_ROLE) => {
                Some(r.rules.clone().unwrap_or_default())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("ClusterRole {CONSUMER_ROLE} is not in manifests/"));
    let want = expand_needs(&[
        need(
            "ns",
            "",
            "secrets",
            &["get", "create", "update", "delete"],
            &[],
            "consumers.rs: read, write and delete the consumer's Secret",
        ),
        need(
            "ns",
            "",
            "pods",
            &["list"],
            &[],
            "consumers/pods.rs: a reload Restart consumer's pods, label-selected",
        ),
    ]);
    assert_eq!(expand_rules("ns", &rules, CONSUMER_ROLE), want);
    let bound: Vec<String> = docs
        .iter()
        .filter(|d| match &d.object {
            Object::ClusterRoleBinding(b) => b.role_ref.name == CONSUMER_ROLE,
            Object::RoleBinding(b) => b.role_ref.name == CONSUMER_ROLE,
            _ => false,
        })
        .map(Doc::label)
        .collect();
    assert!(
        bound.is_empty(),
        "bound by {bound:?}: the admin binds it per namespace"
    );
}
