//! What a platform installs from `monitoring/` (issue 35, part 5): the kustomization builds with
//! kubectl's own kustomize into the objects it names; the Grafana dashboard is valid JSON whose
//! every query is valid PromQL (promtool parses it); and the dashboard and the alert rules name
//! only metrics that exist: the operator's (its registry, as `/metrics` serves it) or etcd's (a
//! real three-member etcd's `/metrics`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use etcd_fixture::{ClusterSpec, EtcdCluster};
use serde_json::Value;

#[path = "support/kubectl.rs"]
mod support;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

const DASHBOARD: &str = "monitoring/dashboards/etcd-static-operator.json";
const RULES: &str = "monitoring/prometheus-rules.yaml";

/// Grafana's interval variables, as a concrete duration for promtool; any other `$` in a query
/// is a variable the dashboard does not define.
fn concrete(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// Every panel's queries (rows hold none).
fn queries(d: &Value) -> Vec<(String, String)> {
    let panels = d["panels"].as_array().expect("panels");
    panels
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or("?").to_owned();
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap_or("").to_owned()))
        })
        .collect()
}

#[test]
fn the_dashboard_shows_what_the_issue_asks_for() {
    let d = dashboard();
    assert_eq!(d["uid"], "etcd-static-operator");
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource"], "the dashboard's variables");
    let ids: Vec<u64> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().expect("every panel has an id"))
        .collect();
    assert_eq!(
        ids.len(),
        ids.iter().collect::<BTreeSet<_>>().len(),
        "panel ids repeat: {ids:?}"
    );
    let q = queries(&d);
    let all: String = q
        .iter()
        .map(|(_, e)| e.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for metric in [
        "etcd_server_is_leader",
        "etcd_server_is_learner",
        "etcd_server_has_leader",
        "etcd_operator_members",
        "etcd_mvcc_db_total_size_in_bytes",
        "etcd_operator_node_current_revision",
        "etcd_operator_gate_denials_total",
        "etcd_operator_backup_last_success_timestamp_seconds",
        "etcd_operator_certificate_expiry_timestamp_seconds",
    ] {
        assert!(all.contains(metric), "no panel shows {metric}");
    }
    for (title, expr) in &q {
        assert!(
            !expr.trim().is_empty(),
            "panel {title:?} has an empty query"
        );
        assert!(
            !concrete(expr).contains('$'),
            "panel {title:?} uses an undefined variable: {expr}"
        );
    }
}

/// `promtool check rules` on the dashboard's queries as recording rules: it parses each one.
#[test]
fn every_dashboard_query_is_valid_promql() {
    let Ok(promtool) = which("promtool") else {
        eprintln!(
            "SKIPPED: promtool not found (scripts/install-deps installs Debian's prometheus)"
        );
        return;
    };
    let mut rules = String::from("groups:\n- name: dashboard\n  rules:\n");
    for (i, (_, expr)) in queries(&dashboard()).iter().enumerate() {
        let quoted = serde_json::to_string(&concrete(expr)).unwrap();
        rules.push_str(&format!(
            "  - record: dashboard:query_{i}\n    expr: {quoted}\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard-rules.yaml");
    std::fs::write(&file, &rules).unwrap();
    let out = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules refused a dashboard query:\n{}{}\n{rules}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn which(name: &str) -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name} is not on PATH"))
}

/// The metric names a Prometheus scrape of `text` yields (histograms' and counters' series too).
fn exported(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["", "_total"],
                "histogram" => &["", "_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#')
            && let Some(name) = line.split(['{', ' ']).next().filter(|n| !n.is_empty())
        {
            names.insert(name.to_owned());
        }
    }
    names
}

/// The `etcd_*` metric names an expression uses (quoted label values left out).
fn etcd_metrics_in(expr: &str) -> BTreeSet<String> {
    let unquoted: String = expr.split('"').step_by(2).collect::<Vec<_>>().join(" ");
    unquoted
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .map(|t| t.trim_end_matches(':'))
        .filter(|t| t.starts_with("etcd_"))
        .map(str::to_owned)
        .collect()
}

/// `GET /metrics` over plain HTTP/1.0 (the fixture's plain cluster serves it on the client URL).
fn scrape(host_port: &str) -> String {
    let mut s = std::net::TcpStream::connect(host_port).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {host_port}\r\n\r\n").as_bytes())
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body:.200}"
    );
    body
}

/// What etcd exports: a real three-member cluster (peers, a leader, some writes) of the
/// fixture's etcd, which is the project's default etcd version.
async fn etcd_metrics() -> BTreeSet<String> {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    let client = cluster.client().unwrap();
    client.put("monitoring-test", b"x".to_vec()).await.unwrap();
    let url = cluster.client_urls()[0].to_string();
    let host_port = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    tokio::task::spawn_blocking(move || exported(&scrape(&host_port)))
        .await
        .unwrap()
}

/// Each `etcd_*` name in the dashboard and the alert rules is one the operator or etcd exports:
/// a renamed metric would leave a panel empty or an alert silent, and nothing else would say so.
#[tokio::test]
async fn the_dashboard_and_the_alerts_name_only_exported_metrics() {
    let operator = operator_metrics();
    assert!(
        operator.contains("etcd_operator_gate_denials_total"),
        "{operator:?}"
    );
    let etcd = etcd_metrics().await;
    assert!(etcd.contains("etcd_server_is_leader"), "{etcd:?}");
    let mut used: Vec<(String, String)> = queries(&dashboard())
        .into_iter()
        .map(|(title, e)| (format!("{DASHBOARD} panel {title:?}"), e))
        .collect();
    used.push((RULES.to_owned(), read(RULES)));
    let unknown: Vec<String> = used
        .iter()
        .flat_map(|(what, e)| etcd_metrics_in(e).into_iter().map(move |m| (what, m)))
        .filter(|(_, m)| !operator.contains(m) && !etcd.contains(m))
        .map(|(what, m)| format!("{what}: {m}"))
        .collect();
    assert!(
        unknown.is_empty(),
        "metrics nobody exports:\n{}",
        unknown.join("\n")
    );
}

/// Every metric the operator exports. A family shows in `/metrics` only once it has a series,
/// so each gets one here; the count of `# TYPE` lines must then be the count of metrics
/// `metrics/register.rs` registers, or a family was added without a series below.
fn operator_metrics() -> BTreeSet<String> {
    use etcd_operator::metrics::*;
    let m = Metrics::new();
    let s = || "x".to_owned();
    m.time("x");
    m.error("x", etcd_operator::category::Category::Etcd);
    m.health_check(true);
    m.condition("x", "True");
    m.gate_denials.get_or_create(&RuleLabel { rule: s() }).inc();
    m.membership_changes
        .get_or_create(&ActionLabel { action: s() })
        .inc();
    m.members
        .get_or_create(&MemberRoleLabels {
            role: s(),
            healthy: s(),
        })
        .set(1);
    m.node_current_revision
        .get_or_create(&NodeLabel { node: s() })
        .set(1);
    m.node_equivalent_revision
        .get_or_create(&NodeLabel { node: s() })
        .set(1);
    let member = MemberLabel { member: s() };
    for f in [
        &m.learner_age_seconds,
        &m.learner_raft_index,
        &m.learner_standby,
        &m.serving_certificate_expiry,
        &m.member_db_size,
        &m.member_db_size_in_use,
        &m.defrag_last_success,
    ] {
        f.get_or_create(&member).set(1);
    }
    m.certificate_expiry
        .get_or_create(&CertLabels {
            secret_key: s(),
            node: s(),
        })
        .set(1);
    m.consumer_reload_pending
        .get_or_create(&ConsumerLabel { consumer: s() })
        .set(1);
    for f in [&m.defragmentations, &m.corruption_checks, &m.backups] {
        f.get_or_create(&ResultLabel { result: s() }).inc();
    }
    m.member_version
        .get_or_create(&MemberVersionLabels {
            member: s(),
            version: s(),
        })
        .set(1);
    m.cluster_version
        .get_or_create(&VersionLabel { version: s() })
        .set(1);
    let text = m.encode();
    let registered = read("operator/src/metrics/register.rs")
        .matches("registry.register(")
        .count();
    let typed = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(
        typed, registered,
        "a metric family has no series in operator_metrics():\n{text}"
    );
    exported(&text)
}

/// `kubectl kustomize monitoring/` builds, into exactly the objects a platform expects.
#[test]
fn the_monitoring_kustomization_builds() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(built) = support::kustomize(&repo().join("monitoring"), tmp.path()) else {
        return;
    };
    let text = built.unwrap_or_else(|e| panic!("{e}"));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("kustomize output is not YAML: {e}\n{text}"));
    let mut objects: Vec<String> = docs
        .iter()
        .map(|v| {
            format!(
                "{} {}/{}",
                v["kind"].as_str().unwrap_or("?"),
                v["metadata"]["namespace"].as_str().unwrap_or("-"),
                v["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect();
    objects.sort();
    assert_eq!(
        objects,
        [
            "ConfigMap etcd-operator/etcd-static-operator-dashboard",
            "PodMonitor etcd-operator/etcd",
            "PrometheusRule etcd-operator/etcd-static-operator",
            "PrometheusRule etcd-operator/etcd-static-operator-etcd",
            "Service etcd-operator/etcd-operator-metrics",
            "ServiceMonitor etcd-operator/etcd-operator",
        ]
    );
    assert!(
        text.contains("grafana_dashboard: \"1\""),
        "the dashboard ConfigMap's label"
    );
    // `kubectl apply -k monitoring/ -l 'etcd-static-operator.io/alerts!=etcd'` (a platform whose
    // etcd-mixin alerts already watch etcd) leaves out exactly the alerts on etcd's own metrics.
    let etcd_alerts: Vec<&str> = docs
        .iter()
        .filter(|v| v["metadata"]["labels"]["etcd-static-operator.io/alerts"] == "etcd")
        .filter_map(|v| v["metadata"]["name"].as_str())
        .collect();
    assert_eq!(etcd_alerts, ["etcd-static-operator-etcd"]);
    let etcd_rule = docs
        .iter()
        .find(|v| v["metadata"]["name"] == "etcd-static-operator-etcd")
        .unwrap();
    let groups: Vec<&str> = etcd_rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(groups, ["etcd-static-operator.etcd"]);
}
