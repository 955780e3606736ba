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

/// Why the operator raised an Event: a closed list, so every reason an admin can filter on
/// (`--field-selector reason=...`) is one of these, and each has one type (Normal or Warning).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventReason {
    /// A new revision of the static-pod manifests was made.
    RevisionCreated,
    /// A revision is published for the installers to roll out.
    RevisionAvailable,
    /// A revision left incomplete by a crash was deleted; the note says what was missing.
    RevisionDiscarded,
    /// An installer pod was created to lay a revision down on a node.
    InstallerPodCreated,
    /// A node's member was added as a learner.
    MemberAddedAsLearner,
    /// A learner was promoted to voter.
    MemberPromoted,
    /// A member's peer URL moved to its node's new address.
    MemberPeerURLMoved,
    /// A learner that never started was removed past its deadline.
    UnstartedLearnerRemoved,
    /// The member of a deleted node was removed.
    MemberOfGoneNodeRemoved,
    /// A member whose node lost its data dir was removed (it is added again as a learner).
    MemberWithLostDataRemoved,
    /// A member unhealthy past `spec.memberRemediation` was removed to be replaced.
    UnhealthyMemberReplaced,
    /// A voter was removed to keep an odd number of voters.
    VoterRemovedForOddCount,
    /// A member whose data diverged from the majority was removed to be replaced.
    DivergentMemberReplaced,
    /// The member of a node an admin asked to remove was removed.
    MemberOfLeavingNodeRemoved,
    /// The standby learner was removed to renew its database file (it joins again).
    StandbyLearnerRenewed,
    /// etcd leadership was handed to another voter before a restart, removal or defragmentation.
    LeaderMoved,
    /// etcd moved the cluster version.
    EtcdClusterVersionChanged,
    /// The raft log was advanced with entries that change nothing, so every member snapshots past what an older etcd minor wrote before the next minor starts.
    EtcdLogAdvanced,
    /// The etcd CA was generated.
    CaGenerated,
    /// Certificates were issued or renewed.
    CertificatesUpdated,
    /// A CA rotation started.
    CaRotationStarted,
    /// A CA rotation entered its next phase.
    CaRotationPhase,
    /// A CA rotation completed.
    CaRotationCompleted,
    /// A CA rotation waits for consumers of etcd to pick up their Secrets.
    CaRotationWaitingForConsumers,
    /// A consumer did not restart onto its new Secret within its deadline.
    ConsumerReloadOverdue,
    /// The Secret of a consumer that left `spec.clients` cannot be deleted; the operator no longer tracks it.
    ConsumerSecretLeftBehind,
    /// A backup was taken (and verified, where asked).
    BackupSucceeded,
    /// A backup failed.
    BackupFailed,
    /// A disruptive operation waits for a backup taken for it.
    PreOperationBackup,
    /// A disruptive operation is held because the backup taken for it failed.
    PreOperationBackupFailing,
    /// A member's defragmentation started.
    Defragmenting,
    /// A member's defragmentation finished.
    Defragmented,
    /// A member's defragmentation failed.
    DefragmentationFailed,
    /// The NOSPACE alarm was disarmed after space was reclaimed.
    NoSpaceAlarmDisarmed,
    /// Every member's hash of the key space agreed.
    MembersConsistent,
    /// A member's hash of the key space disagreed with the majority.
    MembersDivergent,
    /// The EtcdCluster cannot be decoded: the operator holds on the last spec it read.
    SpecUnreadable,
    /// Every cache is listed anew before the operator acts again (e.g. etcd's cluster id changed); the note says why.
    CachesRelisted,
}

impl EventReason {
    /// Every reason, in declaration order.
    pub const ALL: [EventReason; 38] = [
        EventReason::RevisionCreated,
        EventReason::RevisionAvailable,
        EventReason::RevisionDiscarded,
        EventReason::InstallerPodCreated,
        EventReason::MemberAddedAsLearner,
        EventReason::MemberPromoted,
        EventReason::MemberPeerURLMoved,
        EventReason::UnstartedLearnerRemoved,
        EventReason::MemberOfGoneNodeRemoved,
        EventReason::MemberWithLostDataRemoved,
        EventReason::UnhealthyMemberReplaced,
        EventReason::VoterRemovedForOddCount,
        EventReason::DivergentMemberReplaced,
        EventReason::MemberOfLeavingNodeRemoved,
        EventReason::StandbyLearnerRenewed,
        EventReason::LeaderMoved,
        EventReason::EtcdClusterVersionChanged,
        EventReason::EtcdLogAdvanced,
        EventReason::CaGenerated,
        EventReason::CertificatesUpdated,
        EventReason::CaRotationStarted,
        EventReason::CaRotationPhase,
        EventReason::CaRotationCompleted,
        EventReason::CaRotationWaitingForConsumers,
        EventReason::ConsumerReloadOverdue,
        EventReason::ConsumerSecretLeftBehind,
        EventReason::BackupSucceeded,
        EventReason::BackupFailed,
        EventReason::PreOperationBackup,
        EventReason::PreOperationBackupFailing,
        EventReason::Defragmenting,
        EventReason::Defragmented,
        EventReason::DefragmentationFailed,
        EventReason::NoSpaceAlarmDisarmed,
        EventReason::MembersConsistent,
        EventReason::MembersDivergent,
        EventReason::SpecUnreadable,
        EventReason::CachesRelisted,
    ];

    /// The Event's `reason` (and `action`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::RevisionCreated => "RevisionCreated",
            EventReason::RevisionAvailable => "RevisionAvailable",
            EventReason::RevisionDiscarded => "RevisionDiscarded",
            EventReason::InstallerPodCreated => "InstallerPodCreated",
            EventReason::MemberAddedAsLearner => "MemberAddedAsLearner",
            EventReason::MemberPromoted => "MemberPromoted",
            EventReason::MemberPeerURLMoved => "MemberPeerURLMoved",
            EventReason::UnstartedLearnerRemoved => "UnstartedLearnerRemoved",
            EventReason::MemberOfGoneNodeRemoved => "MemberOfGoneNodeRemoved",
            EventReason::MemberWithLostDataRemoved => "MemberWithLostDataRemoved",
            EventReason::UnhealthyMemberReplaced => "UnhealthyMemberReplaced",
            EventReason::VoterRemovedForOddCount => "VoterRemovedForOddCount",
            EventReason::DivergentMemberReplaced => "DivergentMemberReplaced",
            EventReason::MemberOfLeavingNodeRemoved => "MemberOfLeavingNodeRemoved",
            EventReason::StandbyLearnerRenewed => "StandbyLearnerRenewed",
            EventReason::LeaderMoved => "LeaderMoved",
            EventReason::EtcdClusterVersionChanged => "EtcdClusterVersionChanged",
            EventReason::EtcdLogAdvanced => "EtcdLogAdvanced",
            EventReason::CaGenerated => "CaGenerated",
            EventReason::CertificatesUpdated => "CertificatesUpdated",
            EventReason::CaRotationStarted => "CaRotationStarted",
            EventReason::CaRotationPhase => "CaRotationPhase",
            EventReason::CaRotationCompleted => "CaRotationCompleted",
            EventReason::CaRotationWaitingForConsumers => "CaRotationWaitingForConsumers",
            EventReason::ConsumerReloadOverdue => "ConsumerReloadOverdue",
            EventReason::ConsumerSecretLeftBehind => "ConsumerSecretLeftBehind",
            EventReason::BackupSucceeded => "BackupSucceeded",
            EventReason::BackupFailed => "BackupFailed",
            EventReason::PreOperationBackup => "PreOperationBackup",
            EventReason::PreOperationBackupFailing => "PreOperationBackupFailing",
            EventReason::Defragmenting => "Defragmenting",
            EventReason::Defragmented => "Defragmented",
            EventReason::DefragmentationFailed => "DefragmentationFailed",
            EventReason::NoSpaceAlarmDisarmed => "NoSpaceAlarmDisarmed",
            EventReason::MembersConsistent => "MembersConsistent",
            EventReason::MembersDivergent => "MembersDivergent",
            EventReason::SpecUnreadable => "SpecUnreadable",
            EventReason::CachesRelisted => "CachesRelisted",
        }
    }

    /// Whether it is a Warning (else Normal).
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            EventReason::RevisionDiscarded
                | EventReason::UnstartedLearnerRemoved
                | EventReason::MemberOfGoneNodeRemoved
                | EventReason::MemberWithLostDataRemoved
                | EventReason::UnhealthyMemberReplaced
                | EventReason::VoterRemovedForOddCount
                | EventReason::DivergentMemberReplaced
                | EventReason::MemberOfLeavingNodeRemoved
                | EventReason::ConsumerReloadOverdue
                | EventReason::ConsumerSecretLeftBehind
                | EventReason::BackupFailed
                | EventReason::PreOperationBackupFailing
                | EventReason::DefragmentationFailed
                | EventReason::MembersDivergent
                | EventReason::SpecUnreadable
                | EventReason::CachesRelisted
        )
    }
}

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
    pub fn publish(&self, object: ObjectReference, reason: EventReason, note: String) {
        let ev = Event {
            type_: if reason.is_warning() {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.as_str().to_owned(),
            note: Some(note.chars().take(1000).collect()),
            action: reason.as_str().to_owned(),
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
            tracing::warn!(
                reason = reason.as_str(),
                "event publisher stopped; event dropped"
            );
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
