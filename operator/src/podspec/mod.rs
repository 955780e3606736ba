//! Renders the etcd static pod for one node from `bindata/etcd-pod.yaml.hbs` (embedded at
//! compile time) and a typed input. Handlebars runs in strict mode (an undefined variable is an
//! error) without HTML escaping; every value that lands in YAML goes through the `json` helper, so
//! any string is quoted safely. The env is a sorted map, so identical inputs give byte-identical
//! manifests and a revision is created only when something really changed. The output is parsed
//! back into a `Pod` before it is returned, so a broken render never leaves this module. The
//! etcd flags that differ between minor versions come from [`flags`], chosen by the etcd image's
//! tag; an image of a minor the operator does not know is not rendered at all.

mod env;
pub mod flags;
pub mod paths;

use std::net::IpAddr;

use handlebars::{Handlebars, handlebars_helper};
use k8s_openapi::api::core::v1::Pod;
use membership::{Member, MemberUrl};

use crate::api::EtcdClusterSpec;
use crate::etcd_version::{VersionError, image_release};
pub use env::{EnvInput, contract_env, member_client_urls, voter_endpoints};
use paths::CertPaths;

/// Namespace of the etcd static pods (and their mirror pods).
pub const STATIC_POD_NAMESPACE: &str = "etcd";
/// Bound on `etcd-verify membership` in the init container (below the pod's 180 s startup budget).
pub const VERIFY_TIMEOUT: &str = "120s";
/// etcd's own compaction keeps one hour of history (`--auto-compaction-mode=periodic`). The
/// kube-apiserver compacts every 5 minutes by itself; this is the safety net for when it does
/// not (it is down, or the cluster serves other clients), and an hour never cuts into the history
/// a kube-apiserver watch resumes from.
pub const AUTO_COMPACTION_RETENTION: &str = "1h";
/// Stands for the revision number in the `etcd-pod` source; the revision controller replaces it
/// in the `etcd-pod-<N>` copy, so the installer receives a concrete manifest.
pub const REVISION_TOKEN: &str = "__ETCD_STATIC_POD_REVISION__";

/// Replaces [`REVISION_TOKEN`] with `revision`.
pub fn substitute_revision(text: &str, revision: i64) -> String {
    text.replace(REVISION_TOKEN, &revision.to_string())
}

const TEMPLATE: &str = include_str!("../../../bindata/etcd-pod.yaml.hbs");
const INSTALLER_TEMPLATE: &str = include_str!("../../../bindata/installer-pod.yaml.hbs");
const GUARD_TEMPLATE: &str = include_str!("../../../bindata/guard-pod.yaml.hbs");

/// A control-plane node etcd runs on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeTarget {
    pub name: String,
    pub ip: IpAddr,
}

impl NodeTarget {
    /// Builder for tests and callers.
    pub fn new(name: &str, ip: IpAddr) -> Self {
        Self {
            name: name.to_owned(),
            ip,
        }
    }

    /// The host part of URLs (IPv6 in brackets).
    pub fn url_host(&self) -> String {
        membership::url_host(self.ip)
    }

    fn url(&self, port: u16) -> Result<MemberUrl, RenderError> {
        format!("https://{}:{port}", self.url_host())
            .parse()
            .map_err(|e| RenderError::Url(format!("node {}: {e}", self.name)))
    }

    /// `https://<ip>:2380`.
    pub fn peer_url(&self) -> Result<MemberUrl, RenderError> {
        self.url(2380)
    }

    /// `https://<ip>:2379`.
    pub fn client_url(&self) -> Result<MemberUrl, RenderError> {
        self.url(2379)
    }
}

/// Images the pod runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    pub etcd: String,
    pub operator: String,
}

/// Everything one node's manifest is rendered from.
#[derive(Clone, Debug)]
pub struct PodInput<'a> {
    pub node: &'a NodeTarget,
    pub nodes: &'a [NodeTarget],
    pub members: &'a [Member],
    /// The revision, or `None` for the revision-controller source (rendered with [`REVISION_TOKEN`]).
    pub revision: Option<i64>,
    pub bootstrap: bool,
    /// The cluster's initial-cluster token (see [`env::EnvInput::cluster_token`]).
    pub cluster_token: Option<&'a str>,
    pub spec: &'a EtcdClusterSpec,
    pub images: &'a Images,
    /// Host dir mounted as the pod's resource dir; `None` = the revision's dir.
    pub resource_host_dir: Option<String>,
}

/// Why a manifest could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("bad URL: {0}")]
    Url(String),
    #[error("template: {0}")]
    Template(String),
    #[error("rendered manifest is not a valid Pod: {0}")]
    NotAPod(String),
    #[error(transparent)]
    EtcdVersion(#[from] VersionError),
}

#[derive(serde::Serialize)]
struct TemplateData<'a> {
    namespace: &'static str,
    node_name: &'a str,
    node_ip: String,
    url_host: String,
    /// `--listen-client-urls`: the node's address, then the loopback listeners
    /// ([`listen_client_urls`]).
    listen_client_urls: String,
    /// Where etcd's plain `/health` listener (port 2382) is, as a URL host and as a probe host.
    health_url_host: String,
    health_probe_host: String,
    revision: String,
    operator_image: &'a str,
    etcd_image: &'a str,
    log_level: &'static str,
    verify_timeout: &'static str,
    heartbeat_ms: u32,
    election_ms: u32,
    quota_bytes: u64,
    auto_compaction_retention: &'static str,
    /// The flags that depend on etcd's minor version ([`flags::version_args`]).
    version_args: Vec<&'static str>,
    certs: &'a CertPaths,
    env: &'a std::collections::BTreeMap<String, String>,
    resource_host_dir: String,
    force_redeployment_reason: &'a str,
}

handlebars_helper!(json: |v: Json| serde_json::to_string(v).unwrap_or_default());
handlebars_helper!(as_string: |v: Json| match v {
    serde_json::Value::String(s) => s.clone(),
    other => other.to_string(),
});

fn registry() -> Result<Handlebars<'static>, RenderError> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.register_helper("json", Box::new(json));
    hb.register_helper("str", Box::new(as_string));
    hb.register_template_string("etcd-pod", TEMPLATE)
        .map_err(|e| RenderError::Template(e.to_string()))?;
    hb.register_template_string("installer-pod", INSTALLER_TEMPLATE)
        .map_err(|e| RenderError::Template(e.to_string()))?;
    hb.register_template_string("guard-pod", GUARD_TEMPLATE)
        .map_err(|e| RenderError::Template(e.to_string()))?;
    Ok(hb)
}

/// Renders one node's static-pod manifest.
pub fn render_pod(input: &PodInput<'_>) -> Result<String, RenderError> {
    let certs = CertPaths::for_node(&input.node.name);
    let revision = input
        .revision
        .map_or_else(|| REVISION_TOKEN.to_owned(), |r| r.to_string());
    let env = contract_env(&EnvInput {
        node: input.node,
        nodes: input.nodes,
        members: input.members,
        revision: &revision,
        bootstrap: input.bootstrap,
        cluster_token: input.cluster_token,
        certs: &certs,
    })?;
    let etcd_image = input
        .spec
        .etcd_image
        .as_deref()
        .unwrap_or(&input.images.etcd);
    let data = TemplateData {
        namespace: STATIC_POD_NAMESPACE,
        node_name: &input.node.name,
        node_ip: input.node.ip.to_string(),
        url_host: input.node.url_host(),
        listen_client_urls: listen_client_urls(input.node, input.spec.local_client_listener)
            .join(","),
        health_url_host: health_host(input.node, input.spec.local_client_listener).0,
        health_probe_host: health_host(input.node, input.spec.local_client_listener).1,
        revision: revision.clone(),
        operator_image: &input.images.operator,
        etcd_image,
        log_level: input.spec.log_level.etcd_level(),
        verify_timeout: VERIFY_TIMEOUT,
        heartbeat_ms: input.spec.timing.heartbeat_interval_ms,
        election_ms: input.spec.timing.election_timeout_ms,
        quota_bytes: input.spec.quota_bytes(),
        auto_compaction_retention: AUTO_COMPACTION_RETENTION,
        version_args: flags::version_args(image_release(
            etcd_image,
            &input.spec.etcd_image_version,
        )?),
        certs: &certs,
        env: &env,
        resource_host_dir: input
            .resource_host_dir
            .clone()
            .unwrap_or_else(|| paths::revision_host_dir(&revision)),
        force_redeployment_reason: &input.spec.force_redeployment_reason,
    };
    let text = registry()?
        .render("etcd-pod", &data)
        .map_err(|e| RenderError::Template(e.to_string()))?;
    parse_pod(&text)?;
    Ok(text)
}

/// Name of the installer pod for one attempt at one revision on one node.
pub fn installer_pod_name(node: &str, revision: i64, attempt: u32) -> String {
    format!("installer-{revision}-{node}-{attempt}")
}

#[derive(serde::Serialize)]
struct InstallerData<'a> {
    pod_name: String,
    namespace: &'static str,
    node_name: &'a str,
    revision: i64,
    attempt: u32,
    operator_image: &'a str,
    /// `--own-key-prefixes`: the installer gives a node only its own private keys.
    own_key_prefixes: String,
    /// `--approval-window`, in whole seconds.
    approval_window_seconds: u64,
}

/// How long after its start an installer may still restart etcd (`--approval-window`): it
/// writes a new manifest only once the operator, having seen its container run, asked the
/// quorum gate again and annotated the pod (`etcd_installer::approval`); later, it restarts
/// nothing and fails `RestartNotApproved`, and the next pass asks the gate again with a new pod.
/// So no restart rests on a verdict older than this. Generous beside the few seconds from a
/// container's start to the operator's next pass.
pub const APPROVAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(30);

/// Renders the installer pod for `node` at `revision` (attempt `attempt`).
pub fn render_installer(
    node: &str,
    revision: i64,
    attempt: u32,
    images: &Images,
) -> Result<Pod, RenderError> {
    let data = InstallerData {
        approval_window_seconds: APPROVAL_WINDOW.as_secs(),
        pod_name: installer_pod_name(node, revision, attempt),
        namespace: STATIC_POD_NAMESPACE,
        node_name: node,
        revision,
        attempt,
        operator_image: &images.operator,
        own_key_prefixes: crate::certs::CertKind::ALL
            .iter()
            .map(|k| k.prefix())
            .collect::<Vec<_>>()
            .join(","),
    };
    let text = registry()?
        .render("installer-pod", &data)
        .map_err(|e| RenderError::Template(e.to_string()))?;
    parse_pod(&text)
}

/// The metrics proxy's port (TLS, client certificates of the metrics CA required: scrapers use
/// `etcd-metric-client`).
pub const METRICS_PORT: u16 = 2381;
/// etcd's plain listener for `/health` (and `/metrics`) on the node's loopback, for probes.
pub const HEALTH_PORT: u16 = 2382;

/// The loopback addresses etcd also serves clients on when the local listener is on: the
/// node's kube-apiserver dials `https://127.0.0.1:2379` or `https://[::1]:2379` (an IPv6 or
/// dual-stack control plane's), so both are served.
pub const LOCAL_CLIENT_URLS: [&str; 2] = ["https://127.0.0.1:2379", "https://[::1]:2379"];

/// etcd's `--listen-client-urls`: the node's own address, then, with `local_listener`, each of
/// [`LOCAL_CLIENT_URLS`] that is not the node's own address already (etcd refuses to bind one
/// address twice).
pub fn listen_client_urls(node: &NodeTarget, local_listener: bool) -> Vec<String> {
    let own = format!("https://{}:2379", node.url_host());
    let local = LOCAL_CLIENT_URLS
        .iter()
        .filter(|_| local_listener)
        .map(|u| (*u).to_owned())
        .filter(|u| *u != own);
    std::iter::once(own.clone()).chain(local).collect()
}

/// The host of the plain health listener, as a URL host and as a probe host: `127.0.0.1` where
/// each node has its own loopback (`local_listener`, as for the client listener), else the
/// node's own address (the local control plane's nodes share one network namespace, and their
/// addresses are loopback addresses).
pub fn health_host(node: &NodeTarget, local_listener: bool) -> (String, String) {
    if local_listener {
        ("127.0.0.1".into(), "127.0.0.1".into())
    } else {
        (node.url_host(), node.ip.to_string())
    }
}

/// Name of the quorum guard pod of `node`.
pub fn guard_pod_name(node: &str) -> String {
    format!("etcd-quorum-guard-{node}")
}

#[derive(serde::Serialize)]
struct GuardData<'a> {
    pod_name: String,
    namespace: &'static str,
    node_name: &'a str,
    health_probe_host: String,
    operator_image: &'a str,
}

/// Renders the quorum guard pod of `node` (`bindata/guard-pod.yaml.hbs`); its readiness probe
/// asks the node's etcd `/health` on the plain loopback listener (see [`health_host`]).
pub fn render_guard(
    node: &NodeTarget,
    images: &Images,
    local_listener: bool,
) -> Result<Pod, RenderError> {
    let data = GuardData {
        pod_name: guard_pod_name(&node.name),
        namespace: STATIC_POD_NAMESPACE,
        node_name: &node.name,
        health_probe_host: health_host(node, local_listener).1,
        operator_image: &images.operator,
    };
    let text = registry()?
        .render("guard-pod", &data)
        .map_err(|e| RenderError::Template(e.to_string()))?;
    parse_pod(&text)
}

/// Parses a manifest (YAML booleans strict: `yes`/`on` stay strings).
pub fn parse_pod(text: &str) -> Result<Pod, RenderError> {
    let options = serde_saphyr::options! { strict_booleans: true };
    serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| RenderError::NotAPod(e.to_string()))
}

#[cfg(test)]
mod tests;
