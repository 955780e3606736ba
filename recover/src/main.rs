//! `etcd-recover`: node-local etcd disaster recovery (see the crate docs of `etcd_recover`).
//! Output goes to stdout, one step per line; logs to stderr (`ETCD_RECOVER_LOG`).

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
        /// Bound on the whole recovery.
        #[arg(long, default_value = "300s", value_parser = duration)]
        timeout: Duration,
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
    },
    /// Print the shell completion script (e.g. `source <(etcd-recover completions bash)`).
    Completions(etcd_cli::CompletionsArgs),
}

fn duration(text: &str) -> Result<Duration, String> {
    membership::parse_duration(text).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                Exit::Invalid as u8
            } else {
                0
            });
        }
    };
    cli.log.init("ETCD_RECOVER_LOG", "warn");
    if let Cmd::Completions(c) = &cli.command {
        c.print(<Cli as clap::CommandFactory>::command());
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("etcd-recover: starting the async runtime: {e}");
            return ExitCode::from(Exit::Failed as u8);
        }
    };
    let target = Target {
        root: cli.node_root,
        manifest: cli.manifest,
        call_timeout: cli.call_timeout,
    };
    let mut out = |line: String| println!("{line}");
    let exit = runtime.block_on(async {
        match cli.command {
            Cmd::Status => command::status(&target, &mut out).await,
            Cmd::Completions(_) => Exit::Ok,
            Cmd::FromMember {
                dry_run,
                accept_losing_newer_writes,
                timeout,
            } => {
                let accept = Accept {
                    losing_newer_writes: accept_losing_newer_writes,
                    ..Accept::default()
                };
                command::from_member(&target, accept, dry_run, timeout, &mut out).await
            }
            Cmd::FromSnapshot {
                path,
                dry_run,
                force_other_cluster,
                accept_revisions_going_back,
                timeout,
            } => {
                let accept = Accept {
                    other_cluster: force_other_cluster,
                    revisions_going_back: accept_revisions_going_back,
                    ..Accept::default()
                };
                let path = if path.starts_with("s3://") {
                    match etcd_recover::fetch::fetch(
                        &path,
                        &target.root,
                        &|k| std::env::var(k).ok(),
                        &mut out,
                    )
                    .await
                    {
                        Ok(p) => p,
                        Err(e) => {
                            out(format!("etcd-recover from-snapshot {path}: {e}"));
                            return match e {
                                etcd_recover::fetch::FetchError::Invalid(_) => Exit::Invalid,
                                etcd_recover::fetch::FetchError::Failed(_) => Exit::Failed,
                            };
                        }
                    }
                } else {
                    PathBuf::from(path)
                };
                command::from_snapshot(&target, &path, accept, dry_run, timeout, &mut out).await
            }
        }
    });
    ExitCode::from(exit as u8)
}

etcd_cli::command_line_tests!(Cli);
