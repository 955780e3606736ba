//! The runc runtime against the images `scripts/build-images` built (`IMAGE_STORE`, default
//! `target/images`): a pod runs from its image as the image's user on the image's root, a pod's
//! `runAsUser` wins, an exec probe runs in the container, the agent's death (SIGKILL) takes the
//! container down, and an image the node lacks is `ErrImagePull` then `ImagePullBackOff`. Skipped, loudly, without the images, runc or root.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_fixture::LoopbackAddr;
use k8s_openapi::api::core::v1::Pod;
use kubelet_standin::backoff::Backoff;
use kubelet_standin::runc::RuncConfig;
use kubelet_standin::status::{ContainerPhase, PodObservation};
use kubelet_standin::{NodeAgent, NodeAgentHandle, NodeConfig, PodKey};

const DEADLINE: Duration = Duration::from_secs(60);
const OPERATOR_IMAGE: &str = "etcd-static-operator/etcd-static-operator:0.1.0";

/// The runtime, or `None` (printed) when this machine cannot run it.
fn runc_config() -> Option<RuncConfig> {
    let store = std::env::var_os("IMAGE_STORE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/images"),
        PathBuf::from,
    );
    let tools = [
        PathBuf::from("/usr/sbin/runc"),
        PathBuf::from("/usr/bin/umoci"),
    ];
    let missing = if !store.join("images.json").is_file() {
        Some(format!(
            "no images in {} (run scripts/build-images)",
            store.display()
        ))
    } else if let Some(t) = tools.iter().find(|t| !t.is_file()) {
        Some(format!(
            "{} is not installed (scripts/install-deps)",
            t.display()
        ))
    } else if !nix::unistd::Uid::effective().is_root() {
        Some("runc needs root".to_string())
    } else {
        None
    };
    if let Some(why) = missing {
        eprintln!("SKIPPED: the runc runtime test: {why}");
        return None;
    }
    let [runc, umoci] = tools;
    Some(RuncConfig {
        unpack_cache: store.join("rootfs-cache"),
        image_store: store,
        runc,
        umoci,
    })
}

struct Node {
    _addr: LoopbackAddr,
    ip: String,
    _root: tempfile::TempDir,
    agent: Option<NodeAgentHandle>,
}

async fn start(runc: RuncConfig) -> Node {
    let addr = LoopbackAddr::acquire().unwrap();
    let root = tempfile::tempdir().unwrap();
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_kubelet-standin"));
    let mut cfg = NodeConfig::new(
        "n1",
        addr.ip().into(),
        root.path(),
        helper.parent().unwrap(),
    )
    .with_helper(helper)
    .with_runc(runc)
    .with_backoff(Backoff {
        initial: Duration::from_millis(200),
        max: Duration::from_secs(2),
        reset_after: Duration::from_secs(60),
    });
    cfg.manifest_poll = Duration::from_millis(100);
    let agent = NodeAgent::start(cfg).await.unwrap();
    Node {
        ip: addr.ip().to_string(),
        _addr: addr,
        _root: root,
        agent: Some(agent),
    }
}

/// An etcd from the operator image (it carries etcd for backup verification), data on an
/// emptyDir since the image's root is read-only.
fn etcd_pod(name: &str, ip: &str, run_as_user: Option<i64>) -> Pod {
    let mut pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {
            "hostNetwork": true,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "etcd",
                "image": OPERATOR_IMAGE,
                "command": ["etcd"],
                "args": [
                    "--data-dir=/data/etcd",
                    format!("--listen-client-urls=http://{ip}:2379"),
                    format!("--advertise-client-urls=http://{ip}:2379"),
                    format!("--listen-peer-urls=http://{ip}:2380"),
                    format!("--initial-advertise-peer-urls=http://{ip}:2380"),
                    format!("--initial-cluster=default=http://{ip}:2380"),
                ],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "readinessProbe": {
                    "exec": {"command": ["etcdctl", format!("--endpoints=http://{ip}:2379"), "endpoint", "health"]},
                    "periodSeconds": 1
                }
            }],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }
    });
    if let Some(uid) = run_as_user {
        pod["spec"]["securityContext"] = serde_json::json!({"runAsUser": uid, "runAsGroup": uid});
    }
    serde_json::from_value(pod).unwrap()
}

async fn wait_for<T>(
    agent: &NodeAgentHandle,
    key: &PodKey,
    what: &str,
    mut pick: impl FnMut(&PodObservation) -> Option<T>,
) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let obs = agent.observation(key).await;
        if let Some(v) = obs.as_ref().and_then(&mut pick) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what}; last seen: {obs:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The running, ready container's id.
fn ready_id(o: &PodObservation) -> Option<String> {
    match &o.containers.first()?.state {
        ContainerPhase::Running {
            ready: true,
            container_id,
            ..
        } => Some(container_id.clone()),
        _ => None,
    }
}

/// The host PID and uid of the process whose command line starts with `etcd` and names `dir`.
fn etcd_process(dir_arg: &str, ip: &str) -> Option<(u32, u32)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_etcd = args.first().is_some_and(|a| a.ends_with("etcd"))
            && args.iter().any(|a| a == dir_arg)
            && args.iter().any(|a| a.contains(ip));
        if !is_etcd {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        return Some((pid, uid));
    }
    None
}

/// Waits until `etcd_process` finds (`true`) or no longer finds (`false`) the pod's etcd.
async fn wait_process(ip: &str, present: bool, what: &str) -> Option<(u32, u32)> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let found = etcd_process("--data-dir=/data/etcd", ip);
        if found.is_some() == present {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The node agent binary with a static pod from the operator image: etcd runs as the image's
/// user on the image's root, and a SIGKILL to the agent takes it down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_runs_from_its_image_as_its_user_and_dies_with_its_agent() {
    let Some(runc) = runc_config() else { return };
    let addr = LoopbackAddr::acquire().unwrap();
    let ip = addr.ip().to_string();
    let root = tempfile::tempdir().unwrap();
    let manifests = root.path().join("etc/kubernetes/manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let pod = serde_json::to_vec(&etcd_pod("e", &ip, None)).unwrap();
    std::fs::write(manifests.join("etcd.yaml"), pod).unwrap();
    let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_kubelet-standin"))
        .args(["run", "--name", "n1", "--no-api", "--ip", &ip])
        .arg("--root")
        .arg(root.path())
        .arg("--image-store")
        .arg(&runc.image_store)
        .arg("--unpack-cache")
        .arg(&runc.unpack_cache)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (pid, uid) = wait_process(&ip, true, "etcd started").await.unwrap();
    assert_eq!(uid, 65532, "the operator image's user (pid {pid})");
    use std::os::unix::fs::MetadataExt;
    let host = std::fs::metadata("/").unwrap();
    let container = std::fs::metadata(format!("/proc/{pid}/root/.")).unwrap();
    assert_ne!(
        (host.dev(), host.ino()),
        (container.dev(), container.ino()),
        "etcd runs on the host's root, not its image's"
    );
    agent.kill().unwrap();
    agent.wait().unwrap();
    wait_process(&ip, false, "etcd gone after its agent was SIGKILLed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_user_wins_over_the_images_user_and_exec_probes_run_inside() {
    let Some(runc) = runc_config() else { return };
    let mut node = start(runc).await;
    let agent = node.agent.take().unwrap();
    let key = agent.run_pod(etcd_pod("r", &node.ip, Some(0))).await;
    let id = wait_for(
        &agent,
        &key,
        "etcd ready (its exec probe through runc exec)",
        ready_id,
    )
    .await;
    assert!(id.starts_with("runc://"), "{id}");
    let (_, uid) = etcd_process("--data-dir=/data/etcd", &node.ip).expect("etcd's process");
    assert_eq!(uid, 0);
    agent.shutdown().await;
    assert!(
        etcd_process("--data-dir=/data/etcd", &node.ip).is_none(),
        "etcd outlived its pod"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_node_lacks_is_err_image_pull_then_back_off() {
    let Some(runc) = runc_config() else { return };
    let mut node = start(runc).await;
    let agent = node.agent.take().unwrap();
    let mut pod = etcd_pod("p", &node.ip, None);
    pod.spec.as_mut().unwrap().containers[0].image =
        Some("registry.example/etcd-static-operator/etcd:3.5.9".into());
    let key = agent.run_pod(pod).await;
    let seen = wait_for(&agent, &key, "ImagePullBackOff", |o| {
        match &o.containers.first()?.state {
            ContainerPhase::Waiting { reason, message } if reason == "ImagePullBackOff" => {
                message.clone()
            }
            _ => None,
        }
    })
    .await;
    assert!(
        seen.contains("registry.example/etcd-static-operator/etcd:3.5.9")
            && seen.contains("etcd:3.5.16"),
        "the message names the image and what the node has: {seen}"
    );
    agent.shutdown().await;
}
