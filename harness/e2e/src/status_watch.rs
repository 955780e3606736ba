//! Watches `EtcdCluster/cluster` for the whole of a `sandbox up` or a scenario and keeps what a
//! normal run must never show an admin: the aggregate `Degraded` condition True, or a status
//! with a hole where a name belongs (a started member without a name, or a condition message
//! with an empty field in it, such as `EtcdMembersProgressing:  restarting`).
//!
//! It watches rather than polls, so a status that was true for one write only is seen too.
//! [`sightings_in`] is the pure check; [`StatusWatch`] runs it on every version of the status.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use etcd_operator::api::{EtcdClusterStatus, StoredCluster};
use futures::StreamExt;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

/// Something a normal run must not show, and when it was first seen.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Sighting {
    pub at_s: f64,
    pub what: String,
}

/// What in `status` a normal run must never show (pure).
pub fn sightings_in(status: &EtcdClusterStatus) -> Vec<String> {
    let mut out = Vec::new();
    for c in &status.conditions {
        if c.type_ == "Degraded" && c.status == "True" {
            out.push(format!("Degraded=True: {}", c.message));
        }
        if has_empty_field(&c.message) {
            out.push(format!(
                "{} message has an empty field: {:?}",
                c.type_, c.message
            ));
        }
    }
    for m in &status.members {
        if m.started && m.name.is_empty() {
            out.push(format!("started member {} has no name", m.id));
        }
    }
    out
}

/// True when a generated sentence shows the mark of an empty interpolation.
fn has_empty_field(message: &str) -> bool {
    ["  ", " ;", " )", "( ", ": ;", "()"]
        .iter()
        .any(|p| message.contains(p))
        || message.starts_with(' ')
        || message.ends_with(' ')
}

/// A background watch of the EtcdCluster that records every [`Sighting`]; stopped on drop.
#[derive(Debug)]
pub struct StatusWatch {
    seen: Arc<Mutex<Vec<Sighting>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusWatch {
    /// Starts watching; times are measured from `started`.
    pub fn start(client: kube::Client, started: Instant) -> Self {
        let seen: Arc<Mutex<Vec<Sighting>>> = Arc::default();
        let sink = Arc::clone(&seen);
        // As stored: a spec the operator cannot decode leaves the status readable.
        let api: Api<StoredCluster> = Api::all(client);
        let task = tokio::spawn(async move {
            // With back-off: once the API is gone, a watcher without it retries in a loop that
            // never yields (a refused loopback connect is ready at once), so the task could not
            // be aborted and the test's runtime never shut down (seen as a scenario hanging at
            // 100% CPU after its teardown).
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                let cluster = match event {
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => c,
                    _ => continue,
                };
                let Some(status) = crate::controlplane::status_of(&cluster) else {
                    continue;
                };
                let Ok(mut seen) = sink.lock() else {
                    return;
                };
                for what in sightings_in(&status) {
                    // One line per distinct sighting: a condition stays in status for many writes.
                    if !seen.iter().any(|s| s.what == what) {
                        seen.push(Sighting {
                            at_s: started.elapsed().as_secs_f64(),
                            what,
                        });
                    }
                }
            }
        });
        Self { seen, task }
    }

    /// Everything seen so far, in order.
    pub fn sightings(&self) -> Vec<Sighting> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for StatusWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator::api::{Condition, MemberStatus};

    fn cond(type_: &str, status: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: message.into(),
            last_transition_time: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_normal_status_shows_nothing() {
        let s = EtcdClusterStatus {
            conditions: vec![
                cond("Degraded", "False", ""),
                cond(
                    "Progressing",
                    "True",
                    "EtcdMembersProgressing: n2 starting member 27ac6e4a15490aa2 for revision 1",
                ),
            ],
            ..Default::default()
        };
        assert_eq!(sightings_in(&s), Vec::<String>::new());
    }

    #[test]
    fn degraded_and_empty_names_are_seen() {
        let s = EtcdClusterStatus {
            conditions: vec![
                cond("Degraded", "True", "EtcdObserverDegraded: no endpoint"),
                cond(
                    "Progressing",
                    "True",
                    "EtcdMembersProgressing:  restarting for revision 1",
                ),
            ],
            members: vec![MemberStatus {
                id: "8e9e05c52164694d".into(),
                started: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            sightings_in(&s),
            vec![
                "Degraded=True: EtcdObserverDegraded: no endpoint".to_owned(),
                "Progressing message has an empty field: \"EtcdMembersProgressing:  restarting for revision 1\"".to_owned(),
                "started member 8e9e05c52164694d has no name".to_owned(),
            ]
        );
    }
}
