//! The scale-up of each database size: the etcd floor measured just before it, the operator's
//! cluster filled to the size and grown 3 → 4, the node deleted again between sizes, and a size
//! skipped when the run's budget would likely not hold it.

use std::time::Instant;

use super::{BenchArgs, BenchReport, SETTLE, SizeResult, err, operator_client};
use crate::bench::fill::{self, Size};
use crate::bench::opproc::CountedOperator;
use crate::bench::{floor, scaleup, steps};
use crate::scenario::Harness;

/// What the scale-ups so far tell the next one.
#[derive(Debug, Default)]
struct SizeRun {
    /// Keys in the operator's cluster.
    filled: u64,
    /// Puts per second of the last fill.
    put_rate: Option<f64>,
    last_scaleup_s: f64,
}

/// One scale-up per size, the floor just before it.
pub(super) async fn scale_ups(
    args: &BenchArgs,
    h: &mut Harness,
    op: &CountedOperator,
    rep: &mut BenchReport,
    started: Instant,
) -> Result<(), String> {
    let mut run = SizeRun::default();
    for (i, size) in args.sizes.iter().enumerate() {
        let name = format!("n{}", 4 + i);
        if let Some(why) = over_budget(args, size, &run, started) {
            println!("bench: {why}");
            rep.skipped.push(why);
            continue;
        }
        let result = one_size(h, op, size, &name, &mut run).await?;
        rep.scaleup.push(result);
        if i + 1 < args.sizes.len() {
            let cleanup = Instant::now();
            h.cp.delete_node(&name).await.map_err(err)?;
            h.step(format!("bench: node {name} deleted"));
            h.wait_settled(3, SETTLE).await.map_err(err)?;
            run.last_scaleup_s += cleanup.elapsed().as_secs_f64();
        }
    }
    Ok(())
}

/// Why `size` is skipped, when the run would likely overrun the budget with it.
fn over_budget(args: &BenchArgs, size: &Size, run: &SizeRun, started: Instant) -> Option<String> {
    let filled = run.filled;
    let to_fill = size.puts.saturating_sub(filled);
    let rate = run.put_rate?;
    // Two fills (floor and operator), the scale-up and the cleanup; replication grows
    // with the data, so scale the last scale-up by the data ratio (at least 1).
    let fills = (size.puts + to_fill) as f64 / rate;
    let growth = (size.puts as f64 / filled.max(1) as f64).max(1.0);
    let estimate = fills + run.last_scaleup_s * growth.sqrt() * 2.0 + 60.0;
    let left = args.budget.as_secs_f64() - started.elapsed().as_secs_f64();
    if estimate > left {
        return Some(format!(
            "{}: skipped: estimated {:.0} s (fills at {:.0} puts/s, scale-up and cleanup) but {:.0} s of the {:.0} s budget left",
            size.label,
            estimate,
            rate,
            left.max(0.0),
            args.budget.as_secs_f64()
        ));
    }
    None
}

/// The etcd floor for `size`, then the operator's cluster filled to it and scaled up 3 → 4.
async fn one_size(
    h: &mut Harness,
    op: &CountedOperator,
    size: &Size,
    name: &str,
    run: &mut SizeRun,
) -> Result<SizeResult, String> {
    println!("bench: {}: etcd floor ...", size.label);
    let floor = floor::measure(size).await?;
    if floor.fill.puts > 0 {
        run.put_rate = Some(floor.fill.puts as f64 / floor.fill.seconds.max(0.001));
    }
    println!(
        "bench: {}: floor add → promoted {:.0} ms; filling the operator's cluster ...",
        size.label, floor.promoted_ms
    );
    let client = operator_client(h).await?;
    let f = fill::fill(client.clone(), "/bench-fill/", run.filled, size.puts).await?;
    run.filled = run.filled.max(size.puts);
    let db = fill::db_size(&client).await;
    println!(
        "bench: {}: {} puts in {:.1} s, db {:.0} MB; adding {name} ...",
        size.label,
        f.puts,
        f.seconds,
        db as f64 / 1e6
    );
    // 3 → 4 nodes: the odd-voter policy keeps the new member as a standby learner.
    let target = scaleup::Target {
        voters: 3,
        learners: 1,
    };
    let since = steps::now_ms();
    let r = scaleup::measure(
        h,
        &[name.to_owned()],
        target,
        Some(op.pid()),
        Some(&op.proxy),
        SETTLE,
    )
    .await?;
    run.last_scaleup_s = r.phases.done_s + r.phases.node_ready_after_add_s;
    let ratio = r.phases.done_s * 1000.0 / floor.promoted_ms.max(0.001);
    println!(
        "bench: {}: operator {:.2} s (promoted at {:?} s) vs floor {:.0} ms: ratio {ratio:.0}x",
        size.label, r.phases.done_s, r.phases.promoted_s, floor.promoted_ms
    );
    Ok(SizeResult {
        size: size.label.clone(),
        operator_db_bytes: db,
        operator_fill: f,
        ratio,
        ratio_to_promoted: r
            .phases
            .promoted_s
            .map(|p| p * 1000.0 / floor.promoted_ms.max(0.001)),
        floor,
        operator: r,
        rollout_steps: steps::rollout_steps(
            &std::fs::read_to_string(&op.log).unwrap_or_default(),
            since,
            |n| h.cp.node(n).ok().map(|x| x.root.clone()),
        ),
    })
}
