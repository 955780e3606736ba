//! The bench's markdown tables (what `docs/benchmarks.md` quotes).

use std::fmt::Write as _;

use super::run::BenchReport;

fn opt(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}"))
}

/// `67×`, `3.1×`, `0.82×`: two significant digits at least.
fn ratio(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}×")
    } else if v >= 1.0 {
        format!("{v:.1}×")
    } else {
        format!("{v:.2}×")
    }
}

fn counts(c: &super::proxy::Counts) -> String {
    if c.is_empty() {
        return "none".into();
    }
    c.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The scale-up 3 → 4 tables: phases against the etcd floor, then revisions, probe and cost.
fn scaleup_tables(s: &mut String, r: &BenchReport) {
    let _ = writeln!(s, "### Scale-up 3 → 4 vs the etcd floor\n");
    let _ = writeln!(
        s,
        "| database | db size (operator / floor) | etcd floor: add → start → promoted | operator: learner added | learner started | promoted | every node on final revision | ratio (operator / floor) | ratio to promoted |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for x in &r.scaleup {
        let p = &x.operator.phases;
        let _ = writeln!(
            s,
            "| {} | {:.0} MB / {:.0} MB | {:.0} → {:.0} → {:.0} ms | {} s | {} s | {} s | **{:.2} s** | **{}** | {} |",
            x.size,
            x.operator_db_bytes as f64 / 1e6,
            x.floor.db_bytes as f64 / 1e6,
            x.floor.learner_added_ms,
            x.floor.learner_started_ms,
            x.floor.promoted_ms,
            opt(p.learner_added_s),
            opt(p.learner_started_s),
            opt(p.promoted_s),
            p.done_s,
            ratio(x.ratio),
            x.ratio_to_promoted.map_or("–".into(), ratio)
        );
    }
    let _ = writeln!(
        s,
        "\nOperator times are seconds after the new Node is Ready (status polled every 50 ms). Per size: revisions created, write probe during the scale-up, operator cost:\n"
    );
    let _ = writeln!(
        s,
        "| database | Node Ready after add | revisions created | probe puts (failed) | longest probe gap | floor: probe puts (failed), longest gap | operator CPU | operator max RSS | API requests (by kind) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for x in &r.scaleup {
        let o = &x.operator;
        let _ = writeln!(
            s,
            "| {} | {:.2} s | {} | {} ({}) | {:.0} ms | {} ({}), {:.0} ms | {:.1}% of a core ({:.2} s) | {:.1} MiB | {} ({}) |",
            x.size,
            o.phases.node_ready_after_add_s,
            o.phases.revisions_created,
            o.probe_writes,
            o.probe_failed,
            o.probe_longest_gap_ms,
            x.floor.probe_writes,
            x.floor.probe_failed,
            x.floor.probe_longest_gap_ms,
            o.cost.cpu_percent,
            o.cost.cpu_s,
            o.cost.max_rss_kib as f64 / 1024.0,
            o.cost.api_requests,
            counts(&o.cost.api_requests_by_kind)
        );
    }
}

/// The several-nodes-at-once table, if any growth was measured.
fn growth_table(s: &mut String, r: &BenchReport) {
    if !r.growth.is_empty() {
        let _ = writeln!(s, "\n### Several nodes at once\n");
        let _ = writeln!(
            s,
            "| scale-up | etcd floor per member | operator: first learner added | every new member started | every new member a voter | every node on final revision | ratio (operator / floor × members added) | revisions created | longest probe gap |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for g in &r.growth {
            let p = &g.operator.phases;
            let _ = writeln!(
                s,
                "| {} → {} | {:.0} ms | {} s | {} s | {} s | **{:.2} s** | **{}** | {} | {:.0} ms |",
                g.from,
                g.to,
                g.floor_ms_per_member,
                opt(p.learner_added_s),
                opt(p.learner_started_s),
                opt(p.promoted_s),
                p.done_s,
                ratio(g.ratio),
                p.revisions_created,
                g.operator.probe_longest_gap_ms
            );
        }
    }
}

/// The rollout steps of the forced rollout and of every scale-up.
fn rollout_steps_table(s: &mut String, r: &BenchReport) {
    let _ = writeln!(
        s,
        "\n### Rollout steps (ms; etcd's own stop and start are its floor, the rest is overhead)\n"
    );
    let _ = writeln!(
        s,
        "| when | node → revision | install → SIGTERM | etcd stop | stopped → new etcd (verify, start) | etcd start | serving → operator's next decision | step | **overhead** |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    let runs = std::iter::once(("forced rollout".to_owned(), &r.rollout_steps)).chain(
        r.scaleup
            .iter()
            .map(|x| (format!("scale-up, {}", x.size), &x.rollout_steps)),
    );
    for (when, steps) in runs {
        for st in steps {
            let _ = writeln!(
                s,
                "| {when} | {} → r{} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | **{}** |",
                st.node,
                st.revision,
                st.to_sigterm_ms,
                st.etcd_stop_ms,
                st.gate_ms,
                st.etcd_start_ms,
                st.noticed_ms.map_or("–".into(), |v| format!("{v:.0}")),
                st.step_ms.map_or("–".into(), |v| format!("{v:.0}")),
                st.overhead_ms.map_or("–".into(), |v| format!("{v:.0}"))
            );
        }
    }
}

/// Write availability per disruption, then each disruption's steps.
fn availability_tables(s: &mut String, r: &BenchReport) {
    let _ = writeln!(s, "\n### Write availability (scenario write load)\n");
    let _ = writeln!(
        s,
        "| disruption | duration | writes acknowledged | failed | lost | longest write gap | gap ended at |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for a in &r.availability {
        let _ = writeln!(
            s,
            "| {} | {:.1} s | {} | {} | {} | **{} ms** | {:.1} s |",
            a.disruption,
            a.seconds,
            a.writes_acknowledged,
            a.writes_failed,
            a.writes_lost,
            a.longest_write_gap_ms,
            a.longest_gap_at_s
        );
    }
    for a in &r.availability {
        let _ = writeln!(s, "\nSteps of {} (s after the load started):", a.disruption);
        for (t, what) in &a.steps {
            let _ = writeln!(s, "- {t:.1}: {what}");
        }
    }
}

/// The operator's cost while idle.
fn idle_table(s: &mut String, i: &super::idle::IdleReport) {
    let _ = writeln!(s, "\n### Operator cost while idle\n");
    let _ = writeln!(
        s,
        "| window | RSS | CPU | API requests/min | watches/min | lists/min | etcd requests/min | reconcile passes/min |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    let _ = writeln!(
        s,
        "| {:.0} s | {:.1} MiB (anon {:.1}, file {:.1}) | {:.2}% of a core | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
        i.window_s,
        i.rss_kib as f64 / 1024.0,
        i.rss_anon_kib as f64 / 1024.0,
        i.rss_file_kib as f64 / 1024.0,
        i.cpu_percent,
        i.api_requests_per_min,
        i.api_watches_per_min,
        i.api_lists_per_min,
        i.etcd_requests_per_min,
        i.reconcile_passes_per_min
    );
    let _ = writeln!(
        s,
        "\nAPI requests in the idle window: {}",
        counts(&i.api_by_kind)
    );
    let _ = writeln!(
        s,
        "\nAPI requests from the operator's start until the idle window: {}",
        counts(&i.startup_api_by_kind)
    );
    let etcd: Vec<String> = i
        .etcd_by_method
        .iter()
        .map(|(k, v)| format!("{k} {v:.1}"))
        .collect();
    let _ = writeln!(
        s,
        "\netcd requests per minute by method: {}",
        etcd.join(", ")
    );
}

/// The operator's cost while idle beside many worker Nodes.
fn idle_at_scale_table(s: &mut String, w: &super::scale::IdleAtScale) {
    let i = &w.idle;
    let _ = writeln!(
        s,
        "\n### Idle beside {} worker Nodes (each writing its status every {:.0} s; {:.0} writes/s reached, {} failed)\n",
        w.worker_nodes, w.heartbeat_period_s, w.heartbeat.status_writes_per_s, w.heartbeat.failed
    );
    let _ = writeln!(
        s,
        "| window | RSS (× 3-node window) | CPU (×) | API requests/min | etcd requests/min | reconcile passes/min (×) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    let _ = writeln!(
        s,
        "| {:.0} s | {:.1} MiB ({}) | {:.2}% ({}) | {:.1} | {:.1} | {:.1} ({}) |",
        i.window_s,
        i.rss_kib as f64 / 1024.0,
        ratio(w.rss_ratio),
        i.cpu_percent,
        ratio(w.cpu_ratio),
        i.api_requests_per_min,
        i.etcd_requests_per_min,
        i.reconcile_passes_per_min,
        ratio(w.passes_ratio)
    );
}

/// Markdown for the report.
pub fn markdown(r: &BenchReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Run `{}` at {} ({:.0} s; {} cores, kernel {}, load average {} at the start, {} at the end).\n",
        r.command,
        r.started_at,
        r.duration_s,
        r.machine.cores,
        r.machine.kernel,
        r.machine.loadavg_start,
        r.machine.loadavg_end
    );
    scaleup_tables(&mut s, r);
    growth_table(&mut s, r);
    rollout_steps_table(&mut s, r);
    for sk in &r.skipped {
        let _ = writeln!(s, "\nSkipped: {sk}");
    }
    availability_tables(&mut s, r);
    if let Some(i) = &r.idle {
        idle_table(&mut s, i);
    }
    if let Some(w) = &r.idle_at_scale {
        idle_at_scale_table(&mut s, w);
    }
    if let Some(rss) = r.operator_rss_after_bootstrap_kib {
        let _ = writeln!(
            s,
            "\nRSS of the operator after the bootstrap: {:.1} MiB",
            rss as f64 / 1024.0
        );
    }
    for e in &r.errors {
        let _ = writeln!(s, "\nERROR: {e}");
    }
    s
}
