//! The runc runtime: containers run under `runc` (a real OCI runtime) from images in the
//! node's [`ImageStore`], instead of the [`crate::images`] table's host binaries.
//!
//! One container run is one OCI bundle (`<pod dir>/containers/<name>/bundle-<restart>/`,
//! its `config.json` from [`crate::oci_config`]) and one `runc run` in the foreground, started
//! through the agent's own `exec-container` helper like every container: the helper makes
//! `runc run` PID 1 of a PID namespace with a parent-death signal, so the container (whose
//! PID namespace is nested in that one) dies with the agent, and after the grace period a
//! SIGKILL to `runc run` takes the container down with it. `runc run` forwards the SIGTERM the
//! agent sends to the container's process, and exits with the container's exit code. Each
//! node keeps its own runc state directory (`<node root>/run/runc`), emptied when the agent
//! starts (a node that restarts has no running containers) and after each run
//! (`runc delete --force`, in the background so the pod's next container does not wait for it;
//! the agent's shutdown waits for every removal). Exec probes are `runc exec` into the running
//! container.
//!
//! What the process gets, as a kubelet and containerd give it: `command` (else the image's
//! `Entrypoint`) followed by `args` (else, without `command`, the image's `Cmd`); the image's
//! `Env` overridden by the pod's; `workingDir`, else the image's `WorkingDir`, else `/`; the
//! user from `runAsUser`/`runAsGroup` (container, then pod), else the image's `User`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::image_store::{ImageStore, StoreError, StoredImage, image_env, image_user};
use crate::mounts::BindMount;
use crate::oci_config::{ContainerConfig, caps_in_mask, runtime_config};

/// Where the runc runtime finds its tools and images.
#[derive(Debug, Clone)]
pub struct RuncConfig {
    /// A directory `scripts/build-images` wrote.
    pub image_store: PathBuf,
    /// Unpacked root filesystems, one per image digest (may be shared by several nodes).
    pub unpack_cache: PathBuf,
    pub runc: PathBuf,
    pub umoci: PathBuf,
}

/// The runc runtime of one node.
#[derive(Debug)]
pub struct RuncRuntime {
    store: ImageStore,
    runc: PathBuf,
    state: PathBuf,
    /// The agent's own capability bounding set: what a privileged container gets.
    own_caps: Vec<String>,
    /// `runc delete` of containers that ended, running beside the pods ([`RuncRuntime::remove`]).
    removals: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Container runs started by this runtime: the last part of every id
    /// ([`RuncRuntime::container_id`]).
    runs: std::sync::atomic::AtomicU64,
}

/// Why a container could not be set up under runc: the waiting reason and message.
pub type SetupError = (&'static str, String);

/// What the runc runtime starts for one container run.
#[derive(Debug, Clone)]
pub struct RuncLaunch {
    pub id: String,
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// What a container run needs from the pod, resolved before its image is.
#[derive(Debug)]
pub struct RunRequest<'a> {
    pub spec: &'a PodSpec,
    pub container: &'a Container,
    /// The container's resolved `command` and `args` (`$(VAR)` expanded).
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// The pod's environment for this container (the stand-in's base env and the pod's `env`).
    pub env: Vec<(String, String)>,
    pub binds: Vec<BindMount>,
    pub bundle: PathBuf,
    pub id: String,
}

impl RuncRuntime {
    /// Opens the image store and empties this node's runc state (`<root>/run/runc`).
    pub async fn start(config: &RuncConfig, node_root: &Path) -> Result<Self, StoreError> {
        let store = ImageStore::open(&config.image_store, &config.unpack_cache, &config.umoci)?;
        let rt = RuncRuntime {
            store,
            runc: config.runc.clone(),
            state: node_root.join("run/runc"),
            own_caps: caps_in_mask(own_bounding_set()),
            removals: std::sync::Mutex::new(Vec::new()),
            runs: std::sync::atomic::AtomicU64::new(0),
        };
        rt.delete_all().await;
        Ok(rt)
    }

    fn runc_command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.runc);
        cmd.arg("--root").arg(&self.state);
        cmd
    }

    /// Deletes every container in this node's state directory (left by an agent that died).
    async fn delete_all(&self) {
        let Ok(out) = self.runc_command().args(["list", "-q"]).output().await else {
            return;
        };
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            self.delete(id).await;
        }
    }

    /// `runc delete --force`: kills what is left of the container and forgets it, once its
    /// cgroup is empty.
    pub async fn delete(&self, id: &str) {
        wait_cgroup_empty(id).await;
        match self
            .runc_command()
            .args(["delete", "--force", id])
            .output()
            .await
        {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                tracing::debug!(id, stderr = %String::from_utf8_lossy(&o.stderr).trim(), "runc delete")
            }
            Err(e) => tracing::warn!(id, error = %e, "runc delete"),
        }
    }

    /// A new container id for run `restart` of `container` in the pod `pod_uid`. A static
    /// pod's uid is its manifest's hash, so a manifest that comes back (A, B, A) brings back the
    /// uid of a pod whose containers may still be in their background removal: the run counter
    /// keeps the new container's id apart from theirs, so that removal cannot delete it.
    pub fn container_id(&self, pod_uid: &str, container: &str, restart: u32) -> String {
        let run = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        container_id(pod_uid, container, restart, run)
    }

    /// Removes container `id`, whose process has ended, in the background: nothing of the pod
    /// waits for runc's clean-up (a kubelet does not wait for a container's removal either).
    /// [`RuncRuntime::settle`] waits for every removal.
    pub fn remove(self: &Arc<Self>, id: String) {
        let rt = Arc::clone(self);
        let task = tokio::spawn(async move { rt.delete(&id).await });
        let mut removals = self.removals.lock().unwrap_or_else(|e| e.into_inner());
        removals.retain(|t| !t.is_finished());
        removals.push(task);
    }

    /// Waits until every container removal started so far is done (the agent's shutdown, so
    /// no runc state or cgroup outlives it).
    pub async fn settle(&self) {
        let pending = std::mem::take(&mut *self.removals.lock().unwrap_or_else(|e| e.into_inner()));
        for task in pending {
            let _ = task.await;
        }
    }

    /// Resolves the image, unpacks it, writes the bundle and returns what to start.
    pub async fn prepare(&self, req: RunRequest<'_>) -> Result<RuncLaunch, SetupError> {
        let image_name = req.container.image.clone().unwrap_or_default();
        let image = self
            .store
            .lookup(&image_name)
            .map_err(|e| ("ErrImagePull", e.to_string()))?;
        let rootfs = self
            .store
            .rootfs(image)
            .await
            .map_err(|e| ("ErrImagePull", e.to_string()))?;
        let config = container_config(&req, image, rootfs, &self.own_caps)?;
        let json = serde_json::to_vec_pretty(&runtime_config(&config))
            .map_err(|e| ("CreateContainerError", e.to_string()))?;
        write_bundle(&req.bundle, &json).map_err(|e| {
            (
                "CreateContainerError",
                format!("writing {}: {e}", req.bundle.display()),
            )
        })?;
        let args = vec![
            "--root".to_string(),
            self.state.display().to_string(),
            "run".into(),
            "--bundle".into(),
            req.bundle.display().to_string(),
            req.id.clone(),
        ];
        Ok(RuncLaunch {
            id: req.id,
            program: self.runc.clone(),
            args,
        })
    }

    /// `runc exec` of `command` in the running container `id` (exec probes).
    pub fn exec(&self, id: &str, command: &[String]) -> RuncLaunch {
        let mut args = vec![
            "--root".to_string(),
            self.state.display().to_string(),
            "exec".into(),
            id.into(),
        ];
        args.extend(command.iter().cloned());
        RuncLaunch {
            id: id.into(),
            program: self.runc.clone(),
            args,
        }
    }
}

/// Where runc puts the process list of container `id`'s cgroup (no `cgroupsPath` in the bundle:
/// `/<id>` under each hierarchy), in the order to try: cgroup v1's `pids` controller, the hybrid
/// layout's unified hierarchy, a unified-only host. They list the processes as the host sees
/// them, unlike runc's state (see the module docs).
pub fn cgroup_procs_files(id: &str) -> [PathBuf; 3] {
    ["pids", "unified", ""].map(|c| {
        Path::new("/sys/fs/cgroup")
            .join(c)
            .join(id)
            .join("cgroup.procs")
    })
}

/// Waits (at most 2 s) until container `id`'s cgroup has no process left. After a SIGKILL the
/// kernel takes a moment to reap a PID namespace, runc cannot remove a cgroup that still has
/// members (it leaves the directory behind), and runc's own state cannot tell it is still
/// running (its pids are those of the nested namespace).
async fn wait_cgroup_empty(id: &str) {
    let procs = cgroup_procs_files(id);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let busy = procs
            .iter()
            .any(|p| std::fs::read_to_string(p).is_ok_and(|s| !s.trim().is_empty()));
        if !busy {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tracing::warn!(
        id,
        "container cgroup still has processes after 2 s; removing it anyway"
    );
}

/// `CapBnd` of `/proc/self/status` (0 when unreadable: a privileged container then gets none).
fn own_bounding_set() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapBnd:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn write_bundle(dir: &Path, config: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join("config.json.tmp");
    std::fs::write(&tmp, config)?;
    std::fs::rename(tmp, dir.join("config.json"))
}

/// The process arguments, as Kubernetes combines `command`/`args` with the image's
/// `Entrypoint`/`Cmd`.
pub fn process_args(command: &[String], args: &[String], image: &StoredImage) -> Vec<String> {
    let c = &image.config;
    match (command.is_empty(), args.is_empty()) {
        (false, _) => command.iter().chain(args).cloned().collect(),
        (true, false) => c.entrypoint.iter().chain(args).cloned().collect(),
        (true, true) => c.entrypoint.iter().chain(&c.cmd).cloned().collect(),
    }
}

/// The image's `Env`, then the pod's on top; `PATH` and `HOME` of the stand-in's base
/// environment give way to the image's (they describe the host, not the image).
pub fn process_env(pod: &[(String, String)], image: &StoredImage) -> Vec<String> {
    let mut env = image_env(&image.config);
    for (k, v) in pod {
        let host_only = k == "HOME" || (k == "PATH" && env.contains_key("PATH"));
        if !host_only {
            env.insert(k.clone(), v.clone());
        }
    }
    env.entry("HOME".into()).or_insert_with(|| "/".into());
    env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// `runAsUser`/`runAsGroup` of the container, then of the pod.
fn security_ids(spec: &PodSpec, c: &Container) -> (Option<u32>, Option<u32>) {
    let sc = c.security_context.as_ref();
    let psc = spec.security_context.as_ref();
    let id = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
    let user = id(sc.and_then(|s| s.run_as_user)).or(id(psc.and_then(|s| s.run_as_user)));
    let group = id(sc.and_then(|s| s.run_as_group)).or(id(psc.and_then(|s| s.run_as_group)));
    (user, group)
}

fn container_config(
    req: &RunRequest<'_>,
    image: &StoredImage,
    rootfs: PathBuf,
    own_caps: &[String],
) -> Result<ContainerConfig, SetupError> {
    let (uid, gid) = match security_ids(req.spec, req.container) {
        (Some(u), g) => (u, g.unwrap_or(0)),
        (None, g) => {
            let (u, ig) = image_user(&image.config.user, &rootfs).ok_or_else(|| {
                (
                    "CreateContainerConfigError",
                    format!(
                        "image {} names user {:?}, which its /etc/passwd does not have",
                        image.reference(),
                        image.config.user
                    ),
                )
            })?;
            (u, g.unwrap_or(ig))
        }
    };
    let args = process_args(&req.command, &req.args, image);
    if args.is_empty() {
        return Err((
            "CreateContainerError",
            format!(
                "image {} has no entrypoint and the container no command",
                image.reference()
            ),
        ));
    }
    let cwd = req
        .container
        .working_dir
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| Some(image.config.working_dir.clone()).filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".into());
    Ok(ContainerConfig {
        rootfs,
        args,
        env: process_env(&req.env, image),
        cwd: PathBuf::from(cwd),
        uid,
        gid,
        privileged: req
            .container
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false),
        privileged_caps: own_caps.to_vec(),
        binds: req.binds.clone(),
    })
}

/// A runc container id: `[A-Za-z0-9_.+-]`, unique per node, pod, container, restart and the
/// node runtime's run counter `run`.
fn container_id(pod_uid: &str, container: &str, restart: u32, run: u64) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_.+-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{}-{}-{restart}.{run}", clean(pod_uid), clean(container))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::image_store::ImageConfig;

    fn image(entrypoint: &[&str], cmd: &[&str], env: &[&str]) -> StoredImage {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect();
        StoredImage {
            name: "etcd".into(),
            tag: "3.5.16".into(),
            digest: "sha256:aa".into(),
            layout: "/s".into(),
            config: ImageConfig {
                user: String::new(),
                env: v(env),
                entrypoint: v(entrypoint),
                cmd: v(cmd),
                working_dir: String::new(),
            },
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn command_and_args_combine_with_entrypoint_and_cmd_as_kubernetes_does() {
        let i = image(&["/e"], &["--c"], &[]);
        assert_eq!(process_args(&s(&["x"]), &s(&["y"]), &i), ["x", "y"]);
        assert_eq!(process_args(&s(&["x"]), &[], &i), ["x"]);
        assert_eq!(process_args(&[], &s(&["y"]), &i), ["/e", "y"]);
        assert_eq!(process_args(&[], &[], &i), ["/e", "--c"]);
    }

    #[test]
    fn the_images_path_wins_over_the_hosts_and_the_pods_env_over_the_images() {
        let i = image(
            &[],
            &[],
            &["PATH=/usr/local/bin:/bin", "A=image", "B=image"],
        );
        let pod = vec![
            ("PATH".to_string(), "/host/bin".to_string()),
            ("HOME".to_string(), "/host/pods/u/home".to_string()),
            ("A".to_string(), "pod".to_string()),
        ];
        assert_eq!(
            process_env(&pod, &i),
            ["A=pod", "B=image", "HOME=/", "PATH=/usr/local/bin:/bin"]
        );
    }

    #[test]
    fn container_ids_are_what_runc_accepts() {
        assert_eq!(container_id("ab-12", "etcd", 3, 7), "ab-12-etcd-3.7");
        assert_eq!(container_id("a/b c", "x", 0, 0), "a_b_c-x-0.0");
    }
}
