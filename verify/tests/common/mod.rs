//! Running the `etcd-verify` binary as the kubelet does: the env contract in, one JSON line on
//! stdout, the same JSON as the termination message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub json: serde_json::Value,
    pub stderr_last: String,
    pub termination_message: String,
}

impl Outcome {
    pub fn reason(&self) -> &str {
        self.json["reason"].as_str().unwrap_or_default()
    }

    /// The report as the operator reads it.
    pub fn report(&self) -> membership::VerifyReport {
        membership::VerifyReport::read(&self.termination_message, self.code)
    }

    pub fn assert(&self, code: i32, decision: &str, reason_part: &str) {
        assert_eq!(self.code, code, "exit code; outcome: {self:#?}");
        let report = self.report();
        let known = report
            .code
            .is_some_and(|c| c != membership::BlockCode::Unknown);
        assert_eq!(
            known,
            decision == "block",
            "a block (and only a block) carries a known code; outcome: {self:#?}"
        );
        assert_eq!(
            self.json["decision"], decision,
            "decision; outcome: {self:#?}"
        );
        assert!(
            self.reason().contains(reason_part),
            "reason {:?} lacks {reason_part:?}; outcome: {self:#?}",
            self.reason()
        );
        assert!(
            self.stderr_last.contains(reason_part),
            "stderr's last line {:?} lacks the reason",
            self.stderr_last
        );
        let written: serde_json::Value = serde_json::from_str(&self.termination_message).unwrap();
        assert_eq!(
            written, self.json,
            "termination message differs from stdout"
        );
    }
}

pub fn run_verify(env: &BTreeMap<String, String>, timeout: &str) -> Outcome {
    run_verify_in(env, &[], &[], timeout)
}

/// Like [`run_verify`], with extra variables whose bytes need not be UTF-8.
pub fn run_verify_with(
    env: &BTreeMap<String, String>,
    extra: &[(OsString, OsString)],
    timeout: &str,
) -> Outcome {
    run_verify_in(env, extra, &[], timeout)
}

/// Like [`run_verify_with`], with extra flags (`--state-dir`).
pub fn run_verify_in(
    env: &BTreeMap<String, String>,
    extra: &[(OsString, OsString)],
    flags: &[&str],
    timeout: &str,
) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let termination = dir.path().join("termination-log");
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-verify"))
        .args([
            "membership",
            "--timeout",
            timeout,
            "--retry-interval",
            "200ms",
            "--call-timeout",
            "2s",
        ])
        .args(flags)
        .arg("--termination-log")
        .arg(&termination)
        .env_clear()
        .env("ETCD_VERIFY_LOG", "warn")
        .envs(env)
        .envs(extra.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stdout.lines().count(),
        1,
        "stdout must hold only the JSON result: {stdout:?}"
    );
    Outcome {
        code: out.status.code().unwrap_or(-1),
        json: serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bad JSON {stdout:?}: {e}")),
        stderr_last: stderr.lines().last().unwrap_or_default().to_owned(),
        termination_message: std::fs::read_to_string(&termination).unwrap_or_default(),
    }
}

/// The env of a one-node bootstrap render for a data dir under `dir`, asking endpoint `ep`.
pub fn bootstrap_env(dir: &Path, ep: &str) -> BTreeMap<String, String> {
    [
        ("ETCD_NAME", "n1".to_owned()),
        ("ETCD_DATA_DIR", dir.join("data").display().to_string()),
        (
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            "http://127.0.0.1:2380".to_owned(),
        ),
        ("ETCD_INITIAL_CLUSTER_STATE", "new".to_owned()),
        (
            "ETCD_INITIAL_CLUSTER",
            "n1=http://127.0.0.1:2380".to_owned(),
        ),
        ("ETCD_INITIAL_CLUSTER_TOKEN", "etcd-t1".to_owned()),
        ("ETCD_MEMBER_IDS", String::new()),
        ("ETCDCTL_ENDPOINTS", ep.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}
