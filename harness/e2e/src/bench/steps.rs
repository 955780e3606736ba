//! Where one node's rollout step goes, from the logs the step leaves: the operator's
//! `installing revision R on <node>` line (the start), the old etcd's `received signal` and
//! `closed etcd server` (its graceful stop), the new etcd's first line and its first `serving
//! client traffic` (its start), and the operator's first line after that which is not about
//! waiting for this node (it noticed). etcd's own stop and start are etcd's floor; the rest
//! (installer and manifest pick-up, the node's verify gate and container start, the operator
//! noticing) is the step's overhead, the "step minus etcd's own restart".

use std::path::Path;

use time::PrimitiveDateTime;
use time::macros::format_description;

/// One node's step, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RolloutStep {
    pub node: String,
    pub revision: i64,
    /// Install decided → old etcd got SIGTERM (installer pod, files, manifest, pick-up).
    pub to_sigterm_ms: f64,
    /// etcd's graceful stop (SIGTERM → closed).
    pub etcd_stop_ms: f64,
    /// Old etcd closed → new etcd's first line (kill, `etcd-verify`, container start).
    pub gate_ms: f64,
    /// etcd's start (first line → serving clients).
    pub etcd_start_ms: f64,
    /// Serving → the operator's next decision.
    pub noticed_ms: Option<f64>,
    pub step_ms: Option<f64>,
    /// Step minus etcd's own stop and start.
    pub overhead_ms: Option<f64>,
}

/// How much earlier than the operator's install line the old etcd may have been signalled.
const SLACK_MS: f64 = 300.0;

/// Milliseconds since an arbitrary origin, from the formats in these logs: the operator's
/// `2026-11-25T11:02:30.454513Z`, etcd's JSON `"ts":"2026-11-25T11:02:30.523Z"` and its flag
/// lines `2026-11-25 11:02:31.622899 I | ...` (all UTC).
fn ms(stamp: &str) -> Option<f64> {
    let iso = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond]");
    let flags = format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond]");
    let s = stamp.trim_end_matches('Z');
    let t = PrimitiveDateTime::parse(s, &iso)
        .or_else(|_| PrimitiveDateTime::parse(s, &flags))
        .ok()?;
    Some((t.assume_utc().unix_timestamp_nanos() / 1_000) as f64 / 1000.0)
}

/// The time of an etcd log line (JSON or flag line).
fn etcd_line_ms(line: &str) -> Option<f64> {
    if let Some(rest) = line.split("\"ts\":\"").nth(1) {
        return ms(rest.split('"').next()?);
    }
    ms(line.get(..26)?)
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One etcd container's log: when it started, was signalled, closed, first served.
#[derive(Clone, Debug, Default)]
struct EtcdRun {
    first: Option<f64>,
    signal: Option<f64>,
    closed: Option<f64>,
    serving: Option<f64>,
}

fn etcd_run(text: &str) -> EtcdRun {
    let mut r = EtcdRun::default();
    for line in text.lines() {
        let Some(t) = etcd_line_ms(line) else {
            continue;
        };
        r.first.get_or_insert(t);
        if line.contains("received signal; shutting down") {
            r.signal.get_or_insert(t);
        } else if line.contains("closed etcd server") {
            r.closed.get_or_insert(t);
        } else if line.contains("serving client traffic") {
            r.serving.get_or_insert(t);
        }
    }
    r
}

/// Every etcd container log of a node (`var/log/pods/etcd_etcd-<node>_*/etcd/*.log`).
/// Of the runs whose time `at` is at or after `bound`, the one where it is earliest.
fn earliest_from(
    runs: &[EtcdRun],
    at: impl Fn(&EtcdRun) -> Option<f64>,
    bound: f64,
) -> Option<&EtcdRun> {
    runs.iter()
        .filter_map(|r| at(r).filter(|t| *t >= bound).map(|t| (t, r)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, r)| r)
}

fn etcd_runs(node_root: &Path, node: &str) -> Vec<EtcdRun> {
    let dir = node_root.join("var/log/pods");
    let prefix = format!("etcd_etcd-{node}_");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut runs = Vec::new();
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let Ok(logs) = std::fs::read_dir(e.path().join("etcd")) else {
            continue;
        };
        for l in logs.flatten() {
            if let Ok(text) = std::fs::read_to_string(l.path()) {
                runs.push(etcd_run(&text));
            }
        }
    }
    runs
}

/// The operator's log lines as (ms, message).
fn operator_lines(log: &str) -> Vec<(f64, String)> {
    log.lines()
        .filter_map(|l| {
            let l = strip_ansi(l);
            let (stamp, rest) = l.split_once(' ')?;
            let t = ms(stamp)?;
            // `LEVEL [span{..}: ]etcd_operator::module: message`
            let from_target = rest.find("etcd_operator").map_or(rest, |i| &rest[i..]);
            let msg = from_target
                .split_once(": ")
                .map_or(from_target, |(_, m)| m)
                .trim();
            Some((t, msg.to_owned()))
        })
        .collect()
}

/// The steps of every `installing revision R on <node>` in `operator_log` at or after
/// `since_ms` (an empty list when the logs do not show them), reading each node's etcd logs
/// under `node_root(node)`.
pub fn rollout_steps(
    operator_log: &str,
    since_ms: f64,
    node_root: impl Fn(&str) -> Option<std::path::PathBuf>,
) -> Vec<RolloutStep> {
    let lines = operator_lines(operator_log);
    let mut steps = Vec::new();
    for (i, (t0, msg)) in lines.iter().enumerate() {
        let Some(rest) = msg.strip_prefix("installing revision ") else {
            continue;
        };
        if *t0 < since_ms {
            continue;
        }
        let mut words = rest.split_whitespace();
        let revision: i64 = words.next().and_then(|r| r.parse().ok()).unwrap_or(0);
        let node = match (words.next(), words.next()) {
            (Some("on"), Some(n)) => n.to_owned(),
            _ => continue,
        };
        let Some(root) = node_root(&node) else {
            continue;
        };
        let runs = etcd_runs(&root, &node);
        // The run stopped by this step, and the one started after it. The line is logged
        // right after the installer pod was created, and a quick installer may already have
        // replaced the manifest by then: allow for that.
        let Some(old) = earliest_from(&runs, |r| r.signal, *t0 - SLACK_MS) else {
            continue;
        };
        let (Some(signal), Some(closed)) = (old.signal, old.closed) else {
            continue;
        };
        let Some(new) = earliest_from(&runs, |r| r.first, closed) else {
            continue;
        };
        let (Some(first), Some(serving)) = (new.first, new.serving) else {
            continue;
        };
        let waiting = format!("{node}: ");
        let noticed = lines[i + 1..]
            .iter()
            .find(|(t, m)| *t >= serving && !m.starts_with(&waiting))
            .map(|(t, _)| *t);
        let own = (closed - signal) + (serving - first);
        steps.push(RolloutStep {
            node,
            revision,
            to_sigterm_ms: signal - t0,
            etcd_stop_ms: closed - signal,
            gate_ms: first - closed,
            etcd_start_ms: serving - first,
            noticed_ms: noticed.map(|n| n - serving),
            step_ms: noticed.map(|n| n - t0),
            overhead_ms: noticed.map(|n| n - t0 - own),
        });
    }
    steps
}

/// Now, in the scale of [`rollout_steps`].
pub fn now_ms() -> f64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_step_is_split_into_etcds_own_time_and_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let pods = dir.path().join("var/log/pods");
        let old = pods.join("etcd_etcd-n1_aaa/etcd");
        let new = pods.join("etcd_etcd-n1_bbb/etcd");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(
            old.join("0.log"),
            concat!(
                "2026-11-25 11:01:40.000000 I | pkg/flags: recognized\n",
                "{\"level\":\"info\",\"ts\":\"2026-11-25T11:01:40.100Z\",\"msg\":\"serving client traffic securely\"}\n",
                "{\"level\":\"info\",\"ts\":\"2026-11-25T11:02:30.523Z\",\"msg\":\"received signal; shutting down\"}\n",
                "{\"level\":\"info\",\"ts\":\"2026-11-25T11:02:31.532Z\",\"msg\":\"closed etcd server\"}\n",
            ),
        )
        .unwrap();
        std::fs::write(
            new.join("0.log"),
            concat!(
                "2026-11-25 11:02:31.622899 I | pkg/flags: recognized\n",
                "{\"level\":\"info\",\"ts\":\"2026-11-25T11:02:31.704Z\",\"msg\":\"serving client traffic securely\"}\n",
            ),
        )
        .unwrap();
        let log = concat!(
            "\u{1b}[2m2026-11-25T11:02:30.454513Z\u{1b}[0m  INFO etcd_operator::run: installing revision 3 on n1 (attempt 1)\n",
            "2026-11-25T11:02:31.600979Z  INFO etcd_operator::run: n1: waiting for etcd to serve on revision 3\n",
            "2026-11-25T11:02:31.748645Z  INFO reconcile{cluster=\"cluster\"}: etcd_operator::pass: installing revision 3 on n3 (attempt 1)\n",
        );
        let root = dir.path().to_owned();
        let steps = rollout_steps(log, 0.0, |n| (n == "n1").then(|| root.clone()));
        assert_eq!(steps.len(), 1, "{steps:?}");
        let s = &steps[0];
        assert_eq!((s.node.as_str(), s.revision), ("n1", 3));
        let close = |a: f64, b: f64| (a - b).abs() < 0.01;
        assert!(close(s.to_sigterm_ms, 68.487), "{s:?}");
        assert!(close(s.etcd_stop_ms, 1009.0), "{s:?}");
        assert!(close(s.gate_ms, 90.899), "{s:?}");
        assert!(close(s.etcd_start_ms, 81.101), "{s:?}");
        assert!(close(s.noticed_ms.unwrap(), 44.645), "{s:?}");
        assert!(close(s.step_ms.unwrap(), 1294.132), "{s:?}");
        assert!(
            close(s.overhead_ms.unwrap(), 1294.132 - 1009.0 - 81.101),
            "{s:?}"
        );
    }
}
