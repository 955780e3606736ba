//! The operator instances `operator-failover` plays with, and how it kills the leader: local
//! `etcd-operator run` processes (the stand-in's and `TEST_API=kas`'s sandbox), or the pods of
//! the Deployment from `manifests/` on the real control plane (identity: the pod name).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, DEFAULT_OPERATOR, OPERATOR_NS, wait_for};

/// The second local operator instance's identity.
pub const STANDBY: &str = "sandbox-operator-standby";

/// Where the competing operator instances run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperatorInstances {
    /// [`DEFAULT_OPERATOR`] and a [`STANDBY`] started here, as local processes.
    LocalProcesses,
    /// The replicas of the Deployment `etcd-operator` (label `app.kubernetes.io/name`).
    Deployment,
}

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

const SELECTOR: &str = "app.kubernetes.io/name=etcd-operator";

impl OperatorInstances {
    /// Makes sure at least two instances run, one of which stands by, and returns every
    /// instance's identity. Local: starts the standby and waits until its caches synced.
    pub(super) async fn ready(self, h: &mut Harness) -> Result<Vec<String>, ControlPlaneError> {
        match self {
            Self::LocalProcesses => {
                h.cp.start_operator_named(STANDBY)?;
                let log = h.cp.operator_log_path_of(STANDBY);
                wait_for(
                    Duration::from_secs(60),
                    "the standby's caches synced",
                    || {
                        let log = log.clone();
                        async move {
                            let text = std::fs::read_to_string(&log).unwrap_or_default();
                            if text.contains("caches synced") {
                                Ok(())
                            } else {
                                Err(format!("{} lines of log", text.lines().count()))
                            }
                        }
                    },
                )
                .await?;
                Ok(vec![DEFAULT_OPERATOR.to_owned(), STANDBY.to_owned()])
            }
            Self::Deployment => {
                let pods: Api<Pod> = Api::namespaced(h.cp.client(), OPERATOR_NS);
                let list = ListParams::default().labels(SELECTOR);
                let ready_names = || {
                    let (pods, list) = (pods.clone(), list.clone());
                    async move {
                        let items = pods.list(&list).await.map_err(|e| e.to_string())?.items;
                        let names: Vec<String> =
                            items.iter().filter(|p| ready(p)).map(name).collect();
                        if names.len() >= 2 {
                            Ok(names)
                        } else {
                            Err(format!("Ready: {names:?} of {} pod(s)", items.len()))
                        }
                    }
                };
                wait_for(
                    Duration::from_secs(180),
                    "two Ready operator pods",
                    || async { ready_names().await.map(|_| ()) },
                )
                .await?;
                let names = ready_names().await.map_err(failed)?;
                Ok(names)
            }
        }
    }

    /// Kills the instance `leader` at once and says how. Local: SIGKILL. Deployment: SIGKILL
    /// to the operator container's processes (the pid its node agent reports in the
    /// `containerID`), then the pod deleted with grace period 0, so that its node agent does
    /// not restart the container: a restarted container keeps the pod name, hence the Lease
    /// identity, and would take its own Lease back at once; the story here is a leader that is
    /// gone, as when its pod or node is lost.
    pub(super) async fn kill(
        self,
        h: &mut Harness,
        leader: &str,
    ) -> Result<String, ControlPlaneError> {
        match self {
            Self::LocalProcesses => {
                h.cp.stop_operator_named(leader, Duration::ZERO)?;
                Ok("SIGKILL to its process".into())
            }
            Self::Deployment => {
                let pods: Api<Pod> = Api::namespaced(h.cp.client(), OPERATOR_NS);
                let pod = pods.get(leader).await?;
                let id = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|cs| cs.iter().find_map(|c| c.container_id.clone()))
                    .ok_or_else(|| failed(format!("pod {leader} reports no containerID")))?;
                let killed = sigkill_container(&id)?;
                pods.delete(
                    leader,
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..DeleteParams::default()
                    },
                )
                .await?;
                Ok(format!(
                    "SIGKILL to its container ({id}: {killed}), pod deleted with grace period 0"
                ))
            }
        }
    }
}

/// SIGKILL to the container a node agent reports as `containerID`: for `runc://<id>` every
/// process of its cgroup ([`sigkill_runc`]), else the host-binary runtime's shim pid
/// ([`sigkill_group`]). Says which processes were signalled.
pub(super) fn sigkill_container(id: &str) -> Result<String, ControlPlaneError> {
    if let Some(runc_id) = id.strip_prefix("runc://") {
        return sigkill_runc(runc_id);
    }
    let pid = id
        .rsplit('/')
        .next()
        .and_then(|p| p.parse::<i32>().ok())
        .ok_or_else(|| failed(format!("no pid in containerID {id:?}")))?;
    Ok(sigkill_group(pid))
}

/// SIGKILL to every process of runc container `id`, found through its cgroup: the node agent
/// runs `runc run` nested in a PID namespace of its own, so runc's state records pids as that
/// namespace sees them and `runc kill` from the host cannot use them, while the cgroup lists
/// them as the host sees them.
fn sigkill_runc(id: &str) -> Result<String, ControlPlaneError> {
    use nix::sys::signal::{Signal, kill};
    let procs = kubelet_standin::runc::cgroup_procs_files(id)
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| failed(format!("runc container {id} has no cgroup")))?;
    let pids: Vec<i32> = std::fs::read_to_string(&procs)
        .map_err(|e| failed(format!("{}: {e}", procs.display())))?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    let killed = pids
        .iter()
        .filter(|p| kill(nix::unistd::Pid::from_raw(**p), Signal::SIGKILL).is_ok())
        .count();
    if killed == 0 {
        return Err(failed(format!(
            "runc container {id}: no process to kill in {}",
            procs.display()
        )));
    }
    Ok(format!(
        "SIGKILL to the {killed} process(es) of cgroup {}",
        procs.display()
    ))
}

/// SIGKILL to a node agent's container: the shim `pid` (a process group leader) and its child,
/// the container's first process. Says which processes were signalled.
fn sigkill_group(pid: i32) -> String {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let child = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()
        .and_then(|c| {
            c.split_whitespace()
                .next()
                .and_then(|p| p.parse::<i32>().ok())
        });
    let mut done = Vec::new();
    if let Some(c) = child
        && kill(Pid::from_raw(c), Signal::SIGKILL).is_ok()
    {
        done.push(format!("process {c}"));
    }
    if killpg(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
        done.push(format!("group {pid}"));
    }
    if done.is_empty() {
        "no process left to signal".into()
    } else {
        done.join(", ")
    }
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}
