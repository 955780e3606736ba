//! A write load **through kube-apiserver**: ConfigMaps created in namespace [`NAMESPACE`] by one
//! loop per server (a kube-apiserver of its own, or the control-plane endpoint), each create
//! bounded by [`TIMEOUT`] (a client that gives up, as a controller's request would), the next
//! one [`EVERY`] after the last started, each recorded acknowledged or not. The servers can
//! change while it runs (a node joins or leaves). At the end every acknowledged ConfigMap is
//! read back: one missing was lost. Where the API is served from the managed etcd this is what
//! a platform's users see of an etcd operation: the longest gap between two acknowledged
//! creates (of any loop) is the API's outage.

use std::collections::BTreeMap;
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
/// Time between two creates of one loop.
const EVERY: Duration = Duration::from_millis(100);
/// Bound on one create.
const TIMEOUT: Duration = Duration::from_secs(2);

/// One create.
#[derive(Clone, Debug)]
pub struct Create {
    /// The server its loop sends to.
    pub server: String,
    /// The loop's number in the probe: a server given back after a pause gets a new loop, whose
    /// creates have names and counts of their own.
    pub run: u64,
    /// The loop's count: creates of one loop are made one after another.
    pub seq: u64,
    pub name: String,
    pub started: Instant,
    pub ended: Instant,
    pub ok: bool,
    /// The resourceVersion the API acknowledged it at.
    pub resource_version: Option<i64>,
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

/// A server the probe creates through.
#[derive(Clone)]
pub struct Server {
    pub name: String,
    pub client: Client,
}

struct Loop {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// A running probe.
pub struct ApiProbe {
    client: Client,
    creates: Arc<Mutex<Vec<Create>>>,
    loops: BTreeMap<String, Loop>,
    /// Loops started so far.
    runs: u64,
}

impl std::fmt::Debug for ApiProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiProbe")
            .field("servers", &self.loops.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ApiProbe {
    /// Creates the namespace and starts creating through `client` alone (server `endpoint`).
    pub async fn start(client: Client) -> Result<Self, ControlPlaneError> {
        let servers = vec![Server {
            name: "endpoint".into(),
            client: client.clone(),
        }];
        Self::start_over(client, servers).await
    }

    /// Creates the namespace (through `client`) and starts one loop per server.
    pub async fn start_over(
        client: Client,
        servers: Vec<Server>,
    ) -> Result<Self, ControlPlaneError> {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(NAMESPACE.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        create_or_keep(&Api::<Namespace>::all(client.clone()), &ns).await?;
        let mut probe = Self {
            client,
            creates: Arc::new(Mutex::new(Vec::new())),
            loops: BTreeMap::new(),
            runs: 0,
        };
        probe.set_servers(servers);
        Ok(probe)
    }

    /// From now on creates go to exactly `servers`: loops start for new ones, stop for gone ones.
    pub fn set_servers(&mut self, servers: Vec<Server>) {
        let wanted: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
        let gone: Vec<String> = self
            .loops
            .keys()
            .filter(|k| !wanted.contains(k))
            .cloned()
            .collect();
        for name in gone {
            if let Some(l) = self.loops.remove(&name) {
                l.stop.store(true, Ordering::SeqCst);
            }
        }
        for s in servers {
            if !self.loops.contains_key(&s.name) {
                self.runs += 1;
                let l = spawn_loop(s.clone(), self.runs, self.creates.clone());
                self.loops.insert(s.name, l);
            }
        }
    }

    /// When the first create started after `since` was acknowledged (`None`: none yet).
    pub async fn first_ack_after(&self, since: Instant) -> Option<Instant> {
        self.first_acked_after(since).await.map(|c| c.ended)
    }

    /// The first acknowledged create started after `since`.
    pub async fn first_acked_after(&self, since: Instant) -> Option<Create> {
        self.creates
            .lock()
            .await
            .iter()
            .filter(|c| c.ok && c.started >= since)
            .min_by_key(|c| c.ended)
            .cloned()
    }

    /// Stops, then reads every acknowledged ConfigMap back: the report, every create, and the
    /// names present.
    pub async fn finish(
        self,
    ) -> Result<
        (
            ApiProbeReport,
            Vec<Create>,
            std::collections::BTreeSet<String>,
        ),
        ControlPlaneError,
    > {
        for l in self.loops.values() {
            l.stop.store(true, Ordering::SeqCst);
        }
        for (_, l) in self.loops {
            let _ = l.task.await;
        }
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
        let mut ends: Vec<Instant> = acked.iter().map(|c| c.ended).collect();
        ends.sort();
        let report = ApiProbeReport {
            writes_acknowledged: acked.len() as u64,
            writes_failed: (creates.len() - acked.len()) as u64,
            objects_lost: acked.iter().filter(|c| !present.contains(&c.name)).count() as u64,
            longest_write_gap_ms: longest_gap_ms(&ends),
        };
        Ok((report, creates, present))
    }
}

fn spawn_loop(server: Server, run: u64, creates: Arc<Mutex<Vec<Create>>>) -> Loop {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let api: Api<ConfigMap> = Api::namespaced(server.client, NAMESPACE);
    let task = tokio::spawn(async move {
        let mut seq = 0u64;
        while !s.load(Ordering::SeqCst) {
            let name = format!("probe-{}-{run}-{seq:07}", server.name);
            let started = Instant::now();
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let made = tokio::time::timeout(TIMEOUT, api.create(&PostParams::default(), &cm)).await;
            let resource_version = match &made {
                Ok(Ok(cm)) => cm
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok()),
                _ => None,
            };
            creates.lock().await.push(Create {
                server: server.name.clone(),
                run,
                seq,
                name,
                started,
                ended: Instant::now(),
                ok: matches!(made, Ok(Ok(_))),
                resource_version,
            });
            seq += 1;
            tokio::time::sleep(EVERY.saturating_sub(started.elapsed())).await;
        }
    });
    Loop { stop, task }
}

/// The longest gap between successive instants, ms (0 for fewer than two).
pub fn longest_gap_ms(ends: &[Instant]) -> u64 {
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
