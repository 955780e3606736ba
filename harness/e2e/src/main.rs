//! `sandbox`: the project's main job.
//!
//! * `sandbox up [--nodes N]`: the local control plane with N simulated control-plane nodes;
//!   node 1 is bootstrapped with `etcd-operator render`, the operator grows etcd to N voting
//!   members, and a live view shows it happening. Runs until Ctrl-C, then tears down.
//! * `sandbox demo-verify`: the `etcd-verify membership` gate on a throw-away cluster.
//!
//! Ctrl-C (SIGINT) or SIGTERM ends any command and tears down everything it started: `up` stops
//! the operator, the node agents (with every pod they run) and the API in order; the other
//! commands drop what they hold, whose `Drop`s kill the operator, the agents' containers and
//! every etcd, and exit with status 130 (SIGINT) or 143 (SIGTERM).
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use e2e::controlplane::LocalControlPlane;
use etcd_operator::api::EtcdClusterSpec;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;

#[derive(Parser, Debug)]
#[command(
    name = "sandbox",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"),
    about = "The local control plane of etcd-static-operator"
)]
struct Cli {
    #[command(flatten)]
    log: etcd_cli::LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Bring the local control plane up and grow etcd from one bootstrapped node; Ctrl-C ends it.
    Up {
        /// Number of simulated control-plane nodes.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Exit (and tear down) once every member is a healthy voter on the latest revision; the
        /// exit code is non-zero unless that happened and the status never showed Degraded or a
        /// member without a name.
        #[arg(long)]
        exit_when_settled: bool,
        /// Give up after this long (e.g. 5m); default: run until Ctrl-C.
        #[arg(long, value_parser = membership::parse_duration)]
        timeout: Option<Duration>,
        /// Serve the API stand-in from the etcd the operator manages, as kube-apiserver is in a
        /// real control plane (losing etcd's quorum then takes the API down).
        #[arg(long)]
        api_on_managed_etcd: bool,
    },
    /// Run a named scenario (or `all`) under a write load; writes OUT/NAME/report.json and
    /// exits 0 only when every scenario passed.
    Run {
        /// bootstrap, data-loss, node-replacement, operator-crash, forged-member-id,
        /// full-restart, rollout, or all.
        scenario: String,
        /// Where reports go.
        #[arg(long, default_value = "sandbox-reports")]
        out: std::path::PathBuf,
    },
    /// Drain a node as `kubectl drain` does (cordon, then evict through `pods/eviction`,
    /// retrying while a disruption budget refuses), against the cluster in KUBECONFIG (what
    /// `up` prints).
    Drain {
        /// The Node to drain.
        node: String,
        /// Also delete pods that declare no controller.
        #[arg(long)]
        force: bool,
        /// Give up after this long.
        #[arg(long, default_value = "10m", value_parser = membership::parse_duration)]
        timeout: Duration,
    },
    /// Print the shell completion script (e.g. `source <(sandbox completions bash)`).
    Completions(etcd_cli::CompletionsArgs),
    /// Make a drained node schedulable again (`kubectl uncordon`), against KUBECONFIG.
    Uncordon {
        /// The Node to make schedulable again.
        node: String,
    },
    /// Show `etcd-verify membership` deciding on a throw-away 3-member TLS cluster.
    DemoVerify,
    /// Benchmarks: scale-up vs the etcd floor, write availability, operator cost; writes
    /// OUT/bench.json, OUT/bench.md and the scale-up timeline SVG.
    Bench {
        /// Database sizes, comma-separated: empty, NMB, NGB.
        #[arg(long, value_delimiter = ',', default_value = "empty,100MB,1GB")]
        sizes: Vec<e2e::bench::Size>,
        /// Where bench.json, bench.md and the SVG go.
        #[arg(long, default_value = "bench-out")]
        out: std::path::PathBuf,
        /// Where the scale-up timeline SVG goes (also copied into OUT).
        #[arg(long, default_value = "docs/benchmarks-scaleup.svg")]
        svg: std::path::PathBuf,
        /// Length of the idle window.
        #[arg(long, default_value = "60s", value_parser = membership::parse_duration)]
        idle: Duration,
        /// Skip a database size when the run would likely take longer than this.
        #[arg(long, default_value = "15m", value_parser = membership::parse_duration)]
        budget: Duration,
        /// Worker Nodes heartbeating in the API during a second idle window (0: none).
        #[arg(long, default_value_t = 1000)]
        workers: usize,
        /// Skip the 3 → 5 and 1 → 5 scale-ups.
        #[arg(long)]
        no_growth: bool,
    },
}

/// Starts the API (on the managed etcd or its own) and the nodes, bootstrapping the first.
async fn start_control_plane(
    names: &[String],
    api_on_managed_etcd: bool,
) -> anyhow::Result<LocalControlPlane> {
    let mut cp = if api_on_managed_etcd {
        println!(
            "bootstrapping {} with `etcd-operator render`, then the Kubernetes API on its etcd ...",
            names[0]
        );
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        LocalControlPlane::start_on_managed_etcd(&refs, None).await?
    } else {
        println!("starting the Kubernetes API ...");
        LocalControlPlane::start().await?
    };
    let mode = if cp.stacked().is_some() {
        "kube-apiserver, controller-manager and scheduler as static pods on every node, on the managed etcd"
    } else if api_on_managed_etcd {
        "API stand-in on the managed etcd"
    } else if cp.api.is_real() {
        "real cluster (KUBECONFIG)"
    } else {
        "API stand-in on its own etcd"
    };
    println!("  API: {mode}; sandbox dir {}", cp.path().display());
    println!(
        "  kubeconfig: {} (e.g. for `etcd-operator plan`)",
        cp.api.kubeconfig().display()
    );
    if !api_on_managed_etcd {
        for name in names {
            cp.add_node(name).await?;
        }
        println!("bootstrapping {} with `etcd-operator render` ...", names[0]);
        cp.bootstrap(&names[0]).await?;
    }
    for node in &cp.nodes {
        println!(
            "  node {} at {} (node agent, root {})",
            node.name,
            node.ip(),
            node.root.display()
        );
    }
    Ok(cp)
}

/// Prints the operator's last 20 log lines.
fn print_log_tail(cp: &LocalControlPlane) {
    let log = cp.operator_log();
    for l in log
        .lines()
        .rev()
        .take(20)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        println!("  {l}");
    }
}

async fn up(
    nodes: usize,
    exit_when_settled: bool,
    timeout: Option<Duration>,
    api_on_managed_etcd: bool,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
    let mut cp = start_control_plane(&names, api_on_managed_etcd).await?;
    cp.create_cluster(EtcdClusterSpec::default()).await?;
    let watch = e2e::status_watch::StatusWatch::start(cp.client(), started);
    cp.start_operator()?;
    if let Some(addr) = cp.operator_metrics() {
        println!(
            "operator running (metrics on http://{addr}/metrics, log {}/operator.log)",
            cp.path().display()
        );
    }
    println!("watching (Ctrl-C to stop):\n");
    let nodes_api: Api<Node> = Api::all(cp.client());
    let mut last: Vec<String> = Vec::new();
    let mut settled = false;
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        let node_list = nodes_api
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let cluster = cp.cluster().await.ok().flatten();
        let lines = e2e::view::render(&node_list, cluster.as_ref());
        if lines != last {
            println!("[{:>6.1}s]", started.elapsed().as_secs_f64());
            for l in &lines {
                println!("  {l}");
            }
            last = lines;
        }
        let now_settled = cluster
            .and_then(|c| c.status)
            .is_some_and(|s| e2e::view::settled(&s, nodes));
        if now_settled && !settled {
            println!(
                "\nsettled after {:.1}s: {nodes} healthy voting members, every node on the latest revision\n",
                started.elapsed().as_secs_f64()
            );
            settled = true;
            if exit_when_settled {
                break;
            }
        }
        if timeout.is_some_and(|t| started.elapsed() > t) {
            println!(
                "timed out after {:.0?}; the operator's last log lines:",
                timeout.unwrap_or_default()
            );
            print_log_tail(&cp);
            break;
        }
        tokio::select! {
            signal = &mut stop => {
                println!("\n{}: tearing down ...", signal.map_or("signal handler failed", |s| s.name));
                break;
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    let sightings = watch.sightings();
    drop(watch);
    cp.shutdown().await;
    println!("torn down: operator, node agents (and their pods), API.");
    if sightings.is_empty() {
        println!("status check: never Degraded, no member without a name");
    } else {
        println!("status check: the status showed what a normal run must not:");
        for s in &sightings {
            println!("  [{:>6.1}s] {}", s.at_s, s.what);
        }
    }
    Ok(settled && sightings.is_empty())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.log.init("SANDBOX_LOG", "warn");
    let command = cli.command;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(async {
        if matches!(command, Command::Up { .. }) {
            // `up` handles the signals itself, for an orderly teardown with a live view.
            return execute(command).await.map(|()| None);
        }
        tokio::select! {
            result = execute(command) => result.map(|()| None),
            signal = shutdown_signal() => Ok(Some(signal?)),
        }
    });
    // Leaving the select dropped the command's future, and shutting the runtime down drops
    // every task it spawned: the `Drop`s of the control plane, the node agents' containers
    // and the etcd fixtures kill what they started.
    runtime.shutdown_timeout(Duration::from_secs(10));
    if let Some(signal) = outcome? {
        eprintln!(
            "sandbox: {}: stopped; everything it started is torn down",
            signal.name
        );
        std::process::exit(signal.exit_code);
    }
    Ok(())
}

/// A signal that ends the sandbox.
struct Stop {
    name: &'static str,
    exit_code: i32,
}

/// Resolves at the first SIGINT or SIGTERM.
async fn shutdown_signal() -> std::io::Result<Stop> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    Ok(tokio::select! {
        _ = int.recv() => Stop { name: "SIGINT", exit_code: 130 },
        _ = term.recv() => Stop { name: "SIGTERM", exit_code: 143 },
    })
}

/// Runs the scenario `scenario` (or every one, for `all`), reports under `out`.
async fn run_scenarios(scenario: &str, out: &std::path::Path) -> anyhow::Result<()> {
    let names: Vec<&str> = if scenario == "all" {
        e2e::scenario::NAMES.to_vec()
    } else {
        vec![scenario]
    };
    let mut failed = Vec::new();
    for name in names {
        println!("scenario {name} ...");
        let (path, r) = e2e::scenario::run(name, out)
            .await
            .map_err(anyhow::Error::msg)?;
        println!(
            "  {}: {:.1}s, writes acknowledged {}, lost {}, failed {}, longest write gap {} ms",
            if r.passed { "passed" } else { "FAILED" },
            r.duration_s,
            r.writes_acknowledged,
            r.writes_lost,
            r.writes_failed,
            r.longest_write_gap_ms
        );
        if let Some(f) = &r.failure {
            println!("  failure: {f}");
        }
        println!("  report: {}", path.display());
        if !r.passed {
            failed.push(name);
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("scenario(s) failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Drains `node` against KUBECONFIG and prints the report.
async fn drain_node(node: &str, force: bool, timeout: Duration) -> anyhow::Result<()> {
    let client = e2e::drain::client(None, None).await?;
    let options = e2e::drain::DrainOptions {
        force,
        timeout,
        ..Default::default()
    };
    let report = e2e::drain::drain(&client, node, &options, &|line| println!("{line}")).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

async fn execute(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Up {
            nodes,
            exit_when_settled,
            timeout,
            api_on_managed_etcd,
        } => {
            let settled = up(
                nodes.max(1),
                exit_when_settled,
                timeout,
                api_on_managed_etcd,
            )
            .await?;
            if exit_when_settled && !settled {
                anyhow::bail!("the cluster did not settle cleanly (see above)");
            }
        }
        Command::Run { scenario, out } => run_scenarios(&scenario, &out).await?,
        Command::Drain {
            node,
            force,
            timeout,
        } => drain_node(&node, force, timeout).await?,
        Command::Uncordon { node } => {
            let client = kube::Client::try_default().await?;
            e2e::drain::set_unschedulable(&client, &node, false).await?;
            println!("node/{node} uncordoned");
        }
        Command::DemoVerify => e2e::verify_demo::run().await?,
        Command::Completions(c) => c.print(<Cli as clap::CommandFactory>::command()),
        Command::Bench {
            sizes,
            out,
            svg,
            idle,
            budget,
            workers,
            no_growth,
        } => {
            let args = e2e::bench::BenchArgs {
                sizes,
                out,
                svg,
                idle_window: idle,
                workers,
                growth: !no_growth,
                budget,
                command: std::env::args().collect::<Vec<_>>().join(" "),
            };
            let report = e2e::bench::run(&args).await.map_err(anyhow::Error::msg)?;
            if !report.errors.is_empty() {
                anyhow::bail!("bench failed: {}", report.errors.join("; "));
            }
        }
    }
    Ok(())
}

etcd_cli::command_line_tests!(Cli);
