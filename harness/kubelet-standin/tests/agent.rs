//! Node agent tests against real processes: real etcd (Debian `/usr/bin/etcd`) as a static
//! pod, run-to-completion installer-style pods, probes, restarts, mount isolation between two
//! simulated nodes, and clean teardown. Waits are condition polls with deadlines; on timeout
//! the last thing seen is printed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_fixture::LoopbackAddr;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kubelet_standin::backoff::Backoff;
use kubelet_standin::mounts::BindMount;
use kubelet_standin::runner::{Launch, Process};
use kubelet_standin::status::{ContainerPhase, PodObservation};
use kubelet_standin::{NodeAgent, NodeAgentHandle, NodeConfig, PodKey};

const DEADLINE: Duration = Duration::from_secs(30);

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kubelet-standin"))
}

fn fast_backoff() -> Backoff {
    Backoff {
        initial: Duration::from_millis(200),
        max: Duration::from_secs(2),
        reset_after: Duration::from_secs(60),
    }
}

/// Polls `probe` until it returns Ok or `timeout` passes; panics with the last seen state.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().await {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One simulated node with its own address and root directory.
struct TestNode {
    name: String,
    addr: LoopbackAddr,
    root: tempfile::TempDir,
    agent: Option<NodeAgentHandle>,
}

impl TestNode {
    async fn start(name: &str, client: Option<kube::Client>) -> Self {
        Self::start_with(name, client, None).await
    }

    /// A node on `api` (client, kubeconfig for pods without a token, the API's address).
    async fn start_with(
        name: &str,
        client: Option<kube::Client>,
        api: Option<&kube_testapi::TestApi>,
    ) -> Self {
        let addr = LoopbackAddr::acquire().unwrap();
        let root = tempfile::tempdir().unwrap();
        let mut cfg = NodeConfig::new(
            name,
            addr.ip().into(),
            root.path(),
            helper().parent().unwrap(),
        )
        .with_helper(helper())
        .with_backoff(fast_backoff());
        cfg.manifest_poll = Duration::from_millis(100);
        cfg.heartbeat = Duration::from_millis(500);
        cfg.resync = Duration::from_secs(2);
        cfg.client = client;
        if let Some(api) = api {
            cfg.kubeconfig = Some(api.kubeconfig().to_path_buf());
            cfg = cfg.with_api_service(api.server_url());
        }
        let agent = NodeAgent::start(cfg).await.unwrap();
        TestNode {
            name: name.to_string(),
            addr,
            root,
            agent: Some(agent),
        }
    }

    fn ip(&self) -> String {
        self.addr.ip().to_string()
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p.trim_start_matches('/'))
    }

    fn agent(&self) -> &NodeAgentHandle {
        self.agent.as_ref().unwrap()
    }

    fn key(&self, namespace: &str, name: &str) -> PodKey {
        PodKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Writes a manifest the way the installer does: dot-prefixed temp file, then rename.
    fn install_manifest(&self, file: &str, yaml: &str) {
        let dir = self.path("/etc/kubernetes/manifests");
        let tmp = dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, dir.join(file)).unwrap();
    }

    async fn status(&self, key: &PodKey) -> Result<(PodStatus, PodObservation), String> {
        let st = self
            .agent()
            .pod_status(key)
            .await
            .ok_or(format!("{key} not running"))?;
        let obs = self
            .agent()
            .observation(key)
            .await
            .ok_or(format!("{key} not running"))?;
        Ok((st, obs))
    }

    async fn shutdown(&mut self) {
        if let Some(a) = self.agent.take() {
            tokio::time::timeout(Duration::from_secs(60), a.shutdown())
                .await
                .expect("shutdown in time");
        }
    }
}

fn condition(st: &PodStatus, type_: &str) -> String {
    st.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn brief(st: &PodStatus) -> String {
    serde_json::to_string(&serde_json::json!({
        "phase": st.phase,
        "ready": condition(st, "Ready"),
        "init": st.init_container_statuses,
        "containers": st.container_statuses,
    }))
    .unwrap()
}

/// PIDs of running containers in an observation.
fn pids(obs: &PodObservation) -> Vec<i32> {
    obs.init_containers
        .iter()
        .chain(obs.containers.iter())
        .filter_map(|c| match &c.state {
            ContainerPhase::Running { container_id, .. } => {
                container_id.rsplit('/').next()?.parse().ok()
            }
            _ => None,
        })
        .collect()
}

fn running_pid(obs: &PodObservation, container: &str) -> Option<i32> {
    obs.containers
        .iter()
        .find(|c| c.name == container)
        .and_then(|c| match &c.state {
            ContainerPhase::Running { container_id, .. } => {
                container_id.rsplit('/').next()?.parse().ok()
            }
            _ => None,
        })
}

fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok()
}

fn host_mountinfo() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

/// Container processes (children of this test process leading their own process group, as
/// the agent starts every container) that are still around; zombies count (not reaped).
/// Fixtures' own children (the API stand-in's etcd) stay in the test's group and are skipped.
fn own_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...
        let pid = stat.split_whitespace().next().unwrap_or("");
        let after: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if after.get(1) == Some(&me.as_str()) && after.get(2) == Some(&pid) {
            out.push(stat);
        }
    }
    out
}

fn etcd_manifest(revision: u32) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: openshift-etcd
  labels:
    app: etcd
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 10
  initContainers:
  - name: setup
    image: busybox
    command: ["/bin/sh", "-c"]
    args:
    - 'ls -a /var/lib/etcd > /dev/null && echo "init on $(NODE_NAME) at $(POD_IP) rev $(REVISION) \$$(literal)" > /dev/termination-log'
    env:
    - name: NODE_NAME
      valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
    - name: POD_IP
      valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
    - name: REVISION
      value: "{revision}"
    volumeMounts:
    - {{name: data, mountPath: /var/lib/etcd}}
  containers:
  - name: etcd
    image: quay.io/coreos/etcd:v3.4
    command: ["/usr/local/bin/etcd"]
    args:
    - --name=$(NODE_NAME)
    - --data-dir=/var/lib/etcd
    - --listen-client-urls=http://$(POD_IP):2379
    - --advertise-client-urls=http://$(POD_IP):2379
    - --listen-peer-urls=http://$(POD_IP):2380
    - --initial-advertise-peer-urls=http://$(POD_IP):2380
    - --initial-cluster=$(NODE_NAME)=http://$(POD_IP):2380
    env:
    - name: NODE_NAME
      valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
    - name: POD_IP
      valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
    - name: ETCD_STATIC_POD_REVISION
      value: "{revision}"
    - name: ETCD_LOG_LEVEL
      value: warn
    startupProbe:
      tcpSocket: {{port: 2379}}
      periodSeconds: 1
      failureThreshold: 30
    readinessProbe:
      httpGet: {{path: /health, port: 2379}}
      periodSeconds: 1
      failureThreshold: 2
    livenessProbe:
      httpGet: {{path: /health, port: 2379, scheme: HTTP}}
      periodSeconds: 2
      failureThreshold: 5
    volumeMounts:
    - {{name: data, mountPath: /var/lib/etcd}}
  volumes:
  - name: data
    hostPath: {{path: /var/lib/etcd, type: DirectoryOrCreate}}
"#
    )
}

fn installer_pod(node: &str, name: &str, script: &str) -> Pod {
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: openshift-etcd
spec:
  nodeName: {node}
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: installer
    image: docker.io/library/busybox:1.36
    command: ["/bin/sh", "-c"]
    args: ["{script}"]
    env:
    - name: NODE_NAME
      valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
    - name: HOST_IP
      valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}
    volumeMounts:
    - {{name: resources, mountPath: /etc/kubernetes/static-pod-resources}}
    - {{name: data, mountPath: /var/lib/etcd, readOnly: true}}
  volumes:
  - name: resources
    hostPath: {{path: /etc/kubernetes/static-pod-resources}}
  - name: data
    hostPath: {{path: /var/lib/etcd}}
"#
    );
    serde_saphyr::from_str(&yaml).unwrap()
}

/// Waits until the etcd static pod is Running and Ready; returns etcd's pid.
async fn wait_etcd_ready(node: &TestNode) -> i32 {
    let key = node.key("openshift-etcd", &format!("etcd-{}", node.name));
    eventually(
        &format!("etcd on {} ready", node.name),
        DEADLINE,
        || async {
            let (st, obs) = node.status(&key).await?;
            match running_pid(&obs, "etcd") {
                Some(pid)
                    if st.phase.as_deref() == Some("Running")
                        && condition(&st, "Ready") == "True" =>
                {
                    Ok(pid)
                }
                _ => Err(brief(&st)),
            }
        },
    )
    .await
}

async fn wait_phase(node: &TestNode, key: &PodKey, phase: &str) -> PodStatus {
    eventually(&format!("{key} {phase}"), DEADLINE, || async {
        let (st, _) = node.status(key).await?;
        if st.phase.as_deref() == Some(phase) {
            Ok(st)
        } else {
            Err(brief(&st))
        }
    })
    .await
}

fn terminated(st: &PodStatus, container: &str) -> (i32, String) {
    let cs = st
        .container_statuses
        .iter()
        .flatten()
        .chain(st.init_container_statuses.iter().flatten())
        .find(|c| c.name == container)
        .unwrap();
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    (t.exit_code, t.message.clone().unwrap_or_default())
}

/// Root-level teardown checks: no process group alive, no child left, no mount of any node
/// root in this (host) mount namespace, nothing created in the host's /etc/kubernetes.
fn assert_clean(groups: &BTreeSet<i32>, roots: &[&Path]) {
    for g in groups {
        assert!(
            !group_alive(*g),
            "process group {g} still alive after shutdown"
        );
    }
    let children = own_children();
    assert!(children.is_empty(), "children left behind: {children:?}");
    let mi = host_mountinfo();
    for r in roots {
        let r = r.display().to_string();
        assert!(
            !mi.contains(&r),
            "a mount of {r} leaked into the host:\n{mi}"
        );
    }
    assert!(
        !mi.contains(" overlay "),
        "an overlay leaked into the host:\n{mi}"
    );
    assert!(
        !Path::new("/etc/kubernetes").exists(),
        "/etc/kubernetes created on the host"
    );
    assert!(
        !Path::new("/dev/termination-log").exists(),
        "/dev/termination-log created on the host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_container_gives_each_node_its_own_var_lib_etcd() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let before = host_mountinfo();
    let mut outputs = Vec::new();
    for (root, marker) in [(&a, "node-a"), (&b, "node-b")] {
        let data = root.path().join("var/lib/etcd");
        let manifests = root.path().join("etc/kubernetes/manifests");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&manifests).unwrap();
        std::fs::write(data.join(marker), marker).unwrap();
        let log = root.path().join("out.log");
        let launch = Launch {
            helper: helper(),
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "ls /var/lib/etcd; ls -d /etc/kubernetes/manifests; echo msg > /dev/termination-log; \
                 test -c /dev/null || exit 7; grep -q ' /dev/shm ' /proc/self/mountinfo || exit 8; \
                 touch /etc/kubernetes/manifests/x 2>/dev/null && exit 9; cat /proc/self/mountinfo".into(),
            ],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            binds: vec![
                BindMount {
                    source: data.clone(),
                    target: "/var/lib/etcd".into(),
                    read_only: false,
                },
                BindMount {
                    source: manifests,
                    target: "/etc/kubernetes/manifests".into(),
                    read_only: true,
                },
                BindMount {
                    source: root.path().join("tlog"),
                    target: "/dev/termination-log".into(),
                    read_only: false,
                },
            ],
            staging: root.path().join("staging"),
            working_dir: Some("/var/lib/etcd".into()),
            log_path: Some(log.clone()),
            error_file: None,
            join: None,
            mount_proc: false,
        };
        std::fs::write(root.path().join("tlog"), "").unwrap();
        let mut p = Process::spawn(&launch).await.unwrap();
        let exit = tokio::time::timeout(DEADLINE, p.wait()).await.unwrap();
        let out = std::fs::read_to_string(&log).unwrap();
        assert_eq!(exit.code, 0, "helper failed: {out}");
        assert_eq!(
            std::fs::read_to_string(root.path().join("tlog")).unwrap(),
            "msg\n"
        );
        outputs.push(out);
    }
    assert!(
        outputs[0].starts_with("node-a\n/etc/kubernetes/manifests\n"),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[1].starts_with("node-b\n/etc/kubernetes/manifests\n"),
        "{}",
        outputs[1]
    );
    assert!(!outputs[0].contains("node-b") && !outputs[1].contains("node-a"));
    // Inside: the node's own dir at /var/lib/etcd.
    let own = format!("{} /var/lib/etcd ", a.path().join("var/lib/etcd").display());
    assert!(
        outputs[0].contains(&own),
        "mountinfo inside A lacks {own}: {}",
        outputs[0]
    );
    // A program that cannot be exec'd: exit 127 and the reason in the error file.
    let err_file = a.path().join("why");
    let launch = Launch {
        helper: helper(),
        program: "/nonexistent/etcd".into(),
        args: vec![],
        env: vec![],
        binds: vec![],
        staging: a.path().join("staging"),
        working_dir: None,
        log_path: None,
        error_file: Some(err_file.clone()),
        join: None,
        mount_proc: false,
    };
    let mut p = Process::spawn(&launch).await.unwrap();
    let exit = tokio::time::timeout(DEADLINE, p.wait()).await.unwrap();
    assert_eq!(exit.code, 127);
    let why = std::fs::read_to_string(&err_file).unwrap();
    assert!(why.contains("exec /nonexistent/etcd"), "{why}");
    // Outside: nothing changed.
    assert_eq!(host_mountinfo(), before);
    assert_clean(&BTreeSet::new(), &[a.path(), b.path()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_run_static_etcd_and_installer_pods_then_tear_down_cleanly() {
    let mut na = TestNode::start("node-a", None).await;
    let mut nb = TestNode::start("node-b", None).await;
    let mut groups = BTreeSet::new();
    std::fs::write(na.path("/var/lib/etcd/marker-node-a"), "a").unwrap();
    std::fs::write(nb.path("/var/lib/etcd/marker-node-b"), "b").unwrap();
    // Noise the agent must ignore.
    std::fs::write(
        na.path("/etc/kubernetes/manifests/.etcd.yaml.swp"),
        "garbage",
    )
    .unwrap();
    std::fs::write(na.path("/etc/kubernetes/manifests/README.txt"), "not yaml").unwrap();
    for n in [&na, &nb] {
        n.install_manifest("etcd.yaml", &etcd_manifest(1));
    }

    // Static etcd pods: Running, Ready through the readiness probe, init message, pod IP.
    for n in [&na, &nb] {
        let pid = wait_etcd_ready(n).await;
        groups.insert(pid);
        let key = n.key("openshift-etcd", &format!("etcd-{}", n.name));
        let (st, _) = n.status(&key).await.unwrap();
        assert_eq!(st.pod_ip.as_deref(), Some(n.ip().as_str()));
        assert_eq!(st.host_ip.as_deref(), Some(n.ip().as_str()));
        let (code, msg) = terminated(&st, "setup");
        assert_eq!(code, 0);
        assert_eq!(
            msg.trim(),
            format!("init on {} at {} rev 1 $(literal)", n.name, n.ip())
        );
        let etcd = &st.container_statuses.as_ref().unwrap()[0];
        assert!(etcd.ready && etcd.started == Some(true) && etcd.restart_count == 0);
        // etcd really uses the node's data dir, seen through the bind mount.
        assert!(
            n.path("/var/lib/etcd/member").is_dir(),
            "no member dir in {}",
            n.name
        );
        let mi = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
        let own = format!("{} /var/lib/etcd ", n.path("/var/lib/etcd").display());
        assert!(mi.contains(&own), "etcd's mountinfo lacks {own}");
        for other in [&na, &nb] {
            if other.name != n.name {
                assert!(
                    !mi.contains(&other.root.path().display().to_string()),
                    "{} sees {}'s root",
                    n.name,
                    other.name
                );
            }
        }
    }
    assert_eq!(
        na.agent().pods().await.len(),
        1,
        "dot/non-yaml files must be ignored"
    );
    // Mounts live only inside the containers' namespaces.
    let mi = host_mountinfo();
    assert!(!mi.contains(&na.root.path().display().to_string()));

    // Installer-style run-to-completion pods on each node.
    for n in [&na, &nb] {
        let script = "set -e; ls /var/lib/etcd > /etc/kubernetes/static-pod-resources/seen; \
                      echo installed revision 1 on $(NODE_NAME) ip $(HOST_IP) > /dev/termination-log";
        let key = n
            .agent()
            .run_pod(installer_pod(
                &n.name,
                &format!("installer-1-{}", n.name),
                script,
            ))
            .await;
        let st = wait_phase(n, &key, "Succeeded").await;
        let (code, msg) = terminated(&st, "installer");
        assert_eq!(code, 0);
        assert_eq!(
            msg.trim(),
            format!("installed revision 1 on {} ip {}", n.name, n.ip())
        );
        assert_eq!(condition(&st, "Ready"), "False");
        let seen =
            std::fs::read_to_string(n.path("/etc/kubernetes/static-pod-resources/seen")).unwrap();
        let mine = format!("marker-{}", n.name);
        assert!(
            seen.contains(&mine) && seen.contains("member"),
            "{} saw {seen:?}",
            n.name
        );
        let other = if n.name == "node-a" {
            "marker-node-b"
        } else {
            "marker-node-a"
        };
        assert!(
            !seen.contains(other),
            "{} saw the other node's data: {seen:?}",
            n.name
        );
    }
    // A failing one: Failed with its exit code and termination message; read-only mount held.
    let key = na
        .agent()
        .run_pod(installer_pod(
            "node-a",
            "installer-2-node-a",
            "touch /var/lib/etcd/x 2>/dev/null && exit 9; echo refused: revision 2 older than 3 > /dev/termination-log; exit 3",
        ))
        .await;
    let st = wait_phase(&na, &key, "Failed").await;
    assert_eq!(
        terminated(&st, "installer"),
        (3, "refused: revision 2 older than 3\n".into())
    );

    // Manifest change (rename into place) restarts the static pod with the new content.
    let key_a = na.key("openshift-etcd", "etcd-node-a");
    let old_pid = running_pid(&na.status(&key_a).await.unwrap().1, "etcd").unwrap();
    let old_hash = na.agent().pods().await[&key_a].clone();
    na.install_manifest("etcd.yaml", &etcd_manifest(2));
    let new_pid = eventually(
        "etcd on node-a restarted with revision 2",
        DEADLINE,
        || async {
            let (st, obs) = na.status(&key_a).await?;
            let hash = na.agent().pods().await.get(&key_a).cloned();
            match (running_pid(&obs, "etcd"), hash) {
                (Some(pid), Some(h))
                    if pid != old_pid && h != old_hash && condition(&st, "Ready") == "True" =>
                {
                    Ok(pid)
                }
                _ => Err(brief(&st)),
            }
        },
    )
    .await;
    groups.insert(new_pid);
    assert!(
        !group_alive(old_pid),
        "old etcd group {old_pid} survived the restart"
    );
    let environ = std::fs::read(format!("/proc/{new_pid}/environ")).unwrap();
    assert!(String::from_utf8_lossy(&environ).contains("ETCD_STATIC_POD_REVISION=2"));
    let (st, _) = na.status(&key_a).await.unwrap();
    assert!(terminated(&st, "setup").1.contains("rev 2"));

    // Removing the manifest stops the pod.
    std::fs::remove_file(nb.path("/etc/kubernetes/manifests/etcd.yaml")).unwrap();
    let key_b = nb.key("openshift-etcd", "etcd-node-b");
    eventually("etcd on node-b stopped", DEADLINE, || async {
        if nb.agent().pods().await.contains_key(&key_b) {
            Err("still running".into())
        } else {
            Ok(())
        }
    })
    .await;
    // The pod leaves the agent's list when its stop was issued; its process group is gone a
    // moment later, once the kernel has torn the container down.
    let stopped: Vec<i32> = groups.iter().copied().filter(|g| *g != new_pid).collect();
    eventually(
        "the stopped pods' process groups to be gone",
        DEADLINE,
        || {
            let alive: Vec<i32> = stopped
                .iter()
                .copied()
                .filter(|g| group_alive(*g))
                .collect();
            async move {
                if alive.is_empty() {
                    Ok(())
                } else {
                    Err(format!("groups {alive:?} still alive"))
                }
            }
        },
    )
    .await;

    na.shutdown().await;
    nb.shutdown().await;
    assert_clean(&groups, &[na.root.path(), nb.root.path()]);
}

fn probe_manifest() -> &'static str {
    r#"apiVersion: v1
kind: Pod
metadata:
  name: probed
  namespace: default
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "mkdir -p /etc/kubernetes/private && touch /etc/kubernetes/private/seen && exec sleep 1000"]
    readinessProbe:
      exec: {command: ["sh", "-c", "test -f /flags/ready && test -f /etc/kubernetes/private/seen"]}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      exec: {command: ["sh", "-c", "test ! -f /flags/die"]}
      periodSeconds: 1
      failureThreshold: 2
    volumeMounts:
    - {name: flags, mountPath: /flags}
    - {name: etc, mountPath: /etc/kubernetes/manifests}
  volumes:
  - name: flags
    hostPath: {path: /flags, type: DirectoryOrCreate}
  - name: etc
    hostPath: {path: /etc/kubernetes/manifests}
"#
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_drive_readiness_and_liveness_restarts() {
    let mut n = TestNode::start("node-p", None).await;
    n.install_manifest("probed.yaml", probe_manifest());
    let key = n.key("default", "probed-node-p");
    let groups = std::sync::Mutex::new(BTreeSet::new());
    let st = eventually("probed pod running, not ready", DEADLINE, || async {
        let (st, obs) = n.status(&key).await?;
        groups.lock().unwrap().extend(pids(&obs));
        if st.phase.as_deref() == Some("Running") && condition(&st, "Ready") == "False" {
            Ok(st)
        } else {
            Err(brief(&st))
        }
    })
    .await;
    assert_eq!(st.container_statuses.as_ref().unwrap()[0].restart_count, 0);
    std::fs::create_dir_all(n.path("/flags")).unwrap();
    std::fs::write(n.path("/flags/ready"), "").unwrap();
    eventually("probed pod ready", DEADLINE, || async {
        let (st, _) = n.status(&key).await?;
        if condition(&st, "Ready") == "True" {
            Ok(())
        } else {
            Err(brief(&st))
        }
    })
    .await;
    std::fs::remove_file(n.path("/flags/ready")).unwrap();
    eventually("probed pod unready again", DEADLINE, || async {
        let (st, _) = n.status(&key).await?;
        if condition(&st, "Ready") == "False" {
            Ok(())
        } else {
            Err(brief(&st))
        }
    })
    .await;
    // Liveness failure kills and restarts the container (restartPolicy Always).
    let first = running_pid(&n.status(&key).await.unwrap().1, "main").unwrap();
    std::fs::write(n.path("/flags/die"), "").unwrap();
    eventually("liveness restart", DEADLINE, || async {
        let (st, obs) = n.status(&key).await?;
        groups.lock().unwrap().extend(pids(&obs));
        let c = &st.container_statuses.as_ref().unwrap()[0];
        if c.restart_count >= 1
            && c.last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some()
        {
            Ok(())
        } else {
            Err(brief(&st))
        }
    })
    .await;
    std::fs::remove_file(n.path("/flags/die")).unwrap();
    assert!(
        !group_alive(first),
        "liveness-killed container group {first} survived"
    );
    let second = eventually("running again after restart", DEADLINE, || async {
        let (st, obs) = n.status(&key).await?;
        running_pid(&obs, "main")
            .filter(|p| *p != first)
            .ok_or_else(|| brief(&st))
    })
    .await;
    groups.lock().unwrap().insert(second);
    n.shutdown().await;
    assert_clean(&groups.lock().unwrap().clone(), &[n.root.path()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_init_container_blocks_app_and_backs_off() {
    let mut n = TestNode::start("node-i", None).await;
    n.install_manifest(
        "gated.yaml",
        r#"apiVersion: v1
kind: Pod
metadata: {name: gated, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: verify
    image: busybox
    command: ["sh", "-c", "test -f /gate/open || { echo blocked: gate closed > /dev/termination-log; exit 1; }"]
    volumeMounts: [{name: gate, mountPath: /gate}]
  containers:
  - name: main
    image: busybox
    command: ["sleep", "1000"]
    readinessProbe:
      grpc: {port: 2379}
  volumes:
  - {name: gate, hostPath: {path: /gate}}
"#,
    );
    let key = n.key("default", "gated-node-i");
    eventually(
        "init container restarted with back-off",
        DEADLINE,
        || async {
            let (st, _) = n.status(&key).await?;
            let init = &st.init_container_statuses.as_ref().ok_or("no init")?[0];
            let last = init.last_state.as_ref().and_then(|s| s.terminated.as_ref());
            let app_waiting = st.container_statuses.as_ref().unwrap()[0]
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .is_some();
            match last {
                Some(t)
                    if init.restart_count >= 2
                        && t.exit_code == 1
                        && t.message.as_deref() == Some("blocked: gate closed\n")
                        && app_waiting
                        && st.phase.as_deref() == Some("Pending") =>
                {
                    Ok(())
                }
                _ => Err(brief(&st)),
            }
        },
    )
    .await;
    std::fs::write(n.path("/gate/open"), "").unwrap();
    // The grpc readiness probe is not supported: ignored with a warning, so the pod is Ready.
    eventually("gated pod running and ready", DEADLINE, || async {
        let (st, _) = n.status(&key).await?;
        if st.phase.as_deref() == Some("Running") && condition(&st, "Ready") == "True" {
            Ok(())
        } else {
            Err(brief(&st))
        }
    })
    .await;
    n.shutdown().await;
    assert_clean(&BTreeSet::new(), &[n.root.path()]);
}

// ---------------------------------------------------------------------------------------
// Against a Kubernetes API: the API stand-in on real etcd (or a real cluster via KUBECONFIG).
// ---------------------------------------------------------------------------------------

mod api {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use kube::api::{DeleteParams, PostParams};
    use kube_testapi::TestApi;

    fn in_namespace(manifest: &str, ns: &str) -> String {
        manifest.replace("namespace: openshift-etcd", &format!("namespace: {ns}"))
    }

    fn ready_of(p: &Pod) -> String {
        p.status
            .as_ref()
            .map(|s| condition(s, "Ready"))
            .unwrap_or_default()
    }

    fn show(p: &Option<Pod>) -> String {
        match p {
            None => "absent".into(),
            Some(p) => format!(
                "annotations={:?} status={}",
                p.metadata.annotations,
                p.status.as_ref().map(brief).unwrap_or_default()
            ),
        }
    }

    fn mirror_hash(p: &Pod) -> String {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubernetes.io/config.mirror").cloned())
            .unwrap_or_default()
    }

    async fn create_pod(pods: &Api<Pod>, pod: &Pod) {
        // The namespace's default ServiceAccount may not exist yet right after creation.
        eventually("pod created", DEADLINE, || async {
            match pods.create(&PostParams::default(), pod).await {
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
    }

    async fn wait_pod_phase(pods: &Api<Pod>, name: &str, phase: &str) -> Pod {
        eventually(
            &format!("pod {name} {phase} in the API"),
            DEADLINE,
            || async {
                let p = pods.get_opt(name).await.map_err(|e| e.to_string())?;
                match p {
                    Some(p)
                        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase) =>
                    {
                        Ok(p)
                    }
                    other => Err(show(&other)),
                }
            },
        )
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn agents_register_nodes_publish_mirror_pods_and_run_bound_pods() {
        let api = TestApi::start().await.unwrap();
        let ns = api.temp_namespace("kubelet-standin").await.unwrap();
        let suffix = ns.rsplit('-').next().unwrap().to_string();
        let client = api.client();
        let kc = Some(&api);
        let mut na =
            TestNode::start_with(&format!("cp-a-{suffix}"), Some(client.clone()), kc).await;
        let mut nb =
            TestNode::start_with(&format!("cp-b-{suffix}"), Some(client.clone()), kc).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let mut groups = BTreeSet::new();

        // Node objects: control-plane label, InternalIP + Hostname, Ready with a moving heartbeat.
        for n in [&na, &nb] {
            let first = eventually(&format!("node {} ready", n.name), DEADLINE, || async {
                let node = nodes.get_opt(&n.name).await.map_err(|e| e.to_string())?;
                let node = node.ok_or("absent")?;
                let ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready").cloned())
                    .ok_or_else(|| format!("{:?}", node.status))?;
                if ready.status == "True" {
                    Ok((node, ready))
                } else {
                    Err(format!("{ready:?}"))
                }
            })
            .await;
            let (node, ready) = first;
            assert_eq!(
                node.metadata.labels.as_ref().unwrap()["node-role.kubernetes.io/control-plane"],
                ""
            );
            let addrs = node.status.as_ref().unwrap().addresses.clone().unwrap();
            assert!(
                addrs
                    .iter()
                    .any(|a| a.type_ == "InternalIP" && a.address == n.ip())
            );
            assert!(
                addrs
                    .iter()
                    .any(|a| a.type_ == "Hostname" && a.address == n.name)
            );
            eventually("heartbeat moves", DEADLINE, || async {
                let node = nodes.get(&n.name).await.map_err(|e| e.to_string())?;
                let now = node
                    .status
                    .and_then(|s| s.conditions)
                    .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
                    .ok_or("no Ready")?;
                if now.last_heartbeat_time != ready.last_heartbeat_time
                    && now.last_transition_time == ready.last_transition_time
                {
                    Ok(())
                } else {
                    Err(format!("{now:?}"))
                }
            })
            .await;
        }

        // Node leases are renewed (kube-node-lease exists on kube-apiserver and the stand-in).
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), "kube-node-lease");
        for n in [&na, &nb] {
            let first = eventually("node lease", DEADLINE, || async {
                let l = leases
                    .get_opt(&n.name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("absent")?;
                let spec = l.spec.ok_or("no spec")?;
                spec.renew_time.ok_or_else(|| "no renewTime".to_string())
            })
            .await;
            eventually("node lease renewed", DEADLINE, || async {
                let l = leases.get(&n.name).await.map_err(|e| e.to_string())?;
                let spec = l.spec.unwrap_or_default();
                if spec.renew_time.as_ref() != Some(&first)
                    && spec.holder_identity.as_deref() == Some(n.name.as_str())
                {
                    Ok(())
                } else {
                    Err(format!("{spec:?}"))
                }
            })
            .await;
        }

        // Static etcd pods → mirror pods with real status.
        for n in [&na, &nb] {
            n.install_manifest("etcd.yaml", &in_namespace(&etcd_manifest(1), &ns));
        }
        for n in [&na, &nb] {
            let name = format!("etcd-{}", n.name);
            let p = eventually(
                &format!("mirror pod {name} running and ready"),
                DEADLINE,
                || async {
                    let p = pods.get_opt(&name).await.map_err(|e| e.to_string())?;
                    match p {
                        Some(p)
                            if ready_of(&p) == "True"
                                && p.status.as_ref().and_then(|s| s.phase.as_deref())
                                    == Some("Running") =>
                        {
                            Ok(p)
                        }
                        other => Err(show(&other)),
                    }
                },
            )
            .await;
            let ann = p.metadata.annotations.clone().unwrap();
            assert_eq!(ann["kubernetes.io/config.source"], "file");
            let node_uid = nodes.get(&n.name).await.unwrap().metadata.uid.unwrap();
            let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
                ("Node", n.name.as_str(), node_uid.as_str())
            );
            assert!(!mirror_hash(&p).is_empty());
            assert_eq!(
                p.spec.as_ref().unwrap().node_name.as_deref(),
                Some(n.name.as_str())
            );
            let st = p.status.clone().unwrap();
            assert_eq!(st.pod_ip.as_deref(), Some(n.ip().as_str()));
            let (code, msg) = terminated(&st, "setup");
            assert_eq!(code, 0);
            assert!(
                msg.starts_with(&format!("init on {} at {}", n.name, n.ip())),
                "{msg}"
            );
            let etcd = &st.container_statuses.unwrap()[0];
            assert!(etcd.ready);
            groups.insert(
                running_pid(&n.status(&n.key(&ns, &name)).await.unwrap().1, "etcd").unwrap(),
            );
        }

        // Pod events, as the kubelet records them (reporter kubelet, instance = node).
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
        for n in [&na, &nb] {
            let name = format!("etcd-{}", n.name);
            eventually(&format!("Started events on {name}"), DEADLINE, || async {
                let list = events
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let started: Vec<_> = list
                    .items
                    .iter()
                    .filter(|e| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                            && e.reason.as_deref() == Some("Started")
                            && e.reporting_instance.as_deref() == Some(n.name.as_str())
                    })
                    .filter_map(|e| e.note.clone())
                    .collect();
                // One per container: the init container and etcd.
                if started.len() >= 2 {
                    Ok(())
                } else {
                    Err(format!("{started:?}"))
                }
            })
            .await;
        }

        // Run-to-completion pods bound through the API.
        for n in [&na, &nb] {
            // On a real API server the pod gets its ServiceAccount token volume (admission adds
            // it; the agent builds it) and in-cluster env, and no kubeconfig; on the stand-in,
            // which issues no tokens, KUBECONFIG stands in for in-cluster credentials.
            let credentials = if api.is_real() {
                "test -s /var/run/secrets/kubernetes.io/serviceaccount/token; \
                 test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt; \
                 test \\\"$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)\\\" = \\\"$NS\\\"; \
                 test -n \\\"$KUBERNETES_SERVICE_HOST\\\"; test -z \\\"$KUBECONFIG\\\""
            } else {
                "test -s \\\"$KUBECONFIG\\\""
            };
            let script = format!(
                "set -e; NS={ns}; {credentials}; ls /var/lib/etcd > /etc/kubernetes/static-pod-resources/seen; \
                 echo installed on $(NODE_NAME) > /dev/termination-log"
            );
            let mut pod = installer_pod(&n.name, &format!("installer-1-{}", n.name), &script);
            pod.metadata.namespace = Some(ns.clone());
            create_pod(&pods, &pod).await;
        }
        let mut failing = installer_pod(
            &na.name,
            "installer-2-fails",
            "echo no quorum > /dev/termination-log; exit 3",
        );
        failing.metadata.namespace = Some(ns.clone());
        create_pod(&pods, &failing).await;
        for n in [&na, &nb] {
            let p = wait_pod_phase(&pods, &format!("installer-1-{}", n.name), "Succeeded").await;
            let (code, msg) = terminated(p.status.as_ref().unwrap(), "installer");
            assert_eq!(
                (code, msg.trim()),
                (0, format!("installed on {}", n.name).as_str())
            );
            assert!(
                n.path("/etc/kubernetes/static-pod-resources/seen")
                    .is_file()
            );
        }
        let p = wait_pod_phase(&pods, "installer-2-fails", "Failed").await;
        assert_eq!(
            terminated(p.status.as_ref().unwrap(), "installer"),
            (3, "no quorum\n".into())
        );
        assert!(
            !nb.agent()
                .pods()
                .await
                .keys()
                .any(|k| k.name == "installer-2-fails"),
            "ran on the wrong node"
        );

        // A long-running bound pod is stopped when deleted.
        let mut sleeper = installer_pod(&nb.name, "sleeper", "exec sleep 1000");
        sleeper.metadata.namespace = Some(ns.clone());
        create_pod(&pods, &sleeper).await;
        wait_pod_phase(&pods, "sleeper", "Running").await;
        let skey = nb.key(&ns, "sleeper");
        let spid = running_pid(&nb.status(&skey).await.unwrap().1, "installer").unwrap();
        groups.insert(spid);
        pods.delete("sleeper", &DeleteParams::default())
            .await
            .unwrap();
        eventually("deleted pod stopped and gone", DEADLINE, || async {
            let gone = pods
                .get_opt("sleeper")
                .await
                .map_err(|e| e.to_string())?
                .is_none();
            if gone && !group_alive(spid) && !nb.agent().pods().await.contains_key(&skey) {
                Ok(())
            } else {
                Err(format!(
                    "in API: {}, group alive: {}",
                    !gone,
                    group_alive(spid)
                ))
            }
        })
        .await;

        // Manifest change → mirror pod replaced with the new hash, ready again.
        let name_a = format!("etcd-{}", na.name);
        let old = pods.get(&name_a).await.unwrap();
        na.install_manifest("etcd.yaml", &in_namespace(&etcd_manifest(2), &ns));
        let new = eventually(
            "mirror pod updated after manifest change",
            DEADLINE,
            || async {
                let p = pods.get_opt(&name_a).await.map_err(|e| e.to_string())?;
                match p {
                    Some(p) if mirror_hash(&p) != mirror_hash(&old) && ready_of(&p) == "True" => {
                        Ok(p)
                    }
                    other => Err(show(&other)),
                }
            },
        )
        .await;
        let (_, msg) = terminated(new.status.as_ref().unwrap(), "setup");
        assert!(msg.contains("rev 2"), "{msg}");
        groups.insert(
            running_pid(&na.status(&na.key(&ns, &name_a)).await.unwrap().1, "etcd").unwrap(),
        );

        // A mirror pod deleted by someone comes back; a removed manifest removes it.
        let name_b = format!("etcd-{}", nb.name);
        pods.delete(&name_b, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
        eventually("mirror pod recreated", DEADLINE, || async {
            let p = pods.get_opt(&name_b).await.map_err(|e| e.to_string())?;
            match p {
                Some(p) if ready_of(&p) == "True" => Ok(()),
                other => Err(show(&other)),
            }
        })
        .await;
        std::fs::remove_file(nb.path("/etc/kubernetes/manifests/etcd.yaml")).unwrap();
        eventually("mirror pod deleted with its manifest", DEADLINE, || async {
            let p = pods.get_opt(&name_b).await.map_err(|e| e.to_string())?;
            if p.is_none() { Ok(()) } else { Err(show(&p)) }
        })
        .await;

        na.shutdown().await;
        nb.shutdown().await;
        let node = nodes.get(&na.name).await.unwrap();
        let ready = node
            .status
            .unwrap()
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            ready.status, "Unknown",
            "a stopped agent reports its node not ready"
        );
        assert_clean(&groups, &[na.root.path(), nb.root.path()]);
        if api.is_real() {
            let _ = nodes.delete(&na.name, &DeleteParams::default()).await;
            let _ = nodes.delete(&nb.name, &DeleteParams::default()).await;
            api.delete_namespace(&ns).await.unwrap();
        }
    }
}

/// Live (non-zombie) processes whose command line contains `marker`.
fn live_with(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = state
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z');
        if cmd.contains(marker) && !zombie && !cmd.contains("kubelet-standin run") {
            out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_leaves_no_process_behind_on_sigterm_or_sigkill() {
    use nix::sys::signal::{Signal, kill};
    for (sig, marker) in [
        (Signal::SIGTERM, "sleep 424242"),
        (Signal::SIGKILL, "sleep 434343"),
    ] {
        let addr = LoopbackAddr::acquire().unwrap();
        let root = tempfile::tempdir().unwrap();
        let manifests = root.path().join("etc/kubernetes/manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        std::fs::write(
            manifests.join("bg.yaml"),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: bg}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: busybox\n    command: [sh, -c, '{marker} & {marker} & wait']\n"
            ),
        )
        .unwrap();
        let mut agent = tokio::process::Command::new(helper())
            .args([
                "run",
                "--name",
                "bin-node",
                "--ip",
                &addr.ip().to_string(),
                "--no-api",
                "--root",
            ])
            .arg(root.path())
            .arg("--bin-dir")
            .arg(helper().parent().unwrap())
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        eventually(
            "background processes of the container running",
            DEADLINE,
            || async {
                let live = live_with(marker);
                // sh plus its two background sleeps.
                if live.len() >= 3 {
                    Ok(())
                } else {
                    Err(format!("{live:?}"))
                }
            },
        )
        .await;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(agent.id().unwrap()).unwrap());
        kill(pid, sig).unwrap();
        let status = tokio::time::timeout(DEADLINE, agent.wait())
            .await
            .unwrap()
            .unwrap();
        if sig == Signal::SIGTERM {
            assert!(status.success(), "agent exit after SIGTERM: {status:?}");
        }
        eventually(&format!("nothing left after {sig}"), DEADLINE, || async {
            let live = live_with(marker);
            if live.is_empty() {
                Ok(())
            } else {
                Err(format!("{live:?}"))
            }
        })
        .await;
        assert!(!host_mountinfo().contains(&root.path().display().to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_kills_every_container_without_grace() {
    let mut n = TestNode::start("node-c", None).await;
    n.install_manifest(
        "stubborn.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: stubborn}\nspec:\n  terminationGracePeriodSeconds: 300\n  containers:\n  - name: c\n    image: busybox\n    command: [sh, -c, 'trap \"\" TERM; sleep 1000 & wait; sleep 1000']\n",
    );
    let key = n.key("default", "stubborn-node-c");
    let pid = eventually("stubborn running", DEADLINE, || async {
        let (st, obs) = n.status(&key).await?;
        running_pid(&obs, "c").ok_or_else(|| brief(&st))
    })
    .await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), n.agent.take().unwrap().crash())
        .await
        .expect("crash returns without waiting for the grace period");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_clean(&[pid].into(), &[n.root.path()]);
}

fn shell_pod(name: &str, policy: &str, script: &str) -> Pod {
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  restartPolicy: {policy}
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: ["sh", "-c", "{script}"]
    volumeMounts: [{{name: d, mountPath: /d}}]
  volumes:
  - {{name: d, hostPath: {{path: /d/{name}, type: DirectoryOrCreate}}}}
"#
    );
    serde_saphyr::from_str(&yaml).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_on_failure_and_always() {
    let mut n = TestNode::start("node-r", None).await;
    // Fails twice, then succeeds: OnFailure restarts it with back-off until it succeeds.
    let flaky = "n=$(cat /d/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/count; \
                 echo attempt $n > /dev/termination-log; [ $n -ge 3 ]";
    let on_failure = n
        .agent()
        .run_pod(shell_pod("flaky", "OnFailure", flaky))
        .await;
    // Exits 0 at once: Always restarts it anyway.
    let always = n
        .agent()
        .run_pod(shell_pod("quick", "Always", "exit 0"))
        .await;
    let st = wait_phase(&n, &on_failure, "Succeeded").await;
    let cs = &st.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.restart_count, 2, "{}", brief(&st));
    assert_eq!(terminated(&st, "c"), (0, "attempt 3\n".into()));
    let last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .unwrap();
    assert_eq!(
        (last.exit_code, last.message.as_deref()),
        (1, Some("attempt 2\n"))
    );
    eventually(
        "Always restarts a container that exited 0",
        DEADLINE,
        || async {
            let (st, _) = n.status(&always).await?;
            let cs = &st.container_statuses.as_ref().unwrap()[0];
            if cs.restart_count >= 2 && st.phase.as_deref() == Some("Running") {
                Ok(())
            } else {
                Err(brief(&st))
            }
        },
    )
    .await;
    n.shutdown().await;
    assert_clean(&BTreeSet::new(), &[n.root.path()]);
}

fn sleeper(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, '1000']\n"
    )
}

/// As the kubelet, the agent never waits on the API to act on its manifest directory: with an
/// API that accepts connections and never answers (kube-apiserver while its etcd has no
/// quorum), a manifest moved away and another placed (what `etcd-recover` does to restart etcd
/// with `--force-new-cluster`) are acted on at once. Before, the mirror pod's deletion held the
/// static-pod loop for the client's read timeout (295 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pods_never_wait_on_an_api_that_does_not_answer() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let mut n = TestNode::start("node-s", Some(client)).await;
    n.install_manifest("one.yaml", &sleeper("one"));
    let one = n.key("default", "one-node-s");
    eventually("pod one running", DEADLINE, || async {
        let (st, obs) = n.status(&one).await?;
        running_pid(&obs, "c").ok_or_else(|| brief(&st))
    })
    .await;
    std::fs::remove_file(n.path("/etc/kubernetes/manifests/one.yaml")).unwrap();
    n.install_manifest("two.yaml", &sleeper("two"));
    let two = n.key("default", "two-node-s");
    eventually(
        "pod two running while the API never answers",
        Duration::from_secs(15),
        || async {
            let (st, obs) = n.status(&two).await?;
            running_pid(&obs, "c").ok_or_else(|| brief(&st))
        },
    )
    .await;
    assert!(n.status(&one).await.is_err(), "pod one still runs");
    n.shutdown().await;
    hold.abort();
}
