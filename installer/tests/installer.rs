//! The real `etcd-installer` binary, run as a process against a Kubernetes API over HTTP (the
//! API stand-in on its own real etcd, or a real cluster when `KUBECONFIG` is set), writing into
//! temp directories that play the node's resource and manifest dirs.
//!
//! Waits are conditions with deadlines (a line on the installer's stderr, a process exit),
//! never fixed sleeps. Crashes are real: the installer is paused by its test hook in the
//! middle of writing and SIGKILLed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_testapi::TestApi;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-installer");
/// Bound on one installer run or one wait in these tests.
const DEADLINE: Duration = Duration::from_secs(60);
const PAUSE_MARKER: &str = "test hook: paused";

// ---------------------------------------------------------------------------------------------
// Fixture: an API, a namespace, a node's directories, revisions.

struct World {
    api: TestApi,
    ns: String,
    root: tempfile::TempDir,
}

impl World {
    async fn start() -> Self {
        let api = TestApi::start().await.expect("test API");
        let ns = api.temp_namespace("installer").await.expect("namespace");
        let root = tempfile::tempdir().unwrap();
        Self { api, ns, root }
    }

    fn client(&self) -> Client {
        self.api.client()
    }

    fn resources(&self) -> PathBuf {
        self.root.path().join("static-pod-resources")
    }

    fn manifests(&self) -> PathBuf {
        self.root.path().join("manifests")
    }

    fn manifest_file(&self) -> PathBuf {
        self.manifests().join("etcd-pod.yaml")
    }

    /// An installer command for `node` and `rev` with the usual resources.
    fn installer(&self, rev: u64, node: &str) -> Installer {
        self.bare_installer(rev, node)
            .arg("--configmaps=etcd-pod,etcd-all-bundles")
            .arg("--secrets=etcd-all-certs")
    }

    /// An installer command that asks only for the pod ConfigMap (always required).
    fn bare_installer(&self, rev: u64, node: &str) -> Installer {
        Installer {
            args: vec![
                format!("--revision={rev}"),
                format!("--namespace={}", self.ns),
                "--pod=etcd-pod".into(),
                format!("--node-name={node}"),
                format!("--resource-dir={}", self.resources().display()),
                format!("--pod-manifest-dir={}", self.manifests().display()),
                "--timeout=20s".into(),
                format!("--kubeconfig={}", self.api.kubeconfig().display()),
            ],
            env: Vec::new(),
            umask: None,
        }
    }

    /// Publishes revision `rev` the way the operator does: `etcd-pod-<rev>` with one manifest
    /// per node, `etcd-all-bundles-<rev>` (with a binary key) and `etcd-all-certs-<rev>`.
    async fn publish(&self, rev: u64, nodes: &[&str]) {
        let mut pods = BTreeMap::new();
        for n in nodes {
            pods.insert(format!("pod-{n}.yaml"), manifest(n, rev));
        }
        pods.insert("version".into(), format!("{rev}"));
        self.configmap(&format!("etcd-pod-{rev}"), pods).await;
        let mut bundles = configmap(
            &format!("etcd-all-bundles-{rev}"),
            [(
                "ca-bundle.crt".to_string(),
                format!("CA for revision {rev}\n"),
            )]
            .into(),
        );
        bundles.binary_data =
            Some([("raw.bin".to_string(), ByteString(vec![0, 159, 146, 150]))].into());
        Api::<ConfigMap>::namespaced(self.client(), &self.ns)
            .create(&PostParams::default(), &bundles)
            .await
            .unwrap();
        let mut certs = BTreeMap::new();
        for n in nodes {
            certs.insert(format!("{n}.crt"), format!("cert {n} r{rev}").into_bytes());
            certs.insert(format!("{n}.key"), format!("key {n} r{rev}").into_bytes());
        }
        self.secret(&format!("etcd-all-certs-{rev}"), certs).await;
    }

    async fn configmap(&self, name: &str, data: BTreeMap<String, String>) {
        Api::<ConfigMap>::namespaced(self.client(), &self.ns)
            .create(&PostParams::default(), &configmap(name, data))
            .await
            .unwrap();
    }

    async fn secret(&self, name: &str, data: BTreeMap<String, Vec<u8>>) {
        let secret = Secret {
            metadata: meta(name),
            data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
            ..Default::default()
        };
        Api::<Secret>::namespaced(self.client(), &self.ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

fn configmap(name: &str, data: BTreeMap<String, String>) -> ConfigMap {
    ConfigMap {
        metadata: meta(name),
        data: Some(data),
        ..Default::default()
    }
}

/// A static-pod manifest for `node` at `rev`, shaped like the operator's.
fn manifest(node: &str, rev: u64) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: etcd
  labels:
    app: etcd
    revision: "{rev}"
spec:
  containers:
  - name: etcd
    image: etcd
    env:
    - name: ETCD_NAME
      value: {node}
    - name: ETCD_STATIC_POD_REVISION
      value: "{rev}"
"#
    )
}

// ---------------------------------------------------------------------------------------------
// Running the installer.

struct Installer {
    args: Vec<String>,
    env: Vec<(String, String)>,
    umask: Option<&'static str>,
}

/// A finished run.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    /// The one-line JSON result from stdout.
    fn report(&self) -> Value {
        let lines: Vec<&str> = self.stdout.lines().collect();
        assert_eq!(lines.len(), 1, "stdout must be one line: {self:#?}");
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {self:#?}"))
    }

    fn expect(&self, code: i32, outcome: &str, reason: &str) -> Value {
        let report = self.report();
        assert_eq!(
            (
                self.code,
                report["outcome"].as_str(),
                report["reason"].as_str()
            ),
            (code, Some(outcome), Some(reason)),
            "{self:#?}"
        );
        report
    }
}

/// A running installer whose stderr is watched line by line.
struct Spawned {
    child: Child,
    stderr: watch::Receiver<String>,
    stdout: tokio::task::JoinHandle<String>,
    started: Instant,
}

impl Installer {
    /// Adds a flag (list flags accumulate).
    fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets a single-valued `--flag=value`, replacing the fixture's.
    fn set(mut self, arg: &str) -> Self {
        let flag = arg.split_once('=').map_or(arg, |(f, _)| f);
        self.args.retain(|a| !a.starts_with(&format!("{flag}=")));
        self.args.push(arg.into());
        self
    }

    fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    fn hook(self, hook: &str) -> Self {
        self.env("ETCD_INSTALLER_TEST_HOOK", hook)
    }

    fn spawn(&self) -> Spawned {
        let mut cmd = match self.umask {
            Some(umask) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
                    .arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(&self.args)
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .env_remove("NODE_NAME")
            .env_remove("ETCD_INSTALLER_TEST_HOOK")
            .env("ETCD_INSTALLER_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let started = Instant::now();
        let mut child = cmd.spawn().expect("spawn etcd-installer");
        let (tx, rx) = watch::channel(String::new());
        let err = child.stderr.take().unwrap();
        tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tx.send_modify(|all| {
                    all.push_str(&line);
                    all.push('\n');
                });
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = tokio::spawn(async move {
            let mut s = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut out, &mut s).await;
            s
        });
        Spawned {
            child,
            stderr: rx,
            stdout,
            started,
        }
    }

    async fn run(&self) -> Run {
        self.spawn().wait().await
    }
}

impl Spawned {
    fn pid(&self) -> i32 {
        self.child.id().unwrap() as i32
    }

    /// Waits until a stderr line contains `needle`.
    async fn wait_stderr(&mut self, needle: &str) {
        let found = matches!(
            tokio::time::timeout(DEADLINE, self.stderr.wait_for(|s| s.contains(needle))).await,
            Ok(Ok(_))
        );
        if !found {
            panic!(
                "installer never logged {needle:?}; stderr so far:\n{}",
                self.stderr.borrow().as_str()
            );
        }
    }

    async fn wait(mut self) -> Run {
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "installer still running after {DEADLINE:?}; stderr:\n{}",
                    self.stderr.borrow().as_str()
                )
            })
            .unwrap();
        let stdout = self.stdout.await.unwrap();
        // The reader task ends at EOF; wait for it so no line is lost.
        let _ = tokio::time::timeout(DEADLINE, self.stderr.wait_for(|_| false)).await;
        let stderr = self.stderr.borrow().clone();
        Run {
            code: status.code().unwrap_or(-1),
            stdout,
            stderr,
            took: self.started.elapsed(),
        }
    }

    /// SIGKILL: no destructor, no cleanup, like a node losing power mid-write.
    async fn kill9(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Looking at the node.

/// Everything about one entry that a change would show.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    kind: &'static str,
    mode: u32,
    bytes: Vec<u8>,
    mtime: (i64, i64),
    inode: u64,
}

/// Every entry of a tree (relative paths; the root is `""`).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Seen> {
    let mut out = BTreeMap::new();
    if !root.exists() {
        return out;
    }
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let rel = path.strip_prefix(root).unwrap().to_path_buf();
        let (kind, bytes) = if meta.is_dir() {
            for e in std::fs::read_dir(&path).unwrap() {
                pending.push(e.unwrap().path());
            }
            ("dir", Vec::new())
        } else {
            ("file", std::fs::read(&path).unwrap())
        };
        out.insert(
            rel,
            Seen {
                kind,
                mode: meta.mode() & 0o7777,
                bytes,
                mtime: (meta.mtime(), meta.mtime_nsec()),
                inode: meta.ino(),
            },
        );
    }
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_install_writes_every_file_with_its_mode_and_the_manifest_last() {
    let w = World::start().await;
    w.publish(1, &["n1", "n2"]).await;
    let term = w.root.path().join("termination-log");
    let mut inst = w
        .installer(1, "n1")
        .arg(format!("--termination-log={}", term.display()));
    // Modes must not depend on the umask the installer inherits.
    inst.umask = Some("077");
    let run = inst.run().await;
    let report = run.expect(0, "installed", "Installed");
    assert_eq!(report["revision"], 1);
    assert_eq!(report["node"], "n1");
    assert_eq!(read(&term).trim_end(), run.stdout.trim_end());

    let rev = w.resources().join("etcd-pod-1");
    let expect_files = [
        (
            "configmaps/etcd-pod/pod-n1.yaml",
            0o644,
            manifest("n1", 1).into_bytes(),
        ),
        (
            "configmaps/etcd-pod/pod-n2.yaml",
            0o644,
            manifest("n2", 1).into_bytes(),
        ),
        ("configmaps/etcd-pod/version", 0o644, b"1".to_vec()),
        (
            "configmaps/etcd-all-bundles/ca-bundle.crt",
            0o644,
            b"CA for revision 1\n".to_vec(),
        ),
        (
            "configmaps/etcd-all-bundles/raw.bin",
            0o644,
            vec![0, 159, 146, 150],
        ),
        (
            "secrets/etcd-all-certs/n1.crt",
            0o600,
            b"cert n1 r1".to_vec(),
        ),
        (
            "secrets/etcd-all-certs/n1.key",
            0o600,
            b"key n1 r1".to_vec(),
        ),
        (
            "secrets/etcd-all-certs/n2.crt",
            0o600,
            b"cert n2 r1".to_vec(),
        ),
        (
            "secrets/etcd-all-certs/n2.key",
            0o600,
            b"key n2 r1".to_vec(),
        ),
        ("etcd-pod.yaml", 0o644, manifest("n1", 1).into_bytes()),
    ];
    let snap = snapshot(&rev);
    let files: Vec<_> = snap.iter().filter(|(_, v)| v.kind == "file").collect();
    assert_eq!(files.len(), expect_files.len(), "{:#?}", snap.keys());
    for (path, want_mode, bytes) in expect_files {
        let full = rev.join(path);
        assert_eq!(std::fs::read(&full).unwrap(), bytes, "{path}");
        assert_eq!(mode(&full), want_mode, "{path}");
    }
    for (path, v) in &snap {
        if v.kind == "dir" {
            assert_eq!(v.mode, 0o755, "dir {}", path.display());
        }
    }
    assert_eq!(mode(&w.resources()), 0o755);
    assert_eq!(mode(&w.manifests()), 0o755);
    assert_eq!(mode(&w.resources().join(".etcd-pod-installer.lock")), 0o644);
    assert_eq!(read(&w.manifest_file()), manifest("n1", 1));
    assert_eq!(mode(&w.manifest_file()), 0o644);
    // Nothing else: no temp or staging leftovers, only the lock file.
    assert_eq!(
        names(&w.resources()),
        vec![".etcd-pod-installer.lock", "etcd-pod-1"]
    );
    assert_eq!(names(&w.manifests()), vec!["etcd-pod.yaml"]);
    // The manifest was written after the revision directory was complete.
    let dir_mtime = std::fs::metadata(&rev).unwrap().modified().unwrap();
    let manifest_mtime = std::fs::metadata(w.manifest_file())
        .unwrap()
        .modified()
        .unwrap();
    assert!(manifest_mtime >= dir_mtime);
    assert!(
        run.stderr.contains("install{node=n1 revision=1}"),
        "no span fields in the logs: {}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reinstalling_the_same_revision_changes_nothing_and_repairs_a_differing_copy() {
    let w = World::start().await;
    w.publish(1, &["n1", "n2"]).await;
    w.installer(1, "n1")
        .run()
        .await
        .expect(0, "installed", "Installed");
    let before = (snapshot(&w.resources()), snapshot(&w.manifests()));

    let again = w.installer(1, "n1").run().await;
    again.expect(0, "unchanged", "AlreadyInstalled");
    let after = (snapshot(&w.resources()), snapshot(&w.manifests()));
    // Same bytes, modes, mtimes and inodes: nothing was rewritten (the lock file aside, whose
    // content is the holder's PID).
    let strip = |mut s: BTreeMap<PathBuf, _>| {
        s.remove(Path::new(".etcd-pod-installer.lock"));
        s
    };
    assert_eq!(strip(before.0.clone()), strip(after.0.clone()));
    assert_eq!(before.1, after.1);

    // Someone changed a file and a mode inside the installed revision: the next run replaces
    // the whole directory, and still leaves the identical manifest alone.
    let rev = w.resources().join("etcd-pod-1");
    std::fs::write(rev.join("configmaps/etcd-pod/version"), "tampered").unwrap();
    std::fs::set_permissions(
        rev.join("secrets/etcd-all-certs/n1.key"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(rev.join("configmaps/extra"), "x").unwrap();
    let repair = w.installer(1, "n1").run().await;
    let report = repair.expect(0, "installed", "Installed");
    assert!(
        report["message"].as_str().unwrap().contains("Replaced"),
        "{report}"
    );
    assert_eq!(read(&rev.join("configmaps/etcd-pod/version")), "1");
    assert_eq!(mode(&rev.join("secrets/etcd-all-certs/n1.key")), 0o600);
    assert!(!rev.join("configmaps/extra").exists());
    assert_eq!(
        snapshot(&w.manifests()),
        before.1,
        "identical manifest rewritten"
    );
    assert_eq!(
        names(&w.resources()),
        vec![".etcd-pod-installer.lock", "etcd-pod-1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_revision_is_installed_and_a_lower_one_is_refused() {
    let w = World::start().await;
    w.publish(1, &["n1"]).await;
    w.publish(2, &["n1"]).await;
    w.installer(1, "n1")
        .run()
        .await
        .expect(0, "installed", "Installed");
    w.installer(2, "n1")
        .run()
        .await
        .expect(0, "installed", "Installed");
    assert_eq!(read(&w.manifest_file()), manifest("n1", 2));
    assert_eq!(
        names(&w.resources()),
        vec![".etcd-pod-installer.lock", "etcd-pod-1", "etcd-pod-2"]
    );

    let before = (snapshot(&w.resources()), snapshot(&w.manifests()));
    let down = w.installer(1, "n1").run().await;
    let report = down.expect(3, "refused", "Downgrade");
    assert!(
        report["message"]
            .as_str()
            .unwrap()
            .contains("revision 2 is already installed")
    );
    assert_eq!(before, (snapshot(&w.resources()), snapshot(&w.manifests())));

    // Revision dirs pruned: the manifest's own revision still forbids going back.
    std::fs::remove_dir_all(w.resources().join("etcd-pod-2")).unwrap();
    std::fs::remove_dir_all(w.resources().join("etcd-pod-1")).unwrap();
    let down = w.installer(1, "n1").run().await;
    let report = down.expect(3, "refused", "Downgrade");
    assert!(
        report["message"]
            .as_str()
            .unwrap()
            .contains("etcd-pod.yaml declares it"),
        "{report}"
    );
    assert_eq!(read(&w.manifest_file()), manifest("n1", 2));
    assert!(!w.resources().join("etcd-pod-1").exists());
}

/// A restart of etcd waits for the operator's approval (#65: the gate is asked again right
/// before the restart, not only when the installer pod was made): without it inside the window
/// the revision directory is laid down and the manifest is left alone; with it the manifest is
/// written; an unchanged manifest restarts nothing and needs none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_waits_for_the_operators_approval() {
    let w = World::start().await;
    w.publish(1, &["n1"]).await;
    w.publish(2, &["n1"]).await;
    w.installer(1, "n1")
        .run()
        .await
        .expect(0, "installed", "Installed");
    let before = snapshot(&w.manifests());
    let in_pod = |inst: Installer, pod: &str| inst.env("POD_NAME", pod).env("POD_NAMESPACE", &w.ns);

    create_pod(&w, "installer-2-n1-1").await;
    let late = in_pod(w.installer(2, "n1"), "installer-2-n1-1")
        .arg("--approval-window=2s")
        .run()
        .await;
    let report = late.expect(1, "failed", "RestartNotApproved");
    let message = report["message"].as_str().unwrap();
    assert!(
        message.contains("did not approve the restart")
            && message.contains("installer-2-n1-1")
            && message.contains("not annotated yet"),
        "{message}"
    );
    assert_eq!(
        before,
        snapshot(&w.manifests()),
        "the manifest was rewritten"
    );
    assert!(
        w.resources().join("etcd-pod-2").is_dir(),
        "the revision dir was not laid down"
    );

    create_pod(&w, "installer-2-n1-2").await;
    let mut waiting = in_pod(w.installer(2, "n1"), "installer-2-n1-2")
        .arg("--approval-window=30s")
        .spawn();
    waiting
        .wait_stderr("waiting for the operator to approve")
        .await;
    assert_eq!(
        read(&w.manifest_file()),
        manifest("n1", 1),
        "written before the approval"
    );
    let patch = serde_json::json!({"metadata": {"annotations": {
        etcd_installer::approval::RESTART_APPROVED: "2026-12-07T20:00:00Z"}}});
    Api::<Pod>::namespaced(w.client(), &w.ns)
        .patch(
            "installer-2-n1-2",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    waiting.wait().await.expect(0, "installed", "Installed");
    assert_eq!(read(&w.manifest_file()), manifest("n1", 2));

    // Nothing to restart: no approval is awaited.
    create_pod(&w, "installer-2-n1-3").await;
    in_pod(w.installer(2, "n1"), "installer-2-n1-3")
        .arg("--approval-window=1s")
        .run()
        .await
        .expect(0, "unchanged", "AlreadyInstalled");
    // Bad input: no pod to look at, or a zero window.
    let run = w.installer(2, "n1").arg("--approval-window=5s").run().await;
    let report = run.expect(2, "invalid", "InvalidArgs");
    assert!(
        report["message"].as_str().unwrap().contains("POD_NAME"),
        "{report}"
    );
    let zero = w.installer(2, "n1").arg("--approval-window=0s").run().await;
    zero.expect(2, "invalid", "InvalidArgs");
}

/// Creates installer pod `name` on n1 in the test namespace (retried while the namespace's
/// default ServiceAccount appears).
async fn create_pod(w: &World, name: &str) -> Pod {
    let pod = Pod {
        metadata: meta(name),
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("n1".into()),
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "installer".into(),
                image: Some("etcd-static-operator".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let started = Instant::now();
    loop {
        match Api::<Pod>::namespaced(w.client(), &w.ns)
            .create(&PostParams::default(), &pod)
            .await
        {
            Ok(created) => return created,
            Err(e) if started.elapsed() < DEADLINE => {
                eprintln!("creating installer pod {name}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("creating installer pod {name}: {e}"),
        }
    }
}

/// Creates ConfigMap `name` holding `key`. Keys the API refuses are written past validation
/// into the stand-in's etcd (a forged or corrupted object the API then serves as stored);
/// `false` when that is impossible (a real cluster).
async fn configmap_with_key(w: &World, name: &str, key: &str) -> bool {
    let api = Api::<ConfigMap>::namespaced(w.client(), &w.ns);
    let cm = configmap(name, [(key.to_string(), "x".to_string())].into());
    let refused = match api.create(&PostParams::default(), &cm).await {
        Ok(_) => return true,
        Err(e) => e,
    };
    let Some(server) = w.api.stand_in_server() else {
        eprintln!("API refused key {key:?} ({refused}); cannot forge it on a real cluster");
        return false;
    };
    eprintln!("API refused key {key:?}; forging it in storage");
    api.create(
        &PostParams::default(),
        &configmap(name, [("placeholder".to_string(), "x".to_string())].into()),
    )
    .await
    .unwrap();
    let store = apiserver_standin::store::Store::connect(
        &server.config().etcd_endpoints,
        Duration::from_secs(5),
        None,
    )
    .await
    .unwrap();
    let etcd_key = format!("{}/configmaps/{}/{name}", server.config().key_prefix, w.ns);
    let stored = store.get(&etcd_key).await.unwrap().expect("stored object");
    let mut object = stored.object.clone();
    object["data"] = serde_json::json!({ key: "x" });
    store
        .update(&etcd_key, &object, stored.mod_revision)
        .await
        .unwrap();
    let served = api.get(name).await.unwrap();
    assert!(
        served.data.unwrap_or_default().contains_key(key),
        "the API does not serve the forged key {key:?}"
    );
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_are_refused_without_touching_the_node() {
    let w = World::start().await;
    w.publish(1, &["n1"]).await;
    let mut last_hostile = None;
    for (i, key) in [
        "a/b",
        "/etc/passwd",
        "../escape",
        "..",
        "a..b",
        ".hidden",
        ".",
        "",
        "..hidden",
    ]
    .into_iter()
    .enumerate()
    {
        let rev = 10 + i as u64;
        w.publish(rev, &["n1"]).await;
        if !configmap_with_key(&w, &format!("hostile-{rev}"), key).await {
            continue;
        }
        last_hostile = Some(rev);
        let before = snapshot(w.root.path());
        let run = w
            .installer(rev, "n1")
            .arg("--optional-configmaps=hostile")
            .run()
            .await;
        let report = run.expect(3, "refused", "HostileKey");
        assert!(
            report["message"]
                .as_str()
                .unwrap()
                .contains(&format!("{key:?}")),
            "{report}"
        );
        assert_eq!(
            before,
            snapshot(w.root.path()),
            "key {key:?} touched the node"
        );
        assert!(
            !w.resources().exists(),
            "key {key:?} created the resource dir"
        );
    }

    // Also refused when the node already has a revision: nothing of it changes.
    let Some(hostile) = last_hostile else { return };
    w.installer(1, "n1")
        .run()
        .await
        .expect(0, "installed", "Installed");
    let before = snapshot(w.root.path());
    let run = w
        .installer(hostile, "n1")
        .arg("--optional-configmaps=hostile")
        .run()
        .await;
    run.expect(3, "refused", "HostileKey");
    assert_eq!(before, snapshot(w.root.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_required_object_fails_after_retries_a_missing_optional_one_is_skipped() {
    let w = World::start().await;
    w.publish(1, &["n1"]).await;

    let run = w
        .installer(1, "n1")
        .arg("--secrets=missing")
        .set("--timeout=2s")
        .run()
        .await;
    let report = run.expect(1, "failed", "MissingResource");
    assert!(
        report["message"].as_str().unwrap().contains("missing-1"),
        "{report}"
    );
    assert!(
        run.took >= Duration::from_secs(2),
        "gave up early: {:?}",
        run.took
    );
    assert!(
        run.took < Duration::from_secs(15),
        "timeout not honoured: {:?}",
        run.took
    );
    assert!(
        run.stderr.contains("not available yet"),
        "no retries: {}",
        run.stderr
    );
    assert!(!w.root.path().join("static-pod-resources").exists());
    assert!(!w.manifests().exists());

    // Optional ones that don't exist are skipped with a log line.
    let run = w
        .installer(1, "n1")
        .arg("--optional-secrets=nope")
        .arg("--optional-configmaps=nada,etcd-all-bundles-extra")
        .run()
        .await;
    run.expect(0, "installed", "Installed");
    assert_eq!(
        run.stderr
            .matches("optional object not found, skipped")
            .count(),
        3,
        "{}",
        run.stderr
    );
    assert_eq!(
        names(&w.resources().join("etcd-pod-1/secrets")),
        vec!["etcd-all-certs"]
    );
    assert_eq!(
        names(&w.resources().join("etcd-pod-1/configmaps")),
        vec!["etcd-all-bundles", "etcd-pod"]
    );

    // A required object that appears while the installer retries is picked up.
    w.publish(2, &["n1"]).await;
    let mut late = w.installer(2, "n1").arg("--secrets=late").spawn();
    late.wait_stderr("not available yet").await;
    w.secret("late-2", [("token".to_string(), b"t".to_vec())].into())
        .await;
    let run = late.wait().await;
    run.expect(0, "installed", "Installed");
    assert_eq!(
        read(&w.resources().join("etcd-pod-2/secrets/late/token")),
        "t"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_installer_is_refused_while_the_first_holds_the_lock() {
    let w = World::start().await;
    w.publish(1, &["n1"]).await;
    let mut first = w.installer(1, "n1").hook("pause:file:2").spawn();
    first.wait_stderr(PAUSE_MARKER).await;

    let before = snapshot(w.root.path());
    let second = w.installer(1, "n1").run().await;
    let report = second.expect(4, "busy", "Busy");
    assert!(
        report["message"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {}", first.pid())),
        "{report}"
    );
    assert_eq!(
        before,
        snapshot(w.root.path()),
        "the refused installer touched the node"
    );

    // The holder dies: the kernel drops its lock and the next installer finishes the job.
    first.kill9().await;
    w.installer(1, "n1")
        .run()
        .await
        .expect(0, "installed", "Installed");
    assert_eq!(read(&w.manifest_file()), manifest("n1", 1));
    assert_eq!(
        names(&w.resources()),
        vec![".etcd-pod-installer.lock", "etcd-pod-1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_installers_never_corrupt_the_node() {
    let w = World::start().await;
    w.publish(1, &["n1", "n2"]).await;
    let racers: Vec<Spawned> = (0..4).map(|_| w.installer(1, "n1").spawn()).collect();
    let mut outcomes = Vec::new();
    for r in racers {
        let run = r.wait().await;
        let report = run.report();
        outcomes.push((run.code, report["outcome"].as_str().unwrap().to_owned()));
    }
    for (code, outcome) in &outcomes {
        assert!(
            matches!(
                (*code, outcome.as_str()),
                (0, "installed") | (0, "unchanged") | (4, "busy")
            ),
            "{outcomes:?}"
        );
    }
    assert_eq!(
        outcomes.iter().filter(|(_, o)| o == "installed").count(),
        1,
        "exactly one racer writes: {outcomes:?}"
    );
    assert_eq!(read(&w.manifest_file()), manifest("n1", 1));
    assert_eq!(
        names(&w.resources()),
        vec![".etcd-pod-installer.lock", "etcd-pod-1"]
    );
    assert_eq!(names(&w.manifests()), vec!["etcd-pod.yaml"]);
    w.installer(1, "n1")
        .run()
        .await
        .expect(0, "unchanged", "AlreadyInstalled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_files_keeps_the_old_manifest_and_leaves_no_partial_revision() {
    let w = World::start().await;
    for rev in 1..=3 {
        w.publish(rev, &["n1", "n2"]).await;
    }
    w.installer(1, "n1")
        .run()
        .await
        .expect(0, "installed", "Installed");
    let old_manifest = snapshot(&w.manifests());

    // Killed after 3 of the revision's files.
    let mut crashing = w.installer(2, "n1").hook("pause:file:3").spawn();
    crashing.wait_stderr(PAUSE_MARKER).await;
    let staging = w.resources().join(".etcd-pod-2.staging");
    assert!(
        staging.is_dir(),
        "no staging dir: {:?}",
        names(&w.resources())
    );
    crashing.kill9().await;
    assert!(
        !w.resources().join("etcd-pod-2").exists(),
        "partial revision visible"
    );
    assert_eq!(
        snapshot(&w.manifests()),
        old_manifest,
        "the old manifest changed"
    );
    assert_eq!(read(&w.manifest_file()), manifest("n1", 1));
    // A leftover temp manifest of an older crash, too.
    let stale_tmp = w.manifests().join(".etcd-pod.yaml.tmp-999999");
    std::fs::write(&stale_tmp, "half").unwrap();
    let partial = snapshot(&staging)
        .values()
        .filter(|v| v.kind == "file")
        .count();
    assert_eq!(partial, 3, "the crash was not between files");

    // The stale staging dir is not a revision: re-installing 1 is not a downgrade, and cleans up.
    w.installer(1, "n1")
        .run()
        .await
        .expect(0, "unchanged", "AlreadyInstalled");
    assert_eq!(
        names(&w.resources()),
        vec![".etcd-pod-installer.lock", "etcd-pod-1"]
    );
    assert_eq!(names(&w.manifests()), vec!["etcd-pod.yaml"]);

    // An injected failure (not a crash) cleans its own staging dir and reports it.
    let failed = w.installer(2, "n1").hook("fail:file:4").run().await;
    failed.expect(1, "failed", "TestHook");
    assert_eq!(
        names(&w.resources()),
        vec![".etcd-pod-installer.lock", "etcd-pod-1"]
    );
    assert_eq!(read(&w.manifest_file()), manifest("n1", 1));

    // The retry after the crash installs revision 2 whole.
    w.installer(2, "n1")
        .run()
        .await
        .expect(0, "installed", "Installed");
    assert_eq!(read(&w.manifest_file()), manifest("n1", 2));
    assert_eq!(
        read(
            &w.resources()
                .join("etcd-pod-2/secrets/etcd-all-certs/n2.key")
        ),
        "key n2 r2"
    );

    // Killed after the revision dir is in place but before the manifest: the dir is complete,
    // the manifest still the old one; the retry keeps the dir and writes the manifest.
    let mut crashing = w.installer(3, "n1").hook("pause:before-manifest").spawn();
    crashing.wait_stderr(PAUSE_MARKER).await;
    crashing.kill9().await;
    assert_eq!(read(&w.manifest_file()), manifest("n1", 2));
    assert_eq!(
        snapshot(&w.resources().join("etcd-pod-3"))
            .values()
            .filter(|v| v.kind == "file")
            .count(),
        10
    );
    let run = w.installer(3, "n1").run().await;
    let report = run.expect(0, "installed", "Installed");
    assert!(
        report["message"].as_str().unwrap().contains("Kept"),
        "{report}"
    );
    assert_eq!(read(&w.manifest_file()), manifest("n1", 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_this_nodes_manifest_is_installed() {
    let w = World::start().await;
    w.publish(1, &["n1", "n2"]).await;

    // No key for this node.
    let run = w.installer(1, "n3").run().await;
    let report = run.expect(3, "refused", "NoManifestForNode");
    assert!(
        report["message"].as_str().unwrap().contains("pod-n3.yaml"),
        "{report}"
    );

    // n1's key holds n2's manifest (ETCD_NAME), or a pod pinned to n2 (spec.nodeName).
    let pinned = manifest("n1", 2).replace("spec:\n", "spec:\n  nodeName: n2\n");
    w.configmap(
        "etcd-pod-2",
        [
            ("pod-n1.yaml".to_string(), manifest("n2", 2)),
            ("pod-n2.yaml".to_string(), manifest("n2", 2)),
        ]
        .into(),
    )
    .await;
    w.configmap("etcd-pod-3", [("pod-n1.yaml".to_string(), pinned)].into())
        .await;
    for rev in [2, 3] {
        let run = w.bare_installer(rev, "n1").arg("--secrets=").run().await;
        let report = run.expect(3, "refused", "ManifestForAnotherNode");
        assert!(
            report["message"].as_str().unwrap().contains("\"n2\""),
            "{report}"
        );
    }
    assert!(!w.resources().exists());
    assert!(!w.manifests().exists());

    // n2 gets exactly its own.
    w.installer(1, "n2")
        .run()
        .await
        .expect(0, "installed", "Installed");
    assert_eq!(read(&w.manifest_file()), manifest("n2", 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_pod_it_emits_events_about_itself() {
    let w = World::start().await;
    w.publish(1, &["n1"]).await;
    let pod = create_pod(&w, "installer-1-n1").await;
    let in_pod = |inst: Installer| {
        inst.env("POD_NAME", "installer-1-n1")
            .env("POD_NAMESPACE", &w.ns)
    };

    in_pod(w.installer(1, "n1"))
        .run()
        .await
        .expect(0, "installed", "Installed");
    in_pod(
        w.installer(1, "n1")
            .arg("--secrets=gone")
            .set("--timeout=1s"),
    )
    .run()
    .await
    .expect(1, "failed", "MissingResource");

    let events = Api::<Event>::namespaced(w.client(), &w.ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let mut seen: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.involved_object.name.as_deref() == Some("installer-1-n1"))
        .map(|e| {
            assert_eq!(e.involved_object.kind.as_deref(), Some("Pod"));
            assert_eq!(e.involved_object.uid, pod.metadata.uid);
            assert_eq!(
                e.source.as_ref().and_then(|s| s.component.as_deref()),
                Some("etcd-installer")
            );
            (
                e.reason.clone().unwrap_or_default(),
                e.type_.clone().unwrap_or_default(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("StaticPodInstallerCompleted".into(), "Normal".into()),
            ("StaticPodInstallerFailed".into(), "Warning".into()),
        ]
    );
    let failed = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("StaticPodInstallerFailed"))
        .unwrap();
    assert!(failed.message.as_deref().unwrap_or("").contains("gone-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_flags_exit_2_before_any_api_call() {
    let w = World::start().await;
    let run = w.installer(1, "n1").arg("--configmaps=../etc").run().await;
    run.expect(2, "invalid", "InvalidArgs");
    let run = w.installer(1, "n1").hook("explode:now").run().await;
    run.expect(2, "invalid", "InvalidArgs");
    assert!(!w.resources().exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_fails_within_the_timeout() {
    let w = World::start().await;
    // A port nothing listens on, in place of the API's address (the stand-in's or
    // kube-apiserver's: the installer must give up on either within its timeout).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let kubeconfig = w.root.path().join("dead-kubeconfig");
    let server = w.api.server_url().trim_end_matches('/');
    let text = read(w.api.kubeconfig()).replace(server, &format!("http://{closed}"));
    assert!(text.contains(&closed.to_string()), "{text}");
    std::fs::write(&kubeconfig, text).unwrap();
    let run = w
        .installer(1, "n1")
        .set(&format!("--kubeconfig={}", kubeconfig.display()))
        .set("--timeout=2s")
        .run()
        .await;
    run.expect(1, "failed", "ApiUnavailable");
    assert!(run.took < Duration::from_secs(15), "{:?}", run.took);
    assert!(!w.resources().exists());
}

/// A `--timeout` too large to add to a clock is a usage error (exit 2) naming the value; it used
/// to panic.
#[test]
fn an_overflowing_timeout_is_a_usage_error_not_a_panic() {
    let out = std::process::Command::new(BIN)
        .args([
            "--revision",
            "1",
            "--namespace",
            "etcd",
            "--pod",
            "etcd-pod",
            "--node-name",
            "n1",
            "--resource-dir",
            "/nonexistent/resources",
            "--pod-manifest-dir",
            "/nonexistent/manifests",
            "--timeout",
            "18446744073709551615s",
        ])
        .env_clear()
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid duration \"18446744073709551615s\""),
        "{stderr}"
    );
}

/// `--log-format json`: every stderr line is one JSON object (a log pipeline parses each), the
/// refusal among them with its level and fields; stdout keeps only the one-line result.
#[test]
fn json_logs_are_one_object_per_stderr_line() {
    let out = std::process::Command::new(BIN)
        .args([
            "--log-format",
            "json",
            "--revision",
            "1",
            "--namespace",
            "etcd",
            "--node-name",
            "n1",
            "--resource-dir",
            "/nonexistent/r",
            "--pod-manifest-dir",
            "/nonexistent/m",
            "--pod",
            "a-.b",
        ])
        .env_remove("ETCD_INSTALLER_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let refusal = lines
        .iter()
        .find(|l| l["fields"]["reason"] == "InvalidArgs")
        .unwrap_or_else(|| panic!("no InvalidArgs line in {stderr}"));
    assert_eq!(refusal["level"], "ERROR", "{refusal}");
    assert!(refusal["timestamp"].is_string(), "{refusal}");
    assert!(
        refusal["fields"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("a-.b"),
        "{refusal}"
    );
    assert_eq!(out.status.code(), Some(2));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["reason"], "InvalidArgs");
}
