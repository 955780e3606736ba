//! Pod events (the kubelet's event recorder stand-in): `Started`, `BackOff`, `Failed`.
//!
//! Derived purely from two successive observations ([`events_between`]), so the worker needs
//! no API access; the publisher records them on the pod (or mirror pod) with reporter
//! `kubelet` / instance = node name.

use crate::status::{ContainerObservation, ContainerPhase, PodObservation};

/// One event to record on a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    /// The container, as the kubelet names it: `spec.containers{name}`.
    pub field_path: String,
}

const START_FAILURES: &[&str] = &[
    "CreateContainerError",
    "CreateContainerConfigError",
    "RunContainerError",
];

/// The event (reason, action) a kubelet records for an image pull waiting reason.
fn image_pull_event(waiting: &str) -> Option<(&'static str, &'static str)> {
    match waiting {
        "ErrImagePull" => Some(("Failed", "PullImage")),
        "ImagePullBackOff" => Some(("BackOff", "PullImage")),
        _ => None,
    }
}

/// The id of the latest run of a container (running, terminated, or backing off after it).
fn latest_run(c: &ContainerObservation) -> Option<&str> {
    match &c.state {
        ContainerPhase::Running { container_id, .. } => Some(container_id),
        ContainerPhase::Terminated(t) => Some(&t.container_id),
        ContainerPhase::Waiting { .. } => {
            c.last_termination.as_ref().map(|t| t.container_id.as_str())
        }
    }
}

fn container_events(
    field: &str,
    prev: Option<&ContainerObservation>,
    next: &ContainerObservation,
    out: &mut Vec<PodEvent>,
) {
    let field_path = format!("spec.{field}{{{}}}", next.name);
    // A run we have not seen yet started, even if observations coalesced and it already ended.
    if let Some(id) = latest_run(next)
        && prev.and_then(latest_run) != Some(id)
    {
        out.push(PodEvent {
            warning: false,
            reason: "Started",
            action: "StartContainer",
            note: format!("Started container {}", next.name),
            field_path: field_path.clone(),
        });
    }
    if let ContainerPhase::Waiting { reason, message } = &next.state {
        if prev.map(|p| &p.state) == Some(&next.state) {
            return;
        }
        let note = message.clone().unwrap_or_default();
        if reason == "CrashLoopBackOff" {
            out.push(PodEvent {
                warning: true,
                reason: "BackOff",
                action: "StartContainer",
                note: if note.is_empty() {
                    format!("Back-off restarting failed container {}", next.name)
                } else {
                    note
                },
                field_path,
            });
        } else if let Some((reason, action)) = image_pull_event(reason) {
            out.push(PodEvent {
                warning: true,
                reason,
                action,
                note,
                field_path,
            });
        } else if START_FAILURES.contains(&reason.as_str()) {
            out.push(PodEvent {
                warning: true,
                reason: "Failed",
                action: "StartContainer",
                note: format!("Error: {reason}: {note}"),
                field_path,
            });
        }
    }
}

/// The events implied by going from `prev` to `next` (pure).
pub fn events_between(prev: &PodObservation, next: &PodObservation) -> Vec<PodEvent> {
    let mut out = Vec::new();
    for (i, c) in next.init_containers.iter().enumerate() {
        container_events("initContainers", prev.init_containers.get(i), c, &mut out);
    }
    for (i, c) in next.containers.iter().enumerate() {
        container_events("containers", prev.containers.get(i), c, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn running(id: &str) -> ContainerPhase {
        ContainerPhase::Running {
            started_at: Timestamp::UNIX_EPOCH,
            started: true,
            ready: true,
            container_id: id.into(),
        }
    }

    #[test]
    fn started_backoff_and_failed() {
        let mut a = PodObservation::default();
        a.containers.push(ContainerObservation::new("etcd", "etcd"));
        let mut b = a.clone();
        b.containers[0].state = running("x/1");
        let ev = events_between(&a, &b);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].reason, "Started");
        assert!(
            events_between(&b, &b).is_empty(),
            "no event without a change"
        );
        let mut c = b.clone();
        c.containers[0].state = ContainerPhase::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: Some("back-off 10s".into()),
        };
        let ev = events_between(&b, &c);
        assert_eq!(
            (ev[0].reason, ev[0].warning, ev[0].note.as_str()),
            ("BackOff", true, "back-off 10s")
        );
        let mut d = c.clone();
        d.containers[0].state = running("x/2");
        assert_eq!(events_between(&c, &d)[0].reason, "Started");
        // A run that started and ended between two observations still gets its Started.
        let mut f = d.clone();
        f.containers[0].state = ContainerPhase::Terminated(crate::status::Termination {
            exit_code: 0,
            signal: None,
            reason: "Completed".into(),
            message: None,
            started_at: None,
            finished_at: Timestamp::UNIX_EPOCH,
            container_id: "x/3".into(),
        });
        assert_eq!(events_between(&d, &f)[0].reason, "Started");
        let mut e = d.clone();
        e.containers[0].state = ContainerPhase::Waiting {
            reason: "CreateContainerError".into(),
            message: Some("image nginx is not in the table".into()),
        };
        assert_eq!(events_between(&d, &e)[0].reason, "Failed");
        let mut g = d.clone();
        g.containers[0].state = ContainerPhase::Waiting {
            reason: "ImagePullBackOff".into(),
            message: Some("Back-off pulling image: etcd:3.5.9 is not in the store".into()),
        };
        let ev = &events_between(&e, &g)[0];
        assert_eq!(
            (ev.reason, ev.action, ev.warning),
            ("BackOff", "PullImage", true)
        );
    }
}
