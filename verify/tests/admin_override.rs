//! The admin override of `etcd-verify membership` (#65, item 5), run as the real binary against
//! real etcd data: `<state dir>/start-anyway` lets a blocked member start once on its own data,
//! is set aside when used, is refused where starting would lose committed writes, and the start
//! records it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use etcd_fixture::{ClusterSpec, EtcdCluster, LoopbackAddr};

mod common;
use common::{Outcome, bootstrap_env, run_verify_in};

const FILE: &str = "start-anyway";

fn run(env: &BTreeMap<String, String>, state: &Path, timeout: &str) -> Outcome {
    let flag = format!("--state-dir={}", state.display());
    run_verify_in(env, &[], &[&flag], timeout)
}

/// The names in `state` that start with `start-anyway`, sorted.
fn override_files(state: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(FILE))
        .collect();
    names.sort();
    names
}

fn write_override(state: &Path, text: &str) -> PathBuf {
    let path = state.join(FILE);
    std::fs::write(&path, text).unwrap();
    path
}

/// A revision whose `ETCD_MEMBER_IDS` names another id for n1's URL than n1's data holds, with
/// the whole cluster down: the gate cannot confirm the start and blocks at its deadline, where
/// plain etcd would restart from its WAL. The override starts it once; the next start meets
/// the gate again; etcd then really runs on that data.
#[tokio::test]
async fn an_override_starts_a_blocked_member_on_its_own_data_once() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let mut env = cluster.revision_env("n1").await.unwrap();
    let own = cluster.member_id("n1").unwrap();
    let ids = env["ETCD_MEMBER_IDS"].replace(&format!("{own}="), "1=");
    assert_ne!(ids, env["ETCD_MEMBER_IDS"], "{env:?}");
    env.insert("ETCD_MEMBER_IDS".into(), ids);
    for n in ["n1", "n2", "n3"] {
        cluster.stop(n).unwrap();
    }
    let state = tempfile::tempdir().unwrap();

    let blocked = run(&env, state.path(), "2s");
    blocked.assert(1, "block", "cannot confirm it is safe to start");
    assert!(blocked.json.get("overridden").is_none(), "{blocked:#?}");

    write_override(
        state.path(),
        "\n  INC-42: the revision is wrong, n1's data is good  \n",
    );
    let started = run(&env, state.path(), "10s");
    started.assert(0, "start", "admin override");
    assert!(
        started
            .reason()
            .contains(&format!("starting on the data dir's own member {own}")),
        "{started:#?}"
    );
    let record = started.json["overridden"].as_str().unwrap_or_default();
    assert!(
        record.contains("INC-42: the revision is wrong, n1's data is good")
            && record.contains(FILE),
        "{started:#?}"
    );
    assert_eq!(
        started.report().overridden.as_deref(),
        Some(record),
        "the operator reads the record from the termination message"
    );
    let files = override_files(state.path());
    assert!(
        files.len() == 1 && files[0].starts_with("start-anyway.used-"),
        "used once, set aside: {files:?}"
    );

    run(&env, state.path(), "2s").assert(1, "block", "cannot confirm it is safe to start");

    for n in ["n1", "n2", "n3"] {
        cluster.restart(n).unwrap();
    }
    cluster.wait_writable().await.unwrap();
    assert_eq!(cluster.member_id("n1").unwrap(), own);
}

/// A started member whose data dir is gone, on a revision of an existing cluster: etcd would
/// rejoin with an empty log. The override is refused, says why, and stays for the admin to
/// remove.
#[tokio::test]
async fn no_override_starts_a_member_without_its_data() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let env = cluster.revision_env("n3").await.unwrap();
    cluster.stop("n3").unwrap();
    cluster.wipe_data_dir("n3").unwrap();
    let state = tempfile::tempdir().unwrap();
    write_override(state.path(), "INC-43: start it");
    let outcome = run(&env, state.path(), "10s");
    outcome.assert(1, "block", "the admin override was not used");
    assert!(
        outcome.reason().contains("data dir lost") && outcome.reason().contains("etcd-recover"),
        "{outcome:#?}"
    );
    assert_eq!(override_files(state.path()), [FILE]);
}

/// The bootstrap render of a one-node cluster whose data is gone for good (not merely
/// unmounted: the admin checked): the override starts a new, empty cluster and marks it anew.
/// An override without a reason is not used.
#[test]
fn on_the_bootstrap_render_the_override_gives_up_the_lost_cluster() {
    let nobody = LoopbackAddr::acquire().unwrap();
    let ep = format!("http://{}:2379", nobody.ip());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let env = bootstrap_env(dir.path(), &ep);
    run(&env, &state, "3s").assert(0, "start", "bootstrapping a new cluster");
    let lost = run(&env, &state, "3s");
    lost.assert(1, "block", "data dir lost");

    write_override(&state, "   \n\n");
    let empty = run(&env, &state, "3s");
    empty.assert(
        1,
        "block",
        "is empty: write why etcd must start past the gate",
    );
    assert_eq!(override_files(&state), [FILE]);

    write_override(&state, "INC-44: the disk died, no backup; start empty");
    let started = run(&env, &state, "3s");
    started.assert(0, "start", "bootstrapping a new, empty cluster");
    assert!(
        started.json["overridden"]
            .as_str()
            .is_some_and(|r| r.contains("INC-44")),
        "{started:#?}"
    );
    let mark = std::fs::read_to_string(state.join("bootstrapped-by-etcd-verify")).unwrap();
    assert!(mark.contains("cluster token etcd-t1"), "{mark}");
}
