//! `etcd-operator plan` as an admin runs it when things are bad: an API server that accepts
//! connections and never answers (when etcd is in trouble, the API served from it may be) must
//! not hang it (nor `kubectl etcd status`), and a bad `--output` is refused before any API call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A TCP server that accepts every connection and never answers; counts the connections.
fn silent_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (url, accepted)
}

fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             current-context: x\n"
        ),
    )
    .unwrap();
    path
}

fn plan(kubeconfig: &std::path::Path, args: &[&str]) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-operator"))
        .arg("plan")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("ETCD_OPERATOR_LOG", "warn")
        .output()
        .unwrap();
    (out, started.elapsed())
}

#[test]
fn a_silent_api_server_ends_plan_within_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (server, accepted) = silent_server();
    let config = kubeconfig(dir.path(), &server);
    let (out, took) = plan(&config, &["--timeout", "2s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(20), "plan took {took:?}");
    assert!(
        stderr.contains(&server) && stderr.contains("2s"),
        "the message names the server and the bound: {stderr}"
    );
    assert!(
        accepted.load(Ordering::SeqCst) > 0,
        "plan never reached the server"
    );
}

#[test]
fn a_bad_output_format_is_refused_before_any_api_call() {
    let dir = tempfile::tempdir().unwrap();
    let (server, accepted) = silent_server();
    let config = kubeconfig(dir.path(), &server);
    let (out, took) = plan(&config, &["--output", "yaml", "--timeout", "2s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'yaml'") && stderr.contains("json"),
        "{stderr}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "no API call may happen");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn a_silent_api_server_ends_kubectl_etcd_status_within_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (server, accepted) = silent_server();
    let config = kubeconfig(dir.path(), &server);
    let plugin = dir.path().join("kubectl-etcd");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_etcd-operator"), &plugin).unwrap();
    let started = Instant::now();
    let out = Command::new(&plugin)
        .args(["status", "--timeout", "2s"])
        .env("KUBECONFIG", &config)
        .env("KUBECTL_ETCD_LOG", "warn")
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(took < Duration::from_secs(20), "status took {took:?}");
    assert!(
        stderr.contains("reading EtcdCluster cluster"),
        "the message names what was read: {stderr}"
    );
    assert!(
        accepted.load(Ordering::SeqCst) > 0,
        "status never reached the server"
    );
}
