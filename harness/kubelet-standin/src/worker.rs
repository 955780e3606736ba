//! One pod's life on the node (the kubelet pod worker stand-in).
//!
//! A [`PodWorker`] runs the init containers in order (a failing one is retried with back-off
//! unless `restartPolicy` is `Never`, and blocks the app containers), then supervises every
//! app container concurrently: start, probes, exit, restart per policy with exponential
//! back-off. It records what it sees in a [`PodObservation`] published on a watch channel;
//! status computation is left to [`crate::status::pod_status`]. Stopping a worker stops
//! every container (SIGTERM, grace period, SIGKILL) and waits for them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::container::run_once;
use crate::context::NodeContext;
use crate::env::PodFacts;
use crate::probes::cancelled_sleep;
use crate::static_pods::PodKey;
use crate::status::{
    ContainerObservation, ContainerPhase, PodObservation, Termination, restart_policy,
};

/// Which container of the pod.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slot {
    Init(usize),
    App(usize),
}

impl Slot {
    pub(crate) fn get(self, o: &mut PodObservation) -> Option<&mut ContainerObservation> {
        match self {
            Slot::Init(i) => o.init_containers.get_mut(i),
            Slot::App(i) => o.containers.get_mut(i),
        }
    }
}

/// Shared state of one pod worker's tasks.
#[derive(Debug)]
pub(crate) struct PodRun {
    pub(crate) ctx: NodeContext,
    pub(crate) key: PodKey,
    pub(crate) uid: String,
    pub(crate) spec: PodSpec,
    pub(crate) facts: PodFacts,
    pub(crate) obs: watch::Sender<PodObservation>,
    pub(crate) cancel: CancellationToken,
    /// Set before `cancel` to stop without grace period (a simulated node crash).
    pub(crate) kill: Arc<std::sync::atomic::AtomicBool>,
}

/// How one container run ended.
pub(crate) enum RunOutcome {
    Exited(Termination, Duration),
    StartFailed {
        reason: &'static str,
        message: String,
    },
    Cancelled,
}

/// A running pod worker.
#[derive(Debug)]
pub struct PodWorker {
    kill: Arc<std::sync::atomic::AtomicBool>,
    pub key: PodKey,
    pub uid: String,
    pub pod: Arc<Pod>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
    observations: watch::Receiver<PodObservation>,
}

impl PodWorker {
    /// Starts running `pod` (already carrying its final name, namespace and uid).
    pub fn start(ctx: NodeContext, key: PodKey, pod: Pod) -> Self {
        let spec = pod.spec.clone().unwrap_or_default();
        let uid = pod
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| key.to_string().replace('/', "_"));
        let ip = ctx.ip.to_string();
        let mut initial = PodObservation::for_spec(&spec, &ip);
        initial.start_time = Some(Timestamp::now());
        let (tx, rx) = watch::channel(initial);
        let facts = PodFacts {
            name: key.name.clone(),
            namespace: key.namespace.clone(),
            uid: uid.clone(),
            node_name: ctx.name.clone(),
            pod_ip: ip.clone(),
            host_ip: ip,
            service_account: spec.service_account_name.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            annotations: pod.metadata.annotations.clone().unwrap_or_default(),
            kubeconfig: ctx.kubeconfig.as_ref().map(|p| p.display().to_string()),
            in_cluster: crate::api_volumes::has_service_account_token(&spec),
            api_service: ctx.api_service.clone(),
            home: Some(ctx.pod_dir(&uid).join("home").display().to_string()),
        };
        let cancel = CancellationToken::new();
        let kill = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let run = Arc::new(PodRun {
            ctx: ctx.clone(),
            key: key.clone(),
            uid: uid.clone(),
            spec,
            facts,
            obs: tx,
            cancel: cancel.clone(),
            kill: kill.clone(),
        });
        let span = tracing::info_span!("pod", node = %ctx.name, pod = %key);
        let task = tokio::spawn(run_pod(run).instrument(span));
        PodWorker {
            key,
            uid,
            pod: Arc::new(pod),
            cancel,
            kill,
            task,
            observations: rx,
        }
    }

    /// A receiver of the worker's observations.
    pub fn observations(&self) -> watch::Receiver<PodObservation> {
        self.observations.clone()
    }

    /// Whether every container has finished for good (the worker returned).
    pub fn finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops every container (SIGTERM, grace, SIGKILL) and waits for the worker.
    pub async fn stop(self) {
        self.shut(false).await;
    }

    /// SIGKILLs every container at once (no grace period) and waits for the worker.
    pub async fn kill(self) {
        self.shut(true).await;
    }

    async fn shut(self, kill: bool) {
        if kill {
            self.kill.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.cancel.cancel();
        if let Err(e) = self.task.await {
            tracing::error!(pod = %self.key, error = %e, "pod worker task failed");
        }
    }
}

async fn run_pod(run: Arc<PodRun>) {
    tracing::info!("starting pod");
    if let Some(home) = &run.facts.home
        && let Err(e) = std::fs::create_dir_all(home)
    {
        tracing::warn!(%home, error = %e, "could not create the pod's home directory");
    }
    if !mount_api_volumes(&run).await {
        return;
    }
    let init_count = run.spec.init_containers.as_ref().map_or(0, Vec::len);
    for i in 0..init_count {
        if !run_init_container(&run, i).await {
            return;
        }
    }
    let tasks: Vec<_> = (0..run.spec.containers.len())
        .map(|i| {
            let run = run.clone();
            let name = run
                .spec
                .containers
                .get(i)
                .map(|c| c.name.clone())
                .unwrap_or_default();
            let span = tracing::info_span!("container", container = %name);
            tokio::spawn(supervise(run, Slot::App(i)).instrument(span))
        })
        .collect();
    for t in futures::future::join_all(tasks).await {
        if let Err(e) = t {
            tracing::error!(error = %e, "container task failed");
        }
    }
    tracing::info!("pod worker finished");
}

/// Builds the pod's API-backed volumes, retrying (500 ms doubling to 2 min, like the kubelet's
/// volume manager) with every container Waiting `ContainerCreating` and the error as message;
/// false when cancelled meanwhile.
async fn mount_api_volumes(run: &PodRun) -> bool {
    let mut delay = Duration::from_millis(500);
    loop {
        let client = run.ctx.client.as_ref().map(|c| &c.0);
        let pod_dir = run.ctx.pod_dir(&run.uid);
        match crate::api_volume_io::materialize(client, &run.spec, &run.facts, &pod_dir).await {
            Ok(()) => return true,
            Err(e) => {
                let message = format!("MountVolume.SetUp failed: {e}");
                tracing::warn!(%message, "volumes not ready");
                run.obs.send_modify(|o| {
                    for c in o.init_containers.iter_mut().chain(o.containers.iter_mut()) {
                        c.state = ContainerPhase::Waiting {
                            reason: "ContainerCreating".into(),
                            message: Some(message.clone()),
                        };
                    }
                });
            }
        }
        if cancelled_sleep(&run.cancel, delay).await {
            return false;
        }
        delay = (delay * 2).min(Duration::from_secs(122));
    }
}

/// Runs init container `i` until it succeeds; false when the pod must not continue.
async fn run_init_container(run: &Arc<PodRun>, i: usize) -> bool {
    let name = run
        .spec
        .init_containers
        .as_ref()
        .and_then(|v| v.get(i))
        .map(|c| c.name.clone())
        .unwrap_or_default();
    let span = tracing::info_span!("container", container = %name, init = true);
    async {
        let mut failures = 0u32;
        loop {
            let outcome = run_once(run, Slot::Init(i)).await;
            let (ran_for, code) = match outcome {
                RunOutcome::Cancelled => return false,
                RunOutcome::Exited(t, _) if t.exit_code == 0 => return true,
                RunOutcome::Exited(t, ran_for) => {
                    tracing::warn!(exit_code = t.exit_code, message = ?t.message, "init container failed");
                    if restart_policy(&run.spec) == "Never" {
                        return false;
                    }
                    (ran_for, Some(t))
                }
                RunOutcome::StartFailed { reason, message } => {
                    set_waiting(run, Slot::Init(i), reason, Some(message), None);
                    (Duration::ZERO, None)
                }
            };
            failures = run.ctx.backoff.next_count(failures, ran_for);
            if !back_off(run, Slot::Init(i), failures, code).await {
                return false;
            }
        }
    }
    .instrument(span)
    .await
}

/// Supervises one app container until the pod is stopped or the policy says done.
async fn supervise(run: Arc<PodRun>, slot: Slot) {
    let policy = restart_policy(&run.spec).to_string();
    let mut failures = 0u32;
    loop {
        let (ran_for, term) = match run_once(&run, slot).await {
            RunOutcome::Cancelled => return,
            RunOutcome::Exited(t, ran_for) => {
                let restart = match policy.as_str() {
                    "Never" => false,
                    "OnFailure" => t.exit_code != 0,
                    _ => true,
                };
                tracing::info!(exit_code = t.exit_code, restart, "container exited");
                if !restart {
                    return;
                }
                (ran_for, Some(t))
            }
            RunOutcome::StartFailed { reason, message } => {
                tracing::warn!(reason, %message, "container could not start");
                set_waiting(&run, slot, reason, Some(message), None);
                (Duration::ZERO, None)
            }
        };
        failures = run.ctx.backoff.next_count(failures, ran_for);
        if !back_off(&run, slot, failures, term).await {
            return;
        }
    }
}

/// A container whose image could not be pulled (`ErrImagePull`) waits as `ImagePullBackOff`
/// until the next attempt, as with a kubelet.
fn image_pull_back_off(run: &PodRun, slot: Slot) {
    run.obs.send_modify(|o| {
        if let Some(c) = slot.get(o)
            && let ContainerPhase::Waiting { reason, message } = &mut c.state
            && reason == "ErrImagePull"
        {
            *reason = "ImagePullBackOff".into();
            *message = Some(format!(
                "Back-off pulling image: {}",
                message.as_deref().unwrap_or_default()
            ));
        }
    });
}

fn set_waiting(
    run: &PodRun,
    slot: Slot,
    reason: &str,
    message: Option<String>,
    last: Option<Termination>,
) {
    run.obs.send_modify(|o| {
        if let Some(c) = slot.get(o) {
            c.state = ContainerPhase::Waiting {
                reason: reason.to_string(),
                message,
            };
            if last.is_some() {
                c.last_termination = last;
            }
        }
    });
}

/// Waits out the back-off (showing CrashLoopBackOff); false when cancelled meanwhile.
async fn back_off(run: &PodRun, slot: Slot, failures: u32, term: Option<Termination>) -> bool {
    let delay = run.ctx.backoff.delay(failures);
    if let Some(t) = term {
        let name = run.obs.borrow().clone();
        let cname = match slot {
            Slot::Init(i) => name.init_containers.get(i).map(|c| c.name.clone()),
            Slot::App(i) => name.containers.get(i).map(|c| c.name.clone()),
        }
        .unwrap_or_default();
        let msg = format!(
            "back-off {delay:?} restarting failed container={cname} pod={}",
            run.key
        );
        let keep = t.clone();
        set_waiting(run, slot, "CrashLoopBackOff", Some(msg), Some(t));
        if cancelled_sleep(&run.cancel, delay).await {
            // Show the last run as the final state.
            run.obs.send_modify(|o| {
                if let Some(c) = slot.get(o) {
                    c.state = ContainerPhase::Terminated(keep);
                }
            });
            return false;
        }
    } else {
        image_pull_back_off(run, slot);
        if cancelled_sleep(&run.cancel, delay).await {
            return false;
        }
    }
    run.obs.send_modify(|o| {
        if let Some(c) = slot.get(o) {
            c.restart_count = c.restart_count.saturating_add(1);
        }
    });
    true
}
