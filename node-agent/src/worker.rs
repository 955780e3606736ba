//! One pod's life on the node (the kubelet pod worker stand-in).
//!
//! A [`PodWorker`] runs the init containers in order (a failing one is retried with back-off
//! unless `restartPolicy` is `Never`, and blocks the app containers), then supervises every
//! app container concurrently: start, probes, exit, restart per policy with exponential
//! back-off. It records what it sees in a [`PodObservation`] published on a watch channel;
//! status computation is left to [`crate::status::pod_status`]. Stopping a worker stops
//! every container (SIGTERM, grace period, SIGKILL) and waits for them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::NodeContext;
use crate::env::{PodFacts, container_env};
use crate::expand::expand_with;
use crate::mounts::BindMount;
use crate::probes::{
    Action, ProbeEvent, ProbeKind, Timings, cancelled_sleep, network_action, probe_loop,
};
use crate::runner::{Exit, Launch, Process};
use crate::static_pods::PodKey;
use crate::status::{
    ContainerObservation, ContainerPhase, PodObservation, Termination, restart_policy,
};
use crate::volumes::container_binds;

const MAX_TERMINATION_MESSAGE: usize = 4096;
const FALLBACK_LOG_BYTES: usize = 2048;

/// Which container of the pod.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Init(usize),
    App(usize),
}

impl Slot {
    fn get(self, o: &mut PodObservation) -> Option<&mut ContainerObservation> {
        match self {
            Slot::Init(i) => o.init_containers.get_mut(i),
            Slot::App(i) => o.containers.get_mut(i),
        }
    }
}

/// Shared state of one pod worker's tasks.
#[derive(Debug)]
struct PodRun {
    ctx: NodeContext,
    key: PodKey,
    uid: String,
    spec: PodSpec,
    facts: PodFacts,
    obs: watch::Sender<PodObservation>,
    cancel: CancellationToken,
}

/// How one container run ended.
enum RunOutcome {
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
        };
        let cancel = CancellationToken::new();
        let run = Arc::new(PodRun {
            ctx: ctx.clone(),
            key: key.clone(),
            uid: uid.clone(),
            spec,
            facts,
            obs: tx,
            cancel: cancel.clone(),
        });
        let span = tracing::info_span!("pod", node = %ctx.name, pod = %key);
        let task = tokio::spawn(run_pod(run).instrument(span));
        PodWorker {
            key,
            uid,
            pod: Arc::new(pod),
            cancel,
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
        self.cancel.cancel();
        if let Err(e) = self.task.await {
            tracing::error!(pod = %self.key, error = %e, "pod worker task failed");
        }
    }
}

async fn run_pod(run: Arc<PodRun>) {
    tracing::info!("starting pod");
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
    } else if cancelled_sleep(&run.cancel, delay).await {
        return false;
    }
    run.obs.send_modify(|o| {
        if let Some(c) = slot.get(o) {
            c.restart_count = c.restart_count.saturating_add(1);
        }
    });
    true
}

fn container_of(spec: &PodSpec, slot: Slot) -> Option<&Container> {
    match slot {
        Slot::Init(i) => spec.init_containers.as_ref().and_then(|v| v.get(i)),
        Slot::App(i) => spec.containers.get(i),
    }
}

/// Everything prepared for one run of a container.
struct Prepared {
    launch: Launch,
    termination_file: PathBuf,
    env: Vec<(String, String)>,
    binds: Vec<BindMount>,
}

fn prepare(run: &PodRun, c: &Container, restart: u32) -> Result<Prepared, (&'static str, String)> {
    let ctx = &run.ctx;
    let env =
        container_env(c, &run.facts).map_err(|e| ("CreateContainerConfigError", e.to_string()))?;
    let vars = env.iter().cloned().collect();
    let command: Vec<String> = c
        .command
        .iter()
        .flatten()
        .map(|a| expand_with(a, &vars))
        .collect();
    let args: Vec<String> = c
        .args
        .iter()
        .flatten()
        .map(|a| expand_with(a, &vars))
        .collect();
    let image = c.image.clone().unwrap_or_default();
    let resolved = ctx
        .images
        .resolve(&image, &command, &args)
        .map_err(|e| ("CreateContainerError", e.to_string()))?;
    let mut binds = container_binds(ctx, &run.spec, &run.uid, c)
        .map_err(|e| ("CreateContainerConfigError", e.to_string()))?;
    let container_dir = ctx.pod_dir(&run.uid).join("containers").join(&c.name);
    std::fs::create_dir_all(&container_dir).map_err(|e| ("RunContainerError", e.to_string()))?;
    let termination_file = container_dir.join(format!("termination-log-{restart}"));
    std::fs::write(&termination_file, b"").map_err(|e| ("RunContainerError", e.to_string()))?;
    let service_binds = binds.clone();
    binds.push(BindMount {
        source: termination_file.clone(),
        target: PathBuf::from(
            c.termination_message_path
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/dev/termination-log".into()),
        ),
        read_only: false,
    });
    let launch = Launch {
        helper: ctx.helper.clone(),
        program: resolved.program,
        args: resolved.args,
        env: env.clone(),
        binds,
        staging: ctx.staging_dir(),
        working_dir: c
            .working_dir
            .clone()
            .filter(|w| !w.is_empty())
            .map(PathBuf::from),
        log_path: Some(ctx.log_path(
            &run.key.namespace,
            &run.key.name,
            &run.uid,
            &c.name,
            restart,
        )),
    };
    Ok(Prepared {
        launch,
        termination_file,
        env,
        binds: service_binds,
    })
}

/// The launch for an exec probe: same image, env and mounts, no log.
fn exec_probe_launch(
    run: &PodRun,
    c: &Container,
    p: &Prepared,
    command: &[String],
) -> Result<Launch, String> {
    let image = c.image.clone().unwrap_or_default();
    let resolved = run
        .ctx
        .images
        .resolve(&image, command, &[])
        .map_err(|e| e.to_string())?;
    Ok(Launch {
        program: resolved.program,
        args: resolved.args,
        env: p.env.clone(),
        binds: p.binds.clone(),
        log_path: None,
        ..p.launch.clone()
    })
}

fn probe_action(
    run: &PodRun,
    c: &Container,
    p: &Prepared,
    kind: ProbeKind,
) -> Option<Result<(Timings, Action), String>> {
    let probe = match kind {
        ProbeKind::Startup => c.startup_probe.as_ref(),
        ProbeKind::Liveness => c.liveness_probe.as_ref(),
        ProbeKind::Readiness => c.readiness_probe.as_ref(),
    }?;
    let timings = Timings::of(probe, kind);
    let action = match network_action(probe, c, &run.facts.pod_ip) {
        Ok(Some(a)) => Ok(a),
        Ok(None) => match probe.exec.as_ref().and_then(|e| e.command.clone()) {
            Some(cmd) if !cmd.is_empty() => {
                exec_probe_launch(run, c, p, &cmd).map(|l| Action::Exec(Box::new(l)))
            }
            _ => Err(format!("{} probe has no action", kind.as_str())),
        },
        Err(e) => Err(e),
    };
    Some(action.map(|a| (timings, a)))
}

fn read_termination_message(
    c: &Container,
    file: &std::path::Path,
    log: Option<&PathBuf>,
    exit_code: i32,
) -> Option<String> {
    let mut msg = std::fs::read(file).unwrap_or_default();
    msg.truncate(MAX_TERMINATION_MESSAGE);
    let fallback = c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
    if msg.is_empty()
        && fallback
        && exit_code != 0
        && let Some(log) = log
    {
        let all = std::fs::read(log).unwrap_or_default();
        let start = all.len().saturating_sub(FALLBACK_LOG_BYTES);
        msg = all[start..].to_vec();
    }
    let s = String::from_utf8_lossy(&msg).into_owned();
    (!s.is_empty()).then_some(s)
}

fn spawn_probe(
    kind: ProbeKind,
    spec: Option<Result<(Timings, Action), String>>,
    tx: &mpsc::Sender<ProbeEvent>,
    cancel: &CancellationToken,
    tasks: &mut Vec<JoinHandle<()>>,
) {
    match spec {
        Some(Ok((timings, action))) => {
            let span = tracing::debug_span!("probe", probe = kind.as_str());
            tasks.push(tokio::spawn(
                probe_loop(kind, timings, action, tx.clone(), cancel.clone()).instrument(span),
            ));
        }
        Some(Err(e)) => tracing::warn!(probe = kind.as_str(), error = %e, "probe ignored"),
        None => {}
    }
}

/// Starts the container once and follows it until it exits or the pod is stopped.
async fn run_once(run: &PodRun, slot: Slot) -> RunOutcome {
    let Some(c) = container_of(&run.spec, slot) else {
        return RunOutcome::Cancelled;
    };
    if run.cancel.is_cancelled() {
        return RunOutcome::Cancelled;
    }
    let restart = run.obs.borrow().clone();
    let restart = match slot {
        Slot::Init(i) => restart
            .init_containers
            .get(i)
            .map_or(0, |c| c.restart_count),
        Slot::App(i) => restart.containers.get(i).map_or(0, |c| c.restart_count),
    };
    let prepared = match prepare(run, c, restart) {
        Ok(p) => p,
        Err((reason, message)) => return RunOutcome::StartFailed { reason, message },
    };
    let mut process = match Process::spawn(&prepared.launch).await {
        Ok(p) => p,
        Err(e) => {
            return RunOutcome::StartFailed {
                reason: "RunContainerError",
                message: e.to_string(),
            };
        }
    };
    let container_id = format!("node-agent://{}/{}", run.ctx.name, process.pid());
    let is_app = matches!(slot, Slot::App(_));
    let startup = if is_app {
        probe_action(run, c, &prepared, ProbeKind::Startup)
    } else {
        None
    };
    let liveness = if is_app {
        probe_action(run, c, &prepared, ProbeKind::Liveness)
    } else {
        None
    };
    let readiness = if is_app {
        probe_action(run, c, &prepared, ProbeKind::Readiness)
    } else {
        None
    };
    let mut started = startup.is_none();
    let has_readiness = readiness.is_some();
    let mut ready = started && !has_readiness;
    tracing::info!(pid = process.pid(), program = %prepared.launch.program.display(), "container started");
    let started_at = process.started_at;
    let set_running = |started: bool, ready: bool| {
        run.obs.send_modify(|o| {
            if let Some(co) = slot.get(o) {
                co.state = ContainerPhase::Running {
                    started_at,
                    started,
                    ready,
                    container_id: container_id.clone(),
                };
            }
        });
    };
    set_running(started, ready);
    let probe_cancel = run.cancel.child_token();
    let (tx, mut rx) = mpsc::channel(8);
    let mut later = Some((liveness, readiness));
    let mut probe_tasks: Vec<JoinHandle<()>> = Vec::new();
    if startup.is_some() {
        spawn_probe(
            ProbeKind::Startup,
            startup,
            &tx,
            &probe_cancel,
            &mut probe_tasks,
        );
    } else if let Some((l, r)) = later.take() {
        spawn_probe(ProbeKind::Liveness, l, &tx, &probe_cancel, &mut probe_tasks);
        spawn_probe(
            ProbeKind::Readiness,
            r,
            &tx,
            &probe_cancel,
            &mut probe_tasks,
        );
    }
    let grace = Duration::from_secs(
        u64::try_from(run.spec.termination_grace_period_seconds.unwrap_or(30)).unwrap_or(30),
    );
    let mut killed_by_probe: Option<String> = None;
    let mut cancelled = false;
    let exit: Exit = loop {
        tokio::select! {
            exit = process.wait() => break exit,
            Some(ev) = rx.recv() => match ev {
                ProbeEvent::Started => {
                    started = true;
                    ready = !has_readiness;
                    set_running(started, ready);
                    if let Some((l, r)) = later.take() {
                        spawn_probe(ProbeKind::Liveness, l, &tx, &probe_cancel, &mut probe_tasks);
                        spawn_probe(ProbeKind::Readiness, r, &tx, &probe_cancel, &mut probe_tasks);
                    }
                }
                ProbeEvent::Ready(r) => {
                    tracing::info!(ready = r, "readiness changed");
                    ready = r && started;
                    set_running(started, ready);
                }
                ProbeEvent::Failed { kind, message } => {
                    tracing::warn!(probe = kind.as_str(), %message, "probe failed, killing container");
                    killed_by_probe = Some(format!("{} probe failed: {message}", kind.as_str()));
                    probe_cancel.cancel();
                    break process.stop(grace).await;
                }
            },
            _ = run.cancel.cancelled() => {
                cancelled = true;
                probe_cancel.cancel();
                break process.stop(grace).await;
            }
        }
    };
    probe_cancel.cancel();
    // Exec probes stop (and reap) their processes when cancelled; wait for that. Dropping the
    // receiver first makes a probe blocked on sending an event return at once.
    drop(rx);
    drop(tx);
    futures::future::join_all(probe_tasks).await;
    let ran_for = process.started.elapsed();
    let message = read_termination_message(
        c,
        &prepared.termination_file,
        prepared.launch.log_path.as_ref(),
        exit.code,
    )
    .or(killed_by_probe);
    let term = Termination {
        exit_code: exit.code,
        signal: exit.signal,
        reason: if exit.code == 0 { "Completed" } else { "Error" }.into(),
        message,
        started_at: Some(process.started_at),
        finished_at: Timestamp::now(),
        container_id,
    };
    run.obs.send_modify(|o| {
        if let Some(co) = slot.get(o) {
            co.state = ContainerPhase::Terminated(term.clone());
        }
    });
    if cancelled {
        RunOutcome::Cancelled
    } else {
        RunOutcome::Exited(term, ran_for)
    }
}
