//! What the API's clients see of a disaster recovery on the stacked control plane (issue 33,
//! item 5): ConfigMaps created through the control-plane endpoint ([`super::api_probe`]) and a
//! watch that relists on 410 Gone ([`super::api_watch`]) run across the outage. Afterwards the
//! API must answer again with nobody restarting a kube-apiserver, the watcher must be shown a
//! create made after the recovery, no resourceVersion it saw may go backwards (a restore
//! without etcd 3.5's revision bump would take them back), and every acknowledged ConfigMap the
//! recovery keeps must be there. The RTO as the API sees it is from the loss to the first
//! create acknowledged afterwards.

use std::time::{Duration, Instant};

use super::api_probe::{ApiProbe, NAMESPACE};
use super::api_watch::ApiWatch;
use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, wait_for};

/// Bound on the API answering again once etcd serves.
const API_BACK: Duration = Duration::from_secs(180);
/// Bound on the watcher being shown a create made after the recovery.
const WATCH_CATCHES_UP: Duration = Duration::from_secs(60);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// The API load across a recovery.
pub struct ApiAcrossRecovery {
    probe: ApiProbe,
    watch: ApiWatch,
}

impl std::fmt::Debug for ApiAcrossRecovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiAcrossRecovery").finish_non_exhaustive()
    }
}

impl ApiAcrossRecovery {
    /// Starts the load where the API is real kube-apiservers on the managed etcd (`None`
    /// elsewhere).
    pub async fn start(h: &Harness) -> Result<Option<Self>, ControlPlaneError> {
        if h.cp.stacked().is_none() {
            return Ok(None);
        }
        let probe = ApiProbe::start(h.cp.client()).await?;
        let watch = ApiWatch::start(h.cp.client(), NAMESPACE);
        Ok(Some(Self { probe, watch }))
    }

    /// Once the cluster recovered from a loss at `lost_at`: the API back, the watcher caught up
    /// and never shown time going backwards, nothing lost that the recovery keeps (every
    /// acknowledged create when `kept_up_to` is `None`, else those acknowledged at or below that
    /// store revision, and every one made after the loss). Returns the API's RTO, seconds.
    pub async fn after(
        self,
        h: &mut Harness,
        lost_at: Instant,
        kept_up_to: Option<i64>,
    ) -> Result<f64, ControlPlaneError> {
        let probe = &self.probe;
        wait_for(
            API_BACK,
            "the API acknowledging a create after the recovery",
            || async {
                probe
                    .first_ack_after(lost_at)
                    .await
                    .map(|_| ())
                    .ok_or_else(|| "none yet".to_owned())
            },
        )
        .await?;
        let first = probe
            .first_acked_after(lost_at)
            .await
            .ok_or_else(|| failed("the first create after the recovery vanished"))?;
        let watch = &self.watch;
        wait_for(
            WATCH_CATCHES_UP,
            &format!("the watcher shown {}", first.name),
            || async {
                if watch.has_seen(&first.name).await {
                    Ok(())
                } else {
                    Err("not yet".to_owned())
                }
            },
        )
        .await?;
        let (report, creates, present) = self.probe.finish().await?;
        let log = self.watch.finish().await;
        let lost: Vec<&str> = creates
            .iter()
            .filter(|c| c.ok && !present.contains(&c.name))
            .filter(|c| {
                c.started >= lost_at
                    || kept_up_to.is_none_or(|r| c.resource_version.is_some_and(|v| v <= r))
            })
            .map(|c| c.name.as_str())
            .collect();
        if !lost.is_empty() {
            return Err(failed(format!(
                "ConfigMaps the API acknowledged and the recovery keeps are gone: {lost:?}"
            )));
        }
        if let Some((before, after, _)) = log.backwards.first() {
            return Err(failed(format!(
                "the watcher saw time go backwards: resourceVersion {after} after {before} ({} time(s))",
                log.backwards.len()
            )));
        }
        let rto = first.ended.saturating_duration_since(lost_at).as_secs_f64();
        let highest = log
            .seen
            .iter()
            .map(|s| s.resource_version)
            .max()
            .unwrap_or(0);
        h.step(format!(
            "the API across the recovery: RTO {rto:.1}s as its clients see it (first create acknowledged again at resourceVersion {}); {} created, {} failed; the watcher relisted {} time(s), reconnected {} time(s), never saw a resourceVersion go back (highest {highest}), and was shown the first create after the recovery",
            first.resource_version.unwrap_or(0),
            report.writes_acknowledged,
            report.writes_failed,
            log.relists.len(),
            log.reconnects.len(),
        ));
        Ok(rto)
    }
}
