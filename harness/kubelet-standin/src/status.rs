//! Pod status as a pure function of what the agent observed about its processes.
//!
//! The pod worker records [`PodObservation`] (one [`ContainerObservation`] per init and app
//! container); [`pod_status`] turns it into the `PodStatus` the stand-in publishes on the
//! mirror pod (static pods) or on the pod itself (API pods). Phase rules follow the kubelet:
//!
//! - init containers not all succeeded → `Pending`, or `Failed` when one failed and
//!   `restartPolicy` is `Never`;
//! - any app container waiting for its first start → `Pending`; any running → `Running`;
//! - all stopped: `Always` → `Running` (it will restart), all exit 0 → `Succeeded`,
//!   `Never` → `Failed`, else `Running`.
//!
//! Conditions keep their `lastTransitionTime` from the previous status when their status did
//! not change; `now` is an input (no clock in here).

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// How a container run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
    pub container_id: String,
}

/// The state of one container as the agent saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerPhase {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
        /// Startup probe passed (or none).
        started: bool,
        /// Readiness probe passed (or none and started).
        ready: bool,
        container_id: String,
    },
    Terminated(Termination),
}

/// One container's observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerObservation {
    pub name: String,
    pub image: String,
    pub state: ContainerPhase,
    pub last_termination: Option<Termination>,
    pub restart_count: u32,
}

impl ContainerObservation {
    /// A container that has not been started yet.
    pub fn new(name: &str, image: &str) -> Self {
        ContainerObservation {
            name: name.to_string(),
            image: image.to_string(),
            state: ContainerPhase::Waiting {
                reason: "PodInitializing".into(),
                message: None,
            },
            last_termination: None,
            restart_count: 0,
        }
    }

    fn ready(&self) -> bool {
        matches!(self.state, ContainerPhase::Running { ready: true, .. })
    }

    fn succeeded(&self) -> bool {
        matches!(&self.state, ContainerPhase::Terminated(t) if t.exit_code == 0)
    }

    fn failed(&self) -> bool {
        matches!(&self.state, ContainerPhase::Terminated(t) if t.exit_code != 0)
    }
}

/// Everything the agent observed about one pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodObservation {
    pub init_containers: Vec<ContainerObservation>,
    pub containers: Vec<ContainerObservation>,
    pub start_time: Option<Timestamp>,
    pub host_ip: String,
    pub pod_ip: String,
    /// A pod-level failure that ends the pod (reason, message).
    pub failure: Option<(String, String)>,
}

impl PodObservation {
    /// The initial observation for `spec`: every container waiting.
    pub fn for_spec(spec: &PodSpec, ip: &str) -> Self {
        PodObservation {
            init_containers: spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| ContainerObservation::new(&c.name, c.image.as_deref().unwrap_or("")))
                .collect(),
            containers: spec
                .containers
                .iter()
                .map(|c| ContainerObservation::new(&c.name, c.image.as_deref().unwrap_or("")))
                .collect(),
            start_time: None,
            host_ip: ip.to_string(),
            pod_ip: ip.to_string(),
            failure: None,
        }
    }
}

/// Pod phase (the API's strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// The pod's restart policy, defaulted to `Always`.
pub fn restart_policy(spec: &PodSpec) -> &str {
    spec.restart_policy.as_deref().unwrap_or("Always")
}

/// The kubelet's phase rules (see module docs).
pub fn pod_phase(spec: &PodSpec, obs: &PodObservation) -> Phase {
    let policy = restart_policy(spec);
    if obs.failure.is_some() {
        return Phase::Failed;
    }
    if !obs
        .init_containers
        .iter()
        .all(ContainerObservation::succeeded)
    {
        if policy == "Never" && obs.init_containers.iter().any(ContainerObservation::failed) {
            return Phase::Failed;
        }
        return Phase::Pending;
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &obs.containers {
        match &c.state {
            ContainerPhase::Running { .. } => running += 1,
            ContainerPhase::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            ContainerPhase::Waiting { .. } => {
                if c.last_termination.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if waiting > 0 {
        Phase::Pending
    } else if running > 0 {
        Phase::Running
    } else if stopped > 0 {
        if policy == "Always" {
            Phase::Running
        } else if stopped == succeeded {
            Phase::Succeeded
        } else if policy == "Never" {
            Phase::Failed
        } else {
            Phase::Running
        }
    } else {
        Phase::Pending
    }
}

fn time(t: Timestamp) -> Time {
    Time(t)
}

fn terminated(t: &Termination) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: Some(t.reason.clone()),
        message: t.message.clone().filter(|m| !m.is_empty()),
        started_at: t.started_at.map(time),
        finished_at: Some(time(t.finished_at)),
        container_id: Some(t.container_id.clone()).filter(|s| !s.is_empty()),
    }
}

fn container_status(c: &ContainerObservation) -> ContainerStatus {
    let (state, started, container_id) = match &c.state {
        ContainerPhase::Waiting { reason, message } => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            false,
            c.last_termination.as_ref().map(|t| t.container_id.clone()),
        ),
        ContainerPhase::Running {
            started_at,
            started,
            container_id,
            ..
        } => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time(*started_at)),
                }),
                ..Default::default()
            },
            *started,
            Some(container_id.clone()),
        ),
        ContainerPhase::Terminated(t) => (
            ContainerState {
                terminated: Some(terminated(t)),
                ..Default::default()
            },
            false,
            Some(t.container_id.clone()),
        ),
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: String::new(),
        container_id: container_id.filter(|s| !s.is_empty()),
        ready: c.ready(),
        restart_count: i32::try_from(c.restart_count).unwrap_or(i32::MAX),
        started: Some(started),
        state: Some(state),
        last_state: c.last_termination.as_ref().map(|t| ContainerState {
            terminated: Some(terminated(t)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn condition(
    previous: Option<&PodStatus>,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let last_transition = previous
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(time(now));
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: Some(last_transition),
        last_probe_time: None,
        observed_generation: None,
    }
}

/// The `Initialized` condition's message: the init containers that have not succeeded, if any.
fn not_initialized_message(obs: &PodObservation) -> Option<String> {
    let incomplete: Vec<&str> = obs
        .init_containers
        .iter()
        .filter(|c| !c.succeeded())
        .map(|c| c.name.as_str())
        .collect();
    (!incomplete.is_empty()).then(|| {
        format!(
            "containers with incomplete status: [{}]",
            incomplete.join(" ")
        )
    })
}

/// Whether the pod is ready, and the reason and message of the `Ready` conditions if not.
fn readiness(obs: &PodObservation, phase: Phase) -> (bool, Option<&'static str>, Option<String>) {
    let unready: Vec<&str> = obs
        .containers
        .iter()
        .filter(|c| !c.ready())
        .map(|c| c.name.as_str())
        .collect();
    let ready = unready.is_empty() && !phase.is_terminal();
    if ready {
        (true, None, None)
    } else if phase.is_terminal() {
        (false, Some("PodCompleted"), None)
    } else {
        (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    }
}

/// The pod's conditions, keeping unchanged ones' transition times from `previous`.
fn pod_conditions(
    obs: &PodObservation,
    phase: Phase,
    previous: Option<&PodStatus>,
    now: Timestamp,
) -> Vec<PodCondition> {
    let not_initialized = not_initialized_message(obs);
    let initialized = not_initialized.is_none();
    let (ready, ready_reason, ready_message) = readiness(obs, phase);
    vec![
        condition(previous, "PodReadyToStartContainers", true, None, None, now),
        condition(
            previous,
            "Initialized",
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
            not_initialized,
            now,
        ),
        condition(
            previous,
            "Ready",
            ready,
            ready_reason,
            ready_message.clone(),
            now,
        ),
        condition(
            previous,
            "ContainersReady",
            ready,
            ready_reason,
            ready_message,
            now,
        ),
        condition(previous, "PodScheduled", true, None, None, now),
    ]
}

/// The status to publish for a pod with `spec` given what was observed.
pub fn pod_status(
    spec: &PodSpec,
    obs: &PodObservation,
    previous: Option<&PodStatus>,
    now: Timestamp,
) -> PodStatus {
    let phase = pod_phase(spec, obs);
    let (reason, message) = match &obs.failure {
        Some((r, m)) => (Some(r.clone()), Some(m.clone())),
        None => (None, None),
    };
    PodStatus {
        phase: Some(phase.as_str().to_string()),
        conditions: Some(pod_conditions(obs, phase, previous, now)),
        host_ip: Some(obs.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: obs.host_ip.clone(),
        }]),
        pod_ip: Some(obs.pod_ip.clone()),
        pod_ips: Some(vec![PodIP {
            ip: obs.pod_ip.clone(),
        }]),
        start_time: obs.start_time.map(time),
        init_container_statuses: (!obs.init_containers.is_empty())
            .then(|| obs.init_containers.iter().map(container_status).collect()),
        container_statuses: Some(obs.containers.iter().map(container_status).collect()),
        qos_class: Some(crate::qos::qos_class(spec).to_owned()),
        reason,
        message,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
