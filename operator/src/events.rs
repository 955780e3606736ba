//! Events, published off the pass and in order. Each Event is an API write (tens of
//! milliseconds where the API server's etcd syncs to disk); a pass that waited for each one
//! added that to every step it took (an install, a learner added). Events are best effort, as
//! everywhere in Kubernetes: one that fails is logged and dropped, never retried into the pass.

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
            let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
            tokio::spawn(async move {
                while let Some((object, ev)) = rx.recv().await {
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
