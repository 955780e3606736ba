//! The two-leader check every scenario ends with: no two members of one cluster ever became
//! leader in the same raft term.
//!
//! It reads etcd's own record of each election, not a sample of the client API: etcd's Status
//! reports the term of the last *applied* entry beside raft's current leader, so a correct
//! cluster can show two members naming themselves leader "in one term" for a moment (stop 49's
//! note), while raft logs `<id> became leader at term <T>` at the very moment a member wins term
//! T. Every run of every etcd container of every node (`<node>/var/log/pods/*/etcd/<run>.log`,
//! nodes deleted in the scenario included) is read; each run's cluster comes from the
//! `cluster-id` field of its own lines, so a cluster restored from a snapshot (a new cluster id,
//! terms from 1 again) is not confused with the one it replaced.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Who became leader in each (cluster, term), over every log read.
#[derive(Debug, Default)]
pub struct Elections {
    /// (cluster id, term) → the member ids that became leader in it.
    pub leaders: BTreeMap<(String, u64), BTreeSet<String>>,
    /// How many log files were read.
    pub files: usize,
}

impl Elections {
    /// Adds one container run's log (zap's JSON lines; other lines are skipped).
    pub fn add_run(&mut self, text: &str) {
        self.files += 1;
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let text_of = |line: &serde_json::Value, name: &str| -> Option<String> {
            line.get(name)?.as_str().map(str::to_owned)
        };
        let cluster = lines
            .iter()
            .find_map(|l| text_of(l, "cluster-id"))
            .unwrap_or_else(|| "unknown".to_owned());
        for line in &lines {
            let Some(msg) = text_of(line, "msg") else {
                continue;
            };
            let Some((id, term)) = became_leader(&msg) else {
                continue;
            };
            self.leaders
                .entry((cluster.clone(), term))
                .or_default()
                .insert(id.to_owned());
        }
    }

    /// Every (cluster, term) with more than one leader, described.
    pub fn violations(&self) -> Vec<String> {
        self.leaders
            .iter()
            .filter(|(_, ids)| ids.len() > 1)
            .map(|((cluster, term), ids)| {
                format!(
                    "cluster {cluster}, term {term}: {} each became leader",
                    ids.iter().cloned().collect::<Vec<_>>().join(" and ")
                )
            })
            .collect()
    }

    /// How many elections were seen, in how many clusters.
    pub fn summary(&self) -> String {
        let clusters: BTreeSet<&String> = self.leaders.keys().map(|(c, _)| c).collect();
        format!(
            "{} election(s) in {} cluster(s), {} etcd log(s) read",
            self.leaders.len(),
            clusters.len(),
            self.files
        )
    }
}

/// `<id> became leader at term <T>` → (id, T).
fn became_leader(msg: &str) -> Option<(&str, u64)> {
    let (id, term) = msg.split_once(" became leader at term ")?;
    Some((id, term.trim().parse().ok()?))
}

/// Every etcd container log under the sandbox's `nodes/` dir.
fn etcd_logs(sandbox: &Path) -> Vec<PathBuf> {
    let dirs = |p: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(p)
            .map(|e| e.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let mut out = Vec::new();
    for node in dirs(&sandbox.join("nodes")) {
        for pod in dirs(&node.join("var/log/pods")) {
            out.extend(
                dirs(&pod.join("etcd"))
                    .into_iter()
                    .filter(|f| f.extension().is_some_and(|x| x == "log")),
            );
        }
    }
    out
}

/// Reads every etcd log of the sandbox at `sandbox`.
pub fn read(sandbox: &Path) -> Elections {
    let mut e = Elections::default();
    for file in etcd_logs(sandbox) {
        if let Ok(text) = std::fs::read_to_string(&file) {
            e.add_run(&text);
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(msg: &str, cluster: &str) -> String {
        format!(r#"{{"level":"info","logger":"raft","msg":"{msg}","cluster-id":"{cluster}"}}"#)
    }

    #[test]
    fn one_leader_per_term_passes_and_two_fail() {
        let mut e = Elections::default();
        e.add_run(
            &[
                line("a became leader at term 2", "c1"),
                line("a became leader at term 5", "c1"),
            ]
            .join("\n"),
        );
        e.add_run(&line("b became leader at term 3", "c1"));
        assert!(e.violations().is_empty(), "{:?}", e.violations());
        e.add_run(&line("c became leader at term 3", "c1"));
        assert_eq!(
            e.violations(),
            ["cluster c1, term 3: b and c each became leader"]
        );
        assert!(
            e.summary()
                .starts_with("3 election(s) in 1 cluster(s), 3 etcd log(s)"),
            "{}",
            e.summary()
        );
    }

    #[test]
    fn a_restored_cluster_counts_its_terms_apart() {
        let mut e = Elections::default();
        e.add_run(&line("a became leader at term 2", "old"));
        e.add_run(&line("x became leader at term 2", "new"));
        assert!(e.violations().is_empty(), "{:?}", e.violations());
    }

    #[test]
    fn the_same_member_logged_twice_is_one_leader() {
        let mut e = Elections::default();
        e.add_run(&line("a became leader at term 2", "c"));
        e.add_run(&line("a became leader at term 2", "c"));
        assert!(e.violations().is_empty());
        let mut quiet = Elections::default();
        quiet.add_run(&line("a became follower at term 2", "c"));
        assert!(quiet.leaders.is_empty());
    }
}
