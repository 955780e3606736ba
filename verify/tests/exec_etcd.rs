//! The gate on every start of etcd (#65): `etcd-verify membership --install-into` in the init
//! container hands over to `etcd-verify exec-etcd` in etcd's container, run here as the real
//! binaries against a real etcd cluster. The first start after the init container's verdict
//! takes its ticket; a restart in place (no init container) decides again, and a data dir that
//! vanished under the running pod keeps etcd from starting. The program exec'd stands in for
//! etcd only by printing a marker: what is tested is whether it runs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use etcd_fixture::{ClusterSpec, EtcdCluster};

mod common;
use common::run_verify_in;

const MARKER: &str = "etcd-would-start-here";

/// `<dir>/etcd-verify exec-etcd` with `env`, exec'ing a shell that prints [`MARKER`]; the
/// termination message is returned beside the output.
fn exec_etcd(dir: &Path, env: &BTreeMap<String, String>, extra: &[&str]) -> (Output, String) {
    let termination = dir.join("termination-log");
    let _ = std::fs::remove_file(&termination);
    let out = Command::new(dir.join("etcd-verify"))
        .args(["exec-etcd", "--timeout=10s", "--retry-interval=200ms"])
        .arg(format!("--ticket-dir={}", dir.display()))
        .arg(format!("--termination-log={}", termination.display()))
        .args(extra)
        .args(["--", "sh", "-c", &format!("echo {MARKER}")])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("ETCD_VERIFY_LOG", "warn")
        .envs(env)
        .output()
        .unwrap();
    (
        out,
        std::fs::read_to_string(&termination).unwrap_or_default(),
    )
}

fn ran(out: &Output) -> bool {
    String::from_utf8_lossy(&out.stdout).contains(MARKER)
}

#[tokio::test]
async fn the_first_start_takes_the_ticket_and_a_restart_in_place_decides_again() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let env = cluster.revision_env("n2").await.unwrap();
    let id = cluster.member_id("n2").unwrap();
    cluster.stop("n2").unwrap();
    let handoff = tempfile::tempdir().unwrap();
    let flag = format!("--install-into={}", handoff.path().display());
    let init = run_verify_in(&env, &[], &[&flag], "10s");
    init.assert(0, "start", &format!("restarting member {id} (n2)"));
    assert!(handoff.path().join("start-ticket").is_file());

    // The first start: the ticket stands for it, and is gone after.
    let (out, message) = exec_etcd(handoff.path(), &env, &[]);
    assert!(ran(&out) && out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("verdict stands"),
        "{out:?}"
    );
    assert_eq!(message, "", "a start writes no termination message");
    assert!(!handoff.path().join("start-ticket").exists());

    // A restart in place on intact data: no ticket, the gate decides again and lets it start.
    let (out, _) = exec_etcd(handoff.path(), &env, &[]);
    assert!(ran(&out) && out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("deciding again"),
        "{out:?}"
    );

    // The data dir vanishes under the running pod; the next restart in place is held.
    let data = Path::new(&env["ETCD_DATA_DIR"]);
    std::fs::remove_dir_all(data.join("member")).unwrap();
    let (out, message) = exec_etcd(handoff.path(), &env, &[]);
    assert!(!ran(&out), "etcd started on the emptied data dir: {out:?}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("etcd-verify exec-etcd: block: data dir lost"),
        "{out:?}"
    );
    let report = membership::VerifyReport::parse(&message)
        .unwrap_or_else(|| panic!("no report in the termination message: {message:?}"));
    assert_eq!(report.data_lost_member(), Some(id), "{report:?}");
    assert!(
        std::fs::read_dir(data).unwrap().next().is_none(),
        "the held start wrote into the data dir"
    );
}

#[tokio::test]
async fn a_stale_ticket_is_not_a_verdict() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let env = cluster.revision_env("n3").await.unwrap();
    let id = cluster.member_id("n3").unwrap();
    cluster.stop("n3").unwrap();
    let handoff = tempfile::tempdir().unwrap();
    let flag = format!("--install-into={}", handoff.path().display());
    run_verify_in(&env, &[], &[&flag], "10s").assert(0, "start", "restarting member");
    let data = Path::new(&env["ETCD_DATA_DIR"]);
    std::fs::remove_dir_all(data.join("member")).unwrap();
    // The container started long after the verdict (bound 0 s): the gate asks again and holds.
    let (out, message) = exec_etcd(handoff.path(), &env, &["--ticket-max-age=0s"]);
    assert!(!ran(&out), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Stale"),
        "{out:?}"
    );
    let report = membership::VerifyReport::parse(&message).unwrap();
    assert_eq!(report.data_lost_member(), Some(id), "{report:?}");
    assert!(!handoff.path().join("start-ticket").exists());
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("etcd-verify");
    std::fs::copy(env!("CARGO_BIN_EXE_etcd-verify"), &binary).unwrap();
    // No program after `--`.
    let out = Command::new(&binary)
        .args(["exec-etcd", "--ticket-dir", "/nonexistent"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("InvalidInput"), "{stdout}");
    // No ticket, and an env the gate cannot use: exit 2 naming it, the program never runs.
    let (out, message) = exec_etcd(dir.path(), &BTreeMap::new(), &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!ran(&out));
    let report = membership::VerifyReport::parse(&message).unwrap();
    assert_eq!(report.code, Some(membership::BlockCode::InvalidInput));
    assert!(report.reason.contains("ETCD_"), "{}", report.reason);
}
