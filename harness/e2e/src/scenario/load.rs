//! A write load against the managed etcd that proves no acknowledged write is lost.
//!
//! One writer puts `/sandbox-load/<seq>` = `<seq>` one after another (each put bounded by a
//! timeout), through the voters' client endpoints the operator publishes (ConfigMap
//! `etcd-endpoints`, re-read every second), with the operator's own client certificate. It
//! records every acknowledged sequence number and the longest time between two acknowledged
//! writes. [`WriteLoad::finish`] stops it and reads back every acknowledged key: a key that is
//! missing or holds another value is a lost write.
//!
//! A restore from a snapshot loses, by design, what was written after the snapshot: with a
//! cut-off ([`WriteLoad::set_cutoff`], the snapshot's store revision) a missing write the put
//! answered at a revision above it, before [`WriteLoad::end_cutoff`] (the old cluster gone),
//! counts in `writes_lost_past_cutoff` (the recovery point), not in `writes_lost`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use membership::{EtcdClient, MemberUrl, TlsPem};
use tokio::sync::Mutex;

const PREFIX: &str = "/sandbox-load/";
const PUT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the load saw.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LoadReport {
    pub writes_acknowledged: u64,
    pub writes_failed: u64,
    pub writes_lost: u64,
    pub longest_write_gap_ms: u64,
    /// When the longest gap ended, seconds after the load started.
    pub longest_gap_at_s: f64,
    /// Missing writes acknowledged at a revision above the cut-off (0 without one).
    pub writes_lost_past_cutoff: u64,
    /// Why the last failed write failed, and when (seconds after the load started).
    pub last_write_error: Option<String>,
}

/// The load over a stretch of a scenario ([`WriteLoad::window`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub acknowledged: u64,
    pub failed: u64,
    pub longest_gap: Duration,
}

#[derive(Debug, Default)]
struct Progress {
    acked: Vec<u64>,
    /// The store revision each acknowledged write was put at, in the order of `acked`.
    revisions: Vec<i64>,
    /// Writes put above this revision may be lost ([`WriteLoad::set_cutoff`]).
    cutoff: Option<i64>,
    /// How many writes were acknowledged when the cut-off ended: later ones may not be lost
    /// ([`WriteLoad::end_cutoff`]).
    cutoff_end: Option<usize>,
    /// When each write was acknowledged or failed (`true`: acknowledged).
    times: Vec<(Instant, bool)>,
    failed: u64,
    longest_gap: Duration,
    longest_gap_at: Duration,
    last_error: Option<String>,
    last_write_error: Option<String>,
}

/// A running write load.
pub struct WriteLoad {
    stop: Arc<AtomicBool>,
    progress: Arc<Mutex<Progress>>,
    task: tokio::task::JoinHandle<()>,
    client: Client,
    operator_ns: String,
    static_ns: String,
}

impl std::fmt::Debug for WriteLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLoad")
            .field("operator_ns", &self.operator_ns)
            .finish_non_exhaustive()
    }
}

/// Client TLS from the operator's CA and client certificate Secrets.
pub async fn operator_tls(client: &Client, operator_ns: &str) -> Result<TlsPem, String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), operator_ns);
    let get =
        |s: &Secret, k: &str| -> Option<Vec<u8>> { s.data.as_ref()?.get(k).map(|b| b.0.clone()) };
    let ca = secrets
        .get("etcd-signer")
        .await
        .map_err(|e| format!("etcd-signer: {e}"))?;
    let cl = secrets
        .get("etcd-client")
        .await
        .map_err(|e| format!("etcd-client: {e}"))?;
    // The operator puts the CAs to trust beside its client certificate (both while the CA
    // rotates); a Secret from before that holds only the certificate.
    let trusted = get(&cl, "ca.crt").or_else(|| get(&ca, "tls.crt"));
    Ok(TlsPem {
        ca: trusted.ok_or("neither etcd-client nor etcd-signer has a CA certificate")?,
        cert: get(&cl, "tls.crt").ok_or("etcd-client has no tls.crt")?,
        key: get(&cl, "tls.key").ok_or("etcd-client has no tls.key")?,
    })
}

/// The voters' client URLs the operator publishes.
pub async fn published_endpoints(client: &Client, static_ns: &str) -> Vec<MemberUrl> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), static_ns);
    let Ok(Some(cm)) = cms.get_opt("etcd-endpoints").await else {
        return Vec::new();
    };
    let mut urls: Vec<MemberUrl> = cm
        .data
        .unwrap_or_default()
        .values()
        .filter_map(|a| format!("https://{a}").parse().ok())
        .collect();
    urls.sort();
    urls
}

/// An etcd client with the operator's client certificate, on the published endpoints (or
/// `fallback` before the operator published any).
pub async fn etcd_client(
    client: &Client,
    operator_ns: &str,
    static_ns: &str,
    fallback: &[MemberUrl],
) -> Result<EtcdClient, String> {
    let tls = operator_tls(client, operator_ns).await?;
    let mut endpoints = published_endpoints(client, static_ns).await;
    if endpoints.is_empty() {
        endpoints = fallback.to_vec();
    }
    EtcdClient::with_pem(endpoints, Some(&tls), PUT_TIMEOUT).map_err(|e| e.to_string())
}

/// The same client with the endpoints that answer now tried first: a scenario may end with a
/// node stopped, and every read of the check would otherwise wait out its timeout on that
/// node's endpoint first whenever its member id sorts first.
async fn answering_first(
    etcd: EtcdClient,
    client: &Client,
    operator_ns: &str,
) -> Result<EtcdClient, String> {
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for e in etcd.endpoints() {
        if etcd.status_of(e).await.is_ok() {
            up.push(e.clone());
        } else {
            down.push(e.clone());
        }
    }
    up.extend(down);
    let tls = operator_tls(client, operator_ns).await?;
    EtcdClient::with_pem(up, Some(&tls), PUT_TIMEOUT).map_err(|e| e.to_string())
}

/// The client's endpoints, comma-separated.
fn joined_endpoints(client: &EtcdClient) -> String {
    client
        .endpoints()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl WriteLoad {
    /// Starts writing. `fallback` endpoints are used until the operator publishes its own.
    pub fn start(
        client: Client,
        operator_ns: &str,
        static_ns: &str,
        fallback: Vec<MemberUrl>,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Mutex::new(Progress::default()));
        let (s, p, c) = (stop.clone(), progress.clone(), client.clone());
        let (ons, sns) = (operator_ns.to_owned(), static_ns.to_owned());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut last_ack = Instant::now();
            let mut seq = 0u64;
            let mut etcd: Option<(Instant, EtcdClient)> = None;
            while !s.load(Ordering::SeqCst) {
                let stale = etcd
                    .as_ref()
                    .is_none_or(|(at, _)| at.elapsed() > Duration::from_secs(1));
                if stale {
                    match etcd_client(&c, &ons, &sns, &fallback).await {
                        Ok(e) => etcd = Some((Instant::now(), e)),
                        Err(e) => {
                            p.lock().await.last_error = Some(e);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    }
                }
                let Some((_, client)) = etcd.as_ref() else {
                    continue;
                };
                let key = format!("{PREFIX}{seq:010}");
                let put = tokio::time::timeout(
                    PUT_TIMEOUT,
                    client.put(&key, seq.to_string().into_bytes()),
                )
                .await;
                let mut prog = p.lock().await;
                match put {
                    Ok(Ok(revision)) => {
                        let gap = last_ack.elapsed();
                        if gap > prog.longest_gap && !prog.acked.is_empty() {
                            prog.longest_gap = gap;
                            prog.longest_gap_at = started.elapsed();
                        }
                        last_ack = Instant::now();
                        prog.acked.push(seq);
                        prog.revisions.push(revision);
                        prog.times.push((last_ack, true));
                        seq += 1;
                    }
                    Ok(Err(e)) => {
                        prog.failed += 1;
                        prog.times.push((Instant::now(), false));
                        prog.last_error = Some(e.to_string());
                        prog.last_write_error =
                            Some(format!("at {:.1}s: {e}", started.elapsed().as_secs_f64()));
                        seq += 1;
                    }
                    Err(_) => {
                        prog.failed += 1;
                        prog.times.push((Instant::now(), false));
                        prog.last_error = Some("put timed out".into());
                        prog.last_write_error = Some(format!(
                            "at {:.1}s: no answer within {PUT_TIMEOUT:?} (endpoints {})",
                            started.elapsed().as_secs_f64(),
                            joined_endpoints(client)
                        ));
                        seq += 1;
                    }
                }
                drop(prog);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Self {
            stop,
            progress,
            task,
            client,
            operator_ns: operator_ns.to_owned(),
            static_ns: static_ns.to_owned(),
        }
    }

    /// Acknowledged writes so far.
    pub async fn acknowledged(&self) -> u64 {
        self.progress.lock().await.acked.len() as u64
    }

    /// What the load saw from `since` until now: acknowledged and failed writes, and the
    /// longest time without an acknowledgement (measured from `since` for the first one).
    pub async fn window(&self, since: Instant) -> Window {
        let prog = self.progress.lock().await;
        let mut w = Window::default();
        let mut last = since;
        for (at, acked) in prog.times.iter().filter(|(at, _)| *at >= since) {
            if *acked {
                w.acknowledged += 1;
                w.longest_gap = w.longest_gap.max(at.duration_since(last));
                last = *at;
            } else {
                w.failed += 1;
            }
        }
        w.longest_gap = w.longest_gap.max(last.elapsed());
        w
    }

    /// When the first write acknowledged strictly after `since` was acknowledged (none yet:
    /// `None`).
    pub async fn first_ack_after(&self, since: Instant) -> Option<Instant> {
        let prog = self.progress.lock().await;
        prog.times
            .iter()
            .find(|(at, acked)| *acked && *at > since)
            .map(|(at, _)| *at)
    }

    /// The store revision the first write acknowledged strictly after `since` was put at (none
    /// yet: `None`).
    pub async fn first_revision_after(&self, since: Instant) -> Option<i64> {
        let prog = self.progress.lock().await;
        let before = prog
            .times
            .iter()
            .filter(|(at, acked)| *acked && *at <= since)
            .count();
        // Acknowledged writes are recorded in time order, `revisions` beside them.
        prog.revisions.get(before).copied()
    }

    /// Writes acknowledged in `(from, to]`.
    pub async fn acknowledged_between(&self, from: Instant, to: Instant) -> u64 {
        let prog = self.progress.lock().await;
        prog.times
            .iter()
            .filter(|(at, acked)| *acked && *at > from && *at <= to)
            .count() as u64
    }

    /// Writes acknowledged at a revision above `revision` may be lost from now on (a restore
    /// from a snapshot taken at that store revision): [`WriteLoad::finish`] counts them in
    /// `writes_lost_past_cutoff` instead of `writes_lost`.
    pub async fn set_cutoff(&self, revision: i64) {
        self.progress.lock().await.cutoff = Some(revision);
    }

    /// No write acknowledged from now on may be lost, whatever its revision (the cluster the
    /// cut-off was about is gone; a restore without a revision bump reuses its revisions).
    pub async fn end_cutoff(&self) {
        let mut prog = self.progress.lock().await;
        prog.cutoff_end = Some(prog.acked.len());
    }

    /// Writes acknowledged so far at a revision above `revision`, and the highest revision a
    /// write was acknowledged at.
    pub async fn acknowledged_above(&self, revision: i64) -> (u64, i64) {
        let prog = self.progress.lock().await;
        let above = prog.revisions.iter().filter(|r| **r > revision).count() as u64;
        (
            above,
            prog.revisions.iter().copied().max().unwrap_or_default(),
        )
    }

    /// The last error the writer saw.
    pub async fn last_error(&self) -> Option<String> {
        self.progress.lock().await.last_error.clone()
    }

    /// Stops writing and checks every acknowledged write.
    pub async fn finish(self, fallback: &[MemberUrl]) -> Result<LoadReport, String> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let prog = self.progress.lock().await;
        let client =
            etcd_client(&self.client, &self.operator_ns, &self.static_ns, fallback).await?;
        let client = answering_first(client, &self.client, &self.operator_ns).await?;
        let mut lost = 0u64;
        let mut past_cutoff = 0u64;
        let mut lost_examples: BTreeMap<u64, String> = BTreeMap::new();
        for (i, seq) in prog.acked.iter().enumerate() {
            let key = format!("{PREFIX}{seq:010}");
            let mut got = None;
            for _ in 0..5 {
                match client.get(&key).await {
                    Ok(v) => {
                        got = Some(v);
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
            let ok = got
                .flatten()
                .is_some_and(|v| v == seq.to_string().into_bytes());
            let revision = prog.revisions.get(i).copied().unwrap_or_default();
            let excused = prog.cutoff.is_some_and(|c| revision > c)
                && prog.cutoff_end.is_none_or(|end| i < end);
            if !ok && excused {
                past_cutoff += 1;
            } else if !ok {
                lost += 1;
                if lost_examples.len() < 5 {
                    lost_examples.insert(*seq, key);
                }
            }
        }
        if !lost_examples.is_empty() {
            tracing::error!(?lost_examples, "acknowledged writes missing");
        }
        if past_cutoff > 0 {
            tracing::info!(
                past_cutoff,
                cutoff = ?prog.cutoff,
                "acknowledged writes above the cut-off revision missing (expected)"
            );
        }
        Ok(LoadReport {
            writes_acknowledged: prog.acked.len() as u64,
            writes_failed: prog.failed,
            writes_lost: lost,
            longest_write_gap_ms: u64::try_from(prog.longest_gap.as_millis()).unwrap_or(u64::MAX),
            longest_gap_at_s: prog.longest_gap_at.as_secs_f64(),
            writes_lost_past_cutoff: past_cutoff,
            last_write_error: prog.last_write_error.clone(),
        })
    }
}
