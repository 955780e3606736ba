//! Watches, served straight from etcd watches the way kube-apiserver's etcd3 watcher does
//! (without its watch cache):
//!
//! - `resourceVersion` unset or `"0"`: synthetic `ADDED` events for every matching object at
//!   the current revision, then changes after it; with `sendInitialEvents=true` the initial
//!   events end with a `BOOKMARK` annotated `k8s.io/initial-events-end: "true"`;
//! - `resourceVersion=N`: every change after revision N. If N was compacted the stream carries
//!   one `ERROR` event with a `Status` of code 410, reason `Expired` (what the real server sends,
//!   and what kube-runtime's watcher reacts to by re-listing);
//! - `allowWatchBookmarks=true`: `BOOKMARK` events from etcd progress notifications, requested
//!   every `bookmark_interval`;
//! - selectors are applied to both the old and the new state, so an object leaving the
//!   selection is seen as `DELETED` and one entering it as `ADDED`;
//! - `timeoutSeconds` ends the stream (default 30 minutes).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use etcd_client::EventType;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::selectors::Selectors;
use crate::state::{State, from_storage};
use crate::store::{Stored, decode};
use crate::verbs::{ListOptions, Target, selectors, store_err};

/// Parameters of one watch.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// Selectors and `resourceVersion`.
    pub list: ListOptions,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: bool,
    /// `timeoutSeconds`.
    pub timeout: Duration,
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Send the current state first (`resourceVersion` unset or `0`).
    CurrentState,
    /// Changes after this revision.
    After(i64),
}

/// Parses a watch's `resourceVersion`.
pub fn parse_start(rv: &str) -> Result<Start, ApiError> {
    match rv {
        "" | "0" => Ok(Start::CurrentState),
        other => other
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(Start::After)
            .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {other:?}"))),
    }
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn bookmark(t: &Target, revision: i64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": revision.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": t.info.kind, "apiVersion": t.info.api_version(), "metadata": meta}),
    )
}

/// What a change looks like through a selector: (event type, object) or nothing.
pub fn classify<'a>(
    sel: &Selectors,
    old: Option<&'a Value>,
    new: Option<&'a Value>,
) -> Option<(&'static str, &'a Value)> {
    let old_match = old.filter(|o| sel.matches(o));
    let new_match = new.filter(|n| sel.matches(n));
    match (old_match, new_match, new) {
        (None, Some(n), _) => Some(("ADDED", n)),
        (Some(_), Some(n), _) => Some(("MODIFIED", n)),
        (Some(o), None, None) => Some(("DELETED", o)),
        (Some(_), None, Some(n)) => Some(("DELETED", n)),
        (None, None, _) => None,
    }
}

/// Validates a watch request and starts it; the receiver yields newline-delimited JSON events.
pub fn start(
    state: Arc<State>,
    t: Target,
    opts: WatchOptions,
) -> Result<mpsc::Receiver<Bytes>, ApiError> {
    let sel = selectors(&t.info, &opts.list)?;
    let start = parse_start(&opts.list.resource_version)?;
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + opts.timeout;
        if let Err(e) = run(&state, &t, &sel, &opts, start, deadline, &tx).await {
            tracing::debug!(resource = %t.info.resource, error = %e, "API stand-in: watch ended with an error");
            let _ = tx.send(line("ERROR", &e.status_body())).await;
        }
    });
    Ok(rx)
}

async fn run(
    state: &State,
    t: &Target,
    sel: &Selectors,
    opts: &WatchOptions,
    start: Start,
    deadline: tokio::time::Instant,
    tx: &mpsc::Sender<Bytes>,
) -> Result<(), ApiError> {
    let prefix = t
        .info
        .collection_prefix(state.prefix(), t.namespace.as_deref());
    let from = match start {
        Start::After(rv) => rv + 1,
        Start::CurrentState => match send_current_state(state, t, sel, opts, &prefix, tx).await? {
            ControlFlow::Continue(revision) => revision + 1,
            ControlFlow::Break(()) => return Ok(()),
        },
    };
    let mut client = state.store.client().watch_client();
    let mut stream = open_watch(state, &mut client, &prefix, from).await?;
    let mut ticker = tokio::time::interval(state.config.bookmark_interval);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = tx.closed() => return Ok(()),
            _ = tokio::time::sleep_until(deadline) => return Ok(()),
            _ = ticker.tick(), if opts.allow_bookmarks => {
                if let Err(e) = stream.request_progress().await {
                    tracing::debug!(error = %e, "API stand-in: etcd progress request failed");
                }
            }
            msg = stream.message() => {
                let resp = match msg {
                    Ok(Some(resp)) => resp,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(ApiError::internal(format!("etcd watch: {e}"))),
                };
                if forward(t, sel, opts, from, &resp, tx).await?.is_break() {
                    return Ok(());
                }
            }
        }
    }
}

/// Sends an `ADDED` event for every matching object at the current revision (then, with
/// `sendInitialEvents`, the initial-events-end bookmark). Continues with that revision; breaks
/// when the receiver is gone.
async fn send_current_state(
    state: &State,
    t: &Target,
    sel: &Selectors,
    opts: &WatchOptions,
    prefix: &str,
    tx: &mpsc::Sender<Bytes>,
) -> Result<ControlFlow<(), i64>, ApiError> {
    let page = state
        .store
        .list(prefix, None, 0, 0)
        .await
        .map_err(store_err)?;
    for s in page.items {
        let obj = from_storage(&t.info, s.object);
        if sel.matches(&obj) && tx.send(line("ADDED", &obj)).await.is_err() {
            return Ok(ControlFlow::Break(()));
        }
    }
    if opts.send_initial_events && tx.send(bookmark(t, page.revision, true)).await.is_err() {
        return Ok(ControlFlow::Break(()));
    }
    Ok(ControlFlow::Continue(page.revision))
}

/// Opens the etcd watch on `prefix` from revision `from` (with previous values).
async fn open_watch(
    state: &State,
    client: &mut etcd_client::WatchClient,
    prefix: &str,
    from: i64,
) -> Result<etcd_client::WatchStream, ApiError> {
    let options = etcd_client::WatchOptions::new()
        .with_prefix()
        .with_start_revision(from)
        .with_prev_key();
    tokio::time::timeout(
        state.config.etcd_timeout,
        client.watch(prefix.to_string(), Some(options)),
    )
    .await
    .map_err(|_| ApiError::timeout("etcd watch"))?
    .map_err(|e| ApiError::internal(e.to_string()))
}

/// Forwards one etcd watch response: its events through the selectors, or a bookmark for a
/// progress notification. Breaks when the watch ends (canceled, or the receiver is gone).
async fn forward(
    t: &Target,
    sel: &Selectors,
    opts: &WatchOptions,
    from: i64,
    resp: &etcd_client::WatchResponse,
    tx: &mpsc::Sender<Bytes>,
) -> Result<ControlFlow<()>, ApiError> {
    if resp.canceled() {
        if resp.compact_revision() > 0 {
            tracing::debug!(
                from,
                compacted = resp.compact_revision(),
                "watch from a compacted revision"
            );
            return Err(ApiError::expired("watch"));
        }
        return Ok(ControlFlow::Break(()));
    }
    if resp.created() && resp.events().is_empty() {
        return Ok(ControlFlow::Continue(()));
    }
    if resp.events().is_empty() {
        if opts.allow_bookmarks {
            let rev = resp.header().map_or(0, |h| h.revision());
            if rev > 0 && tx.send(bookmark(t, rev, false)).await.is_err() {
                return Ok(ControlFlow::Break(()));
            }
        }
        return Ok(ControlFlow::Continue(()));
    }
    for ev in resp.events() {
        let Some(out) = convert(t, sel, ev) else {
            continue;
        };
        if tx.send(out).await.is_err() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

fn decoded(t: &Target, kv: &etcd_client::KeyValue, revision: i64) -> Option<Value> {
    let key = String::from_utf8_lossy(kv.key()).to_string();
    decode(&key, kv.value(), revision)
        .ok()
        .map(|s: Stored| from_storage(&t.info, s.object))
}

fn convert(t: &Target, sel: &Selectors, ev: &etcd_client::Event) -> Option<Bytes> {
    let kv = ev.kv()?;
    match ev.event_type() {
        EventType::Put => {
            let new = decoded(t, kv, kv.mod_revision())?;
            let old = ev.prev_kv().and_then(|p| decoded(t, p, p.mod_revision()));
            classify(sel, old.as_ref(), Some(&new)).map(|(ty, o)| line(ty, o))
        }
        EventType::Delete => {
            // The deleted object is reported at the deletion's revision, as the real server does.
            let old = ev
                .prev_kv()
                .and_then(|p| decoded(t, p, kv.mod_revision()))?;
            classify(sel, Some(&old), None).map(|(ty, o)| line(ty, o))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::selectors::LabelSelector;

    #[test]
    fn start_parsing() {
        assert_eq!(parse_start("").unwrap(), Start::CurrentState);
        assert_eq!(parse_start("0").unwrap(), Start::CurrentState);
        assert_eq!(parse_start("12").unwrap(), Start::After(12));
        assert_eq!(parse_start("x").unwrap_err().code, 400);
    }

    #[test]
    fn selector_transitions() {
        let sel = Selectors {
            labels: LabelSelector::parse("app=web").unwrap(),
            ..Selectors::default()
        };
        let web = json!({"metadata": {"labels": {"app": "web"}}});
        let db = json!({"metadata": {"labels": {"app": "db"}}});
        assert_eq!(classify(&sel, None, Some(&web)).unwrap().0, "ADDED");
        assert!(classify(&sel, None, Some(&db)).is_none());
        assert_eq!(
            classify(&sel, Some(&web), Some(&web)).unwrap().0,
            "MODIFIED"
        );
        assert_eq!(classify(&sel, Some(&db), Some(&web)).unwrap().0, "ADDED");
        let (ty, obj) = classify(&sel, Some(&web), Some(&db)).unwrap();
        assert_eq!((ty, obj), ("DELETED", &db));
        assert_eq!(classify(&sel, Some(&web), None).unwrap().0, "DELETED");
        assert!(classify(&sel, Some(&db), None).is_none());
    }
}
