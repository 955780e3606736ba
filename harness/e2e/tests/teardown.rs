//! A signal to `sandbox` tears down everything it started: SIGTERM to `sandbox up`, SIGINT to
//! `sandbox run` (sent to the sandbox process alone, as `kill -INT` does, so no child sees it).
//! Every process below the sandbox (the operator, node agents' container helpers, every etcd
//! including the API stand-in's) must be gone afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// One process: its parent and command name, from `/proc/<pid>/stat`.
#[derive(Clone, Debug)]
struct Proc {
    ppid: i32,
    comm: String,
    zombie: bool,
}

fn processes() -> BTreeMap<i32, Proc> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let (Some(state), Some(ppid)) = (rest.first(), rest.get(1)) else {
            continue;
        };
        out.insert(
            pid,
            Proc {
                ppid: ppid.parse().unwrap_or(0),
                comm: stat[open + 1..close].to_owned(),
                zombie: *state == "Z",
            },
        );
    }
    out
}

/// Every live process below `root`.
fn descendants(root: i32) -> BTreeMap<i32, Proc> {
    let all = processes();
    let mut found: BTreeMap<i32, Proc> = BTreeMap::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, p) in &all {
            if p.ppid == parent && !p.zombie && !found.contains_key(pid) {
                found.insert(*pid, p.clone());
                frontier.push(*pid);
            }
        }
    }
    found
}

fn alive(pid: i32) -> bool {
    processes().get(&pid).is_some_and(|p| !p.zombie)
}

/// Starts `sandbox args`, with its stdout lines delivered to the returned channel.
fn sandbox(args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Waits until `check` holds, printing what was last seen when `deadline` passes.
fn wait_until<T>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let started = Instant::now();
    loop {
        match check() {
            Ok(v) => return v,
            Err(seen) if started.elapsed() > deadline => {
                panic!("timed out after {deadline:?} waiting for {what}; last seen: {seen}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Runs the sandbox until its operator and at least `etcds` etcd processes run below it, sends
/// `signal` to the sandbox process alone, and checks it exits with `want_code` leaving nothing.
fn signal_tears_down(args: &[&str], signal: Signal, want_code: i32, etcds: usize) {
    let (mut child, lines) = sandbox(args);
    let root = i32::try_from(child.id()).unwrap();
    let mut output = Vec::new();
    let started = wait_until(
        "the operator and etcd to run",
        Duration::from_secs(180),
        || {
            output.extend(lines.try_iter());
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "sandbox exited early with {status}; output:\n{}",
                    output.join("\n")
                );
            }
            let below = descendants(root);
            // The operator is the sandbox's own child; quorum guard pods run `etcd-operator
            // guard` below their node agents.
            let operator = below
                .values()
                .filter(|p| p.comm == "etcd-operator" && p.ppid == root)
                .count();
            let etcd = below.values().filter(|p| p.comm == "etcd").count();
            if operator == 1 && etcd >= etcds {
                Ok(below)
            } else {
                let names: Vec<&str> = below.values().map(|p| p.comm.as_str()).collect();
                Err(format!("below the sandbox: {names:?}"))
            }
        },
    );
    kill(Pid::from_raw(root), signal).unwrap();
    let status = wait_until("the sandbox to exit", Duration::from_secs(90), || {
        child
            .try_wait()
            .unwrap()
            .ok_or_else(|| "still running".to_owned())
    });
    output.extend(lines.try_iter());
    assert_eq!(
        status.code(),
        Some(want_code),
        "exit status {status}; output:\n{}",
        output.join("\n")
    );
    wait_until(
        "every process the sandbox started to be gone",
        Duration::from_secs(20),
        || {
            let left: Vec<String> = started
                .iter()
                .filter(|(pid, _)| alive(**pid))
                .map(|(pid, p)| format!("{pid} {}", p.comm))
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join(", "))
            }
        },
    );
}

#[test]
fn sigterm_to_sandbox_up_tears_everything_down() {
    // The API stand-in's etcd plus n1's bootstrapped member at least.
    signal_tears_down(&["up"], Signal::SIGTERM, 0, 2);
}

#[test]
fn sigint_to_sandbox_run_tears_everything_down() {
    let out = std::env::temp_dir().join(format!("sandbox-teardown-{}", std::process::id()));
    let out = out.to_str().unwrap();
    signal_tears_down(&["run", "bootstrap", "--out", out], Signal::SIGINT, 130, 2);
    let _ = std::fs::remove_dir_all(out);
}
