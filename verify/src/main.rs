//! `etcd-verify`: the node-side helpers of the etcd pod (see the crate docs of `etcd_verify`).
//!
//! `etcd-verify membership` is the init container that gates etcd's start. Exit codes: 0 = etcd
//! may start; 1 = blocked (decided); 2 = invalid input (env or flags). Stdout carries only the
//! JSON result; logs and the one-line reason go to stderr. With `--install-into` it hands the
//! gate to etcd's container on a `start` (`etcd_verify::handoff`).
//!
//! `etcd-verify exec-etcd -- etcd ...` is etcd's container command: the same gate on every start
//! of etcd (a restart in place runs no init container), then it becomes etcd. A block exits as
//! `membership` does, with the report in the container's termination message.
//!
//! `etcd-verify metrics-proxy` is the container that serves etcd's metrics to scrapers over
//! mutual TLS. It runs until SIGTERM or SIGINT (exit 0); a startup error (a TLS file, the
//! address) exits 1 naming the flag and the file or address, a flag error exits 2.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Parser, Subcommand};
use etcd_verify::config::VerifyConfig;
use etcd_verify::handoff::{self, Ticket};
use etcd_verify::metrics_proxy::{MetricsProxy, ProxyConfig, Upstream};
use etcd_verify::run::{Timing, client_for, run};
use membership::{BlockCode, VerifyReport};

/// Default bound on the whole run. The etcd pod's startup budget is 180 s (startup probe:
/// 30 s initial delay + 30 x 5 s); the gate gives up well before so the kubelet's restart and
/// the operator's view of the termination message happen inside that budget.
const DEFAULT_TIMEOUT: &str = "120s";
const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";

#[derive(Parser, Debug)]
#[command(
    name = "etcd-verify",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"),
    about = "The node-side helpers of the etcd pod: the start gate and the metrics proxy"
)]
struct Cli {
    #[command(flatten)]
    log: etcd_cli::LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decide whether etcd may start, from the pod's env, the data dir and the live membership.
    Membership(MembershipArgs),
    /// etcd's container command: gate this start of etcd (taking the init container's ticket on
    /// the first start, deciding again on a restart in place), then become etcd.
    ExecEtcd(ExecEtcdArgs),
    /// Serve etcd's metrics over mutual TLS to scrapers holding a certificate of the metrics CA,
    /// from etcd's plain loopback metrics listener (nothing else of etcd is reachable).
    MetricsProxy(MetricsProxyArgs),
    /// Print the shell completion script (e.g. `source <(etcd-verify completions bash)`).
    Completions(etcd_cli::CompletionsArgs),
}

#[derive(clap::Args, Debug)]
struct MembershipArgs {
    #[command(flatten)]
    gate: GateArgs,
    /// A directory shared with etcd's container (an emptyDir): on a `start` verdict this
    /// binary is copied there with a ticket for etcd's first start (see `exec-etcd`).
    #[arg(long, value_name = "DIR")]
    install_into: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct ExecEtcdArgs {
    #[command(flatten)]
    gate: GateArgs,
    /// The directory the init container installed into (its `--install-into`).
    #[arg(long, value_name = "DIR")]
    ticket_dir: PathBuf,
    /// How old the init container's ticket may be and still stand for this start.
    #[arg(long, default_value = "60s", value_parser = membership::parse_duration)]
    ticket_max_age: Duration,
    /// etcd and its flags, after `--` (e.g. `-- etcd --name=n1 ...`); `etcd` is found on PATH.
    #[arg(last = true, required = true, value_name = "ETCD")]
    etcd: Vec<std::ffi::OsString>,
}

/// The gate's flags, the same in the init container and in etcd's container.
#[derive(clap::Args, Debug)]
struct GateArgs {
    /// Bound on the whole run, retries included (e.g. 120s, 2m).
    #[arg(long, default_value = DEFAULT_TIMEOUT, value_parser = membership::parse_duration)]
    timeout: Duration,
    /// Pause between attempts while waiting.
    #[arg(long, default_value = "1s", value_parser = membership::parse_duration)]
    retry_interval: Duration,
    /// Bound on one call to one etcd endpoint.
    #[arg(long, default_value = "3s", value_parser = membership::parse_duration)]
    call_timeout: Duration,
    /// Where the JSON result is also written for the kubelet (the container's
    /// terminationMessagePath). The default is written only when it exists, as it does in a pod.
    #[arg(long)]
    termination_log: Option<PathBuf>,
    /// A directory on the node's root disk, outside the data dir, where the mark of a bootstrap
    /// is kept too: a data disk that failed to mount leaves an empty data dir, and only a mark
    /// outside it shows that this node's bootstrap manifest already made a cluster.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct MetricsProxyArgs {
    /// Socket address scrapers connect to (https), e.g. 10.0.0.1:2381 or [fd00::1]:2381.
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// The proxy's serving certificate, with its chain (PEM).
    #[arg(long, value_name = "FILE")]
    cert_file: PathBuf,
    /// The private key of --cert-file (PEM: PKCS#8, SEC1 EC or PKCS#1 RSA).
    #[arg(long, value_name = "FILE")]
    key_file: PathBuf,
    /// The metrics CA bundle (PEM, one or more certificates): a scraper must present a
    /// certificate that chains to one of them, or gets no answer.
    #[arg(long, value_name = "FILE")]
    client_ca_file: PathBuf,
    /// etcd's plain metrics listener (its --listen-metrics-urls), http://host:port, e.g.
    /// http://127.0.0.1:2382. Only its /metrics is ever asked.
    #[arg(long, value_name = "URL")]
    upstream: Upstream,
    /// Bound on one exchange with the upstream (connect, request, whole answer); past it the
    /// scraper gets 502.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5s",
        value_parser = membership::parse_duration
    )]
    upstream_timeout: Duration,
}

impl MetricsProxyArgs {
    fn config(self) -> ProxyConfig {
        ProxyConfig {
            listen: self.listen,
            cert_file: self.cert_file,
            key_file: self.key_file,
            client_ca_file: self.client_ca_file,
            upstream: self.upstream,
            upstream_timeout: self.upstream_timeout,
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) if invoked_subcommand().as_deref() == Some("metrics-proxy") => {
            // Not the gate: no JSON report, just clap's message naming the flag.
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            // A flag error is invalid input like a bad env var: the JSON line and exit 2.
            let _ = e.print();
            let first = e.to_string();
            let first = first
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ");
            let reason = format!("invalid input: {first}");
            let subcommand = invoked_subcommand().unwrap_or_else(|| "membership".to_owned());
            report(
                &VerifyReport::block(BlockCode::InvalidInput, reason, None, None),
                termination_log_flag().as_ref(),
                &subcommand,
            );
            return ExitCode::from(2);
        }
    };
    cli.log.init("ETCD_VERIFY_LOG", "info");
    match cli.command {
        Command::Membership(args) => membership(&args),
        Command::ExecEtcd(args) => exec_etcd(&args),
        Command::MetricsProxy(args) => metrics_proxy(args.config()),
        Command::Completions(c) => {
            c.print(<Cli as clap::CommandFactory>::command());
            ExitCode::SUCCESS
        }
    }
}

/// The init container: decide, report, and on `start` hand the gate over to etcd's container.
fn membership(args: &MembershipArgs) -> ExitCode {
    let (mut result, mut code) = decided(&args.gate);
    if let (true, Some(dir)) = (result.may_start(), &args.install_into) {
        let line = etcd_verify::report::json_line(&result);
        if let Err(e) = handoff::install(dir, &line) {
            result = VerifyReport::block(BlockCode::Internal, e.to_string(), None, None);
            code = ExitCode::from(1);
        }
    }
    report(&result, args.gate.termination_log.as_ref(), "membership");
    code
}

/// etcd's container: the init container's ticket or a decision of its own, then etcd.
fn exec_etcd(args: &ExecEtcdArgs) -> ExitCode {
    let ticket = handoff::take_ticket(&args.ticket_dir, args.ticket_max_age, SystemTime::now());
    let fresh = matches!(ticket, Ticket::Fresh { .. });
    if fresh {
        eprintln!(
            "etcd-verify exec-etcd: the init container's verdict stands for this start ({ticket:?})"
        );
    } else {
        eprintln!(
            "etcd-verify exec-etcd: no fresh verdict for this start ({ticket:?}): deciding again"
        );
        let (result, code) = decided(&args.gate);
        if !result.may_start() {
            report(&result, args.gate.termination_log.as_ref(), "exec-etcd");
            return code;
        }
        eprintln!("etcd-verify exec-etcd: start: {}", result.reason);
    }
    let Some((program, rest)) = args.etcd.split_first() else {
        return ExitCode::from(2); // clap requires it
    };
    let e = handoff::exec(program, rest);
    let reason = format!("cannot run {}: {e}", program.to_string_lossy());
    report(
        &VerifyReport::block(BlockCode::Internal, reason, None, None),
        args.gate.termination_log.as_ref(),
        "exec-etcd",
    );
    ExitCode::from(1)
}

/// The gate's report and exit code: 0 start, 1 block, 2 invalid input.
fn decided(args: &GateArgs) -> (VerifyReport, ExitCode) {
    match membership_gate(args) {
        Ok(result) if result.may_start() => (result, ExitCode::SUCCESS),
        Ok(result) => (result, ExitCode::from(1)),
        Err((code, reason)) => (
            VerifyReport::block(code, reason, None, None),
            ExitCode::from(2),
        ),
    }
}

fn membership_gate(args: &GateArgs) -> Result<VerifyReport, (BlockCode, String)> {
    let invalid =
        |e: &dyn std::fmt::Display| (BlockCode::InvalidInput, format!("invalid input: {e}"));
    let mut config = VerifyConfig::from_process_env().map_err(|e| invalid(&e))?;
    config.state_dir.clone_from(&args.state_dir);
    let client = client_for(&config, args.call_timeout).map_err(|e| invalid(&e))?;
    etcd_verify::keyfiles::check(&config).map_err(|e| invalid(&e))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            (
                BlockCode::Internal,
                format!("cannot start the async runtime: {e}"),
            )
        })?;
    let timing = Timing {
        timeout: args.timeout,
        retry_interval: args.retry_interval,
        call_timeout: args.call_timeout,
    };
    // The kubelet stops a pod (a new revision, a recovery) with SIGTERM; as its container's PID 1
    // this process would otherwise ignore it and hold the pod until the grace period's SIGKILL.
    // Stopping is never a decision to start: it blocks.
    let result = runtime.block_on(async {
        let stop = Stop::install();
        tokio::select! {
            result = run(&config, &client, timing) => result,
            signal = stop.received() => VerifyReport::block(
                BlockCode::Stopped,
                format!("stopped by {signal} before deciding"),
                None,
                None,
            ),
        }
    });
    // A read of the data dir that timed out may still hang in a blocking thread: don't wait.
    runtime.shutdown_background();
    Ok(result)
}

/// The subcommand named on the command line, read leniently (for when it did not parse).
fn invoked_subcommand() -> Option<String> {
    let matches = <Cli as clap::CommandFactory>::command()
        .ignore_errors(true)
        .try_get_matches()
        .ok()?;
    matches.subcommand_name().map(str::to_owned)
}

/// Runs the metrics proxy until SIGTERM or SIGINT (exit 0); a startup error exits 1.
fn metrics_proxy(config: ProxyConfig) -> ExitCode {
    match serve_metrics(&config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Each error names its flag, file or address, and its cause (which `{e:#}` would
            // print twice).
            eprintln!("etcd-verify metrics-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve_metrics(config: &ProxyConfig) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let stop = Stop::install();
        let proxy = MetricsProxy::bind(config).await?;
        tracing::info!(
            listen = %proxy.local_addr()?,
            upstream = %config.upstream,
            client_ca_file = %config.client_ca_file.display(),
            "metrics proxy serving /metrics over mutual TLS"
        );
        tokio::select! {
            never = proxy.serve() => match never {},
            signal = stop.received() => tracing::info!("stopped by {signal}"),
        }
        Ok(())
    })
}

/// SIGTERM and SIGINT handlers, installed before the gate or the proxy runs (so a signal that
/// arrives once it logged anything is handled).
struct Stop {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Stop {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// The name of the first signal received (never, if the handlers could not be installed).
    async fn received(mut self) -> &'static str {
        match (self.term.as_mut(), self.int.as_mut()) {
            (Some(term), Some(int)) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            },
            _ => std::future::pending().await,
        }
    }
}

/// `--termination-log` from the raw arguments, for when the flags as a whole did not parse.
fn termination_log_flag() -> Option<PathBuf> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    args.iter().enumerate().find_map(|(i, a)| {
        let a = a.to_str()?;
        if let Some(v) = a.strip_prefix("--termination-log=") {
            return Some(PathBuf::from(v));
        }
        (a == "--termination-log").then(|| args.get(i + 1).map(PathBuf::from))?
    })
}

/// Prints the report (stdout: JSON; stderr: `etcd-verify <subcommand>: <decision>: <reason>`)
/// and writes it to the termination log.
fn report(result: &VerifyReport, termination_log: Option<&PathBuf>, subcommand: &str) {
    let json = etcd_verify::report::json_line(result);
    println!("{json}");
    eprintln!(
        "etcd-verify {subcommand}: {}: {}",
        result.decision, result.reason
    );
    let path = match termination_log {
        Some(p) => Some(p.clone()),
        None => {
            let default = PathBuf::from(DEFAULT_TERMINATION_LOG);
            default.exists().then_some(default)
        }
    };
    if let Some(path) = path {
        // In place: the kubelet bind-mounts this file into the container.
        let written = std::fs::File::create(&path).and_then(|mut f| f.write_all(json.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "etcd-verify {subcommand}: could not write {}: {e}",
                path.display()
            );
        }
    }
}

etcd_cli::command_line_tests!(Cli);
