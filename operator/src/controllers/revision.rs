//! Revisions: numbered, immutable snapshots of the static pod's sources.
//!
//! Sources: ConfigMap `etcd-pod` (one `pod-<node>.yaml` per node), ConfigMap `etcd-all-bundles`,
//! Secret `etcd-all-certs`. Revision N is the copies `<source>-N` (the `etcd-pod` copy with the
//! revision token replaced by N), owned by ConfigMap `revision-status-N`, which records a SHA-256
//! fingerprint of every source it was made from. Creation order is status first, then the
//! copies, then `status.latestAvailableRevision`; a revision is *complete* when its status and
//! every copy exist. "The sources changed" means their fingerprints differ from the latest
//! complete revision's.
//!
//! [`decide`] is pure. From the sources and the revisions found it returns one next step:
//! * discard an incomplete revision (a crash between its writes): no node can be on it, since
//!   `latestAvailableRevision` only moves to complete revisions, so it is deleted and rebuilt
//!   from the current sources, never completed with newer data. One that was published or is
//!   on a node and lost a copy afterwards is never deleted (#65): a new revision supersedes it;
//! * create N+1 when the sources differ from the latest complete revision (byte for byte), N
//!   being the highest revision found, published, or run or installed on a node (after a
//!   restore the nodes may run revisions the restored API never saw);
//! * publish the latest complete revision in status;
//! * prune revisions beyond the history limits, never one a node is on, moving to, or failed on
//!   recently.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use super::cert_signer::Issued;
use crate::api::NodeStatus;
use crate::controller::{ControllerError, ControllerName, Flow};
use crate::pass::Pass;
use crate::podspec::STATIC_POD_NAMESPACE as NS;
use crate::podspec::paths::{ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET, POD_CONFIGMAP};

mod act;
use act::act;

const NAME: ControllerName = ControllerName::Revision;
/// Prefix of each revision's status ConfigMap.
pub const STATUS_PREFIX: &str = "revision-status-";
const SOURCE_NAMES: [&str; 3] = [POD_CONFIGMAP, ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET];
/// The highest revision label on a node that numbering follows: 2^40 is beyond any history
/// (a revision a second for 34,000 years); a label above it is forged, and numbering it would
/// overflow.
pub const MAX_NODE_REVISION: i64 = 1 << 40;

/// Data of one source or copy (ConfigMap `data` or Secret `data`, bytes).
pub type Data = BTreeMap<String, Vec<u8>>;

/// SHA-256 (hex) of a source's data: each key and value, length-prefixed, in key order.
pub fn fingerprint(data: &Data) -> String {
    let mut h = Sha256::new();
    for (k, v) in data {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_le_bytes());
        h.update(v);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The revisioned sources, by source name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sources {
    pub by_name: BTreeMap<String, Data>,
}

impl Sources {
    /// Source name → fingerprint.
    pub fn fingerprints(&self) -> BTreeMap<String, String> {
        self.by_name
            .iter()
            .map(|(n, d)| (n.clone(), fingerprint(d)))
            .collect()
    }
}

/// One revision as found in the API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoundRevision {
    pub number: i64,
    /// The fingerprints recorded in `revision-status-N`, if it exists.
    pub status: Option<BTreeMap<String, String>>,
    /// Names of the sources whose copy exists.
    pub copies: BTreeSet<String>,
}

impl FoundRevision {
    fn complete(&self, source_names: &BTreeSet<String>) -> bool {
        self.status.as_ref().is_some_and(|fp| {
            source_names
                .iter()
                .all(|s| self.copies.contains(s) && fp.contains_key(s))
        })
    }
}

/// Which revisions nodes need kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InUse {
    /// Current and target revisions of every node.
    pub nodes: BTreeSet<i64>,
    /// Revisions some node failed on, newest first.
    pub failed: Vec<i64>,
}

/// History limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub succeeded: usize,
    pub failed: usize,
}

/// The next revision step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevisionStep {
    /// Delete a revision left incomplete by a crash (its status and copies).
    Discard { number: i64, reason: String },
    /// Create revision `number` from the current sources.
    Create { number: i64, reason: String },
    /// Set `status.latestAvailableRevision`.
    Publish { number: i64 },
    /// Delete revisions beyond the history limits.
    Prune { numbers: Vec<i64> },
    /// Nothing to do.
    None,
}

/// What the decision is made from.
#[derive(Clone, Debug)]
pub struct RevisionView<'a> {
    pub sources: &'a Sources,
    pub found: &'a [FoundRevision],
    pub published: i64,
    /// The highest revision a node's etcd pod runs or an installer pod installs. After a
    /// restore from a snapshot the API knows only the revisions made before it, while the nodes
    /// may run later ones: a revision reusing one of their numbers would look installed there,
    /// and the installer refuses a lower one, so those nodes would never move.
    pub on_nodes: i64,
    pub in_use: &'a InUse,
    pub limits: Limits,
}

/// Names of the sources whose fingerprint differs from `recorded`.
fn changed_sources(
    current: &BTreeMap<String, String>,
    recorded: &BTreeMap<String, String>,
) -> Vec<String> {
    let names: BTreeSet<&String> = current.keys().chain(recorded.keys()).collect();
    names
        .into_iter()
        .filter(|n| current.get(*n) != recorded.get(*n))
        .cloned()
        .collect()
}

/// The number of the next revision: above every revision found, published, or run or installed
/// on a node.
fn next_number(view: &RevisionView<'_>, found: &[&FoundRevision]) -> i64 {
    found
        .last()
        .map_or(0, |r| r.number)
        .max(view.published)
        .max(view.on_nodes.min(MAX_NODE_REVISION))
        .saturating_add(1)
}

/// Whether revision `number` may have reached a node: published, or run, installed or targeted
/// on one. Only a revision that never did is left incomplete by a crash alone; one that did lost
/// a copy afterwards (deleted by hand, or a new leader whose caches had not caught up with its
/// predecessor's writes saw it so).
fn reached_nodes(view: &RevisionView<'_>, number: i64) -> bool {
    number <= view.published || number <= view.on_nodes || view.in_use.nodes.contains(&number)
}

/// Decides the next revision step.
pub fn decide(view: &RevisionView<'_>) -> RevisionStep {
    let names: BTreeSet<String> = view.sources.by_name.keys().cloned().collect();
    let mut found: Vec<&FoundRevision> = view.found.iter().collect();
    found.sort_by_key(|r| r.number);
    let latest_complete = found.iter().rev().find(|r| r.complete(&names)).copied();
    let latest_number = latest_complete.map_or(0, |r| r.number);
    if let Some(broken) = found
        .iter()
        .find(|r| !r.complete(&names) && r.number > latest_number)
    {
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !broken.copies.contains(*n))
            .cloned()
            .collect();
        if reached_nodes(view, broken.number) {
            return RevisionStep::Create {
                number: next_number(view, &found),
                reason: format!(
                    "revision {} was published and lost {}: a new revision supersedes it (one \
                     that may have reached a node is never deleted)",
                    broken.number,
                    missing.join(", ")
                ),
            };
        }
        return RevisionStep::Discard {
            number: broken.number,
            reason: if broken.status.is_some() {
                format!(
                    "revision {} is incomplete (missing {})",
                    broken.number,
                    missing.join(", ")
                )
            } else {
                format!(
                    "revision {} has copies but no revision-status",
                    broken.number
                )
            },
        };
    }
    let current = view.sources.fingerprints();
    let changed = match latest_complete.and_then(|r| r.status.as_ref()) {
        None => names.iter().cloned().collect(),
        Some(recorded) => changed_sources(&current, recorded),
    };
    if !changed.is_empty() {
        let number = next_number(view, &found);
        return RevisionStep::Create {
            number,
            reason: if latest_complete.is_none() {
                "no revision yet".to_owned()
            } else {
                format!("{} changed", changed.join(", "))
            },
        };
    }
    if latest_number != view.published {
        return RevisionStep::Publish {
            number: latest_number,
        };
    }
    let prune = prunable(&found, view.in_use, view.limits, latest_number);
    if prune.is_empty() {
        RevisionStep::None
    } else {
        RevisionStep::Prune { numbers: prune }
    }
}

fn prunable(found: &[&FoundRevision], in_use: &InUse, limits: Limits, latest: i64) -> Vec<i64> {
    let mut keep: BTreeSet<i64> = in_use.nodes.clone();
    keep.insert(latest);
    keep.extend(in_use.failed.iter().take(limits.failed).copied());
    let newest: Vec<i64> = found
        .iter()
        .rev()
        .map(|r| r.number)
        .take(limits.succeeded)
        .collect();
    keep.extend(newest);
    found
        .iter()
        .map(|r| r.number)
        .filter(|n| !keep.contains(n))
        .collect()
}

/// The revisions found in the caches.
pub fn found_revisions(configmaps: &[ConfigMap], secrets: &[Secret]) -> Vec<FoundRevision> {
    let mut found: BTreeMap<i64, FoundRevision> = BTreeMap::new();
    let number = |name: &str, prefix: &str| -> Option<i64> {
        name.strip_prefix(prefix)?.strip_prefix('-')?.parse().ok()
    };
    fn entry(found: &mut BTreeMap<i64, FoundRevision>, n: i64) -> &mut FoundRevision {
        found.entry(n).or_insert_with(|| FoundRevision {
            number: n,
            ..Default::default()
        })
    }
    let ours = |ns: Option<&str>| ns == Some(NS);
    for cm in configmaps
        .iter()
        .filter(|c| ours(c.metadata.namespace.as_deref()))
    {
        let name = cm.name_any();
        if let Some(n) = name
            .strip_prefix(STATUS_PREFIX)
            .and_then(|n| n.parse().ok())
        {
            let fingerprints: BTreeMap<String, String> = cm
                .data
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| SOURCE_NAMES.contains(&k.as_str()))
                .collect();
            entry(&mut found, n).status = Some(fingerprints);
        }
        for source in [POD_CONFIGMAP, ALL_BUNDLES_CONFIGMAP] {
            if let Some(n) = number(&name, source) {
                entry(&mut found, n).copies.insert(source.to_owned());
            }
        }
    }
    for secret in secrets
        .iter()
        .filter(|c| ours(c.metadata.namespace.as_deref()))
    {
        if let Some(n) = number(&secret.name_any(), ALL_CERTS_SECRET) {
            entry(&mut found, n)
                .copies
                .insert(ALL_CERTS_SECRET.to_owned());
        }
    }
    found.into_values().collect()
}

/// The sources of the next revision: the rendered manifests and what the signer issued.
pub fn sources(pods: BTreeMap<String, String>, issued: &Issued) -> Sources {
    let bytes = |m: &BTreeMap<String, String>| -> Data {
        m.iter()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect()
    };
    Sources {
        by_name: BTreeMap::from([
            (POD_CONFIGMAP.to_owned(), bytes(&pods)),
            (ALL_BUNDLES_CONFIGMAP.to_owned(), bytes(&issued.bundles)),
            (ALL_CERTS_SECRET.to_owned(), issued.all_certs.clone()),
        ]),
    }
}

/// Revisions in use: what nodes are on or moving to, and failed ones (distinct, newest first).
pub fn in_use(statuses: &[NodeStatus]) -> InUse {
    let mut failed: Vec<i64> = statuses
        .iter()
        .filter_map(|s| s.last_failed_revision)
        .collect();
    failed.sort_unstable_by(|a, b| b.cmp(a));
    // Two nodes that failed on one revision keep one revision, not two slots of the limit.
    failed.dedup();
    InUse {
        nodes: statuses
            .iter()
            .flat_map(|s| [Some(s.current_revision), s.target_revision])
            .flatten()
            .collect(),
        failed,
    }
}

/// The plan line of a step.
pub fn describe(step: &RevisionStep, latest: i64) -> String {
    match step {
        RevisionStep::None => format!("revision {latest} is the latest and matches the sources"),
        RevisionStep::Publish { number } => format!("publish revision {number} as the latest"),
        RevisionStep::Create { number, reason } => format!("create revision {number}: {reason}"),
        RevisionStep::Discard { number, reason } => format!("discard revision {number}: {reason}"),
        RevisionStep::Prune { numbers } => format!("prune revisions {numbers:?}"),
    }
}

/// Runs the revision controller; [`Flow::Stop`] after creating or discarding a revision (the
/// next pass sees it complete, or rebuilds it).
pub async fn reconcile(
    p: &mut Pass<'_>,
    issued: &Issued,
    pods: BTreeMap<String, String>,
) -> Result<Flow, ControllerError> {
    let _t = p.ctx.metrics.time(NAME.as_str());
    let sources = sources(pods, issued);
    let found = found_revisions(&p.inputs.configmaps, &p.inputs.secrets);
    let in_use = in_use(&p.status.node_statuses);
    let spec = &p.o.spec.revision_history;
    let on_nodes =
        p.o.pods
            .values()
            .map(|(pod, _)| pod.revision)
            .chain(p.o.installers.values().map(|i| i.revision))
            .filter(|r| *r <= MAX_NODE_REVISION)
            .max()
            .unwrap_or(0);
    let step = decide(&RevisionView {
        sources: &sources,
        found: &found,
        published: p.status.latest,
        on_nodes,
        in_use: &in_use,
        limits: Limits {
            succeeded: spec.succeeded_limit as usize,
            failed: spec.failed_limit as usize,
        },
    });
    p.next(NAME, describe(&step, p.status.latest));
    act(p, &step, &sources)
        .await
        .map_err(|e| ControllerError::write(NAME, &e))?;
    if matches!(
        step,
        RevisionStep::Create { .. } | RevisionStep::Discard { .. }
    ) {
        p.busy = true;
        return Ok(Flow::Stop);
    }
    p.succeeded(NAME);
    p.ctx.metrics.latest_revision.set(p.status.latest);
    Ok(Flow::Continue)
}

#[cfg(test)]
#[path = "revision_tests.rs"]
mod tests;
