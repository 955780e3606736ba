//! The etcd floor: a learner added, started and promoted directly with etcd's API on a 3-member
//! mTLS cluster of the fixture (no operator, no Kubernetes), with the same data in it, under the
//! same write probe as the operator's scale-up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_fixture::{ClusterSpec, EtcdCluster};

use super::fill::{FillReport, Size, db_size, fill};
use super::probe::{Probe, longest_gap_ms};

/// One floor measurement, milliseconds from the start of `add_learner`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FloorReport {
    pub size: String,
    pub db_bytes: u64,
    pub fill: FillReport,
    pub learner_added_ms: f64,
    pub learner_started_ms: f64,
    pub promoted_ms: f64,
    /// The same write probe as the operator's scale-up, from the add to the promotion: etcd's
    /// own write gaps while a learner joins (its snapshot sent, received and applied).
    pub probe_writes: usize,
    pub probe_failed: usize,
    pub probe_longest_gap_ms: f64,
}

/// etcd refuses membership changes for about 5 s after a cluster starts.
const QUIET_AFTER_START: Duration = Duration::from_secs(6);

pub async fn measure(size: &Size) -> Result<FloorReport, String> {
    let mut cluster = EtcdCluster::start(ClusterSpec::tls(3).with_token("bench-floor"))
        .await
        .map_err(|e| format!("starting the floor cluster: {e}"))?;
    let started = Instant::now();
    let client = Arc::new(cluster.client().map_err(|e| e.to_string())?);
    let filled = fill(client.clone(), "/bench-fill/", 0, size.puts).await?;
    let db_bytes = db_size(&client).await;
    if let Some(rest) = QUIET_AFTER_START.checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let t0 = Instant::now();
    let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1000.0;
    let probe = Probe::on(cluster.client().map_err(|e| e.to_string())?, t0);
    let id = cluster
        .add_learner("n4")
        .await
        .map_err(|e| format!("add learner: {e}"))?;
    let added = Instant::now();
    cluster
        .start_member("n4")
        .await
        .map_err(|e| format!("start learner: {e}"))?;
    let spawned = Instant::now();
    // Promote as soon as etcd accepts it: retry every 10 ms (the fixture's own `promote` retries
    // every 100 ms, too coarse for the empty database).
    let voters = cluster.client().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        match voters.promote(id).await {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "floor: promote not accepted yet");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => return Err(format!("promote: {e}")),
        }
    }
    let promoted = Instant::now();
    let writes = probe.finish().await;
    Ok(FloorReport {
        size: size.label.clone(),
        db_bytes,
        fill: filled,
        learner_added_ms: ms(added),
        learner_started_ms: ms(spawned),
        promoted_ms: ms(promoted),
        probe_writes: writes.len(),
        probe_failed: writes.iter().filter(|w| !w.ok).count(),
        probe_longest_gap_ms: longest_gap_ms(&writes),
    })
}
