//! Write availability: the scenario write load ([`WriteLoad`]) run over exactly one disruption,
//! then stopped and every acknowledged write read back.

use std::time::{Duration, Instant};

use crate::controlplane::{OPERATOR_NS, STATIC_NS};
use crate::scenario::Harness;
use crate::scenario::load::WriteLoad;

/// What the load saw during one disruption.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Availability {
    pub disruption: String,
    pub seconds: f64,
    pub writes_acknowledged: u64,
    pub writes_failed: u64,
    pub writes_lost: u64,
    pub longest_write_gap_ms: u64,
    /// When the longest gap ended, seconds after the load started.
    pub longest_gap_at_s: f64,
    /// Steps of the disruption, seconds after the load started.
    pub steps: Vec<(f64, String)>,
}

/// Starts the load and waits for its first acknowledged write.
pub async fn start_load(h: &Harness) -> Result<(WriteLoad, Instant), String> {
    let load = WriteLoad::start(h.cp.client(), OPERATOR_NS, STATIC_NS, h.node_endpoints());
    let started = Instant::now();
    while load.acknowledged().await == 0 {
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "no write acknowledged in 60s: {:?}",
                load.last_error().await
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((load, started))
}

/// Stops the load and reads every acknowledged write back.
pub async fn finish_load(
    h: &Harness,
    disruption: &str,
    load: WriteLoad,
    started: Instant,
    steps_from: usize,
) -> Result<Availability, String> {
    let seconds = started.elapsed().as_secs_f64();
    let r = load.finish(&h.node_endpoints()).await?;
    let origin = started.duration_since(h.started).as_secs_f64();
    Ok(Availability {
        disruption: disruption.to_owned(),
        seconds,
        writes_acknowledged: r.writes_acknowledged,
        writes_failed: r.writes_failed,
        writes_lost: r.writes_lost,
        longest_write_gap_ms: r.longest_write_gap_ms,
        longest_gap_at_s: r.longest_gap_at_s,
        steps: h.steps[steps_from.min(h.steps.len())..]
            .iter()
            .map(|s| (s.at_s - origin, s.what.clone()))
            .collect(),
    })
}
