//! `kubectl etcd` as an admin runs it: the `etcd-operator` binary linked as `kubectl-etcd` into
//! a directory on `PATH`, found and run by the real kubectl (`kubectl etcd status`), and run
//! directly for the actions. Against the API stand-in, or kube-apiserver with `TEST_API=kas`:
//! the EtcdCluster CRD installed, the singleton with a status as the operator writes it, three
//! Nodes. Each action is checked on what the API then holds: a dry run and an unconfirmed run
//! store nothing, a confirmed one stores exactly its field, a repeat is refused, a stop that
//! would lose quorum is refused, `--wait` returns once the status shows the request handled, and
//! a change computed from a stale object is refused by the API (its resourceVersion guard).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use etcd_operator::api::{
    Backup, Condition, EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, MemberStatus, NodeStatus,
    SINGLETON,
};
use etcd_operator::kubectl::actions::{Action, decide};
use etcd_operator::observed::objects::ETCD_STOPPED_ANNOTATION;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt};
use kube_testapi::TestApi;
use tokio::process::Command;

#[path = "support/kubectl.rs"]
#[allow(dead_code)]
mod support;

struct Plugin {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Plugin {
    fn new(api: &TestApi) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_etcd-operator"),
            dir.path().join("kubectl-etcd"),
        )
        .unwrap();
        Self {
            dir,
            kubeconfig: api.kubeconfig().to_owned(),
        }
    }

    fn path_env(&self) -> std::ffi::OsString {
        let mut dirs = vec![self.dir.path().to_owned()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        std::env::join_paths(dirs).unwrap()
    }

    /// `program args` with the plugin on PATH, stdin not a terminal.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", self.path_env())
            .env("KUBECTL_ETCD_LOG", "warn")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Runs it (without blocking the runtime: the API stand-in serves from this test's).
    async fn run(&self, program: &Path, args: &[&str]) -> Output {
        self.command(program, args).output().await.unwrap()
    }

    async fn etcd(&self, args: &[&str]) -> Output {
        self.run(&self.dir.path().join("kubectl-etcd"), args).await
    }

    /// Runs and asserts success; stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.etcd(args).await;
        assert!(
            out.status.success(),
            "kubectl-etcd {args:?}: {}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs and asserts a failure whose stderr names `why`.
    async fn refused(&self, args: &[&str], why: &str) {
        let out = self.etcd(args).await;
        assert_eq!(
            out.status.code(),
            Some(1),
            "kubectl-etcd {args:?}: {}",
            text(&out)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(why),
            "kubectl-etcd {args:?}: {err:?} lacks {why:?}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: "2026-11-28T00:00:00Z".into(),
    }
}

fn member(name: &str, id: &str, healthy: bool) -> MemberStatus {
    MemberStatus {
        name: name.into(),
        id: id.into(),
        peer_url: format!("https://10.0.0.{}:2380", &id[id.len() - 1..]),
        role: "Voter".into(),
        started: true,
        healthy,
        leader: name.ends_with("n1"),
        version: "3.5.16".into(),
        ..MemberStatus::default()
    }
}

fn status(nodes: &[String], healthy: [bool; 3]) -> EtcdClusterStatus {
    EtcdClusterStatus {
        observed_generation: Some(1),
        conditions: vec![
            condition("Available", "True", "AsExpected", "3 of 3 voters healthy"),
            condition("Progressing", "False", "AsExpected", ""),
            condition("Degraded", "False", "AsExpected", ""),
        ],
        latest_available_revision: 4,
        node_statuses: nodes
            .iter()
            .map(|n| NodeStatus {
                node_name: n.clone(),
                current_revision: 4,
                ..NodeStatus::default()
            })
            .collect(),
        members: nodes
            .iter()
            .zip(healthy)
            .enumerate()
            .map(|(i, (n, h))| member(n, &format!("a{}", i + 1), h))
            .collect(),
        ..EtcdClusterStatus::default()
    }
}

async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = EtcdCluster::crd();
    let name = crd.metadata.name.clone().unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the CRD: {e}"),
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let clusters: Api<EtcdCluster> = Api::all(client.clone());
    loop {
        // Established, and served: a list of the new resource answers.
        let established = crds
            .get(&name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        let listed = clusters.list(&Default::default()).await;
        if established && listed.is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "CRD {name} not served within 30 s: established {established}, list {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn put_status(client: &Client, status: &EtcdClusterStatus) {
    let api: Api<EtcdCluster> = Api::all(client.clone());
    api.patch_status(
        SINGLETON,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .unwrap();
}

async fn spec_of(client: &Client) -> EtcdClusterSpec {
    Api::<EtcdCluster>::all(client.clone())
        .get(SINGLETON)
        .await
        .unwrap()
        .spec
}

async fn stopped_mark(client: &Client, node: &str) -> Option<String> {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .unwrap()
        .metadata
        .annotations
        .and_then(|a| a.get(ETCD_STOPPED_ANNOTATION).cloned())
}

/// The cluster the test made: the singleton and three Nodes named for this run.
async fn set_up(client: &Client) -> Vec<String> {
    install_crd(client).await;
    let prefix = format!("kp{}-", std::process::id());
    let nodes: Vec<String> = (1..=3).map(|i| format!("{prefix}n{i}")).collect();
    for n in &nodes {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(n.clone()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    let mut cluster = EtcdCluster::new(SINGLETON, EtcdClusterSpec::default());
    cluster.spec.backup = Some(Backup::default());
    Api::<EtcdCluster>::all(client.clone())
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    put_status(client, &status(&nodes, [true; 3])).await;
    nodes
}

async fn tear_down(client: &Client, nodes: &[String]) {
    let dp = DeleteParams::default();
    for n in nodes {
        let _ = Api::<Node>::all(client.clone()).delete(n, &dp).await;
    }
    let _ = Api::<EtcdCluster>::all(client.clone())
        .delete(SINGLETON, &dp)
        .await;
}

#[tokio::test]
async fn kubectl_etcd_reads_the_status_and_sends_only_confirmed_safe_changes() {
    let api = TestApi::start().await.unwrap();
    if api.is_real() && !api.is_own_real() {
        eprintln!(
            "SKIPPED kubectl_etcd_reads_the_status_and_sends_only_confirmed_safe_changes: KUBECONFIG names a real cluster, whose EtcdCluster this test must not change"
        );
        return;
    }
    let client = api.client();
    let nodes = set_up(&client).await;
    let plugin = Plugin::new(&api);
    status_through_kubectl(&api, &plugin, &nodes).await;
    request_actions(&client, &plugin).await;
    wait_for_the_status(&client, &plugin).await;
    node_actions(&client, &plugin, &nodes).await;
    stale_change_is_refused(&client).await;
    tear_down(&client, &nodes).await;
}

/// The real kubectl finds the plugin on PATH; its summary is the plugin's own.
async fn status_through_kubectl(api: &TestApi, plugin: &Plugin, nodes: &[String]) {
    let direct = plugin.ok(&["status"]).await;
    for n in nodes {
        assert!(direct.contains(n.as_str()), "{n} missing from:\n{direct}");
    }
    assert!(direct.contains("Nothing needs attention."), "{direct}");
    let json: serde_json::Value =
        serde_json::from_str(&plugin.ok(&["status", "-o", "json"]).await).unwrap();
    assert_eq!(json["latestAvailableRevision"], 4, "{json}");
    let scratch = tempfile::tempdir().unwrap();
    let Some(kubectl) = api.kubectl().or_else(|| support::kubectl(scratch.path())) else {
        eprintln!("SKIPPED the `kubectl etcd` half: no kubectl on PATH or in shared/kas");
        return;
    };
    let out = plugin.run(&kubectl, &["etcd", "status"]).await;
    assert!(out.status.success(), "kubectl etcd status: {}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), direct);
    let plugins = plugin.run(&kubectl, &["plugin", "list"]).await;
    assert!(
        String::from_utf8_lossy(&plugins.stdout).contains("kubectl-etcd"),
        "kubectl plugin list: {}",
        text(&plugins)
    );
}

async fn request_actions(client: &Client, plugin: &Plugin) {
    // Unconfirmed (stdin is no terminal): nothing is stored.
    plugin
        .refused(&["backup", "--request", "r1"], "pass --yes")
        .await;
    // A dry run: the API server admits it and stores nothing.
    let dry = plugin.ok(&["backup", "--request", "r1", "--dry-run"]).await;
    assert!(dry.contains("dry run"), "{dry}");
    assert_eq!(spec_of(client).await.backup.unwrap().request, "");
    // Confirmed: exactly that field changes.
    let before = spec_of(client).await;
    plugin.ok(&["backup", "--request", "r1", "--yes"]).await;
    let after = spec_of(client).await;
    let mut expected = before.clone();
    expected.backup.as_mut().unwrap().request = "r1".into();
    assert_eq!(after, expected);
    plugin
        .refused(&["backup", "--request", "r1", "--yes"], "is already \"r1\"")
        .await;
    plugin
        .ok(&["rotate-ca", "--request", "rot-1", "--yes"])
        .await;
    assert_eq!(
        spec_of(client).await.certificates.ca_rotation_request,
        "rot-1"
    );
    plugin
        .ok(&["redeploy", "--reason", "new kernel", "--yes"])
        .await;
    assert_eq!(
        spec_of(client).await.force_redeployment_reason,
        "new kernel"
    );
    plugin
        .refused(&["redeploy", "--reason", "", "--yes"], "must not be empty")
        .await;
}

/// `--wait` returns once the status shows the request handled (the test plays the operator).
async fn wait_for_the_status(client: &Client, plugin: &Plugin) {
    let child = plugin
        .command(
            &plugin.dir.path().join("kubectl-etcd"),
            &["defragment", "--request", "d1", "--yes", "--wait", "60s"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while spec_of(client).await.defragmentation.request != "d1" {
        assert!(
            Instant::now() < deadline,
            "the request never reached the spec"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let api: Api<EtcdCluster> = Api::all(client.clone());
    api.patch_status(
        SINGLETON,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"defragmentation": {"handledRequest": "d1"}}})),
    )
    .await
    .unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("defragmentation for request \"d1\" done"),
        "{}",
        text(&out)
    );
}

async fn node_actions(client: &Client, plugin: &Plugin, nodes: &[String]) {
    let (n1, n2, n3) = (nodes[0].as_str(), nodes[1].as_str(), nodes[2].as_str());
    plugin
        .refused(
            &["stop-etcd", "kp-nobody", "--reason", "x", "--yes"],
            "does not exist",
        )
        .await;
    plugin
        .ok(&["stop-etcd", n2, "--reason", "disk swap", "--yes"])
        .await;
    assert_eq!(stopped_mark(client, n2).await.as_deref(), Some("disk swap"));
    plugin
        .refused(
            &["stop-etcd", n2, "--reason", "again", "--yes"],
            "already marked",
        )
        .await;
    // n1 unhealthy: stopping n3 would leave one healthy voter of three.
    put_status(client, &status(nodes, [false, true, true])).await;
    plugin
        .refused(
            &["stop-etcd", n3, "--reason", "x", "--yes"],
            "would leave 1 healthy voter(s) of 3",
        )
        .await;
    assert_eq!(stopped_mark(client, n3).await, None);
    plugin.ok(&["start-etcd", n2, "--yes"]).await;
    assert_eq!(stopped_mark(client, n2).await, None);
    plugin
        .refused(&["start-etcd", n1, "--yes"], "nothing to start")
        .await;
    let summary = plugin.ok(&["status"]).await;
    let row = summary
        .lines()
        .find(|l| l.starts_with(n1) && l.contains("Voter"))
        .unwrap_or_else(|| panic!("no member row for {n1}:\n{summary}"));
    assert!(
        row.contains("Voter  yes      no"),
        "{n1} should show unhealthy: {row:?}"
    );
}

/// A change computed from an object someone changed since is refused by the API server.
async fn stale_change_is_refused(client: &Client) {
    let api: Api<EtcdCluster> = Api::all(client.clone());
    let stale = api.get(SINGLETON).await.unwrap();
    let change = decide(
        &Action::Backup {
            request: "r-stale".into(),
        },
        &stale,
        None,
    )
    .unwrap();
    api.patch(
        SINGLETON,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"logLevel": "Debug"}})),
    )
    .await
    .unwrap();
    let err = etcd_operator::kubectl::apply(client, &change, false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("409"), "{err}");
    assert_eq!(spec_of(client).await.backup.unwrap().request, "r1");
}
