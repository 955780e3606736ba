//! `etcd-recover`: node-local etcd disaster recovery (see the crate docs of `etcd_recover`).
//! Output goes to stdout, one step per line; logs to stderr (`ETCD_RECOVER_LOG`).
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use etcd_recover::command::{self, Exit, Target};
use etcd_recover::plan::Accept;

#[derive(Parser, Debug)]
#[command(
    name = "etcd-recover",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"),
    about = "Node-local etcd recovery, with the Kubernetes API down"
)]
struct Cli {
    /// The node's root: `/` on a control-plane node; a sandbox node's root dir.
    #[arg(
        long,
        global = true,
        env = "ETCD_RECOVER_NODE_ROOT",
        default_value = "/"
    )]
    node_root: PathBuf,
    /// The etcd static-pod manifest (a path on the node, read below --node-root).
    #[arg(
        long,
        global = true,
        default_value = "/etc/kubernetes/manifests/etcd-pod.yaml"
    )]
    manifest: PathBuf,
    /// Bound on one call to one etcd member.
    #[arg(long, global = true, default_value = "3s", value_parser = duration)]
    call_timeout: Duration,
    #[command(flatten)]
    log: etcd_cli::LogArgs,
    #[command(subcommand)]
    command: Cmd,
}

/// `--confirm-down`: the other voters the admin checked are down for good.
#[derive(clap::Args, Debug)]
struct ConfirmDown {
    /// The other voters that do not answer, by name or hex member id, once you have checked that
    /// each is powered off or its etcd stopped for good (comma-separated). From this node a
    /// partition looks like a lost quorum; recovery refuses while a voter neither answers nor
    /// is named here.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    confirm_down: Vec<String>,
}

impl ConfirmDown {
    fn set(self) -> std::collections::BTreeSet<String> {
        self.confirm_down
            .into_iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect()
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Lists every member this node reaches, with its raft index, and whether a quorum answers.
    Status,
    /// Makes this node's surviving data a one-member cluster (refused while quorum is healthy
    /// or when another survivor is further ahead).
    FromMember {
        /// Print the survey and the plan, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Go on although another survivor is further ahead (or cannot be compared): the writes
        /// only it holds are lost.
        #[arg(long)]
        accept_losing_newer_writes: bool,
        /// This node's new IP address, when every member's address changed at once: the
        /// member starts there (every URL of the manifest follows, its peer URL is moved with
        /// MemberUpdate once it leads alone).
        #[arg(long, value_name = "IP")]
        address: Option<std::net::IpAddr>,
        /// With --address: the cluster's signer, Secret etcd-signer as `kubectl get secret
        /// -o yaml` prints it (or as `etcd-operator render` wrote it), to issue this node's
        /// certificates for the new address.
        #[arg(long, value_name = "FILE", requires = "address")]
        signer: Option<PathBuf>,
        /// Bound on the whole recovery.
        #[arg(long, default_value = "300s", value_parser = duration)]
        timeout: Duration,
        #[command(flatten)]
        down: ConfirmDown,
    },
    /// Restores a snapshot (its integrity hash checked first) into a fresh data dir with the
    /// etcd image's own tool and starts it as a one-member cluster (refused while quorum is
    /// healthy, for another cluster's snapshot, and where the tool cannot bump the revision).
    FromSnapshot {
        /// The snapshot: a file (`etcdctl snapshot save` or an operator backup; its record
        /// `<file>.json`, when present, must agree) or `s3://bucket/key` (downloaded first;
        /// endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
        /// AWS_SECRET_ACCESS_KEY, AWS_REGION).
        path: String,
        /// Print the checks and the plan, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Restore a snapshot that is not this cluster's.
        #[arg(long)]
        force_other_cluster: bool,
        /// Restore with a tool that cannot bump the store revision (etcd < 3.5.10).
        #[arg(long)]
        accept_revisions_going_back: bool,
        /// Bound on the whole recovery.
        #[arg(long, default_value = "300s", value_parser = duration)]
        timeout: Duration,
        #[command(flatten)]
        down: ConfirmDown,
    },
    /// Print the shell completion script (e.g. `source <(etcd-recover completions bash)`).
    Completions(etcd_cli::CompletionsArgs),
}

fn duration(text: &str) -> Result<Duration, String> {
    membership::parse_duration(text).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    cli.log.init("ETCD_RECOVER_LOG", "warn");
    if let Cmd::Completions(c) = &cli.command {
        c.print(<Cli as clap::CommandFactory>::command());
        return ExitCode::SUCCESS;
    }
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let target = Target {
        root: cli.node_root,
        manifest: cli.manifest,
        call_timeout: cli.call_timeout,
    };
    let mut out = |line: String| println!("{line}");
    let exit = runtime.block_on(run(cli.command, &target, &mut out));
    ExitCode::from(exit as u8)
}

/// Parses the command line; on `--help`, `--version` or an error, prints it and gives the exit
/// code to end with.
fn parse_cli() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|e| {
        let _ = e.print();
        ExitCode::from(if e.use_stderr() {
            Exit::Invalid as u8
        } else {
            0
        })
    })
}

/// The single-threaded async runtime the commands run on (a failure printed).
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("etcd-recover: starting the async runtime: {e}");
            ExitCode::from(Exit::Failed as u8)
        })
}

/// Runs `command` against `target`, printing with `out`.
async fn run(command: Cmd, target: &Target, out: &mut dyn FnMut(String)) -> Exit {
    match command {
        Cmd::Status => command::status(target, out).await,
        Cmd::Completions(_) => Exit::Ok,
        Cmd::FromMember {
            dry_run,
            accept_losing_newer_writes,
            address,
            signer,
            timeout,
            down,
        } => {
            let accept = Accept {
                losing_newer_writes: accept_losing_newer_writes,
                confirmed_down: down.set(),
                ..Accept::default()
            };
            let address = address.map(|ip| command::AddressArgs { ip, signer });
            let opts = command::Options {
                accept,
                dry_run,
                timeout,
            };
            command::from_member(target, opts, address.as_ref(), out).await
        }
        Cmd::FromSnapshot {
            path,
            dry_run,
            force_other_cluster,
            accept_revisions_going_back,
            timeout,
            down,
        } => {
            let accept = Accept {
                other_cluster: force_other_cluster,
                revisions_going_back: accept_revisions_going_back,
                confirmed_down: down.set(),
                ..Accept::default()
            };
            let path = match local_snapshot(path, target, out).await {
                Ok(p) => p,
                Err(exit) => return exit,
            };
            let opts = command::Options {
                accept,
                dry_run,
                timeout,
            };
            command::from_snapshot(target, &path, opts, out).await
        }
    }
}

/// The snapshot as a local file: an `s3://` one downloaded first (a failure printed), any
/// other path as it is.
async fn local_snapshot(
    path: String,
    target: &Target,
    out: &mut dyn FnMut(String),
) -> Result<PathBuf, Exit> {
    if !path.starts_with("s3://") {
        return Ok(PathBuf::from(path));
    }
    etcd_recover::fetch::fetch(&path, &target.root, &|k| std::env::var(k).ok(), out)
        .await
        .map_err(|e| {
            out(format!("etcd-recover from-snapshot {path}: {e}"));
            match e {
                etcd_recover::fetch::FetchError::Invalid(_) => Exit::Invalid,
                etcd_recover::fetch::FetchError::Failed(_) => Exit::Failed,
            }
        })
}

etcd_cli::command_line_tests!(Cli);
