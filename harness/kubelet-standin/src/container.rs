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

use crate::env::container_env;
use crate::expand::expand_with;
use crate::mounts::BindMount;
use crate::probes::{Action, ProbeEvent, ProbeKind, Timings, network_action, probe_loop};
use crate::runner::{Exit, Launch, Process};
use crate::status::{ContainerPhase, Termination};
use crate::volumes::container_binds;
use crate::worker::{PodRun, RunOutcome, Slot};

const MAX_TERMINATION_MESSAGE: usize = 4096;
const FALLBACK_LOG_BYTES: usize = 2048;

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
        error_file: Some(termination_file.clone()),
        join: None,
    };
    Ok(Prepared {
        launch,
        termination_file,
        env,
    })
}

/// The launch for an exec probe: same image, env and mounts, no log.
fn exec_probe_launch(
    run: &PodRun,
    c: &Container,
    p: &Prepared,
    command: &[String],
    shim: i32,
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
        binds: Vec::new(),
        log_path: None,
        error_file: None,
        join: Some(shim),
        ..p.launch.clone()
    })
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

/// Starts the container once and follows it until it exits or the pod is stopped.
pub(crate) async fn run_once(run: &PodRun, slot: Slot) -> RunOutcome {
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
    let container_id = format!("kubelet-standin://{}/{}", run.ctx.name, process.pid());
    let is_app = matches!(slot, Slot::App(_));
    // Init containers have no probes; an unusable probe is reported and treated as absent.
    let probe = |kind: ProbeKind| -> Option<(Timings, Action)> {
        if !is_app {
            return None;
        }
        match probe_action(run, c, &prepared, kind, process.pid())? {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(probe = kind.as_str(), error = %e, "probe ignored");
                None
            }
        }
    };
    let startup = probe(ProbeKind::Startup);
    let liveness = probe(ProbeKind::Liveness);
    let readiness = probe(ProbeKind::Readiness);
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
                let grace = if run.kill.load(std::sync::atomic::Ordering::SeqCst) {
                    Duration::ZERO
                } else {
                    grace
                };
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
