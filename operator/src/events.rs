//! Events, published off the pass and in order. Each Event is an API write (tens of
//! milliseconds where the API server's etcd syncs to disk); a pass that waited for each one
//! added that to every step it took (an install, a learner added). Events are best effort, as
//! everywhere in Kubernetes: one that fails is logged and dropped, never retried into the pass.
//! The same Event again (same reason, object and note) becomes a series, as with kubectl's
//! `x3`; a different note is a new Event.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

/// The queue to the one task that publishes, started with the first Event.
pub struct EventSink {
    client: Client,
    reporter: Reporter,
    tx: OnceLock<mpsc::UnboundedSender<(ObjectReference, Event)>>,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink")
            .field("started", &self.tx.get().is_some())
            .finish_non_exhaustive()
    }
}

impl EventSink {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            tx: OnceLock::new(),
        }
    }

    /// Queues an Event about `object` (its note cut to the API's 1 kB).
    pub fn publish(&self, object: ObjectReference, warning: bool, reason: &str, note: String) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(note.chars().take(1000).collect()),
            action: reason.to_owned(),
            secondary: None,
        };
        let tx = self.tx.get_or_init(|| {
            let (tx, mut rx) = mpsc::unbounded_channel::<(ObjectReference, Event)>();
            let (client, reporter) = (self.client.clone(), self.reporter.clone());
            tokio::spawn(async move {
                let mut recorders = Recorders::default();
                while let Some((object, ev)) = rx.recv().await {
                    let recorder = recorders.for_event(&ev, &client, &reporter);
                    if let Err(e) = recorder.publish(&ev, &object).await {
                        tracing::warn!(reason = ev.reason, error = %e, "could not publish event");
                    }
                }
            });
            tx
        });
        if tx.send((object, ev)).is_err() {
            tracing::warn!(reason, "event publisher stopped; event dropped");
        }
    }
}

/// One kube-runtime Recorder per (reason, note): a Recorder turns a repeat of an Event into a
/// series (its count patched), keyed by reason and object but not by note, so one Recorder for
/// everything merged "promoted n4" and a later "promoted n5" into one Event that kept the first
/// note. Only the very same Event becomes a series now; the map is bounded.
#[derive(Default)]
struct Recorders {
    by_event: std::collections::HashMap<(String, Option<String>), Recorder>,
}

/// Distinct Events remembered for series; past this the memory starts over.
const MAX_SERIES: usize = 256;

impl Recorders {
    fn for_event(&mut self, ev: &Event, client: &Client, reporter: &Reporter) -> &Recorder {
        if self.by_event.len() >= MAX_SERIES {
            self.by_event.clear();
        }
        self.by_event
            .entry((ev.reason.clone(), ev.note.clone()))
            .or_insert_with(|| Recorder::new(client.clone(), reporter.clone()))
    }
}
