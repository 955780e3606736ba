//! The bench steps about size: the operator idling beside a thousand heartbeating worker Nodes
//! (its cost must not grow with the cluster), and growing the control plane by several nodes at
//! once (3 → 5 on the bench's cluster, 1 → 5 on a fresh one).

use std::time::Duration;

use super::fill::Size;
use super::floor;
use super::idle::{self, IdleReport};
use super::opproc::CountedOperator;
use super::scaleup::{self, ScaleUpReport, Target};
use super::workers::{self, Heartbeat, HeartbeatReport};
use crate::scenario::Harness;

/// The idle window again, with worker Nodes heartbeating in the API.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IdleAtScale {
    pub worker_nodes: usize,
    pub heartbeat_period_s: f64,
    pub heartbeat: HeartbeatReport,
    pub idle: IdleReport,
    /// This window's figure / the 3-node window's (RSS, CPU, passes).
    pub rss_ratio: f64,
    pub cpu_ratio: f64,
    pub passes_ratio: f64,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// Creates `count` worker Nodes, heartbeats them every `period`, measures an idle `window`
/// against `base` (the window without them), and deletes them again.
pub async fn idle_at_scale(
    h: &Harness,
    op: &CountedOperator,
    base: &IdleReport,
    count: usize,
    period: Duration,
    window: Duration,
) -> Result<IdleAtScale, String> {
    let client = h.cp.client();
    workers::create(&client, count).await?;
    let beat = Heartbeat::start(&client, count, period);
    // One whole heartbeat period before the window, so every Node has written once.
    tokio::time::sleep(period).await;
    let measured = idle::measure(&h.cp, op, window).await;
    let heartbeat = beat.stop();
    workers::delete(&client, count).await?;
    let idle = measured?;
    Ok(IdleAtScale {
        worker_nodes: count,
        heartbeat_period_s: period.as_secs_f64(),
        heartbeat,
        rss_ratio: ratio(idle.rss_kib as f64, base.rss_kib as f64),
        cpu_ratio: ratio(idle.cpu_percent, base.cpu_percent),
        passes_ratio: ratio(idle.reconcile_passes_per_min, base.reconcile_passes_per_min),
        idle,
    })
}

/// Several nodes added at once, against etcd's floor for one member times the members added
/// (etcd 3.4 takes one learner at a time).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Growth {
    pub from: usize,
    pub to: usize,
    /// etcd's own add → promoted for one member, empty database.
    pub floor_ms_per_member: f64,
    pub operator: ScaleUpReport,
    /// Operator time / (floor per member × members added).
    pub ratio: f64,
}

/// The empty-database floor for one member.
pub async fn empty_floor_ms() -> Result<f64, String> {
    let empty: Size = "empty".parse()?;
    Ok(floor::measure(&empty).await?.promoted_ms)
}

/// Adds `names` to the settled cluster of `from` nodes and measures until all are voters.
pub async fn grow(
    h: &mut Harness,
    from: usize,
    names: &[String],
    floor_ms: f64,
    op: Option<&CountedOperator>,
    deadline: Duration,
) -> Result<Growth, String> {
    let to = from + names.len();
    let target = Target {
        voters: to,
        learners: 0,
    };
    let r = scaleup::measure(
        h,
        names,
        target,
        op.map(CountedOperator::pid),
        op.map(|o| &o.proxy),
        deadline,
    )
    .await?;
    Ok(Growth {
        from,
        to,
        floor_ms_per_member: floor_ms,
        ratio: r.phases.done_s * 1000.0 / (floor_ms * names.len() as f64).max(0.001),
        operator: r,
    })
}
