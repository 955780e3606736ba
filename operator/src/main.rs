//! `etcd-operator`: runs etcd as static pods and changes membership through one quorum gate.
//!
//! Subcommands: `run` (the operator), `plan` (print what the operator would do next), `gather`
//! (one archive to debug an incident with), `crd` (print the CustomResourceDefinition), `render`
//! (the bootstrap static pod for the first node, before any operator runs), `guard` (the quorum
//! guard pod's idle container). Run under the name `kubectl-etcd`, it is the kubectl plugin
//! (`main_plugin.rs`).
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use etcd_operator::api::EtcdCluster;
use etcd_operator::podspec::Images;
use kube::CustomResourceExt;

#[path = "main_plugin.rs"]
mod plugin;

/// etcd image when neither the spec nor `ETCD_IMAGE` names one.
const DEFAULT_ETCD_IMAGE: &str = "etcd-static-operator/etcd:3.6.16";
/// The operator's own image when `OPERATOR_IMAGE` is not set.
const DEFAULT_OPERATOR_IMAGE: &str = "etcd-static-operator/etcd-static-operator:0.1.0";

#[derive(Parser, Debug)]
#[command(
    name = "etcd-operator",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"),
    about = "Runs etcd as static pods and changes membership safely"
)]
struct Cli {
    #[command(flatten)]
    log: etcd_cli::LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug)]
struct ImageArgs {
    /// etcd image for the static pods.
    #[arg(long, env = "ETCD_IMAGE", default_value = DEFAULT_ETCD_IMAGE)]
    etcd_image: String,
    /// The operator's image (runs `etcd-verify` and `etcd-installer`).
    #[arg(long, env = "OPERATOR_IMAGE", default_value = DEFAULT_OPERATOR_IMAGE)]
    operator_image: String,
}

impl ImageArgs {
    fn images(&self) -> Images {
        Images {
            etcd: self.etcd_image.clone(),
            operator: self.operator_image.clone(),
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator (leader-elected) against the cluster in KUBECONFIG or in-cluster config.
    Run(RunArgs),
    /// Print the next action each controller would take, every quorum-gate result and why
    /// anything waits, without changing anything.
    Plan(PlanArgs),
    /// Write one archive (.tar.gz) with what an incident needs: the EtcdCluster and its
    /// conditions, Events, per-node revisions and installer results, each member's status,
    /// etcd-verify's messages, the plan and the operator's recent logs. No Secret is included.
    Gather(GatherArgs),
    /// Print the EtcdCluster CustomResourceDefinition (YAML).
    Crd,
    /// Write the bootstrap static pod, its certificates and the manifests the operator adopts.
    Render(RenderArgs),
    /// The quorum guard pod's container: idles until SIGTERM (its readiness probe, on the
    /// node's etcd, is what counts).
    Guard,
    /// Print the shell completion script (e.g. `source <(etcd-operator completions bash)`).
    Completions(etcd_cli::CompletionsArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Namespace the operator runs in (its Lease, CA and client certificate live there).
    #[arg(long, env = "POD_NAMESPACE", default_value = etcd_operator::bootstrap::OPERATOR_NAMESPACE)]
    namespace: String,
    /// This instance's identity in the leader Lease.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8443")]
    listen: std::net::SocketAddr,
    /// Leader lease duration.
    #[arg(long, default_value = "15s", value_parser = membership::parse_duration)]
    lease_duration: std::time::Duration,
    /// Bound on each etcd call.
    #[arg(long, default_value = "3s", value_parser = membership::parse_duration)]
    etcd_timeout: std::time::Duration,
    #[command(flatten)]
    images: ImageArgs,
    #[command(flatten)]
    backup: BackupArgs,
}

/// Where `run` keeps backups (`spec.backup`).
#[derive(clap::Args, Debug)]
struct BackupArgs {
    /// The local backup destination (mount a hostPath of the control-plane node here).
    #[arg(
        long,
        env = "ETCD_OPERATOR_BACKUP_DIR",
        default_value = "/var/lib/etcd-backup"
    )]
    backup_dir: PathBuf,
    /// A directory holding `etcd` and `etcdctl` (etcd 3.4) or `etcdutl` (3.5+): verification
    /// restores each backup with them. When `<dir>/../lib/etcd/<version>/` holds the build of the
    /// cluster image's version (or `spec.etcdImageVersion`), as the operator image lays every
    /// supported build out, that one is used instead.
    #[arg(
        long,
        env = "ETCD_OPERATOR_ETCD_TOOLS",
        default_value = "/usr/local/bin"
    )]
    etcd_tools: PathBuf,
    /// Scratch space: snapshots are streamed here before they are stored, and verified here.
    #[arg(long, env = "ETCD_OPERATOR_SCRATCH_DIR")]
    scratch_dir: Option<PathBuf>,
}

impl BackupArgs {
    fn paths(self) -> etcd_operator::context::BackupPaths {
        etcd_operator::context::BackupPaths {
            dir: self.backup_dir,
            etcd_tools: self.etcd_tools,
            scratch: self.scratch_dir.unwrap_or_else(std::env::temp_dir),
        }
    }
}

#[derive(clap::Args, Debug)]
struct PlanArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanOutput::Text)]
    output: PlanOutput,
    #[command(flatten)]
    read: ReadArgs,
}

/// How `plan` and `gather` read the cluster.
#[derive(clap::Args, Debug)]
struct ReadArgs {
    /// Namespace the operator runs in: its CA and client certificate (to ask etcd) live there.
    #[arg(long, env = "POD_NAMESPACE", default_value = etcd_operator::bootstrap::OPERATOR_NAMESPACE)]
    namespace: String,
    /// Bound on each etcd call.
    #[arg(long, default_value = "3s", value_parser = membership::parse_duration)]
    etcd_timeout: std::time::Duration,
    /// Bound on the whole command: reading the API and asking etcd. When etcd is in trouble
    /// the API (served from it) may accept connections and never answer.
    #[arg(long, default_value = "30s", value_parser = membership::parse_duration)]
    timeout: std::time::Duration,
    #[command(flatten)]
    images: ImageArgs,
}

#[derive(clap::Args, Debug)]
struct GatherArgs {
    /// The archive to write (a new file).
    #[arg(long)]
    output: PathBuf,
    /// A log file to include as well (repeatable): an operator that does not run as a pod.
    #[arg(long = "log-file")]
    log_files: Vec<PathBuf>,
    /// Lines of each operator pod's log.
    #[arg(long, default_value_t = 5000)]
    log_lines: i64,
    #[command(flatten)]
    read: ReadArgs,
}

#[derive(clap::Args, Debug)]
struct RenderArgs {
    /// The first control-plane node's name (a valid Node name: lowercase DNS subdomain).
    #[arg(long, value_parser = etcd_operator::bootstrap::validate::node_name)]
    node_name: String,
    /// Its IP address (etcd listens and advertises there): a unicast address.
    #[arg(long, value_parser = etcd_operator::bootstrap::validate::node_ip)]
    node_ip: IpAddr,
    /// Where to write etcd-pod.yaml, etcd-certs/, kube-apiserver/ (the first kube-apiserver's
    /// etcd client certificate, key and CA bundle) and manifests/. The whole dir is written at
    /// once (a staging dir renamed into place). Re-running on a dir that holds a previous
    /// render reuses its CA (manifests/etcd-signer.json), like kubeadm reuses its pki dir,
    /// and keeps the previous output as <dir>.replaced-<UTC>.
    #[arg(long)]
    output_dir: PathBuf,
    /// The certificates dir as the node's kubelet sees it (default: output-dir/etcd-certs).
    #[arg(long)]
    resource_host_dir: Option<String>,
    /// etcd also listens on https://127.0.0.1:2379 and https://[::1]:2379 for the node's
    /// kube-apiserver (set false only where nodes share one network namespace, as on the local
    /// control plane).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    local_client_listener: bool,
    #[command(flatten)]
    images: ImageArgs,
}

impl ReadArgs {
    fn config(&self) -> etcd_operator::context::OperatorConfig {
        etcd_operator::context::OperatorConfig {
            images: self.images.images(),
            operator_namespace: self.namespace.clone(),
            etcd_timeout: self.etcd_timeout,
            backup: etcd_operator::context::BackupPaths::default(),
        }
    }
}

/// How `plan` prints.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum PlanOutput {
    Text,
    Json,
}

/// Parses the command line and runs the chosen subcommand.
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let arg0 = std::env::args_os().next();
    if etcd_operator::kubectl::invoked_as_plugin(arg0.as_deref()) {
        return plugin::main().await;
    }
    let cli = Cli::parse();
    cli.log.init("ETCD_OPERATOR_LOG", "info");
    match cli.command {
        Command::Run(args) => run(args).await,
        Command::Plan(args) => plan(args).await,
        Command::Gather(args) => gather(args).await,
        Command::Crd => crd(),
        Command::Render(args) => render(args),
        Command::Guard => {
            etcd_operator::run::shutdown_signal().await;
            Ok(())
        }
        Command::Completions(args) => {
            args.print(<Cli as clap::CommandFactory>::command());
            Ok(())
        }
    }
}

/// `run`: runs the operator, identified by `identity` or else `<hostname>-<pid>`.
async fn run(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        namespace,
        identity,
        listen,
        lease_duration,
        etcd_timeout,
        images,
        backup,
    } = args;
    let client = kube::Client::try_default().await?;
    let identity = identity.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    etcd_operator::run::run(
        client,
        etcd_operator::run::RunOptions {
            config: etcd_operator::context::OperatorConfig {
                images: images.images(),
                operator_namespace: namespace,
                etcd_timeout,
                backup: backup.paths(),
            },
            listen,
            identity,
            lease_duration,
        },
    )
    .await?;
    Ok(())
}

/// A client whose every request is bounded by `timeout` (when etcd is in trouble the API served
/// from it may accept connections and never answer), and the server's URL.
async fn bounded_client(timeout: std::time::Duration) -> anyhow::Result<(kube::Client, String)> {
    let mut config = kube::Config::infer().await?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    let server = config.cluster_url.to_string();
    Ok((kube::Client::try_from(config)?, server))
}

/// `gather`: reads what it can within `timeout` (what it could not is listed in the archive's
/// problems.txt) and writes the archive.
async fn gather(args: GatherArgs) -> anyhow::Result<()> {
    let timeout = args.read.timeout;
    let (client, server) = bounded_client(timeout).await?;
    let opts = etcd_operator::gather::GatherOptions {
        config: args.read.config(),
        output: args.output,
        log_files: args.log_files,
        log_lines: args.log_lines,
        server,
    };
    let now = time::OffsetDateTime::now_utc();
    let gathered = tokio::time::timeout(
        timeout.saturating_mul(4),
        etcd_operator::gather::collect(&client, &opts, now),
    )
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "gathering from {} took longer than {:?} (4 x --timeout)",
            opts.server,
            timeout.saturating_mul(4)
        )
    })?;
    let problems = gathered.problems.clone();
    let files = gathered.finish(&opts, now);
    etcd_operator::gather::write_archive(&files, &opts.output, now)?;
    println!(
        "wrote {} ({} files){}",
        opts.output.display(),
        files.len(),
        if problems.is_empty() {
            String::new()
        } else {
            format!("; not gathered (see problems.txt): {}", problems.join("; "))
        }
    );
    Ok(())
}

/// `plan`: prints each controller's next action, the whole plan bounded by `timeout`.
async fn plan(args: PlanArgs) -> anyhow::Result<()> {
    let PlanArgs { output, read } = args;
    let timeout = read.timeout;
    // Each request is bounded too, so a silent API fails fast with its own message.
    let (client, server) = bounded_client(timeout).await?;
    let plan = etcd_operator::run::plan(client, read.config());
    let report = tokio::time::timeout(timeout, plan)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the API server {server} did not answer within {timeout:?} (--timeout); when etcd is in trouble the API served from it may be too"
            )
        })?
        .map_err(|e| {
            anyhow::anyhow!(
                "reading from the API server {server} (each request bounded by --timeout {timeout:?}): {}",
                etcd_operator::writer::describe(&e)
            )
        })?;
    match output {
        PlanOutput::Json => println!("{}", serde_json::to_string_pretty(&report.plan)?),
        PlanOutput::Text => print!("{}", report.plan_text()),
    }
    if let Some(why) = report.unreadable {
        anyhow::bail!("{why}; the operator holds every action until it is fixed");
    }
    Ok(())
}

/// `crd`: prints the EtcdCluster CustomResourceDefinition as YAML.
fn crd() -> anyhow::Result<()> {
    print!(
        "{}",
        etcd_operator::manifests::crd_yaml(&EtcdCluster::crd())?
    );
    Ok(())
}

/// `render`: writes the bootstrap output and prints the path of every file written.
fn render(args: RenderArgs) -> anyhow::Result<()> {
    let RenderArgs {
        node_name,
        node_ip,
        output_dir,
        resource_host_dir,
        local_client_listener,
        images,
    } = args;
    let rendered = etcd_operator::bootstrap::render(
        &node_name,
        node_ip,
        &output_dir,
        resource_host_dir,
        local_client_listener,
        images.images(),
        time::OffsetDateTime::now_utc(),
    )?;
    for f in rendered.files {
        println!("{}", output_dir.join(f.path).display());
    }
    if rendered.reused_ca {
        eprintln!(
            "render: reused the CA of the previous render in {}",
            output_dir.display()
        );
    }
    if let Some(previous) = rendered.previous {
        eprintln!(
            "render: the previous output is kept in {}",
            previous.display()
        );
    }
    Ok(())
}

etcd_cli::command_line_tests!(Cli);
