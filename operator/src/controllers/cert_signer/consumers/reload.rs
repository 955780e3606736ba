//! Whether each consumer has picked up its Secret's material (`spec.clients[].reload`): pure,
//! from the time the operator wrote the material (kept in `status.certificates.consumers`, so
//! it survives an operator restart) and the consumer's pods as this pass listed them.
//!
//! A `Files` consumer has the material once its Secret is written. A `Restart` consumer has it
//! once every pod its selector picks (mirror pods of static pods included: they carry the
//! manifest's labels) has every container running, and either carries the annotation
//! [`MATERIAL_DIGEST_ANNOTATION`] with the digest of the Secret's data (its platform laid it
//! down from that material: sound even where files are laid per revision, so a container that
//! restarts from the revision before does not count) or, without the annotation, has every
//! container running since the whole second at or after the write. The kubelet reports start
//! times in whole seconds, so a pod without the annotation that restarted within the second of
//! the write cannot be told from one that restarted just before it: it is waited for, and the
//! status says why. A selector that picks no pod leaves nothing to wait for (said in status:
//! "no pod selected").
//! Pods that ended (`Succeeded`, `Failed`) hold no connection and are not waited for. A CA
//! rotation waits on [`before`] before each step; [`settle`] gives the status after this
//! pass's writes. The operator's clock and the kubelets' are taken to agree to the second.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::gate_pods::{api_server, has_ended, pod_key};
use super::{MATERIAL_DIGEST_ANNOTATION, Target};
use crate::api::{ConsumerStatus, EtcdConsumer, ReloadMode};
use crate::certs::{format_time, parse_time};

/// The annotation the kubelet puts on a static pod's mirror pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// How a consumer picks up a change, resolved from its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadPolicy {
    /// It re-reads its files on each connection.
    Files,
    /// Its pods (in `namespace`, carrying `match_labels`) must restart.
    Restart {
        namespace: String,
        match_labels: BTreeMap<String, String>,
        deadline: time::Duration,
    },
    /// `Restart` without pods: the schema refuses it, an API without CEL may still store it.
    RestartWithoutPods,
}

impl ReloadPolicy {
    /// The policy of consumer `c`, whose Secret lives in `secret_ns`.
    pub fn of(c: &EtcdConsumer, secret_ns: &str) -> Self {
        match (c.reload.mode, &c.reload.pods) {
            (ReloadMode::Files, _) => Self::Files,
            (ReloadMode::Restart, None) => Self::RestartWithoutPods,
            (ReloadMode::Restart, Some(pods)) => Self::Restart {
                namespace: pods
                    .namespace
                    .clone()
                    .unwrap_or_else(|| secret_ns.to_owned()),
                match_labels: pods.match_labels.clone(),
                deadline: time::Duration::seconds(i64::from(c.reload.deadline_seconds)),
            },
        }
    }

    pub fn mode(&self) -> ReloadMode {
        match self {
            Self::Files => ReloadMode::Files,
            Self::Restart { .. } | Self::RestartWithoutPods => ReloadMode::Restart,
        }
    }
}

/// The label selector of `labels` (`a=b,c=d`, sorted).
pub fn label_selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// One selected pod as the decision needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodStart {
    /// `<namespace>/<name>`.
    pub name: String,
    /// A kube-apiserver: the pod as the gate's rule 10 sees it (`None`: no container of the
    /// pod takes `--etcd-servers`).
    pub api_server: Option<membership::ApiServer>,
    /// The mirror pod of a static pod.
    pub mirror: bool,
    /// When its containers last started: the latest `state.running.startedAt` of its
    /// containers, `None` unless every container runs. Not `status.startTime`: that is when
    /// the kubelet took the pod, and it stays the same when a container restarts in place
    /// (which is how a kubelet restarts a crashed or killed kube-apiserver), so it cannot
    /// show that the process read its files again.
    pub started: Option<OffsetDateTime>,
    /// Its [`MATERIAL_DIGEST_ANNOTATION`]: the digest of the material it was laid down with.
    pub material: Option<String>,
}

impl PodStart {
    /// `pod` as the decision sees it; `None` for a pod that ended.
    pub fn of(pod: &Pod) -> Option<Self> {
        if has_ended(pod) {
            return None;
        }
        let status = pod.status.as_ref();
        let containers = status
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or_default();
        let starts: Option<Vec<OffsetDateTime>> = containers
            .iter()
            .map(|c| {
                let at = c.state.as_ref()?.running.as_ref()?.started_at.as_ref()?;
                OffsetDateTime::from_unix_timestamp(at.0.as_second()).ok()
            })
            .collect();
        let started = starts.and_then(|s| s.into_iter().max());
        let annotations = pod.metadata.annotations.as_ref();
        Some(Self {
            name: pod_key(pod),
            mirror: annotations.is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)),
            material: annotations.and_then(|a| a.get(MATERIAL_DIGEST_ANNOTATION).cloned()),
            started,
            api_server: api_server(pod),
        })
    }
}

/// Every kube-apiserver among the consumers' pods, by pod name.
pub fn api_servers(pods: &BTreeMap<String, PodsSeen>) -> Vec<membership::ApiServer> {
    let mut out: Vec<membership::ApiServer> = pods
        .values()
        .filter_map(|seen| match seen {
            PodsSeen::Listed(pods) => Some(pods),
            _ => None,
        })
        .flatten()
        .filter_map(|p| p.api_server.clone())
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out.dedup_by(|a, b| a.pod == b.pod);
    out
}

/// What the pass saw of a consumer's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodsSeen {
    /// `Files`: none asked for.
    NotNeeded,
    /// Sorted by name.
    Listed(Vec<PodStart>),
    /// The list failed (`forbidden`: the API refused the operator).
    Unreadable { forbidden: bool, message: String },
}

/// Whether the consumer has the material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `Files`, or every selected pod started since the write.
    Current,
    /// `Restart`, and the selector picks no pod: nothing to wait for.
    NoPods,
    /// These pods (sorted by name) do not have the material, and why.
    Waiting(Vec<(String, Behind)>),
    /// When the material was written is not on record (status lost, or a new consumer).
    WriteUnknown,
    /// `Restart` without pods named.
    NoSelector,
    /// The pods could not be listed.
    Unreadable { forbidden: bool, message: String },
}

/// Why a selected pod is taken not to have its consumer's material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behind {
    /// Not every container of it runs.
    NotRunning,
    /// It carries no digest, and its containers started before the second of the write.
    StartedBefore,
    /// It carries no digest, and its containers started within the second of the write.
    SameSecond,
    /// Its digest annotation names other material (this digest).
    OtherMaterial(String),
}

impl Behind {
    fn words(&self) -> String {
        match self {
            Self::NotRunning => "not every container runs".to_owned(),
            Self::StartedBefore => "not restarted since the write".to_owned(),
            Self::SameSecond => format!(
                "restarted within the second of the write (start times are whole seconds: whether before or after cannot be told; restart it again, or have its platform set annotation {MATERIAL_DIGEST_ANNOTATION} on it)"
            ),
            Self::OtherMaterial(d) => {
                format!("laid down with other material ({MATERIAL_DIGEST_ANNOTATION}={d})")
            }
        }
    }
}

impl Verdict {
    pub fn is_current(&self) -> bool {
        matches!(self, Verdict::Current | Verdict::NoPods)
    }
}

/// One consumer's pickup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pickup {
    pub consumer: String,
    /// `<namespace>/<name>`.
    pub secret: String,
    pub mode: ReloadMode,
    pub written: Option<OffsetDateTime>,
    pub digest: String,
    /// Every selected pod, sorted (mirror pods marked in [`Pickup::line`]).
    pub pods: Vec<PodStart>,
    pub verdict: Verdict,
    /// Not current for longer than the consumer's deadline.
    pub overdue: bool,
}

/// The whole second at or after `t`: a pod whose containers started (in whole seconds, as the
/// kubelet reports it) at or after it started after `t`.
pub fn ceil_second(t: OffsetDateTime) -> OffsetDateTime {
    let floor = t.replace_nanosecond(0).unwrap_or(t);
    if floor == t {
        t
    } else {
        floor + time::Duration::SECOND
    }
}

/// A digest of a Secret's data (16 hex digits), to recognise material on record.
pub fn digest(data: &BTreeMap<String, Vec<u8>>) -> String {
    let mut h = Sha256::new();
    for (k, v) in data {
        h.update((k.len() as u64).to_be_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_be_bytes());
        h.update(v);
    }
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Judges one consumer whose material, of digest `digest`, was written at `written`.
pub fn judge(
    policy: &ReloadPolicy,
    written: Option<OffsetDateTime>,
    digest: &str,
    pods: &PodsSeen,
) -> Verdict {
    match policy {
        ReloadPolicy::Files => return Verdict::Current,
        ReloadPolicy::RestartWithoutPods => return Verdict::NoSelector,
        ReloadPolicy::Restart { .. } => {}
    }
    let listed = match pods {
        PodsSeen::Listed(l) => l,
        PodsSeen::Unreadable { forbidden, message } => {
            return Verdict::Unreadable {
                forbidden: *forbidden,
                message: message.clone(),
            };
        }
        PodsSeen::NotNeeded => return Verdict::NoPods,
    };
    if listed.is_empty() {
        return Verdict::NoPods;
    }
    // No digest on record (status lost): annotated pods are judged by the write time too.
    let digest = Some(digest).filter(|d| !d.is_empty());
    let by_time = |p: &PodStart| p.material.is_none() || digest.is_none();
    if written.is_none() && listed.iter().any(by_time) {
        return Verdict::WriteUnknown;
    }
    let behind: Vec<(String, Behind)> = listed
        .iter()
        .filter_map(|p| Some((p.name.clone(), behind(p, written, digest)?)))
        .collect();
    if behind.is_empty() {
        Verdict::Current
    } else {
        Verdict::Waiting(behind)
    }
}

/// Why pod `p` lacks the material of `digest` written at `written` (`None`: it has it). A pod
/// without the digest annotation (or any pod, when no digest is on record) is judged by
/// `written`, which the caller has.
fn behind(p: &PodStart, written: Option<OffsetDateTime>, digest: Option<&str>) -> Option<Behind> {
    let started = match p.started {
        None => return Some(Behind::NotRunning),
        Some(s) => s,
    };
    if let (Some(m), Some(d)) = (&p.material, digest) {
        return (m != d).then(|| Behind::OtherMaterial(m.clone()));
    }
    let written = written?;
    if started >= written {
        None
    } else if started + time::Duration::SECOND >= written {
        Some(Behind::SameSecond)
    } else {
        Some(Behind::StartedBefore)
    }
}

fn pickup(
    t: &Target,
    written: Option<OffsetDateTime>,
    digest: String,
    pods: &BTreeMap<String, PodsSeen>,
    now: OffsetDateTime,
) -> Pickup {
    let seen = pods.get(&t.consumer).unwrap_or(&PodsSeen::NotNeeded);
    let verdict = judge(&t.reload, written, &digest, seen);
    let overdue = match (&t.reload, &verdict, written) {
        (ReloadPolicy::Restart { deadline, .. }, Verdict::Waiting(_), Some(w)) => {
            now - w >= *deadline
        }
        _ => false,
    };
    Pickup {
        consumer: t.consumer.clone(),
        secret: t.key(),
        mode: t.reload.mode(),
        written,
        digest,
        pods: match seen {
            PodsSeen::Listed(l) => l.clone(),
            _ => Vec::new(),
        },
        verdict,
        overdue,
    }
}

fn record<'a>(records: &'a [ConsumerStatus], t: &Target) -> Option<&'a ConsumerStatus> {
    records
        .iter()
        .find(|r| r.name == t.consumer && r.secret == t.key())
}

/// Each consumer as the previous pass left its material (`records`), judged on the pods seen
/// now: what a CA rotation step waits for.
pub fn before(
    targets: &[Target],
    records: &[ConsumerStatus],
    pods: &BTreeMap<String, PodsSeen>,
    now: OffsetDateTime,
) -> Vec<Pickup> {
    targets
        .iter()
        .map(|t| {
            let r = record(records, t);
            let written = r.and_then(|r| parse_time(&r.material_written_time));
            let digest = r.map(|r| r.material_digest.clone()).unwrap_or_default();
            pickup(t, written, digest, pods, now)
        })
        .collect()
}

/// Each consumer after this pass's writes: `digests` are the digests of the Secrets as
/// written (a consumer whose Secret could not be read or written has none and keeps its
/// record's time). Material whose digest is not on record was written now.
pub fn settle(
    targets: &[Target],
    records: &[ConsumerStatus],
    digests: &BTreeMap<String, String>,
    pods: &BTreeMap<String, PodsSeen>,
    now: OffsetDateTime,
) -> Vec<Pickup> {
    targets
        .iter()
        .map(|t| {
            let r = record(records, t);
            let on_record = r.and_then(|r| parse_time(&r.material_written_time));
            let (written, digest) = match (digests.get(&t.consumer), r) {
                (Some(d), Some(r)) if *d == r.material_digest && on_record.is_some() => {
                    (on_record, d.clone())
                }
                (Some(d), _) => (Some(ceil_second(now)), d.clone()),
                (None, r) => (
                    on_record,
                    r.map(|r| r.material_digest.clone()).unwrap_or_default(),
                ),
            };
            pickup(t, written, digest, pods, now)
        })
        .collect()
}

impl Pickup {
    /// The line naming what the consumer is waiting for; `None` when it is current.
    pub fn line(&self) -> Option<String> {
        let who = format!("consumer {} (Secret {})", self.consumer, self.secret);
        let since = self.written.map(format_time).unwrap_or_default();
        match &self.verdict {
            Verdict::Current | Verdict::NoPods => None,
            Verdict::Waiting(behind) => Some(format!(
                "{who}, material {} written at {since}: {}",
                self.digest,
                self.behind_groups(behind).join("; ")
            )),
            Verdict::WriteUnknown => Some(format!(
                "{who}: when its Secret was written is not on record yet"
            )),
            Verdict::NoSelector => Some(format!(
                "{who}: reload mode Restart names no pods (reload.pods)"
            )),
            Verdict::Unreadable { message, .. } => {
                Some(format!("{who}: its pods cannot be listed: {message}"))
            }
        }
    }

    /// `<why>: <pod>, <pod> (static pod)`, one per reason (sorted).
    fn behind_groups(&self, behind: &[(String, Behind)]) -> Vec<String> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, why) in behind {
            let mirror = self.pods.iter().any(|p| &p.name == name && p.mirror);
            let shown = if mirror {
                format!("{name} (static pod)")
            } else {
                name.clone()
            };
            groups.entry(why.words()).or_default().push(shown);
        }
        groups
            .into_iter()
            .map(|(why, names)| format!("{why}: {}", names.join(", ")))
            .collect()
    }

    /// The consumer's entry in `status.certificates.consumers`.
    pub fn status(&self) -> ConsumerStatus {
        let mut pods: Vec<String> = self.pods.iter().map(|p| p.name.clone()).collect();
        pods.sort();
        ConsumerStatus {
            name: self.consumer.clone(),
            secret: self.secret.clone(),
            reload: self.mode,
            material_written_time: self.written.map(format_time).unwrap_or_default(),
            material_digest: self.digest.clone(),
            current: self.verdict.is_current(),
            pods,
            waiting_for: match &self.verdict {
                Verdict::Waiting(b) => b.iter().map(|(name, _)| name.clone()).collect(),
                _ => Vec::new(),
            },
            overdue: self.overdue,
            message: match &self.verdict {
                Verdict::NoPods => {
                    "no pod selected: nothing to wait for (check reload.pods)".to_owned()
                }
                _ => self.line().unwrap_or_default(),
            },
        }
    }
}

#[cfg(test)]
#[path = "reload_tests.rs"]
mod tests;
