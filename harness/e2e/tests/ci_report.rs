//! `scripts/ci-report`, the table at the end of every CI log (issue 64): run on a recorded run
//! it prints the phases in the order they started, the longest tests with their phase, and each
//! family against its budget; a malformed record is named, and the committed budget table parses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the report on `times` (with `budget` as its table when given): exit code and stderr.
fn report(times: &Path, budget: Option<&Path>) -> (i32, String) {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("scripts/ci-report")).arg(times);
    cmd.env_remove("CI_BUDGET");
    if let Some(b) = budget {
        cmd.env("CI_BUDGET", b);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn junit(cases: &[(&str, &str, f64, bool)]) -> String {
    let mut xml = String::from("<?xml version=\"1.0\"?>\n<testsuites name=\"nextest-run\">\n");
    for (binary, name, secs, failed) in cases {
        let body = if *failed {
            "<failure type=\"test failure\">boom</failure>"
        } else {
            ""
        };
        xml.push_str(&format!(
            "<testsuite name=\"{binary}\"><testcase name=\"{name}\" classname=\"{binary}\" \
             time=\"{secs}\">{body}</testcase></testsuite>\n"
        ));
    }
    xml + "</testsuites>\n"
}

const BUDGET: &str = "\
Some prose.

| family | counts | budget (s) |
|---|---|---|
| whole | `total` | 1000 |
| checks | `phases ^(fmt\\|clippy)` | 10 |
| stacked | `tests ^e2e::scenarios (quorum\\|api)` | 100 |
| scenarios | `tests ^e2e::` | 1000 |
| unit | `tests rest` | 50 |

Not part of the table.
";

#[test]
fn the_report_orders_phases_ranks_tests_and_checks_each_family() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("phases.tsv"),
        "0\tfmt\t100\t101\tok\n\
         1\t[3/4] tests\t130\t230\tok\n\
         0\tclippy\t101\t121\tok\n\
         0\ttests (scripts/test)\t121\t400\tfailed\n",
    )
    .unwrap();
    let mut cases = vec![
        ("e2e::scenarios", "api_availability", 90.0, false),
        ("e2e::scenarios", "quorum_loss", 30.5, true),
        ("e2e::scenarios", "bootstrap", 20.0, false),
        ("etcd-membership", "gate::tests::a", 40.0, false),
    ];
    let names: Vec<String> = (0..14).map(|i| format!("tiny_{i:02}")).collect();
    for n in &names {
        cases.push(("etcd-verify", n, 0.5, false));
    }
    std::fs::write(dir.path().join("junit-3-4.xml"), junit(&cases)).unwrap();
    let budget = dir.path().join("budget.md");
    std::fs::write(&budget, BUDGET).unwrap();

    let (code, out) = report(dir.path(), Some(&budget));
    assert_eq!(code, 0, "{out}");
    let at = |needle: &str| {
        out.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in:\n{out}"))
    };
    // Phases by start: fmt, clippy, tests, and the test phase indented under tests.
    assert!(at("  fmt") < at("  clippy") && at("  clippy") < at("tests (scripts/test)  [failed]"));
    assert!(
        at("tests (scripts/test)") < at("        [3/4] tests"),
        "{out}"
    );
    assert!(out.contains("   300.0 s 100.0%  total (5.0 min)"), "{out}");
    // The 15 longest of 18, longest first, with their phase; the three shortest left out.
    assert!(out.contains("the 15 longest of 18 tests run"), "{out}");
    assert!(at("[3/4] e2e::scenarios api_availability") < at("[3/4] etcd-membership gate"));
    assert!(
        out.contains("[3/4] e2e::scenarios quorum_loss  [FAILED]"),
        "{out}"
    );
    assert_eq!(out.matches("etcd-verify tiny_").count(), 11, "{out}");
    // Families: the first matching test family takes a test, `rest` the others.
    for line in [
        "   300.0 /   1000 s wall  whole",
        "    21.0 /     10 s wall  checks  OVER BUDGET",
        "   120.5 /    100 test-s  stacked (2 tests)  OVER BUDGET",
        "    20.0 /   1000 test-s  scenarios (1 tests)",
        "    47.0 /     50 test-s  unit (15 tests)",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    assert!(out.contains("2 families are OVER BUDGET"), "{out}");
}

#[test]
fn a_malformed_record_is_named_and_nothing_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("phases.tsv"), "0\tfmt\t100\n").unwrap();
    let (code, out) = report(dir.path(), None);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("phases.tsv:1: expected 5 tab-separated fields, got 3"),
        "{out}"
    );
    assert!(!out.contains("where the time went"), "{out}");
}

#[test]
fn the_committed_budget_table_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = report(dir.path(), None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no test durations recorded"), "{out}");
    for family in [
        "whole `.ci/run`",
        "install",
        "images stage",
        "realistic-shape scenarios",
        "fault campaign",
        "etcd upgrade chain",
        "real-kubelet tests",
        "unit and API-level tests",
    ] {
        assert!(out.contains(family), "{family} missing:\n{out}");
    }
}
