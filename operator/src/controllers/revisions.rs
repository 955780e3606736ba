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
//!   from the current sources, never completed with newer data;
//! * create N+1 when the sources differ from the latest complete revision (byte for byte);
//! * publish the latest complete revision in status;
//! * prune revisions beyond the history limits, never one a node is on, moving to, or failed on
//!   recently.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

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
        let number = found.last().map_or(0, |r| r.number).max(view.published) + 1;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn data(v: &str) -> Data {
        BTreeMap::from([("k".to_owned(), v.as_bytes().to_vec())])
    }

    fn sources(pod: &str, certs: &str) -> Sources {
        Sources {
            by_name: BTreeMap::from([
                ("etcd-pod".to_owned(), data(pod)),
                ("etcd-all-certs".to_owned(), data(certs)),
            ]),
        }
    }

    fn revision(n: i64, pod: &str, certs: &str) -> FoundRevision {
        let s = sources(pod, certs);
        FoundRevision {
            number: n,
            status: Some(s.fingerprints()),
            copies: s.by_name.keys().cloned().collect(),
        }
    }

    fn view<'a>(
        s: &'a Sources,
        found: &'a [FoundRevision],
        published: i64,
        in_use: &'a InUse,
    ) -> RevisionView<'a> {
        RevisionView {
            sources: s,
            found,
            published,
            in_use,
            limits: Limits {
                succeeded: 2,
                failed: 1,
            },
        }
    }

    #[test]
    fn first_revision_then_only_on_real_change() {
        let s = sources("a", "x");
        let none = InUse::default();
        assert_eq!(
            decide(&view(&s, &[], 0, &none)),
            RevisionStep::Create {
                number: 1,
                reason: "no revision yet".into()
            }
        );
        let found = [revision(1, "a", "x")];
        assert_eq!(
            decide(&view(&s, &found, 0, &none)),
            RevisionStep::Publish { number: 1 }
        );
        assert_eq!(decide(&view(&s, &found, 1, &none)), RevisionStep::None);
        let changed = sources("a", "y");
        assert_eq!(
            decide(&view(&changed, &found, 1, &none)),
            RevisionStep::Create {
                number: 2,
                reason: "etcd-all-certs changed".into()
            }
        );
    }

    #[test]
    fn a_crash_mid_creation_is_discarded_and_redone() {
        let s = sources("b", "x");
        let mut partial = revision(2, "b", "x");
        partial.copies.remove("etcd-all-certs");
        let found = [revision(1, "a", "x"), partial];
        let in_use = InUse::default();
        match decide(&view(&s, &found, 1, &in_use)) {
            RevisionStep::Discard { number: 2, reason } => {
                assert!(reason.contains("missing etcd-all-certs"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        // Copies without a status (crash after deleting the status) are discarded too.
        let mut orphan = revision(2, "b", "x");
        orphan.status = None;
        let found = [revision(1, "a", "x"), orphan];
        assert!(matches!(
            decide(&view(&s, &found, 1, &in_use)),
            RevisionStep::Discard { number: 2, .. }
        ));
        // After the discard, revision 2 is created again from the current sources.
        let found = [revision(1, "a", "x")];
        assert!(matches!(
            decide(&view(&s, &found, 1, &in_use)),
            RevisionStep::Create { number: 2, .. }
        ));
    }

    #[test]
    fn numbers_never_go_back_even_if_status_is_ahead() {
        let s = sources("c", "x");
        let found = [revision(3, "a", "x")];
        assert!(matches!(
            decide(&view(&s, &found, 5, &InUse::default())),
            RevisionStep::Create { number: 6, .. }
        ));
    }

    #[test]
    fn fingerprints_are_stable_and_sensitive() {
        let a = data("v");
        assert_eq!(fingerprint(&a), fingerprint(&data("v")));
        assert_ne!(fingerprint(&a), fingerprint(&data("w")));
        // Key/value boundaries matter.
        let ab = BTreeMap::from([("ab".to_owned(), b"c".to_vec())]);
        let a_bc = BTreeMap::from([("a".to_owned(), b"bc".to_vec())]);
        assert_ne!(fingerprint(&ab), fingerprint(&a_bc));
    }

    #[test]
    fn prunes_beyond_limits_but_keeps_what_nodes_use() {
        let s = sources("e", "x");
        let found: Vec<FoundRevision> = (1..=6)
            .map(|n| revision(n, if n == 6 { "e" } else { "old" }, "x"))
            .collect();
        let in_use = InUse {
            nodes: BTreeSet::from([2]),
            failed: vec![3, 1],
        };
        // Keep: 6 (latest), 5 (second newest), 2 (a node is on it), 3 (newest failure).
        assert_eq!(
            decide(&view(&s, &found, 6, &in_use)),
            RevisionStep::Prune {
                numbers: vec![1, 4]
            }
        );
    }
}
