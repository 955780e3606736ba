//! A write load **through kube-apiserver**: a ConfigMap created every [`EVERY`] in namespace
//! [`NAMESPACE`], each create bounded by [`TIMEOUT`] (a client that gives up, as a controller's
//! request would), recorded acknowledged or not. At the end every acknowledged ConfigMap is read
//! back: one missing was lost. Where the API is served from the managed etcd this is what a
//! platform's users see of an etcd operation: the longest gap between two acknowledged creates is
//! the API's outage.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::Mutex;

use crate::controlplane::{ControlPlaneError, create_or_keep};

/// Where the probe's ConfigMaps go.
pub const NAMESPACE: &str = "api-probe";
/// Time between two creates.
const EVERY: Duration = Duration::from_millis(100);
/// Bound on one create.
const TIMEOUT: Duration = Duration::from_secs(2);

/// One create.
#[derive(Clone, Debug)]
struct Create {
    name: String,
    started: Instant,
    ended: Instant,
    ok: bool,
}

/// What the probe saw.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ApiProbeReport {
    pub writes_acknowledged: u64,
    pub writes_failed: u64,
    /// Acknowledged ConfigMaps missing when read back.
    pub objects_lost: u64,
    /// Longest time between two acknowledged creates (their ends), ms.
    pub longest_write_gap_ms: u64,
}

/// A running probe.
pub struct ApiProbe {
    client: Client,
    stop: Arc<AtomicBool>,
    creates: Arc<Mutex<Vec<Create>>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ApiProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiProbe").finish_non_exhaustive()
    }
}

impl ApiProbe {
    /// Creates the namespace and starts creating.
    pub async fn start(client: Client) -> Result<Self, ControlPlaneError> {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(NAMESPACE.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        create_or_keep(&Api::<Namespace>::all(client.clone()), &ns).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let creates = Arc::new(Mutex::new(Vec::new()));
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
        let (s, c) = (stop.clone(), creates.clone());
        let task = tokio::spawn(async move {
            let mut seq = 0u64;
            while !s.load(Ordering::SeqCst) {
                let name = format!("probe-{seq:07}");
                seq += 1;
                let started = Instant::now();
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let ok = matches!(
                    tokio::time::timeout(TIMEOUT, api.create(&PostParams::default(), &cm)).await,
                    Ok(Ok(_))
                );
                c.lock().await.push(Create {
                    name,
                    started,
                    ended: Instant::now(),
                    ok,
                });
                tokio::time::sleep(EVERY.saturating_sub(started.elapsed())).await;
            }
        });
        Ok(Self {
            client,
            stop,
            creates,
            task,
        })
    }

    /// When the first create started after `since` was acknowledged (`None`: none yet).
    pub async fn first_ack_after(&self, since: Instant) -> Option<Instant> {
        self.creates
            .lock()
            .await
            .iter()
            .find(|c| c.ok && c.started >= since)
            .map(|c| c.ended)
    }

    /// The longest gap so far between acknowledged creates ended within `[from, to]`, ms.
    pub async fn longest_gap_ms_between(&self, from: Instant, to: Instant) -> u64 {
        let creates = self.creates.lock().await;
        let ends: Vec<Instant> = creates
            .iter()
            .filter(|c| c.ok && c.ended >= from && c.ended <= to)
            .map(|c| c.ended)
            .collect();
        longest_gap_ms(&ends)
    }

    /// Stops, then reads every acknowledged ConfigMap back.
    pub async fn finish(self) -> Result<ApiProbeReport, ControlPlaneError> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let creates = self.creates.lock().await.clone();
        let listed = Api::<ConfigMap>::namespaced(self.client.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await?;
        let present: std::collections::BTreeSet<String> = listed
            .items
            .into_iter()
            .filter_map(|cm| cm.metadata.name)
            .collect();
        let acked: Vec<&Create> = creates.iter().filter(|c| c.ok).collect();
        let ends: Vec<Instant> = acked.iter().map(|c| c.ended).collect();
        Ok(ApiProbeReport {
            writes_acknowledged: acked.len() as u64,
            writes_failed: (creates.len() - acked.len()) as u64,
            objects_lost: acked.iter().filter(|c| !present.contains(&c.name)).count() as u64,
            longest_write_gap_ms: longest_gap_ms(&ends),
        })
    }
}

/// The longest gap between successive instants, ms (0 for fewer than two).
fn longest_gap_ms(ends: &[Instant]) -> u64 {
    ends.windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]).as_millis() as u64)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_is_between_successive_acknowledgements() {
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        assert_eq!(longest_gap_ms(&[ms(0), ms(100), ms(1300), ms(1400)]), 1200);
        assert_eq!(longest_gap_ms(&[ms(5)]), 0);
    }
}
