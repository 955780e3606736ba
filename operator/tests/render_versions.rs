//! Every etcd version renders what that version accepts (#66). For each etcd release the
//! operator runs (3.4.23, 3.5.16, 3.5.36, 3.6.16, 3.7.3), the etcd container the operator
//! renders for an image of that release is run by that release's real binary, with exactly the
//! rendered arguments and environment: only the values that point into the container's volume
//! mounts (the resource dir with the certificates, the data dir) are pointed at a temp dir, which
//! holds the certificates the bootstrap render issued. Two renders run, one after the other,
//! on one data dir and the node's own loopback address ([`LoopbackAddr`]):
//!
//! 1. the bootstrap render (`bootstrap::render`, what `etcd-operator render` writes: a new
//!    single-member cluster) must take a put and answer a get over the rendered client URL, with
//!    mutual TLS as rendered (a client certificate of the render's CA, kube-apiserver's), and
//!    answer `/health` where the rendered readiness probe asks;
//! 2. the revision the operator renders next for that member (`render_pod` with the live member
//!    list, as the target-config controller does: `ETCD_MEMBER_IDS`,
//!    `ETCD_INITIAL_CLUSTER_STATE=existing`) must still serve the key, take another write, and
//!    have run the initial corruption check every minor's flags ask for (etcd runs it on a data
//!    dir that exists): the flag or gate was not only accepted but acted on.
//!
//! Each etcd's log (zap JSON, and any plain line a flag parser prints) must hold no line where
//! etcd complains about what it was given: a deprecated or unknown flag or feature gate, a flag
//! not defined, a gate that is GA and will be removed, an unrecognized `ETCD_*` variable (except
//! the two contract variables etcd-verify reads beside etcd, [`CONTRACT_ONLY_ENV`]). The test
//! names each such line. A release whose binary is not installed is skipped loudly
//! (`SKIPPED: ...`); the test fails when none ran. A binary that reports another version than
//! its directory says fails the test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use etcd_fixture::LoopbackAddr;
use etcd_operator::api::EtcdClusterSpec;
use etcd_operator::bootstrap::apiserver::{CA_FILE, CERT_FILE, KEY_FILE};
use etcd_operator::bootstrap::{TOKEN_FILE, render as bootstrap_render};
use etcd_operator::podspec::{
    HEALTH_PORT, Images, NodeTarget, PodInput, parse_pod, render_pod, substitute_revision,
};
use k8s_openapi::api::core::v1::Pod;
use membership::{ClientConfig, EtcdClient, TlsFiles};

/// How long one etcd may take to answer, from its start.
const DEADLINE: Duration = Duration::from_secs(30);

/// Each release and where `scripts/install-deps` puts its binary.
const RELEASES: [(&str, &str); 5] = [
    ("3.4.23", "/usr/bin/etcd"),
    ("3.5.16", "/opt/etcd-3.5.16/bin/etcd"),
    ("3.5.36", "/opt/etcd-3.5.36/bin/etcd"),
    ("3.6.16", "/opt/etcd-3.6.16/bin/etcd"),
    ("3.7.3", "/opt/etcd-3.7.3/bin/etcd"),
];

/// Variables of the pod's env contract that only etcd-verify reads (it runs in etcd's container
/// and becomes etcd): etcd lists them as "unrecognized environment variable" and goes on
/// (docs/architecture.md). Any other `ETCD_*` variable etcd does not know is a complaint.
const CONTRACT_ONLY_ENV: [&str; 2] = ["ETCD_MEMBER_IDS=", "ETCD_STATIC_POD_REVISION="];

/// Words of a log line in which etcd complains about a flag, a feature gate or a variable.
const COMPLAINT_WORDS: [&str; 8] = [
    "deprecated",
    "unknown flag",
    "flag provided but not defined",
    "unrecognized",
    "unknown feature",
    "will be removed",
    "decommissioned",
    "invalid value",
];

/// zap levels at which etcd warns or worse.
const WARN_LEVELS: [&str; 5] = ["warn", "error", "dpanic", "panic", "fatal"];

/// The lines of an etcd log that complain about what etcd was given: warn-or-worse zap lines,
/// and plain lines (Go's flag parser and etcd 3.4's env check print those), that mention one of
/// [`COMPLAINT_WORDS`], less the [`CONTRACT_ONLY_ENV`] notices.
fn complaints(log: &str) -> Vec<String> {
    log.lines()
        .filter(
            |line| match serde_json::from_str::<serde_json::Value>(line) {
                Ok(v) => v["level"]
                    .as_str()
                    .is_some_and(|level| WARN_LEVELS.contains(&level)),
                Err(_) => true,
            },
        )
        .filter(|line| {
            let lower = line.to_lowercase();
            COMPLAINT_WORDS.iter().any(|w| lower.contains(w))
        })
        .filter(|line| {
            !(line.contains("unrecognized environment variable")
                && CONTRACT_ONLY_ENV.iter().any(|v| line.contains(v)))
        })
        .map(str::to_owned)
        .collect()
}

/// The warn-or-worse zap lines (their messages), for the report.
fn warnings(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| {
            v["level"]
                .as_str()
                .is_some_and(|level| WARN_LEVELS.contains(&level))
        })
        .map(|v| v["msg"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[path = "support/etcd_process.rs"]
mod etcd_process;
use etcd_process::Etcd;

impl Etcd {
    /// An error if etcd has exited: its status, the log's complaints (a refused flag is printed
    /// above a long usage text) and the log's tail.
    fn exited(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(format!(
                "etcd exited ({status}); complaints: {:#?}\nlog tail:\n{}",
                complaints(&self.log()),
                self.log_tail(20)
            )),
            _ => Ok(()),
        }
    }
}

/// What etcd's container runs: the program after `--` of the `etcd-verify exec-etcd` wrapper,
/// its arguments and env, with mount paths rewritten.
#[derive(Debug)]
struct EtcdRun {
    args: Vec<String>,
    env: BTreeMap<String, String>,
}

/// Where each volume of the etcd container is on this machine, by volume name.
fn local_mounts(root: &Path) -> BTreeMap<&'static str, PathBuf> {
    BTreeMap::from([
        ("resource-dir", root.join("out/etcd-certs")),
        ("data-dir", root.join("data")),
        ("verify-state", root.join("verify-state")),
        ("verify-handoff", root.join("verify-handoff")),
    ])
}

/// `value` with a leading container mount path replaced by its local dir.
fn rewrite(value: &str, mounts: &[(String, PathBuf)]) -> String {
    for (mount, local) in mounts {
        if let Some(rest) = value.strip_prefix(mount.as_str())
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("{}{rest}", local.display());
        }
    }
    value.to_owned()
}

/// The etcd container of `pod`, ready to run here: every value that starts with one of its
/// mount paths points into `root` instead; a value left pointing at another absolute path is
/// an error (a node path this test would not provide).
fn etcd_run(pod: &Pod, root: &Path) -> Result<EtcdRun, String> {
    let spec = pod.spec.as_ref().ok_or("the pod has no spec")?;
    let c = spec
        .containers
        .iter()
        .find(|c| c.name == "etcd")
        .ok_or("the pod has no etcd container")?;
    let local = local_mounts(root);
    let mut mounts = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let dir = local.get(m.name.as_str()).ok_or_else(|| {
            format!(
                "etcd mounts volume {}, which this test does not know",
                m.name
            )
        })?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        mounts.push((m.mount_path.clone(), dir.clone()));
    }
    let command = c.command.as_deref().unwrap_or_default();
    let program = command
        .iter()
        .position(|a| a == "--")
        .map(|i| &command[i + 1..])
        .ok_or_else(|| format!("etcd's command has no `-- etcd`: {command:?}"))?;
    if program.first().map(String::as_str) != Some("etcd") {
        return Err(format!("etcd's command does not run etcd: {command:?}"));
    }
    let mut args = Vec::new();
    for a in program[1..].iter().chain(c.args.iter().flatten()) {
        args.push(match a.split_once('=') {
            Some((flag, value)) => format!("{flag}={}", rewrite(value, &mounts)),
            None => a.clone(),
        });
    }
    let mut env = BTreeMap::new();
    for e in c.env.iter().flatten() {
        let value = e
            .value
            .as_deref()
            .ok_or_else(|| format!("env {} has no plain value", e.name))?;
        env.insert(e.name.clone(), rewrite(value, &mounts));
    }
    let values = args
        .iter()
        .filter_map(|a| a.split_once('=').map(|(_, v)| v))
        .chain(env.values().map(String::as_str));
    for v in values {
        if v.starts_with('/') && !v.starts_with(&*root.to_string_lossy()) {
            return Err(format!("{v} is a node path outside the container's mounts"));
        }
    }
    Ok(EtcdRun { args, env })
}

fn start(binary: &Path, run: &EtcdRun, log: PathBuf) -> Result<Etcd, String> {
    let stderr = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = Command::new(binary)
        .env_clear()
        .envs(&run.env)
        .args(&run.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    Ok(Etcd { child, log })
}

/// The version `etcd --version` reports.
fn reported_version(binary: &Path) -> Result<String, String> {
    let o = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| format!("{} --version: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&o.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("etcd Version: "))
        .map(str::to_owned)
        .ok_or_else(|| format!("{} --version printed {text:?}", binary.display()))
}

/// Retries `call` until it returns `Ok`, etcd exits or [`DEADLINE`] passes from `since`.
async fn eventually<T, F, Fut>(
    etcd: &mut Etcd,
    since: Instant,
    what: &str,
    mut call: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    loop {
        let last = match tokio::time::timeout(Duration::from_secs(5), call()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e,
            Err(_) => "timed out".to_owned(),
        };
        etcd.exited()?;
        if since.elapsed() > DEADLINE {
            return Err(format!(
                "{what}: no success within {DEADLINE:?}; last: {last}\n{}",
                etcd.log_tail(20)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET /health` on etcd's plain listener, as the rendered readiness probe asks.
fn health(ip: IpAddr) -> Result<(), String> {
    let addr = SocketAddr::new(ip, HEALTH_PORT);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /health HTTP/1.0\r\nHost: etcd\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).map_err(|e| e.to_string())?;
    let ok = reply.starts_with("HTTP/1.") && reply.contains(" 200 ");
    if ok && reply.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(format!("/health answered {reply:?}"))
    }
}

fn client(url: &str, out: &Path) -> Result<EtcdClient, String> {
    EtcdClient::new(ClientConfig {
        endpoints: vec![url.parse().map_err(|e| format!("{url}: {e}"))?],
        tls: Some(TlsFiles {
            ca: out.join(CA_FILE),
            cert: out.join(CERT_FILE),
            key: out.join(KEY_FILE),
        }),
        call_timeout: Duration::from_secs(2),
    })
    .map_err(|e| e.to_string())
}

/// What one release showed.
struct Outcome {
    bootstrap: Duration,
    revision: Duration,
    warnings: std::collections::BTreeSet<String>,
}

/// A release's etcd image as the operator is given it.
fn images(version: &str) -> Images {
    Images {
        etcd: format!("registry.example/etcd:{version}"),
        operator: "registry.example/etcd-static-operator:0.1.0".into(),
    }
}

/// Checks the log of one start; fails naming every complaint.
fn check_log(etcd: &Etcd, what: &str) -> Result<Vec<String>, String> {
    let log = etcd.log();
    let bad = complaints(&log);
    if bad.is_empty() {
        Ok(warnings(&log))
    } else {
        Err(format!(
            "{what}: etcd complains about what it was given:\n{}",
            bad.join("\n")
        ))
    }
}

/// One release's node: its binary, temp dir, address and the images rendered for it.
struct Node<'a> {
    binary: &'a Path,
    root: &'a Path,
    ip: IpAddr,
    images: Images,
}

impl Node<'_> {
    /// `etcd-pod.yaml`, the certificates and the client material of the bootstrap render.
    fn out(&self) -> PathBuf {
        self.root.join("out")
    }

    /// Starts `pod`'s etcd container; its log goes to `<name>.log`.
    fn start(&self, pod: &Pod, name: &str) -> Result<(Etcd, EtcdRun), String> {
        let run = etcd_run(pod, self.root)?;
        let etcd = start(self.binary, &run, self.root.join(format!("{name}.log")))?;
        Ok((etcd, run))
    }

    /// Waits for the rendered readiness probe's `/health`, then checks the log.
    async fn healthy(
        &self,
        etcd: &mut Etcd,
        started: Instant,
        what: &str,
    ) -> Result<Vec<String>, String> {
        let ip = self.ip;
        eventually(etcd, started, "/health", move || async move { health(ip) }).await?;
        check_log(etcd, what)
    }
}

/// 1. The bootstrap render, a new cluster of one: a put and a get with the rendered client URL
///    and TLS. Returns how long it took to answer, the warnings, the live member list and the
///    client.
async fn bootstrap_phase(
    n: &Node<'_>,
) -> Result<(Duration, Vec<String>, Vec<membership::Member>, EtcdClient), String> {
    bootstrap_render(
        "master-1",
        n.ip,
        &n.out(),
        None,
        false,
        n.images.clone(),
        time::OffsetDateTime::now_utc(),
    )
    .map_err(|e| format!("render: {e}"))?;
    let text = std::fs::read_to_string(n.out().join("etcd-pod.yaml")).map_err(|e| e.to_string())?;
    let pod = parse_pod(&text).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let (mut etcd, run) = n.start(&pod, "bootstrap")?;
    let url = run
        .env
        .get("ETCD_ADVERTISE_CLIENT_URLS")
        .ok_or("no ETCD_ADVERTISE_CLIENT_URLS rendered")?;
    let client = client(url, &n.out())?;
    let c = &client;
    eventually(&mut etcd, started, "put", move || async move {
        c.put("/render", b"ok".to_vec())
            .await
            .map_err(|e| e.to_string())
    })
    .await?;
    let read = c.get("/render").await.map_err(|e| e.to_string())?;
    if read.as_deref() != Some(&b"ok"[..]) {
        return Err(format!("get /render after the put read {read:?}"));
    }
    let warnings = n.healthy(&mut etcd, started, "bootstrap render").await?;
    let took = started.elapsed();
    let live = c.member_list().await.map_err(|e| e.to_string())?;
    Ok((took, warnings, live.members, client))
}

/// 2. The revision the operator renders next for this member (as the target-config controller
///    does, the revision number substituted after), on the bootstrap's data dir.
async fn revision_phase(
    n: &Node<'_>,
    members: &[membership::Member],
    c: &EtcdClient,
) -> Result<(Duration, Vec<String>), String> {
    let token = std::fs::read_to_string(n.out().join(TOKEN_FILE)).map_err(|e| e.to_string())?;
    let node = NodeTarget::new("master-1", n.ip);
    let spec = EtcdClusterSpec {
        local_client_listener: false,
        ..EtcdClusterSpec::default()
    };
    let text = render_pod(&PodInput {
        node: &node,
        nodes: std::slice::from_ref(&node),
        members,
        revision: None,
        bootstrap: false,
        cluster_token: Some(token.trim()),
        spec: &spec,
        images: &n.images,
        resource_host_dir: None,
    })
    .map_err(|e| format!("render the revision: {e}"))?;
    let pod = parse_pod(&substitute_revision(&text, 1)).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let (mut etcd, run) = n.start(&pod, "revision")?;
    let state = run.env.get("ETCD_INITIAL_CLUSTER_STATE");
    if state.map(String::as_str) != Some("existing") {
        return Err(format!(
            "the revision is not for an existing cluster: {run:?}"
        ));
    }
    let read = eventually(&mut etcd, started, "get", move || async move {
        c.get("/render").await.map_err(|e| e.to_string())
    })
    .await?;
    if read.as_deref() != Some(&b"ok"[..]) {
        return Err(format!("the revision's etcd read {read:?} for /render"));
    }
    c.put("/revision", b"ok".to_vec())
        .await
        .map_err(|e| e.to_string())?;
    let warnings = n.healthy(&mut etcd, started, "revision").await?;
    let took = started.elapsed();
    // Accepted is not enough: the corruption check each minor's flags ask for ran (etcd runs it
    // on a data dir that exists, so on this second start).
    if !etcd.log().contains("starting initial corruption check") {
        return Err(format!(
            "the revision's etcd ran no initial corruption check:\n{}",
            etcd.log_tail(20)
        ));
    }
    Ok((took, warnings))
}

/// Both renders of `version` under `binary`: see the module doc.
async fn run_release(version: &str, binary: &Path) -> Result<Outcome, String> {
    let reported = reported_version(binary)?;
    if reported != version {
        return Err(format!(
            "{} reports version {reported}, not {version}",
            binary.display()
        ));
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let addr = LoopbackAddr::acquire().map_err(|e| e.to_string())?;
    let node = Node {
        binary,
        root: tmp.path(),
        ip: IpAddr::V4(addr.ip()),
        images: images(version),
    };
    let (bootstrap, mut warnings, members, client) = bootstrap_phase(&node).await?;
    let (revision, more) = revision_phase(&node, &members, &client).await?;
    warnings.extend(more);
    Ok(Outcome {
        bootstrap,
        revision,
        warnings: warnings.into_iter().collect(),
    })
}

#[tokio::test]
async fn each_release_starts_and_answers_with_exactly_what_is_rendered_for_it() {
    let began = Instant::now();
    let mut ran = Vec::new();
    let mut failed = Vec::new();
    for (version, binary) in RELEASES {
        let binary = Path::new(binary);
        if !binary.exists() {
            eprintln!(
                "SKIPPED: etcd {version}: {} is not installed (scripts/install-deps)",
                binary.display()
            );
            continue;
        }
        match run_release(version, binary).await {
            Ok(o) => {
                eprintln!(
                    "etcd {version}: bootstrap render answered in {:.1?}, revision in {:.1?}; \
                     no complaint; other warnings: {:?}",
                    o.bootstrap, o.revision, o.warnings
                );
                ran.push(version);
            }
            Err(e) => {
                eprintln!("etcd {version}: FAILED: {e}");
                failed.push(format!("etcd {version}: {e}"));
            }
        }
    }
    eprintln!("releases run: {ran:?}, in {:.1?}", began.elapsed());
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    assert!(
        !ran.is_empty(),
        "no etcd release ran: none of {:?} is installed (scripts/install-deps)",
        RELEASES.map(|(_, b)| b)
    );
}

/// The log check itself: the lines etcd writes when it is given something it deprecates or
/// does not know are caught; the contract variables' notice and ordinary warnings are not.
#[test]
fn complaints_are_told_from_ordinary_warnings() {
    let log = [
        r#"{"level":"warn","ts":"t","caller":"etcdmain/config.go:1","msg":"--experimental-initial-corrupt-check is deprecated in 3.6 and will be decommissioned in 3.7. Use '--feature-gates=InitialCorruptCheck=true' instead."}"#,
        r#"{"level":"warn","msg":"Setting GA feature gate CompactHashCheck=true. It will be removed in a future release."}"#,
        r#"{"level":"warn","msg":"unrecognized environment variable","environment-variable":"ETCD_INITIAL_CLUSTR=x"}"#,
        "flag provided but not defined: -bogus",
        r#"{"level":"warn","msg":"unrecognized environment variable","environment-variable":"ETCD_MEMBER_IDS=1=https://a:2380"}"#,
        "2026-01-01 W | pkg/flags: unrecognized environment variable ETCD_STATIC_POD_REVISION=1",
        r#"{"level":"warn","msg":"simple token is not cryptographically signed"}"#,
        r#"{"level":"info","msg":"the deprecated v2 store is empty"}"#,
    ]
    .join("\n");
    let found = complaints(&log);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].contains("--experimental-initial-corrupt-check"));
    assert!(found[1].contains("GA feature gate"));
    assert!(found[2].contains("ETCD_INITIAL_CLUSTR"));
    assert!(found[3].contains("-bogus"));
    assert_eq!(warnings(&log).len(), 5);
}
