//! `summary.json`: the bench's headline figures, one flat record per database size plus the idle
//! window and the build, for comparing runs and checking goals without reading `bench.json`.

use std::collections::BTreeMap;

use super::run::BenchReport;
use super::scaleup::{Sample, ScaleUpReport};

/// The figures of one scale-up.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SizeSummary {
    pub size: String,
    /// etcd's own add → start → promoted on a fixture cluster holding the same data.
    pub floor_s: f64,
    /// Node Ready → member promoted and every node on the final revision.
    pub scaleup_s: f64,
    pub ratio: f64,
    pub revisions_created: i64,
    /// Revisions the new node was installed with (each one a start of its etcd).
    pub new_member_restarts: u32,
    /// The most revision changes (each one an etcd restart) of any node that was there before.
    pub max_restarts_per_existing_member: u32,
    pub longest_write_gap_ms: f64,
    pub failed_writes: usize,
    /// The same probe's longest gap on the floor cluster (add → promoted): etcd's own.
    pub floor_longest_write_gap_ms: f64,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct IdleSummary {
    pub cpu_percent: f64,
    pub rss_mib: f64,
    /// Of `rss_mib`: anonymous memory and file-backed pages.
    pub rss_anon_mib: f64,
    pub rss_file_mib: f64,
    pub passes_per_min: f64,
    pub etcd_requests_per_min: f64,
    pub api_requests_per_min: f64,
}

/// The idle window beside worker Nodes, against the one without them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AtScaleSummary {
    pub worker_nodes: usize,
    pub node_status_writes_per_s: f64,
    pub idle: IdleSummary,
    pub rss_ratio: f64,
    pub cpu_ratio: f64,
    pub passes_ratio: f64,
}

/// Several nodes added at once.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GrowthSummary {
    pub from: usize,
    pub to: usize,
    pub floor_s_per_member: f64,
    pub scaleup_s: f64,
    pub ratio: f64,
    pub revisions_created: i64,
    pub max_restarts_per_existing_member: u32,
    pub longest_write_gap_ms: f64,
    pub failed_writes: usize,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    /// `release` or `debug`: the profile the bench (and the binaries beside it) was built with.
    pub build: &'static str,
    pub sizes: Vec<SizeSummary>,
    pub idle: Option<IdleSummary>,
    pub idle_at_scale: Option<AtScaleSummary>,
    pub growth: Vec<GrowthSummary>,
    /// The largest rollout-step overhead (step minus etcd's own stop and start) of the forced
    /// rollout and every scale-up's rollout.
    pub max_rollout_step_overhead_ms: Option<f64>,
}

fn idle_summary(i: &super::idle::IdleReport) -> IdleSummary {
    IdleSummary {
        cpu_percent: i.cpu_percent,
        rss_mib: i.rss_kib as f64 / 1024.0,
        rss_anon_mib: i.rss_anon_kib as f64 / 1024.0,
        rss_file_mib: i.rss_file_kib as f64 / 1024.0,
        passes_per_min: i.reconcile_passes_per_min,
        etcd_requests_per_min: i.etcd_requests_per_min,
        api_requests_per_min: i.api_requests_per_min,
    }
}

/// How many times each node's current revision changed during the scale-up (a node's first
/// revision counts as one change from nothing), from the status samples.
pub fn revision_changes(samples: &[Sample]) -> BTreeMap<String, u32> {
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    let mut changes: BTreeMap<String, u32> = BTreeMap::new();
    for s in samples {
        for (node, current, _) in &s.nodes {
            let before = last.insert(node.clone(), *current);
            let moved = match before {
                Some(b) => b != *current,
                None => *current > 0 && s.at_s > samples.first().map_or(0.0, |f| f.at_s),
            };
            let count = changes.entry(node.clone()).or_default();
            if moved {
                *count += 1;
            }
        }
    }
    changes
}

/// What a scale-up's status samples and probe show of the operator, for a size or a growth step.
struct OperatorFigures {
    revisions_created: i64,
    new_member_restarts: u32,
    max_restarts_per_existing_member: u32,
    longest_write_gap_ms: f64,
    failed_writes: usize,
}

fn operator_figures(op: &ScaleUpReport) -> OperatorFigures {
    let changes = revision_changes(&op.samples);
    let new_member_restarts = op
        .nodes
        .iter()
        .filter_map(|n| changes.get(n).copied())
        .max()
        .unwrap_or(0);
    let max_restarts_per_existing_member = changes
        .iter()
        .filter(|(n, _)| !op.nodes.contains(n))
        .map(|(_, c)| *c)
        .max()
        .unwrap_or(0);
    OperatorFigures {
        revisions_created: op.phases.revisions_created,
        new_member_restarts,
        max_restarts_per_existing_member,
        longest_write_gap_ms: op.probe_longest_gap_ms,
        failed_writes: op.probe_failed,
    }
}

fn size_summary(x: &super::run::SizeResult) -> SizeSummary {
    let op = operator_figures(&x.operator);
    SizeSummary {
        size: x.size.clone(),
        floor_s: x.floor.promoted_ms / 1000.0,
        scaleup_s: x.operator.phases.done_s,
        ratio: x.ratio,
        revisions_created: op.revisions_created,
        new_member_restarts: op.new_member_restarts,
        max_restarts_per_existing_member: op.max_restarts_per_existing_member,
        longest_write_gap_ms: op.longest_write_gap_ms,
        failed_writes: op.failed_writes,
        floor_longest_write_gap_ms: x.floor.probe_longest_gap_ms,
    }
}

/// The summary of a finished run.
pub fn summarize(r: &BenchReport) -> Summary {
    Summary {
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        sizes: r.scaleup.iter().map(size_summary).collect(),
        idle: r.idle.as_ref().map(idle_summary),
        idle_at_scale: r.idle_at_scale.as_ref().map(|w| AtScaleSummary {
            worker_nodes: w.worker_nodes,
            node_status_writes_per_s: w.heartbeat.status_writes_per_s,
            idle: idle_summary(&w.idle),
            rss_ratio: w.rss_ratio,
            cpu_ratio: w.cpu_ratio,
            passes_ratio: w.passes_ratio,
        }),
        growth: r
            .growth
            .iter()
            .map(|g| {
                let one = operator_figures(&g.operator);
                GrowthSummary {
                    from: g.from,
                    to: g.to,
                    floor_s_per_member: g.floor_ms_per_member / 1000.0,
                    scaleup_s: g.operator.phases.done_s,
                    ratio: g.ratio,
                    revisions_created: one.revisions_created,
                    max_restarts_per_existing_member: one.max_restarts_per_existing_member,
                    longest_write_gap_ms: one.longest_write_gap_ms,
                    failed_writes: one.failed_writes,
                }
            })
            .collect(),
        max_rollout_step_overhead_ms: r
            .rollout_steps
            .iter()
            .chain(r.scaleup.iter().flat_map(|x| &x.rollout_steps))
            .filter_map(|st| st.overhead_ms)
            .reduce(f64::max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: f64, nodes: &[(&str, i64)]) -> Sample {
        Sample {
            at_s,
            latest_revision: 0,
            voters: 0,
            learners: 0,
            nodes: nodes
                .iter()
                .map(|(n, r)| ((*n).to_owned(), *r, None))
                .collect(),
        }
    }

    #[test]
    fn each_revision_change_is_one_restart_and_the_new_node_counts_its_first() {
        let samples = [
            sample(-0.1, &[("n1", 5), ("n2", 5)]),
            sample(0.5, &[("n1", 5), ("n2", 5), ("n4", 0)]),
            sample(1.0, &[("n1", 5), ("n2", 5), ("n4", 6)]),
            sample(1.5, &[("n1", 6), ("n2", 5), ("n4", 6)]),
            sample(2.0, &[("n1", 6), ("n2", 6), ("n4", 7)]),
            sample(2.5, &[("n1", 7), ("n2", 7), ("n4", 7)]),
        ];
        let c = revision_changes(&samples);
        assert_eq!(c["n4"], 2, "{c:?}");
        assert_eq!(c["n1"], 2, "{c:?}");
        assert_eq!(c["n2"], 2, "{c:?}");
        let settled = [sample(0.0, &[("n1", 5)]), sample(1.0, &[("n1", 5)])];
        assert_eq!(revision_changes(&settled)["n1"], 0, "no change, no restart");
    }
}
