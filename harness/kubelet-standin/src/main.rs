//! `kubelet-standin`: the kubelet stand-in binary.
//!
//! - `kubelet-standin run --name n1 --ip 127.0.0.2 --root /srv/n1 --bin-dir target/debug` runs one
//!   simulated node against the cluster in `KUBECONFIG` (or without any API: `--no-api`).
//! - `kubelet-standin exec-container ...` is the per-container helper the agent itself spawns
//!   (private mount namespace + bind mounts + exec); see the library's `mounts` module.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kubelet_standin::helper::{ExecSpec, exec_init, run_container};
use kubelet_standin::mounts::BindMount;
use kubelet_standin::runc::RuncConfig;
use kubelet_standin::{NodeAgent, NodeConfig};

#[derive(Debug, Parser)]
#[command(
    name = "kubelet-standin",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"),
    about = "kubelet stand-in: runs a simulated node's pods as local processes"
)]
struct Args {
    #[command(flatten)]
    log: etcd_cli::LogArgs,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one simulated control-plane node.
    Run {
        /// The node's name (its Node object's and its pods' `spec.nodeName`).
        #[arg(long)]
        name: String,
        /// The node's address: its pods (host network) bind to it.
        #[arg(long)]
        ip: IpAddr,
        /// The node's root directory: its manifests, pod logs and host paths live below it.
        #[arg(long)]
        root: PathBuf,
        /// Directory with the project's binaries (etcd-operator, etcd-installer, etcd-verify).
        #[arg(long, default_value = "target/debug")]
        bin_dir: PathBuf,
        /// Run static pods only; do not talk to a Kubernetes API.
        #[arg(long)]
        no_api: bool,
        /// Kubeconfig given to every container as `KUBECONFIG` (stand-in for in-cluster
        /// credentials); defaults to the agent's own `KUBECONFIG`.
        #[arg(long, env = "KUBECONFIG")]
        pod_kubeconfig: Option<PathBuf>,
        /// Run every container under runc from the images in this directory (what
        /// `scripts/build-images --out` wrote) instead of mapping images to host binaries.
        #[arg(long)]
        image_store: Option<PathBuf>,
        /// Where images are unpacked, once per digest (default `<image-store>/rootfs-cache`).
        #[arg(long, requires = "image_store")]
        unpack_cache: Option<PathBuf>,
        /// The OCI runtime.
        #[arg(long, default_value = "/usr/sbin/runc")]
        runc: PathBuf,
        /// The image unpacker.
        #[arg(long, default_value = "/usr/bin/umoci")]
        umoci: PathBuf,
    },
    /// Internal: start one container process in a private mount namespace.
    ExecContainer {
        /// The container's staging directory (its root filesystem view is built there).
        #[arg(long)]
        staging: PathBuf,
        /// SRC:DST or SRC:DST:ro (SRC on the host, DST in the container's view).
        #[arg(long = "bind")]
        binds: Vec<String>,
        /// The program's working directory, in the container's view.
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Host file to write the reason to when the program cannot be started.
        #[arg(long)]
        error_file: Option<PathBuf>,
        /// Join the namespaces of this running container shim (exec probes).
        #[arg(long)]
        join: Option<i32>,
        /// SIGKILL the container when the agent thread that spawned it dies.
        #[arg(long)]
        die_with_parent: bool,
        /// Mount a /proc of the new PID namespace before the program starts.
        #[arg(long)]
        mount_proc: bool,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Internal: PID 1 of a container (started by exec-container); execs the program.
    #[command(hide = true)]
    ExecInit {
        /// Host file to write the reason to when the program cannot be started.
        #[arg(long)]
        error_file: Option<PathBuf>,
        /// Mount a /proc of this PID namespace first.
        #[arg(long)]
        mount_proc: bool,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Cmd::ExecContainer {
            staging,
            binds,
            workdir,
            error_file,
            join,
            die_with_parent,
            mount_proc,
            command,
        } => {
            // Single-threaded on purpose: unshare(CLONE_NEWNS) refuses threaded processes.
            let binds = binds
                .iter()
                .map(|b| BindMount::parse(b))
                .collect::<Result<Vec<_>, _>>()?;
            let (program, rest) = command.split_first().context("no command")?;
            let spec = ExecSpec {
                binds,
                staging,
                workdir,
                program: PathBuf::from(program),
                args: rest.to_vec(),
                die_with_parent,
                error_file: error_file.clone(),
                join,
                mount_proc,
            };
            match run_container(&spec) {
                Ok(code) => std::process::exit(code),
                Err(e) => exit_failed("exec-container", &e, error_file),
            }
        }
        Cmd::ExecInit {
            error_file,
            mount_proc,
            command,
        } => {
            let (program, rest) = command.split_first().context("no command")?;
            match exec_init(std::path::Path::new(program), rest, mount_proc) {
                Ok(never) => match never {},
                Err(e) => exit_failed("exec-init", &e, error_file),
            }
        }
        Cmd::Run {
            name,
            ip,
            root,
            bin_dir,
            no_api,
            pod_kubeconfig,
            image_store,
            unpack_cache,
            runc,
            umoci,
        } => {
            args.log.init("RUST_LOG", "info");
            let mut node = NodeConfig::new(&name, ip, &root, &bin_dir);
            if let Some(store) = image_store {
                node = node.with_runc(RuncConfig {
                    unpack_cache: unpack_cache.unwrap_or_else(|| store.join("rootfs-cache")),
                    image_store: store,
                    runc,
                    umoci,
                });
            }
            let kubeconfig = pod_kubeconfig.filter(|p| !p.as_os_str().is_empty());
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("tokio runtime")?
                .block_on(run_node(node, no_api, kubeconfig))
        }
    }
}

/// A helper subcommand that could not start its program: says why on stderr and in
/// `error_file`, and exits 127 (as a shell does for a command it cannot run).
fn exit_failed(what: &str, e: &dyn std::fmt::Display, error_file: Option<PathBuf>) -> ! {
    let msg = format!("kubelet-standin {what}: {e}\n");
    eprint!("{msg}");
    if let Some(f) = error_file {
        let _ = std::fs::write(f, &msg);
    }
    std::process::exit(127);
}

/// Runs one node's agent (with the API unless `no_api`) until SIGTERM or Ctrl-C, then shuts it
/// down within two minutes.
async fn run_node(
    mut config: NodeConfig,
    no_api: bool,
    pod_kubeconfig: Option<PathBuf>,
) -> anyhow::Result<()> {
    if !no_api {
        let kc = kube::Config::infer().await.context("kube config")?;
        config = config.with_api_service(&kc.cluster_url.to_string());
        config.client = Some(kube::Client::try_from(kc).context("kube client")?);
    }
    config.helper = Some(std::env::current_exe().context("own path")?);
    config.kubeconfig = pod_kubeconfig;
    let agent = NodeAgent::start(config).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("signal handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("signal")?,
        _ = term.recv() => {}
    }
    tracing::info!("stopping");
    tokio::time::timeout(Duration::from_secs(120), agent.shutdown())
        .await
        .context("shutdown timed out")?;
    Ok(())
}

etcd_cli::command_line_tests!(Args);
