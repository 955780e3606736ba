//! `sandbox`: the project's main job. Today: `sandbox demo-verify` (the `etcd-verify` gate on a
//! throw-away cluster).

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "sandbox",
    about = "The local control plane of etcd-static-operator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show `etcd-verify membership` deciding on a throw-away 3-member TLS cluster.
    DemoVerify,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SANDBOX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match Cli::parse().command {
        Command::DemoVerify => e2e::verify_demo::run().await?,
    }
    Ok(())
}
