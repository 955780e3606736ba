//! The restart approval (#65, "the gate is asked when the installer pod is created, not when
//! etcd restarts"). A new or changed manifest restarts etcd, so with `--approval-window` the
//! installer writes one only on a fresh answer of the quorum gate:
//!
//! ```text
//!   installer process starts (t0, its own clock)
//!   kubelet reports the container running ──▶ operator's pass asks the gate (RollNode) again
//!                                              allowed: annotates this pod RESTART_APPROVED
//!   revision dir laid down; manifest would change
//!   poll its own pod until the annotation is there ── seen by t0 + window ──▶ write the manifest
//!                                                    └─ not by then ──▶ RestartNotApproved
//! ```
//!
//! The operator approves only a pod whose container it has seen running, so its gate verdict is
//! younger than this process; the manifest is written within the window of the process's
//! start, so it is never older than the window, measured on one clock (no clock of another
//! machine is compared). An unchanged manifest restarts nothing and needs no approval.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use crate::events::PodRef;

/// The annotation the operator sets on an installer pod once the quorum gate allows its
/// restart; its value is the operator's time of the verdict (for people reading the pod).
pub const RESTART_APPROVED: &str = "etcd.static-operator.io/restart-approved";

/// How often the pod is read while waiting.
const POLL: Duration = Duration::from_millis(250);

/// Where to look for the approval and how long it may take.
#[derive(Debug, Clone)]
pub struct Approval {
    pub pod: PodRef,
    /// From the process's start.
    pub window: Duration,
    pub started: Instant,
}

/// The approval was not seen in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the operator did not approve the restart of etcd within {window:?} of this installer's start \
     (annotation {RESTART_APPROVED} on pod {namespace}/{pod}; last read: {last}): the manifest was \
     not written, so etcd did not restart; the operator asks the quorum gate again with a new pod"
)]
pub struct NotApproved {
    pub window: Duration,
    pub namespace: String,
    pub pod: String,
    pub last: String,
}

/// The approval's value, when `pod` carries it.
pub fn approval_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(RESTART_APPROVED)
        .map(String::as_str)
}

impl Approval {
    /// Waits for the annotation; returns its value.
    pub async fn wait(&self, client: &Client) -> Result<String, NotApproved> {
        let api: Api<Pod> = Api::namespaced(client.clone(), &self.pod.namespace);
        let deadline = self.started + self.window;
        let mut last = "not read yet".to_owned();
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(NotApproved {
                    window: self.window,
                    namespace: self.pod.namespace.clone(),
                    pod: self.pod.name.clone(),
                    last,
                });
            }
            let read = tokio::time::timeout(deadline - now, api.get(&self.pod.name)).await;
            match read {
                Ok(Ok(pod)) => match approval_of(&pod) {
                    Some(value) => return Ok(value.to_owned()),
                    None => "the pod, not annotated yet".clone_into(&mut last),
                },
                Ok(Err(e)) => last = format!("error: {e}"),
                Err(_) => "timed out reading the pod".clone_into(&mut last),
            }
            let now = Instant::now();
            if now < deadline {
                tokio::time::sleep((deadline - now).min(POLL)).await;
            }
        }
    }
}
