//! `apiserver-standin`: runs the Kubernetes API stand-in (see the library docs) until SIGINT or
//! SIGTERM. Without `--etcd` it starts its own single-member etcd through `etcd-fixture`.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use apiserver_standin::{ApiServerStandIn, EtcdTls, StandInConfig};
use clap::Parser;

/// Kubernetes API stand-in backed by a real etcd.
#[derive(Debug, Parser)]
#[command(name = "apiserver-standin", version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"))]
struct Args {
    /// Address to serve plain HTTP on (a loopback address; port 0 picks one).
    #[arg(long, env = "STANDIN_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// etcd client URLs, comma-separated. Without it, a private etcd is started.
    #[arg(long, env = "STANDIN_ETCD", value_delimiter = ',')]
    etcd: Vec<String>,
    /// CA of an etcd that requires mTLS (with --etcd-cert and --etcd-key).
    #[arg(long, env = "STANDIN_ETCD_CACERT", requires_all = ["etcd_cert", "etcd_key"])]
    etcd_cacert: Option<PathBuf>,
    /// Client certificate for etcd.
    #[arg(long, env = "STANDIN_ETCD_CERT", requires_all = ["etcd_cacert", "etcd_key"])]
    etcd_cert: Option<PathBuf>,
    /// Client key for etcd.
    #[arg(long, env = "STANDIN_ETCD_KEY", requires_all = ["etcd_cacert", "etcd_cert"])]
    etcd_key: Option<PathBuf>,
    /// Write a kubeconfig for the stand-in here.
    #[arg(long, env = "STANDIN_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// etcd key prefix.
    #[arg(long, default_value = "/registry")]
    key_prefix: String,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 10)]
    bookmark_interval_seconds: u64,
    /// Seconds between etcd compactions (0 = never).
    #[arg(long, default_value_t = 300)]
    compaction_interval_seconds: u64,
    /// Do not require a pod's service account to exist.
    #[arg(long)]
    no_service_account_admission: bool,
    /// Delete pods bound to a node at once instead of gracefully.
    #[arg(long)]
    no_graceful_pod_deletion: bool,
    #[command(flatten)]
    log: etcd_cli::LogArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.log.init("RUST_LOG", "info");
    let mut own_etcd = None;
    let endpoints = if args.etcd.is_empty() {
        let cluster = etcd_fixture::EtcdCluster::start(etcd_fixture::ClusterSpec::plain(1))
            .await
            .context("starting a private etcd for the API stand-in")?;
        let urls: Vec<String> = cluster
            .client_urls()
            .iter()
            .map(|u| u.to_string())
            .collect();
        tracing::info!(etcd = ?urls, "API stand-in: started its own etcd");
        own_etcd = Some(cluster);
        urls
    } else {
        args.etcd.clone()
    };
    let mut config = StandInConfig::new(endpoints, args.listen)
        .with_key_prefix(args.key_prefix.clone())
        .with_bookmark_interval(Duration::from_secs(args.bookmark_interval_seconds.max(1)))
        .with_compaction_interval(
            (args.compaction_interval_seconds > 0)
                .then(|| Duration::from_secs(args.compaction_interval_seconds)),
        );
    if let (Some(ca), Some(cert), Some(key)) = (&args.etcd_cacert, &args.etcd_cert, &args.etcd_key)
    {
        config = config.with_etcd_tls(EtcdTls {
            ca: ca.clone(),
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    config.service_account_admission = !args.no_service_account_admission;
    config.graceful_pod_deletion = !args.no_graceful_pod_deletion;
    let standin = ApiServerStandIn::start(config)
        .await
        .context("starting the API stand-in")?;
    if let Some(path) = &args.kubeconfig {
        standin
            .write_kubeconfig(path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // The URL alone on stdout, for scripts.
    println!("{}", standin.url());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("API stand-in: shutting down");
    standin.stopped(Duration::from_secs(5)).await;
    drop(own_etcd);
    Ok(())
}

etcd_cli::command_line_tests!(Args);
