//! The command line of `kubectl etcd` (the `etcd-operator` binary run as `kubectl-etcd`): the
//! status summary, the operator's `plan` and `gather`, and the admin actions, each confirmed
//! before it is sent (`--yes` skips the question, `--dry-run` has the API server check it and
//! store nothing).

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::Duration;

use clap::{Parser, Subcommand};
use etcd_operator::kubectl::{self, actions::Action};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-etcd",
    bin_name = "kubectl etcd",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"),
    about = "The etcd of the control plane, as etcd-static-operator runs it: its status, the operator's plan, an incident archive, and admin actions as safe spec changes. Uses your kubeconfig"
)]
pub struct PluginCli {
    #[command(flatten)]
    log: etcd_cli::LogArgs,
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Subcommand, Debug)]
enum PluginCommand {
    /// Members, roles, health, every node's revision, the summary conditions, what runs now and
    /// what needs attention.
    Status(StatusArgs),
    /// The operator's plan: each controller's next action and why anything waits (asks etcd
    /// too, with the operator's client certificate read through the API).
    Plan(super::PlanArgs),
    /// One incident archive (.tar.gz): the EtcdCluster, Events, revisions, members, the plan and
    /// the operator's logs; no Secret.
    Gather(super::GatherArgs),
    /// Take a backup now, schedule aside (sets spec.backup.request).
    Backup(RequestArgs),
    /// Defragment every voter once, one at a time, thresholds aside (sets
    /// spec.defragmentation.request).
    Defragment(RequestArgs),
    /// Rotate the etcd CA through its three phases (sets spec.certificates.caRotationRequest).
    RotateCa(RequestArgs),
    /// Roll a new static-pod revision to every node through the quorum gate (sets
    /// spec.forceRedeploymentReason).
    Redeploy(RedeployArgs),
    /// Mark a node's etcd as stopped on purpose (refused when its member is needed for quorum):
    /// the operator then neither installs etcd there again nor replaces its member.
    StopEtcd(StopArgs),
    /// Remove that mark: the operator installs the node's revision again.
    StartEtcd(StartArgs),
    /// Print the shell completion script (e.g. `source <(kubectl-etcd completions bash)`).
    Completions(etcd_cli::CompletionsArgs),
}

#[derive(clap::Args, Debug)]
struct StatusArgs {
    /// Output format: the summary, or the EtcdCluster's status as JSON.
    #[arg(short, long, value_enum, default_value_t = super::PlanOutput::Text)]
    output: super::PlanOutput,
    #[command(flatten)]
    api: ApiTimeout,
}

/// How long one API request may take.
#[derive(clap::Args, Debug)]
struct ApiTimeout {
    /// Bound on each API request: when etcd is in trouble the API (served from it) may accept
    /// connections and never answer.
    #[arg(long, default_value = "30s", value_parser = membership::parse_duration)]
    timeout: Duration,
}

/// How an action is sent.
#[derive(clap::Args, Debug)]
struct Confirm {
    /// Have the API server check and admit the change without storing it (nothing changes).
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation (needed when stdin is not a terminal).
    #[arg(short, long)]
    yes: bool,
    /// After sending, wait this long for the status to show it done (e.g. `10m`); 0: return at
    /// once.
    #[arg(long, default_value = "0s", value_parser = membership::parse_duration)]
    wait: Duration,
    #[command(flatten)]
    api: ApiTimeout,
}

#[derive(clap::Args, Debug)]
struct RequestArgs {
    /// The request's value: any new value triggers the action once (default: `kubectl-etcd-`
    /// and the UTC time).
    #[arg(long)]
    request: Option<String>,
    #[command(flatten)]
    confirm: Confirm,
}

#[derive(clap::Args, Debug)]
struct RedeployArgs {
    /// Why (kept in the spec and in the revision); must differ from the current reason.
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    confirm: Confirm,
}

#[derive(clap::Args, Debug)]
struct StopArgs {
    /// The node.
    node: String,
    /// Why (the annotation's value, shown in the status and by the operator).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    confirm: Confirm,
}

#[derive(clap::Args, Debug)]
struct StartArgs {
    /// The node.
    node: String,
    #[command(flatten)]
    confirm: Confirm,
}

/// Runs the plugin.
pub async fn main() -> anyhow::Result<()> {
    let cli = PluginCli::parse();
    cli.log.init("KUBECTL_ETCD_LOG", "warn");
    let now = time::OffsetDateTime::now_utc();
    let stamp = |r: Option<String>| {
        r.unwrap_or_else(|| {
            format!(
                "kubectl-etcd-{}",
                etcd_operator::controllers::backup::schedule::stamp(now)
            )
        })
    };
    let (action, confirm) = match cli.command {
        PluginCommand::Status(args) => return status(args).await,
        PluginCommand::Plan(args) => return super::plan(args).await,
        PluginCommand::Gather(args) => return super::gather(args).await,
        PluginCommand::Completions(args) => {
            args.print(<PluginCli as clap::CommandFactory>::command());
            return Ok(());
        }
        PluginCommand::Backup(a) => (
            Action::Backup {
                request: stamp(a.request),
            },
            a.confirm,
        ),
        PluginCommand::Defragment(a) => (
            Action::Defragment {
                request: stamp(a.request),
            },
            a.confirm,
        ),
        PluginCommand::RotateCa(a) => (
            Action::RotateCa {
                request: stamp(a.request),
            },
            a.confirm,
        ),
        PluginCommand::Redeploy(a) => (Action::Redeploy { reason: a.reason }, a.confirm),
        PluginCommand::StopEtcd(a) => (
            Action::StopEtcd {
                node: a.node,
                reason: a.reason,
            },
            a.confirm,
        ),
        PluginCommand::StartEtcd(a) => (Action::StartEtcd { node: a.node }, a.confirm),
    };
    act(action, confirm).await
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let (client, _) = super::bounded_client(args.api.timeout).await?;
    let cluster = kubectl::cluster(&client).await?;
    match args.output {
        super::PlanOutput::Text => print!("{}", kubectl::summary::render(&cluster)),
        super::PlanOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&cluster.status.unwrap_or_default())?
        ),
    }
    Ok(())
}

async fn act(action: Action, confirm: Confirm) -> anyhow::Result<()> {
    let (client, _) = super::bounded_client(confirm.api.timeout).await?;
    let change = kubectl::prepare(&client, &action).await?;
    if confirm.dry_run {
        kubectl::apply(&client, &change, true).await?;
        println!(
            "dry run: the API server admitted it (nothing stored): {}",
            change.summary
        );
        return Ok(());
    }
    if !confirm.yes && !confirmed(&change.summary)? {
        anyhow::bail!("{}: not confirmed, nothing changed", action.name());
    }
    kubectl::apply(&client, &change, false).await?;
    println!("done: {}", change.summary);
    match (&change.done, confirm.wait.is_zero()) {
        (Some(done), false) => {
            let seen = kubectl::wait(&client, done, confirm.wait, Duration::from_secs(2)).await?;
            println!("{seen}");
        }
        (Some(done), true) => println!(
            "the status shows when it is done: {}",
            kubectl::actions::watch_hint(done)
        ),
        (None, _) => {}
    }
    Ok(())
}

/// Asks on the terminal; without one, refuses (an unattended run passes `--yes`).
fn confirmed(summary: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "this would {summary}\nstdin is not a terminal to confirm on: pass --yes (or --dry-run to check it)"
        );
    }
    eprint!("This will {summary}.\nProceed? [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

etcd_cli::command_line_tests!(PluginCli);
