//! A writer that follows the leader: each put goes to the member that leads now (asked of every
//! member at once, the first to say it leads wins). It measures whether the *cluster* keeps
//! taking writes while one member is held (a defragmentation), which the main write load cannot
//! tell apart from the stall of a client attached to the held member: etcd answers a put only
//! after the member that received it applied it, and a member being defragmented applies
//! nothing until it is done.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use membership::{EtcdClient, MemberUrl};
use tokio::sync::Mutex;

const PUT_TIMEOUT: Duration = Duration::from_secs(2);
/// A member that does not answer its status this fast is not asked whether it leads.
const ASK_TIMEOUT: Duration = Duration::from_millis(100);

/// A running probe.
pub struct LeaderProbe {
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Instant>>>,
    failed: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for LeaderProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderProbe").finish_non_exhaustive()
    }
}

async fn leader(client: &EtcdClient, urls: &[MemberUrl]) -> Option<MemberUrl> {
    let asks = urls.iter().map(|u| async move {
        let s = tokio::time::timeout(ASK_TIMEOUT, client.status_of(u))
            .await
            .ok()?
            .ok()?;
        (s.leader != 0 && s.leader == s.member_id).then(|| u.clone())
    });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .next()
}

impl LeaderProbe {
    /// Starts putting `/sandbox-probe/<seq>` through the leader among `urls`.
    pub fn start(client: EtcdClient, urls: Vec<MemberUrl>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(Mutex::new(0));
        let (s, a, f) = (stop.clone(), acks.clone(), failed.clone());
        let task = tokio::spawn(async move {
            let mut seq = 0u64;
            while !s.load(Ordering::SeqCst) {
                // Asked before every put: leadership moves during the window.
                let Some(url) = leader(&client, &urls).await else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let key = format!("/sandbox-probe/{seq:08}");
                let put = client.put_at(&url, &key, seq.to_string().into_bytes());
                match tokio::time::timeout(PUT_TIMEOUT, put).await {
                    Ok(Ok(_)) => a.lock().await.push(Instant::now()),
                    _ => *f.lock().await += 1,
                }
                seq += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Self {
            stop,
            acks,
            failed,
            task,
        }
    }

    /// Stops it; returns the acknowledged writes, the failed ones and the longest time without
    /// an acknowledgement (from `since`, and up to now).
    pub async fn finish(self, since: Instant) -> (usize, u64, Duration) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let acks = self.acks.lock().await;
        let mut last = since;
        let mut longest = Duration::ZERO;
        for at in acks.iter().filter(|at| **at >= since) {
            longest = longest.max(at.duration_since(last));
            last = *at;
        }
        longest = longest.max(last.elapsed());
        (acks.len(), *self.failed.lock().await, longest)
    }
}
