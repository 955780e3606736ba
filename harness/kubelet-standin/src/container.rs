//! One run of one container: prepare (env, command, image, mounts, termination message
//! file), start through the helper, follow probes, stop, and record the termination.
//! The pod-level loop that decides about restarts is in [`crate::worker`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::probes::{Action, ProbeEvent, ProbeKind, Timings, network_action, probe_loop};
use crate::runner::{Exit, Process};
use crate::status::{ContainerPhase, Termination};
use crate::worker::{PodRun, RunOutcome, Slot};

mod prepare;
use prepare::{Prepared, exec_probe_launch, prepare};

const MAX_TERMINATION_MESSAGE: usize = 4096;
const FALLBACK_LOG_BYTES: usize = 2048;

fn container_of(spec: &PodSpec, slot: Slot) -> Option<&Container> {
    match slot {
        Slot::Init(i) => spec.init_containers.as_ref().and_then(|v| v.get(i)),
        Slot::App(i) => spec.containers.get(i),
    }
}

fn probe_action(
    run: &PodRun,
    c: &Container,
    p: &Prepared,
    kind: ProbeKind,
    shim: i32,
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
                exec_probe_launch(run, c, p, &cmd, shim).map(|l| Action::Exec(Box::new(l)))
            }
            _ => Err(format!("{} probe has no action", kind.as_str())),
        },
        Err(e) => Err(e),
    };
    Some(action.map(|a| (timings, a)))
}

fn read_termination_message(
    c: &Container,
    file: &Path,
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
    spec: Option<(Timings, Action)>,
    tx: &mpsc::Sender<ProbeEvent>,
    cancel: &CancellationToken,
    tasks: &mut Vec<JoinHandle<()>>,
) {
    if let Some((timings, action)) = spec {
        let span = tracing::debug_span!("probe", probe = kind.as_str());
        tasks.push(tokio::spawn(
            probe_loop(kind, timings, action, tx.clone(), cancel.clone()).instrument(span),
        ));
    }
}

/// A probe ready to run: its timings and its action.
type ProbeSpec = (Timings, Action);

/// The restart count recorded so far for the container in `slot`.
fn restart_count(run: &PodRun, slot: Slot) -> u32 {
    let obs = run.obs.borrow().clone();
    match slot {
        Slot::Init(i) => obs.init_containers.get(i).map_or(0, |c| c.restart_count),
        Slot::App(i) => obs.containers.get(i).map_or(0, |c| c.restart_count),
    }
}

/// Prepares and spawns the container's process; a failure is the run's outcome.
async fn start(
    run: &PodRun,
    c: &Container,
    restart: u32,
) -> Result<(Prepared, Process), RunOutcome> {
    let prepared = match prepare(run, c, restart).await {
        Ok(p) => p,
        Err((reason, message)) => return Err(RunOutcome::StartFailed { reason, message }),
    };
    match Process::spawn(&prepared.launch).await {
        Ok(process) => Ok((prepared, process)),
        Err(e) => Err(RunOutcome::StartFailed {
            reason: "RunContainerError",
            message: e.to_string(),
        }),
    }
}

/// The probes of one container run, not started yet.
struct Probes {
    startup: Option<ProbeSpec>,
    liveness: Option<ProbeSpec>,
    readiness: Option<ProbeSpec>,
}

/// The container's usable probes; an unusable probe is logged and left out.
fn container_probes(
    run: &PodRun,
    c: &Container,
    prepared: &Prepared,
    slot: Slot,
    pid: i32,
) -> Probes {
    // Init containers have no probes; an unusable probe is reported and treated as absent.
    let probe = |kind: ProbeKind| -> Option<ProbeSpec> {
        if !matches!(slot, Slot::App(_)) {
            return None;
        }
        match probe_action(run, c, prepared, kind, pid)? {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(probe = kind.as_str(), error = %e, "probe ignored");
                None
            }
        }
    };
    Probes {
        startup: probe(ProbeKind::Startup),
        liveness: probe(ProbeKind::Liveness),
        readiness: probe(ProbeKind::Readiness),
    }
}

/// The probe tasks of a running container and the started/ready state they drive.
struct ProbeTracker<'a> {
    run: &'a PodRun,
    slot: Slot,
    started_at: Timestamp,
    container_id: String,
    started: bool,
    ready: bool,
    has_readiness: bool,
    /// Liveness and readiness probes, started once the startup probe passed.
    later: Option<(Option<ProbeSpec>, Option<ProbeSpec>)>,
    tx: mpsc::Sender<ProbeEvent>,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl<'a> ProbeTracker<'a> {
    /// Publishes the container as running and starts its first probes.
    fn start(
        run: &'a PodRun,
        slot: Slot,
        process: &Process,
        container_id: String,
        probes: Probes,
    ) -> (Self, mpsc::Receiver<ProbeEvent>) {
        let started = probes.startup.is_none();
        let has_readiness = probes.readiness.is_some();
        let (tx, rx) = mpsc::channel(8);
        let mut tracker = ProbeTracker {
            run,
            slot,
            started_at: process.started_at,
            container_id,
            started,
            ready: started && !has_readiness,
            has_readiness,
            later: Some((probes.liveness, probes.readiness)),
            tx,
            cancel: run.cancel.child_token(),
            tasks: Vec::new(),
        };
        tracker.publish_running();
        if probes.startup.is_some() {
            tracker.spawn(ProbeKind::Startup, probes.startup);
        } else {
            tracker.spawn_later();
        }
        (tracker, rx)
    }

    /// Records the container as running with the current started/ready flags.
    fn publish_running(&self) {
        self.run.obs.send_modify(|o| {
            if let Some(co) = self.slot.get(o) {
                co.state = ContainerPhase::Running {
                    started_at: self.started_at,
                    started: self.started,
                    ready: self.ready,
                    container_id: self.container_id.clone(),
                };
            }
        });
    }

    /// Starts one probe task, if that probe is configured.
    fn spawn(&mut self, kind: ProbeKind, spec: Option<ProbeSpec>) {
        spawn_probe(kind, spec, &self.tx, &self.cancel, &mut self.tasks);
    }

    /// Starts the liveness and readiness probes, once.
    fn spawn_later(&mut self) {
        if let Some((l, r)) = self.later.take() {
            self.spawn(ProbeKind::Liveness, l);
            self.spawn(ProbeKind::Readiness, r);
        }
    }

    /// Applies a probe event; returns why the container must be killed, if it must.
    fn on_event(&mut self, ev: ProbeEvent) -> Option<String> {
        match ev {
            ProbeEvent::Started => {
                self.started = true;
                self.ready = !self.has_readiness;
                self.publish_running();
                self.spawn_later();
            }
            ProbeEvent::Ready(r) => {
                tracing::info!(ready = r, "readiness changed");
                self.ready = r && self.started;
                self.publish_running();
            }
            ProbeEvent::Failed { kind, message } => {
                tracing::warn!(probe = kind.as_str(), %message, "probe failed, killing container");
                let killed = format!("{} probe failed: {message}", kind.as_str());
                self.cancel.cancel();
                return Some(killed);
            }
        }
        None
    }

    /// Stops the probes and waits until their tasks (and exec probe processes) are done.
    async fn stop(self, rx: mpsc::Receiver<ProbeEvent>) {
        self.cancel.cancel();
        // Exec probes stop (and reap) their processes when cancelled; wait for that. Dropping the
        // receiver first makes a probe blocked on sending an event return at once.
        drop(rx);
        drop(self.tx);
        futures::future::join_all(self.tasks).await;
    }
}

/// How following a running container ended.
struct Followed {
    exit: Exit,
    /// Why a failed probe killed the container.
    killed_by_probe: Option<String>,
    /// The pod was stopped.
    cancelled: bool,
}

/// The pod's termination grace period (default 30 s).
fn termination_grace(spec: &PodSpec) -> Duration {
    Duration::from_secs(
        u64::try_from(spec.termination_grace_period_seconds.unwrap_or(30)).unwrap_or(30),
    )
}

/// Follows the process until it exits, a failed probe kills it or the pod is stopped.
async fn follow(
    run: &PodRun,
    process: &mut Process,
    probes: &mut ProbeTracker<'_>,
    rx: &mut mpsc::Receiver<ProbeEvent>,
) -> Followed {
    let grace = termination_grace(&run.spec);
    loop {
        tokio::select! {
            exit = process.wait() => {
                return Followed { exit, killed_by_probe: None, cancelled: false };
            }
            Some(ev) = rx.recv() => {
                if let Some(killed) = probes.on_event(ev) {
                    let exit = process.stop(grace).await;
                    return Followed { exit, killed_by_probe: Some(killed), cancelled: false };
                }
            }
            _ = run.cancel.cancelled() => {
                probes.cancel.cancel();
                let grace = if run.kill.load(std::sync::atomic::Ordering::SeqCst) {
                    Duration::ZERO
                } else {
                    grace
                };
                let exit = process.stop(grace).await;
                return Followed { exit, killed_by_probe: None, cancelled: true };
            }
        }
    }
}

/// The termination of a run: its exit, and the termination message or else the probe failure.
fn termination(
    c: &Container,
    prepared: &Prepared,
    process: &Process,
    container_id: String,
    followed: Followed,
) -> Termination {
    let Followed {
        exit,
        killed_by_probe,
        ..
    } = followed;
    let message = read_termination_message(
        c,
        &prepared.termination_file,
        prepared.launch.log_path.as_ref(),
        exit.code,
    )
    .or(killed_by_probe);
    Termination {
        exit_code: exit.code,
        signal: exit.signal,
        reason: if exit.code == 0 { "Completed" } else { "Error" }.into(),
        message,
        started_at: Some(process.started_at),
        finished_at: Timestamp::now(),
        container_id,
    }
}

/// Starts the container once and follows it until it exits or the pod is stopped.
pub(crate) async fn run_once(run: &PodRun, slot: Slot) -> RunOutcome {
    let Some(c) = container_of(&run.spec, slot) else {
        return RunOutcome::Cancelled;
    };
    if run.cancel.is_cancelled() {
        return RunOutcome::Cancelled;
    }
    let (prepared, mut process) = match start(run, c, restart_count(run, slot)).await {
        Ok(started) => started,
        Err(outcome) => return outcome,
    };
    let container_id = match &prepared.runc_id {
        Some(id) => format!("runc://{id}"),
        None => format!("kubelet-standin://{}/{}", run.ctx.name, process.pid()),
    };
    let probes = container_probes(run, c, &prepared, slot, process.pid());
    tracing::info!(pid = process.pid(), program = %prepared.launch.program.display(), "container started");
    let (mut tracker, mut rx) =
        ProbeTracker::start(run, slot, &process, container_id.clone(), probes);
    let followed = follow(run, &mut process, &mut tracker, &mut rx).await;
    tracker.stop(rx).await;
    if let (Some(rt), Some(id)) = (&run.ctx.runc, &prepared.runc_id) {
        rt.remove(id.clone());
    }
    let ran_for = process.started.elapsed();
    let cancelled = followed.cancelled;
    let term = termination(c, &prepared, &process, container_id, followed);
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
