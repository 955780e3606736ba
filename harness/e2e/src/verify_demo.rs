//! `sandbox demo-verify`: shows the `etcd-verify membership` gate deciding on a throw-away
//! three-member TLS cluster (real etcd on loopback): a learner that may join, a forged
//! `ETCD_MEMBER_IDS` that is refused, and the learner then really joining and being promoted.

use std::collections::BTreeMap;
use std::process::Command;

use etcd_fixture::{ClusterSpec, EtcdCluster};

/// What went wrong in the demonstration.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Fixture(#[from] etcd_fixture::FixtureError),
    #[error("running etcd-verify: {0}")]
    Verify(#[from] std::io::Error),
    #[error("the gate answered {got:?} where {want:?} was expected: {output}")]
    Unexpected {
        want: &'static str,
        got: String,
        output: String,
    },
}

fn gate(env: &BTreeMap<String, String>, want: &'static str) -> Result<String, DemoError> {
    let out = Command::new(crate::binaries::binary("etcd-verify")?)
        .args([
            "membership",
            "--timeout",
            "10s",
            "--termination-log",
            "/dev/null",
        ])
        .env_clear()
        .env("ETCD_VERIFY_LOG", "warn")
        .envs(env)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let started = out.status.success();
    if started != (want == "start") {
        return Err(DemoError::Unexpected {
            want,
            got: stdout.clone(),
            output: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(stdout)
}

/// Runs the demonstration, printing each step.
pub async fn run() -> Result<(), DemoError> {
    println!("starting a 3-member etcd cluster with mutual TLS on loopback ...");
    let mut cluster = EtcdCluster::start(ClusterSpec::tls(3)).await?;
    for n in cluster.names() {
        println!(
            "  {n}: {} (member {})",
            cluster.client_url(&n)?,
            cluster.member_id(&n)?
        );
    }
    println!("adding node n4 as a learner (etcd refuses member changes for ~5 s after start) ...");
    let id = cluster.add_learner("n4").await?;
    println!("  learner {id} added, not started");

    let env = cluster.revision_env("n4").await?;
    println!("\nrevision env for n4:");
    for key in [
        "ETCD_INITIAL_CLUSTER",
        "ETCD_MEMBER_IDS",
        "ETCDCTL_ENDPOINTS",
    ] {
        println!("  {key}={}", env.get(key).map_or("", String::as_str));
    }
    println!("\n1. etcd-verify membership with that revision (expect: start)");
    println!("   {}", gate(&env, "start")?);

    let mut forged = env.clone();
    let ids = env.get("ETCD_MEMBER_IDS").cloned().unwrap_or_default();
    forged.insert(
        "ETCD_MEMBER_IDS".into(),
        ids.replace(&id.to_string(), "abad1dea"),
    );
    println!("\n2. the same revision with n4's id forged to abad1dea (expect: block)");
    println!("   {}", gate(&forged, "block")?);

    println!("\n3. starting n4's etcd as the gate allowed, and promoting it ...");
    cluster.start_member("n4").await?;
    cluster.promote("n4").await?;
    for m in cluster.members().await? {
        let role = if m.is_learner { "learner" } else { "voter" };
        println!("  {} {:<3} {role}", m.id, m.name);
    }
    println!("\ndone: the cluster is torn down on exit.");
    Ok(())
}
