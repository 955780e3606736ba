//! A watch **through kube-apiserver** on the probe's ConfigMaps ([`super::api_probe`]), held as
//! an informer holds one: it lists once, then watches from the list's resourceVersion, and
//! after every end of the stream watches again from the last resourceVersion it saw. Where the
//! server can no longer serve from there (410 Gone: a kube-apiserver that restarted has a
//! watch cache starting later), it lists again and takes what the list shows that no event
//! did (a *relist*). Every object it is shown is logged with how (an event or a relist), when,
//! and its resourceVersion, so that the scenario can tell, per acknowledged create, whether
//! the watcher saw it, once, in order, and whether time (the resourceVersion) ever went
//! backwards.
//!
//! resourceVersions are opaque to clients by contract; kube-apiserver's are etcd's store
//! revisions, which is what "time going backwards" means here (a restore without the revision
//! bump would show it).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use tokio::sync::Mutex;

/// Server-side bound on one watch request (below the client's 295 s read timeout).
const WATCH_TIMEOUT_S: u32 = 240;
/// A stream that ends this much before its server-side timeout ended early: a reconnect.
const EARLY: Duration = Duration::from_secs(5);
/// Pause before watching again after a failure.
const RETRY: Duration = Duration::from_millis(200);

/// How the watcher was shown an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// An `ADDED` event.
    Event,
    /// A list after 410 Gone: the events in between were never delivered.
    Relist,
}

/// One object shown to the watcher.
#[derive(Clone, Debug)]
pub struct Seen {
    pub name: String,
    pub resource_version: i64,
    pub at: Instant,
    pub via: Via,
}

/// Everything the watcher saw.
#[derive(Clone, Debug, Default)]
pub struct WatchLog {
    pub seen: Vec<Seen>,
    /// When a watch stream ended early or could not be opened.
    pub reconnects: Vec<Instant>,
    /// When the watcher had to list again (410 Gone).
    pub relists: Vec<Instant>,
    /// A resourceVersion below one seen before: (the highest before, the lower one, when).
    pub backwards: Vec<(i64, i64, Instant)>,
    /// The last error, for a failure message.
    pub last_error: Option<String>,
}

impl WatchLog {
    /// Records a resourceVersion; a lower one than the highest so far went backwards.
    fn advance(&mut self, rv: i64, at: Instant, highest: &mut i64) {
        if rv < *highest {
            self.backwards.push((*highest, rv, at));
        }
        *highest = (*highest).max(rv);
    }
}

/// A running watcher (stopped by [`ApiWatch::finish`]).
pub struct ApiWatch {
    log: Arc<Mutex<WatchLog>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ApiWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiWatch").finish_non_exhaustive()
    }
}

impl ApiWatch {
    /// Lists and starts watching ConfigMaps in `namespace` through `client`.
    pub fn start(client: Client, namespace: &str) -> Self {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let log = Arc::new(Mutex::new(WatchLog::default()));
        let task = tokio::spawn(run(api, log.clone()));
        Self { log, task }
    }

    /// Whether it has been shown `name` (by an event or a relist).
    pub async fn has_seen(&self, name: &str) -> bool {
        self.log.lock().await.seen.iter().any(|s| s.name == name)
    }

    /// Those of `names` it has not been shown yet.
    pub async fn unseen<'a>(&self, names: &[&'a str]) -> Vec<&'a str> {
        let log = self.log.lock().await;
        let shown: BTreeSet<&str> = log.seen.iter().map(|s| s.name.as_str()).collect();
        names
            .iter()
            .copied()
            .filter(|n| !shown.contains(n))
            .collect()
    }

    /// Stops watching and returns what it saw.
    pub async fn finish(self) -> WatchLog {
        self.task.abort();
        let _ = self.task.await;
        self.log.lock().await.clone()
    }
}

fn rv_of(meta: &kube::api::ObjectMeta) -> i64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn run(api: Api<ConfigMap>, log: Arc<Mutex<WatchLog>>) {
    let mut highest = 0i64;
    let mut rv = relist(&api, &log, &mut highest).await;
    loop {
        let opened = Instant::now();
        let params = WatchParams::default()
            .timeout(WATCH_TIMEOUT_S)
            .disable_bookmarks();
        let ended = match api.watch(&params, &rv.to_string()).await {
            Ok(stream) => follow(stream.boxed(), &log, &mut rv, &mut highest).await,
            Err(e) => End::Failed(e.to_string()),
        };
        match ended {
            End::Gone => {
                rv = relist(&api, &log, &mut highest).await;
            }
            End::Failed(e) => {
                let mut l = log.lock().await;
                l.reconnects.push(Instant::now());
                l.last_error = Some(e);
                drop(l);
                tokio::time::sleep(RETRY).await;
            }
            End::Closed => {
                let timeout = Duration::from_secs(u64::from(WATCH_TIMEOUT_S));
                if opened.elapsed() + EARLY < timeout {
                    log.lock().await.reconnects.push(Instant::now());
                }
            }
        }
    }
}

/// Why a watch stream ended.
enum End {
    /// 410 Gone: list again.
    Gone,
    /// An error (the stream broke, the server answered an error): watch again.
    Failed(String),
    /// The server closed it (its timeout, or a restart): watch again.
    Closed,
}

async fn follow(
    mut stream: futures::stream::BoxStream<'_, kube::Result<WatchEvent<ConfigMap>>>,
    log: &Mutex<WatchLog>,
    rv: &mut i64,
    highest: &mut i64,
) -> End {
    loop {
        let event = match stream.try_next().await {
            Ok(Some(e)) => e,
            Ok(None) => return End::Closed,
            Err(e) => return End::Failed(e.to_string()),
        };
        let now = Instant::now();
        let mut l = log.lock().await;
        match event {
            WatchEvent::Added(cm) => {
                let at = rv_of(&cm.metadata);
                l.advance(at, now, highest);
                l.seen.push(Seen {
                    name: cm.metadata.name.unwrap_or_default(),
                    resource_version: at,
                    at: now,
                    via: Via::Event,
                });
                *rv = at.max(*rv);
            }
            WatchEvent::Modified(cm) | WatchEvent::Deleted(cm) => {
                let at = rv_of(&cm.metadata);
                l.advance(at, now, highest);
                *rv = at.max(*rv);
            }
            WatchEvent::Bookmark(b) => {
                let at = b.metadata.resource_version.parse().unwrap_or(0);
                l.advance(at, now, highest);
                *rv = at.max(*rv);
            }
            WatchEvent::Error(e) if e.code == 410 => return End::Gone,
            WatchEvent::Error(e) => return End::Failed(format!("{} ({})", e.message, e.code)),
        }
    }
}

/// Lists until a list succeeds; records what it shows that was not seen before. Returns the
/// list's resourceVersion.
async fn relist(api: &Api<ConfigMap>, log: &Mutex<WatchLog>, highest: &mut i64) -> i64 {
    loop {
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                let now = Instant::now();
                let mut l = log.lock().await;
                let known: BTreeSet<String> = l.seen.iter().map(|s| s.name.clone()).collect();
                let at = list
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if *highest > 0 {
                    l.relists.push(now);
                }
                l.advance(at, now, highest);
                for cm in list.items {
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    if !known.contains(&name) {
                        l.seen.push(Seen {
                            name,
                            resource_version: rv_of(&cm.metadata),
                            at: now,
                            via: Via::Relist,
                        });
                    }
                }
                return at;
            }
            Err(e) => {
                log.lock().await.last_error = Some(format!("list: {e}"));
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}
