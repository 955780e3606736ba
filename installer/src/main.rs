//! `etcd-installer`: lays one static-pod revision down on a node, atomically. Flags, exit codes,
//! refusals and the termination message are documented in the crate docs of `etcd_installer`.
//!
//! `Args` → `validate()` → run; logs go to stderr, the one-line JSON result alone to stdout.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use etcd_installer::approval::Approval;
use etcd_installer::args::{Args, Config};
use etcd_installer::events::{self, PodRef};
use etcd_installer::fetch;
use etcd_installer::hook::Hook;
use etcd_installer::install;
use etcd_installer::report::{Outcome, Report};
use tracing::Instrument;

/// Bound on emitting the final event (after the run, whatever its outcome).
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let started = Instant::now();
    let args = Args::parse();
    args.log.init("ETCD_INSTALLER_LOG", "info");
    let report = match args.validate() {
        Err(e) => Report {
            outcome: Outcome::Invalid,
            revision: args.revision,
            node: args.node_name.clone(),
            reason: "InvalidArgs",
            message: e.to_string(),
        },
        Ok(cfg) => match runtime() {
            Ok(rt) => rt.block_on(run(&cfg, started)),
            Err(e) => failed(&cfg, "IoError", format!("{e:#}")),
        },
    };
    if report.outcome.ok() {
        tracing::info!(node = %report.node, revision = report.revision, reason = report.reason, "{}", report.message);
    } else {
        tracing::error!(node = %report.node, revision = report.revision, reason = report.reason, "{}", report.message);
    }
    println!("{}", report.line());
    if let Err(e) = report.write_termination_log(args.termination_log.as_deref()) {
        tracing::warn!(error = %e, "could not write the termination message");
    }
    ExitCode::from(report.outcome.exit_code())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn failed(cfg: &Config, reason: &'static str, message: String) -> Report {
    Report {
        outcome: Outcome::Failed,
        revision: cfg.revision,
        node: cfg.node.clone(),
        reason,
        message,
    }
}

fn invalid(cfg: &Config, message: String) -> Report {
    Report {
        outcome: Outcome::Invalid,
        revision: cfg.revision,
        node: cfg.node.clone(),
        reason: "InvalidArgs",
        message,
    }
}

/// The approval to wait for: `--approval-window` names it, the downward API says which pod.
fn approval(cfg: &Config, started: Instant) -> Result<Option<Approval>, String> {
    let Some(window) = cfg.approval_window else {
        return Ok(None);
    };
    let pod = PodRef::from_env().ok_or(
        "--approval-window needs POD_NAME and POD_NAMESPACE (the downward API): the approval is an annotation on the installer's own pod",
    )?;
    Ok(Some(Approval {
        pod,
        window,
        started,
    }))
}

async fn run(cfg: &Config, started: Instant) -> Report {
    let span = tracing::info_span!("install", node = %cfg.node, revision = cfg.revision);
    async {
        let deadline = tokio::time::Instant::now() + cfg.timeout;
        let hook = match Hook::from_env() {
            Ok(hook) => hook,
            Err(message) => return invalid(cfg, message),
        };
        let approval = match approval(cfg, started) {
            Ok(approval) => approval,
            Err(message) => return invalid(cfg, message),
        };
        let client =
            match tokio::time::timeout_at(deadline, fetch::client(cfg.kubeconfig.as_deref())).await
            {
                Ok(Ok(client)) => client,
                Ok(Err(e)) => return failed(cfg, e.category(), e.to_string()),
                Err(_) => {
                    return failed(cfg, "Timeout", "timed out building the client".into());
                }
            };
        let result = install::run(cfg, &client, hook, approval.as_ref(), deadline).await;
        let report = install::report(cfg, &result);
        if let Some(pod) = PodRef::from_env() {
            let emitted = tokio::time::timeout(
                EVENT_TIMEOUT,
                events::emit(
                    &client,
                    &pod,
                    &cfg.node,
                    report.outcome.ok(),
                    &report.message,
                ),
            )
            .await;
            match emitted {
                Ok(Ok(())) => tracing::info!(pod = %pod.name, "event emitted"),
                Ok(Err(e)) => tracing::warn!(error = %e, "could not emit the event"),
                Err(_) => tracing::warn!("timed out emitting the event"),
            }
        }
        report
    }
    .instrument(span)
    .await
}
