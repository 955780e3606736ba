//! `etcd-verify membership` against real etcd clusters: every row of the decision table, run as
//! the real binary with the env contract, plus bad input.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use etcd_fixture::{ClusterSpec, EtcdCluster, LoopbackAddr};
use membership::MemberIds;

mod common;
use common::{bootstrap_env, run_verify, run_verify_with};

async fn revision_env(cluster: &mut EtcdCluster, node: &str) -> BTreeMap<String, String> {
    cluster.revision_env(node).await.unwrap()
}

fn archived_dirs(data_dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(data_dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("member-archived-")
                })
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

#[tokio::test]
async fn learner_joins_over_tls() {
    let mut cluster = EtcdCluster::start(ClusterSpec::tls(3)).await.unwrap();
    let id = cluster.add_learner("n4").await.unwrap();
    let env = revision_env(&mut cluster, "n4").await;
    let outcome = run_verify(&env, "10s");
    outcome.assert(0, "start", &format!("joining as unstarted learner {id}"));
    assert_eq!(outcome.json["member_id"], id.to_string());
    assert!(outcome.json["archived"].is_null());
    // The gate's "start" is real: etcd joins with this env and can be promoted.
    cluster.start_member("n4").await.unwrap();
    cluster.promote("n4").await.unwrap();
    let members = cluster.members().await.unwrap();
    assert!(
        members
            .iter()
            .any(|m| m.id == id && !m.is_learner && m.name == "n4"),
        "{members:?}"
    );
}

#[tokio::test]
async fn replaced_member_archives_its_stale_data_and_joins() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let old_id = cluster.member_id("n3").unwrap();
    cluster.stop("n3").unwrap();
    cluster.remove_member("n3").await.unwrap();
    let new_id = cluster.readd_as_learner("n3").await.unwrap();
    assert_ne!(old_id, new_id);
    let data_dir = cluster.data_dir("n3").unwrap();
    let outcome = run_verify(&revision_env(&mut cluster, "n3").await, "10s");
    outcome.assert(
        0,
        "start",
        &format!("archived a stale data dir of member {old_id}"),
    );
    let archived = archived_dirs(&data_dir);
    assert_eq!(archived.len(), 1, "{archived:?}");
    assert_eq!(outcome.json["archived"], archived[0].display().to_string());
    assert!(
        archived[0].join("wal").is_dir(),
        "the archive keeps the old data"
    );
    assert!(!data_dir.join("member").exists());
    cluster.start_member("n3").await.unwrap();
    cluster.promote("n3").await.unwrap();
}

#[tokio::test]
async fn started_member_restarts() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let id = cluster.member_id("n2").unwrap();
    cluster.stop("n2").unwrap();
    let outcome = run_verify(&revision_env(&mut cluster, "n2").await, "10s");
    outcome.assert(
        0,
        "start",
        &format!("restarting member {id} (n2) on its own data dir"),
    );
    cluster.restart("n2").unwrap();
    cluster.wait_writable().await.unwrap();
}

#[tokio::test]
async fn forged_or_stale_member_ids_block_over_tls() {
    let mut cluster = EtcdCluster::start(ClusterSpec::tls(3)).await.unwrap();
    // A revision made before a learner was added is stale.
    let stale = revision_env(&mut cluster, "n3").await;
    let learner = cluster.add_learner("n4").await.unwrap();
    let real = cluster.member_id("n3").unwrap();
    cluster.stop("n3").unwrap();

    let mut env = revision_env(&mut cluster, "n3").await;
    let good_ids = env["ETCD_MEMBER_IDS"].clone();
    let peer = cluster.peer_url("n3").unwrap();
    let forged = good_ids.replace(&format!("{real}={peer}"), &format!("abad1dea={peer}"));
    assert_ne!(forged, good_ids);
    env.insert(
        "ETCD_MEMBER_IDS".into(),
        MemberIds::parse(&forged).unwrap().to_string(),
    );
    let outcome = run_verify(&env, "10s");
    outcome.assert(
        1,
        "block",
        &format!("abad1dea={peer} is in ETCD_MEMBER_IDS but not a live member"),
    );
    assert!(
        cluster.data_dir("n3").unwrap().join("member").is_dir(),
        "data must stay untouched"
    );
    assert!(archived_dirs(&cluster.data_dir("n3").unwrap()).is_empty());

    // A revision made before the learner was added restarts n3's started member on its own
    // data (#36: etcd ignores the member list then) ...
    run_verify(&stale, "10s").assert(0, "start", "restarting member");
    // ... but not with its data dir gone: that blocks as lost data, naming the member (the
    // operator replaces it), not as the stale revision.
    let data = cluster.data_dir("n3").unwrap();
    let aside = data.with_extension("aside");
    std::fs::rename(data.join("member"), &aside).unwrap();
    let lost = run_verify(&stale, "10s");
    lost.assert(1, "block", "data dir lost");
    assert_eq!(lost.report().data_lost_member(), Some(real), "{learner}");
    std::fs::rename(&aside, data.join("member")).unwrap();
    // The good revision still starts n3.
    run_verify(&revision_env(&mut cluster, "n3").await, "10s").assert(
        0,
        "start",
        "restarting member",
    );
}

/// #65: the gate decides only from a member list a quorum confirms. n4 is an unstarted learner;
/// n2 and n3 die, and n1 keeps running without a quorum, still answering a member list from its
/// own view. Asked serializably, that view started n4 ("joining as unstarted learner") on a list
/// nobody could confirm (a member cut off by a partition serves the same way, and its list may
/// name a member removed since); asked linearizably, n1 answers nothing, and the gate waits and
/// blocks as for no answer. (A stale list itself cannot be made here: a frozen member still
/// receives what the leader sends into its socket, and a restarted etcd 3.5 serves no client
/// until it has published itself through a quorum; it needs the fault campaign's partitions.)
#[tokio::test]
async fn an_unconfirmed_member_list_is_never_believed() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.add_learner("n4").await.unwrap();
    let env = revision_env(&mut cluster, "n4").await;
    run_verify(&env, "8s").assert(0, "start", "joining as unstarted learner");
    // Killed: a stopping leader waits for a leadership transfer no one can take.
    cluster.kill("n2").unwrap();
    cluster.kill("n3").unwrap();
    let outcome = run_verify(&env, "8s");
    outcome.assert(1, "block", "no etcd endpoint answered");
    cluster.restart("n2").unwrap();
    cluster.restart("n3").unwrap();
    cluster.wait_writable().await.unwrap();
    run_verify(&env, "8s").assert(0, "start", "joining as unstarted learner");
}

#[tokio::test]
async fn lost_data_dir_blocks() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let id = cluster.member_id("n3").unwrap();
    cluster.stop("n3").unwrap();
    cluster.wipe_data_dir("n3").unwrap();
    let outcome = run_verify(&revision_env(&mut cluster, "n3").await, "10s");
    outcome.assert(1, "block", &format!("data dir lost: member {id} (n3)"));
    assert_eq!(
        outcome.report().data_lost_member(),
        Some(id),
        "{outcome:#?}"
    );
    assert_eq!(outcome.json["member_id"], id.to_string());
}

#[tokio::test]
async fn removed_member_data_is_archived_then_waits() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let old_id = cluster.member_id("n3").unwrap();
    cluster.stop("n3").unwrap();
    cluster.remove_member("n3").await.unwrap();
    let data_dir = cluster.data_dir("n3").unwrap();
    // The deadline leaves room for a loaded machine: archiving takes one look, and a second
    // look cut short by the deadline must still name what was awaited.
    let outcome = run_verify(&revision_env(&mut cluster, "n3").await, "4s");
    outcome.assert(
        1,
        "block",
        "waiting for the operator to add a member with peer URL",
    );
    assert!(
        outcome.reason().starts_with("timed out after 4s"),
        "{}",
        outcome.reason()
    );
    let archived = archived_dirs(&data_dir);
    assert_eq!(archived.len(), 1, "{archived:?}");
    assert_eq!(outcome.json["archived"], archived[0].display().to_string());
    assert!(!data_dir.join("member").exists());
    // The archive is the removed member's own data, identified by its WAL.
    let wal = etcd_verify::wal::read_identity(&archived[0].join("wal")).unwrap();
    assert_eq!(wal.member_id, old_id.get());
}

#[tokio::test]
async fn data_dir_from_another_cluster_is_archived() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let mut other = EtcdCluster::start(ClusterSpec::plain(1).with_token("another-cluster"))
        .await
        .unwrap();
    let id = cluster.add_learner("n4").await.unwrap();
    other.stop("n1").unwrap();
    let data_dir = cluster.data_dir("n4").unwrap();
    std::fs::rename(other.data_dir("n1").unwrap(), &data_dir).unwrap();
    let outcome = run_verify(&revision_env(&mut cluster, "n4").await, "10s");
    outcome.assert(0, "start", &format!("joining as unstarted learner {id}"));
    let archived = archived_dirs(&data_dir);
    assert_eq!(archived.len(), 1, "{archived:?}");
    assert_eq!(outcome.json["archived"], archived[0].display().to_string());
}

#[tokio::test]
async fn whole_cluster_down() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let envs = [
        revision_env(&mut cluster, "n1").await,
        revision_env(&mut cluster, "n2").await,
        revision_env(&mut cluster, "n3").await,
    ];
    let before = cluster.members().await.unwrap();
    for n in ["n1", "n2", "n3"] {
        cluster.stop(n).unwrap();
    }
    // Every endpoint of the revision is down: each node with its data dir may start.
    let mut all_endpoints = envs[0].clone();
    all_endpoints.insert(
        "ETCDCTL_ENDPOINTS".into(),
        cluster
            .client_urls()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
    );
    let outcome = run_verify(&all_endpoints, "10s");
    outcome.assert(0, "start", "whole cluster restarting");
    for env in &envs[1..] {
        run_verify(env, "10s").assert(0, "start", "whole cluster restarting");
    }
    for n in ["n1", "n2", "n3"] {
        cluster.restart(n).unwrap();
    }
    cluster.wait_writable().await.unwrap();
    let after = cluster.members().await.unwrap();
    assert_eq!(
        MemberIds::from_members(&before),
        MemberIds::from_members(&after)
    );

    // Without a data dir, nothing answering means retry, then block at the deadline.
    for n in ["n1", "n2", "n3"] {
        cluster.stop(n).unwrap();
    }
    cluster.wipe_data_dir("n1").unwrap();
    let outcome = run_verify(&envs[0], "1s");
    outcome.assert(1, "block", "no data dir to start from");
    assert!(outcome.reason().starts_with("timed out after 1s"));
}

/// Bad input: the exact error, exit code 2, JSON on stdout, nothing touched.
#[test]
fn bad_input_is_named_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let base: BTreeMap<String, String> = [
        ("ETCD_NAME", "n2"),
        ("ETCD_DATA_DIR", data_dir.to_str().unwrap()),
        ("ETCD_INITIAL_ADVERTISE_PEER_URLS", "http://127.0.0.2:2380"),
        ("ETCD_INITIAL_CLUSTER_STATE", "existing"),
        (
            "ETCD_INITIAL_CLUSTER",
            "n1=http://127.0.0.1:2380,n2=http://127.0.0.2:2380",
        ),
        (
            "ETCD_MEMBER_IDS",
            "a1=http://127.0.0.1:2380,b2=http://127.0.0.2:2380",
        ),
        ("ETCDCTL_ENDPOINTS", "http://127.0.0.1:2379"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let cases: Vec<(&str, Option<&str>, String)> = vec![
        ("ETCD_MEMBER_IDS", Some("a1=http://127.0.0.1:2380,0xb2=http://127.0.0.2:2380"),
         "invalid input: ETCD_MEMBER_IDS: entry 2 (\"0xb2=http://127.0.0.2:2380\"): member id \"0xb2\" is not lowercase hex (no 0x prefix, digits 0-9a-f only)".into()),
        ("ETCD_MEMBER_IDS", Some("a1=http://127.0.0.1:2380,a1=http://127.0.0.2:2380"),
         "invalid input: ETCD_MEMBER_IDS: entry 2 (\"a1=http://127.0.0.2:2380\"): duplicate key \"a1\"".into()),
        ("ETCD_INITIAL_CLUSTER", Some("n1=http://127.0.0.1:2380,,n2=http://127.0.0.2:2380"),
         "invalid input: ETCD_INITIAL_CLUSTER: entry 2 (\"\"): empty entry (stray comma?)".into()),
        ("ETCD_INITIAL_CLUSTER", Some("n1=http://127.0.0.1:2380, n2=http://127.0.0.2:2380"),
         "invalid input: ETCD_INITIAL_CLUSTER: entry 2 (\" n2=http://127.0.0.2:2380\"): contains whitespace".into()),
        ("ETCD_INITIAL_CLUSTER", Some("n1=127.0.0.1:2380,n2=http://127.0.0.2:2380"),
         "invalid input: ETCD_INITIAL_CLUSTER: entry 1 (\"n1=127.0.0.1:2380\"): URL \"127.0.0.1:2380\" is not an absolute URL: relative URL without a base".into()),
        ("ETCD_INITIAL_ADVERTISE_PEER_URLS", Some("http://127.0.0.2"),
         "invalid input: ETCD_INITIAL_ADVERTISE_PEER_URLS=\"http://127.0.0.2\": URL \"http://127.0.0.2\" has no explicit port".into()),
        ("ETCD_DATA_DIR", None, "invalid input: ETCD_DATA_DIR is not set".into()),
        ("ETCD_INITIAL_CLUSTER_STATE", Some("New"),
         "invalid input: ETCD_INITIAL_CLUSTER_STATE=\"New\": must be \"new\" or \"existing\"".into()),
        ("ETCDCTL_ENDPOINTS", Some(""), "invalid input: ETCDCTL_ENDPOINTS=\"\": must not be empty".into()),
        ("ETCDCTL_CACERT", Some("/nonexistent/ca.crt"),
         "invalid input: TLS must be configured with all three of ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY or none: ETCDCTL_CACERT set but ETCDCTL_CERT, ETCDCTL_KEY not".into()),
    ];
    for (var, value, expected) in cases {
        let mut env = base.clone();
        match value {
            Some(v) => env.insert(var.to_owned(), v.to_owned()),
            None => env.remove(var),
        };
        let outcome = run_verify(&env, "5s");
        assert_eq!(outcome.code, 2, "{var}={value:?}: {outcome:#?}");
        assert_eq!(outcome.json["decision"], "block");
        assert_eq!(outcome.reason(), expected, "{var}={value:?}");
        assert_eq!(
            outcome.stderr_last,
            format!("etcd-verify membership: block: {expected}")
        );
        assert!(!data_dir.exists(), "bad input must not touch the data dir");
    }

    // All three TLS variables set, one file missing.
    let mut env = base.clone();
    let ca = dir.path().join("ca.crt");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    env.insert("ETCDCTL_CACERT".into(), ca.display().to_string());
    env.insert("ETCDCTL_CERT".into(), "/nonexistent/client.crt".into());
    env.insert("ETCDCTL_KEY".into(), ca.display().to_string());
    let outcome = run_verify(&env, "5s");
    assert_eq!(outcome.code, 2);
    assert_eq!(
        outcome.reason(),
        "invalid input: ETCDCTL_CERT: cannot read /nonexistent/client.crt: No such file or directory (os error 2)"
    );
    // A key file that holds no key.
    env.insert("ETCDCTL_CERT".into(), ca.display().to_string());
    let outcome = run_verify(&env, "5s");
    assert_eq!(outcome.code, 2);
    assert_eq!(
        outcome.reason(),
        format!(
            "invalid input: ETCDCTL_KEY: {} is not a PEM file holding a PRIVATE KEY",
            ca.display()
        )
    );
}

/// The contract of member n2 of a two-member revision whose only endpoint `ep` answers nothing,
/// its data dir (absent) in `dir`.
fn unanswered_env(dir: &Path, ep: &str) -> BTreeMap<String, String> {
    [
        ("ETCD_NAME", "n2".to_owned()),
        ("ETCD_DATA_DIR", dir.join("data").display().to_string()),
        (
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            "http://127.0.0.2:2380".to_owned(),
        ),
        ("ETCD_INITIAL_CLUSTER_STATE", "existing".to_owned()),
        (
            "ETCD_INITIAL_CLUSTER",
            "n1=http://127.0.0.1:2380,n2=http://127.0.0.2:2380".to_owned(),
        ),
        (
            "ETCD_MEMBER_IDS",
            "a1=http://127.0.0.1:2380,b2=http://127.0.0.2:2380".to_owned(),
        ),
        ("ETCDCTL_ENDPOINTS", ep.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// No endpoint answers and there is no data dir: retry until the deadline, then block (exit 1),
/// naming each endpoint's failure.
#[test]
fn unreachable_endpoints_block_after_the_deadline() {
    let nobody = LoopbackAddr::acquire().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("http://{}:2379", nobody.ip());
    let env = unanswered_env(dir.path(), &ep);
    let started = std::time::Instant::now();
    let outcome = run_verify(&env, "1500ms");
    outcome.assert(
        1,
        "block",
        &format!("no etcd endpoint answered linearizable member list: {ep}"),
    );
    assert!(
        outcome.reason().starts_with("timed out after 1.5s"),
        "{}",
        outcome.reason()
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(6),
        "--timeout must bound the run"
    );
}

/// A broken TLS input must never open the gate. The base is a forged revision that blocks (exit
/// 1) with good TLS; each broken variant must be invalid input (exit 2) naming the variable, or,
/// for a CA that simply does not trust the servers, a block (exit 1) that says TLS failed. It
/// used to exit 0: a TLS failure at connect time read as "whole cluster restarting".
#[tokio::test]
async fn broken_tls_never_opens_the_gate() {
    let mut cluster = EtcdCluster::start(ClusterSpec::tls(3)).await.unwrap();
    let other = EtcdCluster::start(ClusterSpec::tls(1).with_token("other-pki"))
        .await
        .unwrap();
    let other_tls = other.client_tls().unwrap();
    // n3's member is removed while its etcd is stopped; its revision still lists it, and its data
    // dir still holds it, so without the membership check ("no endpoint answered") the gate
    // would start a removed member on its own data.
    let env = revision_env(&mut cluster, "n3").await;
    let removed = cluster.member_id("n3").unwrap();
    cluster.stop("n3").unwrap();
    cluster.remove_member("n3").await.unwrap();
    run_verify(&env, "10s").assert(1, "block", &format!("{removed}="));

    let dir = tempfile::tempdir().unwrap();
    let truncated = |var: &str| {
        let bytes = std::fs::read(&env[var]).unwrap();
        let path = dir.path().join(format!("{var}.truncated"));
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        path.display().to_string()
    };
    let invalid = [
        (
            "ETCDCTL_KEY",
            truncated("ETCDCTL_KEY"),
            "not a complete PEM private key",
        ),
        (
            "ETCDCTL_CERT",
            truncated("ETCDCTL_CERT"),
            "not a complete PEM certificate list",
        ),
        (
            "ETCDCTL_CACERT",
            truncated("ETCDCTL_CACERT"),
            "not a complete PEM certificate list",
        ),
        (
            "ETCDCTL_KEY",
            other_tls.key.display().to_string(),
            "does not belong to the certificate in ETCDCTL_CERT",
        ),
    ];
    for (var, path, why) in invalid {
        let mut broken = env.clone();
        broken.insert(var.into(), path.clone());
        let outcome = run_verify(&broken, "10s");
        outcome.assert(2, "block", &format!("{var}: {path}: {why}"));
    }
    // A complete, valid CA that did not sign the servers' certificates: the endpoints answer,
    // the handshake fails. Not "no endpoint answered": wait, then block.
    let mut foreign_ca = env.clone();
    foreign_ca.insert("ETCDCTL_CACERT".into(), other_tls.ca.display().to_string());
    run_verify(&foreign_ca, "3s").assert(1, "block", "TLS handshake failed");
    assert!(
        cluster.data_dir("n3").unwrap().join("member").is_dir(),
        "data must stay untouched"
    );
    assert!(archived_dirs(&cluster.data_dir("n3").unwrap()).is_empty());
}

/// Non-UTF-8 bytes in the environment: ignored in a variable verify does not read, named (exit 2)
/// in one it does. They used to panic (exit 101, no JSON line, no termination message).
#[test]
fn non_utf8_env_is_ignored_or_named_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let env: BTreeMap<String, String> = [
        ("ETCD_NAME", "n2"),
        ("ETCD_DATA_DIR", data_dir.to_str().unwrap()),
        ("ETCD_INITIAL_ADVERTISE_PEER_URLS", "http://127.0.0.2:2380"),
        ("ETCD_INITIAL_CLUSTER_STATE", "existing"),
        (
            "ETCD_INITIAL_CLUSTER",
            "n1=http://127.0.0.1:2380,n2=http://127.0.0.2:2380",
        ),
        (
            "ETCD_MEMBER_IDS",
            "a1=http://127.0.0.1:2380,b2=http://127.0.0.2:2380",
        ),
        // Nothing listens here: the run ends at the deadline.
        ("ETCDCTL_ENDPOINTS", "http://127.0.99.254:2379"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let bad = || OsString::from_vec(vec![b'n', 0xff, b'2']);
    let unrelated = [(OsString::from("SOME_OTHER_VAR"), bad())];
    let outcome = run_verify_with(&env, &unrelated, "1s");
    outcome.assert(1, "block", "timed out after 1s");
    let mut without_name = env.clone();
    without_name.remove("ETCD_NAME");
    let named = [(OsString::from("ETCD_NAME"), bad())];
    let outcome = run_verify_with(&without_name, &named, "1s");
    outcome.assert(2, "block", "invalid input: ETCD_NAME is not valid UTF-8");
    assert!(!data_dir.exists(), "bad input must not touch the data dir");
}

/// Runs the binary with `args` after `membership` and returns exit code, stdout and the
/// termination message.
fn run_raw(args: &[&str], env: &BTreeMap<String, String>) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let termination = dir.path().join("termination-log");
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-verify"))
        .arg("membership")
        .args(args)
        .arg("--termination-log")
        .arg(&termination)
        .env_clear()
        .envs(env)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        std::fs::read_to_string(&termination).unwrap_or_default(),
    )
}

/// Flag errors are invalid input like bad env: exit 2 with the JSON line (also in the
/// termination message). Durations too large to add to a clock used to panic.
#[test]
fn flag_errors_print_the_json_line_and_exit_2() {
    let env = BTreeMap::new();
    for (args, reason_part) in [
        (
            vec!["--timeout", "18446744073709551615s"],
            "invalid duration",
        ),
        (
            vec!["--call-timeout", "99999999999999999999h"],
            "invalid duration",
        ),
        (vec!["--no-such-flag"], "--no-such-flag"),
    ] {
        let (code, stdout, termination) = run_raw(&args, &env);
        assert_eq!(code, 2, "{args:?}: {stdout}");
        assert_eq!(stdout.lines().count(), 1, "{args:?}: {stdout:?}");
        let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(json["decision"], "block");
        let reason = json["reason"].as_str().unwrap();
        assert!(reason.starts_with("invalid input: "), "{reason}");
        assert!(reason.contains(reason_part), "{args:?}: {reason}");
        assert_eq!(termination.trim(), stdout.trim(), "{args:?}");
    }
}

/// However long the input quoted in the reason, the JSON line fits the 4096 bytes the kubelet
/// keeps of a termination message, and stays valid JSON.
#[test]
fn the_json_line_fits_a_termination_message() {
    let huge = format!(
        "a1=http://127.0.0.1:2380,0x{}=http://127.0.0.2:2380",
        "b\"é".repeat(30_000)
    );
    let env: BTreeMap<String, String> = [
        ("ETCD_NAME", "n2"),
        ("ETCD_DATA_DIR", "/nonexistent/data"),
        ("ETCD_INITIAL_ADVERTISE_PEER_URLS", "http://127.0.0.2:2380"),
        ("ETCD_INITIAL_CLUSTER_STATE", "existing"),
        (
            "ETCD_INITIAL_CLUSTER",
            "n1=http://127.0.0.1:2380,n2=http://127.0.0.2:2380",
        ),
        ("ETCD_MEMBER_IDS", huge.as_str()),
        ("ETCDCTL_ENDPOINTS", "http://127.0.0.1:2379"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let (code, stdout, termination) = run_raw(&["--timeout", "1s"], &env);
    assert_eq!(code, 2);
    let line = stdout.trim_end_matches('\n');
    assert!(line.len() <= 4096, "JSON line of {} bytes", line.len());
    assert!(
        termination.len() <= 4096,
        "termination message of {} bytes",
        termination.len()
    );
    let json: serde_json::Value = serde_json::from_str(line).unwrap();
    let reason = json["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("invalid input: ETCD_MEMBER_IDS: entry 2"),
        "{reason}"
    );
    assert!(reason.ends_with("[truncated]"), "{reason}");
}

/// The kubelet stops a pod with SIGTERM: etcd-verify, waiting for the cluster, must stop at once
/// (as the container's PID 1 it would otherwise hold the pod for the whole grace period) and
/// never with exit 0.
#[test]
fn sigterm_while_waiting_blocks_at_once() {
    use std::io::BufRead;
    let nobody = LoopbackAddr::acquire().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("http://{}:2379", nobody.ip());
    let env = unanswered_env(dir.path(), &ep);
    let mut child = Command::new(env!("CARGO_BIN_EXE_etcd-verify"))
        .args(["membership", "--timeout=60s"])
        .env_clear()
        .envs(&env)
        .env("ETCD_VERIFY_LOG", "debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its first log line says the gate runs, with the handlers installed.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(!first.is_empty(), "etcd-verify logged nothing");
    let sent = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < std::time::Duration::from_secs(5),
        "took {:?} to stop",
        sent.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["decision"], "block");
    assert!(
        json["reason"]
            .as_str()
            .unwrap()
            .contains("stopped by SIGTERM"),
        "{json}"
    );
}

/// This node's private key must be readable by its owner only, and no other member's key may lie
/// beside it (a node holds only its own identity): each is a block (exit 2) naming the file,
/// before etcd is asked anything.
#[tokio::test]
async fn loose_key_permissions_or_another_members_key_block() {
    use std::os::unix::fs::PermissionsExt;
    let mut cluster = EtcdCluster::start(ClusterSpec::tls(2)).await.unwrap();
    let env = revision_env(&mut cluster, "n2").await;
    let key = std::path::PathBuf::from(&env["ETCDCTL_KEY"]);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let outcome = run_verify(&env, "5s");
    assert_eq!(outcome.code, 2, "{outcome:?}");
    assert!(
        outcome.reason().contains("mode 0644") && outcome.reason().contains(&env["ETCDCTL_KEY"]),
        "{}",
        outcome.reason()
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let foreign = key.with_file_name("etcd-peer-n1.key");
    std::fs::write(&foreign, b"-----BEGIN PRIVATE KEY-----\n").unwrap();
    let outcome = run_verify(&env, "5s");
    assert_eq!(outcome.code, 2, "{outcome:?}");
    assert!(
        outcome.reason().contains("etcd-peer-n1.key")
            && outcome.reason().contains("another member's private key"),
        "{}",
        outcome.reason()
    );
    std::fs::remove_file(&foreign).unwrap();
    run_verify(&env, "10s").assert(0, "start", "");
}

/// The bootstrap manifest of node n1 (a new cluster, token `etcd-t1`) whose only endpoint `ep`
/// answers nothing, its data dir in `dir/data`.
/// The bootstrap manifest starts a new cluster once, and marks the data dir. When the member
/// data is gone later (the manifest stays in place for good on a 1- or 2-node control plane),
/// the same manifest must not start a second, empty cluster with the lost one's ids: it blocks
/// as "data dir lost" for the member the bootstrap made, so the operator can replace it where
/// other members run. A kept-aside `member-archived-*` shows the same.
#[test]
fn a_lost_data_dir_on_the_bootstrap_manifest_blocks_instead_of_a_new_cluster() {
    let nobody = LoopbackAddr::acquire().unwrap();
    let ep = format!("http://{}:2379", nobody.ip());
    let member = membership::new_cluster_member_id(&["http://127.0.0.1:2380"], "etcd-t1").unwrap();
    let first = tempfile::tempdir().unwrap();
    let env = bootstrap_env(first.path(), &ep);
    run_verify(&env, "3s").assert(0, "start", "bootstrapping a new cluster");
    let mark = std::fs::read_to_string(
        first
            .path()
            .join("data")
            .join("bootstrapped-by-etcd-verify"),
    )
    .unwrap();
    assert!(
        mark.contains("cluster token etcd-t1") && mark.contains(&format!("member {member}")),
        "{mark}"
    );
    // etcd ran and its member data is gone now: blocked, naming the member.
    let again = run_verify(&env, "3s");
    again.assert(
        1,
        "block",
        "data dir lost: this node bootstrapped its cluster before",
    );
    assert_eq!(again.json["member_id"], member.to_string(), "{again:#?}");
    assert_eq!(
        again.report().data_lost_member(),
        Some(member),
        "{again:#?}"
    );
    assert!(
        again.reason().contains("etcd-recover from-snapshot"),
        "{again:#?}"
    );

    // No mark, but member data kept aside by an earlier archive: the same.
    let second = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(second.path().join("data/member-archived-20260101T000000Z")).unwrap();
    let env = bootstrap_env(second.path(), &ep);
    run_verify(&env, "3s").assert(1, "block", "member-archived-20260101T000000Z");
}
