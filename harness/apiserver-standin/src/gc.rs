//! The stand-in's garbage collector, namespace controller (controller-manager's jobs on a
//! real cluster) and CRD finalizer (apiextensions-apiserver's), run in-process: woken after
//! every deletion and every `gc_interval`.
//!
//! One sweep reads every stored object at a single etcd revision (a consistent snapshot, so an
//! owner created together with its dependent is never missed) and then:
//! 1. terminating namespaces: deletes their contents; removes the namespace once empty;
//! 2. owners with the `foregroundDeletion` finalizer: deletes their dependents (foreground);
//!    drops the finalizer once none remain;
//! 3. owners with the `orphan` finalizer: removes the owner reference from their dependents,
//!    then drops the finalizer;
//! 4. objects whose owner references all name uids that no longer exist: deletes them
//!    (background).
//! 5. CRDs being deleted: deletes their custom resources; drops the
//!    `customresourcecleanup.apiextensions.k8s.io` finalizer once none remain.
//!
//! Every write is guarded by the mod revision seen in the snapshot; a lost race waits for the
//! next sweep.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use crate::delete::{self, DeleteOptions, Propagation};
use crate::objects;
use crate::resources::ResourceInfo;
use crate::state::{State, from_storage};
use crate::store::{StoreError, Stored};

/// One object of the snapshot.
#[derive(Clone, Debug)]
struct Entry {
    info: ResourceInfo,
    stored: Stored,
    object: Value,
}

/// What a sweep decided to do (a pure decision from [`decide`], applied by [`sweep`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Delete an object with a propagation policy.
    Delete {
        /// Index into the snapshot.
        index: usize,
        /// Policy.
        propagation: Propagation,
    },
    /// Remove a finalizer from an object.
    RemoveFinalizer {
        /// Index into the snapshot.
        index: usize,
        /// Finalizer.
        finalizer: &'static str,
    },
    /// Remove the owner reference naming `owner_uid` from an object.
    Orphan {
        /// Index into the snapshot.
        index: usize,
        /// Owner uid.
        owner_uid: String,
    },
    /// Remove a terminated, empty namespace.
    RemoveNamespace {
        /// Index into the snapshot.
        index: usize,
    },
}

/// What the collector needs to know about one object of the snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// The object is a Namespace.
    pub is_namespace: bool,
    /// The object is a CustomResourceDefinition.
    pub is_crd: bool,
    /// The object's kind is namespaced.
    pub namespaced: bool,
    /// The CRD that defines the object's kind, for custom resources.
    pub defined_by: Option<String>,
    /// The object.
    pub object: Value,
}

impl Item {
    /// An ordinary object.
    pub fn plain(namespaced: bool, object: Value) -> Self {
        Self {
            is_namespace: false,
            is_crd: false,
            namespaced,
            defined_by: None,
            object,
        }
    }
}

/// Decides a sweep's actions over a snapshot.
pub fn decide(items: &[Item]) -> Vec<Action> {
    let mut actions = Vec::new();
    let uids: BTreeSet<&str> = items.iter().map(|it| objects::uid(&it.object)).collect();
    let dependents = dependents_by_owner(items);
    for (i, it) in items.iter().enumerate() {
        let o = &it.object;
        let deleting = objects::is_deleting(o);
        let finalizers = objects::finalizers(o);
        let has = |name: &str| finalizers.iter().any(|f| f == name);
        if it.is_crd && deleting && has(crate::crd::CLEANUP_FINALIZER) {
            clean_up_crd(items, i, &mut actions);
        }
        if it.is_namespace && deleting {
            empty_namespace(items, i, finalizers.is_empty(), &mut actions);
            continue;
        }
        let deps = dependents.get(objects::uid(o)).cloned().unwrap_or_default();
        if deleting && has("foregroundDeletion") {
            finish_foreground(items, i, &deps, &mut actions);
        }
        if deleting && has("orphan") {
            finish_orphan(i, objects::uid(o), &deps, &mut actions);
        }
        let owners = objects::owner_uids(o);
        if !owners.is_empty() && !deleting && owners.iter().all(|u| !uids.contains(u.as_str())) {
            actions.push(Action::Delete {
                index: i,
                propagation: Propagation::Background,
            });
        }
    }
    actions
}

/// The indices of each owner's dependents, by owner uid.
fn dependents_by_owner(items: &[Item]) -> BTreeMap<String, Vec<usize>> {
    let mut dependents: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, it) in items.iter().enumerate() {
        for owner in objects::owner_uids(&it.object) {
            dependents.entry(owner).or_default().push(i);
        }
    }
    dependents
}

/// Deletes (background) the objects at `indices` that are not already being deleted.
fn delete_all(items: &[Item], indices: &[usize], actions: &mut Vec<Action>) {
    for &j in indices {
        if !objects::is_deleting(&items[j].object) {
            actions.push(Action::Delete {
                index: j,
                propagation: Propagation::Background,
            });
        }
    }
}

/// A CRD being deleted: deletes its custom resources, drops the cleanup finalizer once none
/// remain.
fn clean_up_crd(items: &[Item], i: usize, actions: &mut Vec<Action>) {
    let name = objects::name(&items[i].object);
    let instances: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, c)| c.defined_by.as_deref() == Some(name))
        .map(|(j, _)| j)
        .collect();
    delete_all(items, &instances, actions);
    if instances.is_empty() {
        actions.push(Action::RemoveFinalizer {
            index: i,
            finalizer: crate::crd::CLEANUP_FINALIZER,
        });
    }
}

/// A terminating namespace: deletes its contents, removes it once empty and unfinalized.
fn empty_namespace(items: &[Item], i: usize, unfinalized: bool, actions: &mut Vec<Action>) {
    let ns = objects::name(&items[i].object);
    let contents: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, c)| c.namespaced && objects::namespace(&c.object) == ns)
        .map(|(j, _)| j)
        .collect();
    delete_all(items, &contents, actions);
    if contents.is_empty() && unfinalized {
        actions.push(Action::RemoveNamespace { index: i });
    }
}

/// An owner with the `foregroundDeletion` finalizer: deletes its dependents (foreground),
/// drops the finalizer once none remain.
fn finish_foreground(items: &[Item], i: usize, deps: &[usize], actions: &mut Vec<Action>) {
    if deps.is_empty() {
        actions.push(Action::RemoveFinalizer {
            index: i,
            finalizer: "foregroundDeletion",
        });
    }
    for &j in deps {
        if !objects::is_deleting(&items[j].object) {
            actions.push(Action::Delete {
                index: j,
                propagation: Propagation::Foreground,
            });
        }
    }
}

/// An owner with the `orphan` finalizer: removes its owner reference from its dependents,
/// drops the finalizer once none remain.
fn finish_orphan(i: usize, owner_uid: &str, deps: &[usize], actions: &mut Vec<Action>) {
    for &j in deps {
        actions.push(Action::Orphan {
            index: j,
            owner_uid: owner_uid.to_string(),
        });
    }
    if deps.is_empty() {
        actions.push(Action::RemoveFinalizer {
            index: i,
            finalizer: "orphan",
        });
    }
}

async fn snapshot(state: &State) -> Result<Vec<Entry>, StoreError> {
    let revision = state.store.revision().await?;
    let mut out = Vec::new();
    for info in state.registry().storage_resources() {
        let prefix = info.collection_prefix(state.prefix(), None);
        let page = state.store.list(&prefix, None, revision, 0).await?;
        for stored in page.items {
            let object = from_storage(&info, stored.object.clone());
            out.push(Entry {
                info: info.clone(),
                stored,
                object,
            });
        }
    }
    Ok(out)
}

/// Runs one sweep; returns how many actions were attempted.
pub async fn sweep(state: &State) -> Result<usize, StoreError> {
    let snap = snapshot(state).await?;
    let input: Vec<Item> = snap
        .iter()
        .map(|e| Item {
            is_namespace: e.info.group.is_empty() && e.info.resource == "namespaces",
            is_crd: e.info.group == "apiextensions.k8s.io"
                && e.info.resource == "customresourcedefinitions",
            namespaced: e.info.namespaced,
            defined_by: e.info.crd.clone(),
            object: e.object.clone(),
        })
        .collect();
    let actions = decide(&input);
    for action in &actions {
        apply(state, &snap, action).await;
    }
    Ok(actions.len())
}

async fn apply(state: &State, snap: &[Entry], action: &Action) {
    let result = match action {
        Action::Delete { index, propagation } => {
            let Some(e) = snap.get(*index) else { return };
            let opts = DeleteOptions {
                propagation: *propagation,
                resource_version: Some(e.stored.mod_revision.to_string()),
                ..DeleteOptions::default()
            };
            tracing::debug!(resource = %e.info.resource, namespace = objects::namespace(&e.object),
                name = objects::name(&e.object), ?propagation, "API stand-in GC: deleting");
            delete::delete(
                state,
                &e.info,
                objects::namespace(&e.object),
                objects::name(&e.object),
                &opts,
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
        }
        Action::RemoveFinalizer { index, finalizer } => {
            let Some(e) = snap.get(*index) else { return };
            let mut obj = e.object.clone();
            let remaining: Vec<String> = objects::finalizers(&obj)
                .into_iter()
                .filter(|f| f != finalizer)
                .collect();
            objects::set_finalizers(&mut obj, &remaining);
            write(state, e, obj).await
        }
        Action::Orphan { index, owner_uid } => {
            let Some(e) = snap.get(*index) else { return };
            let mut obj = e.object.clone();
            objects::remove_owner(&mut obj, owner_uid);
            write(state, e, obj).await
        }
        Action::RemoveNamespace { index } => {
            let Some(e) = snap.get(*index) else { return };
            match state
                .store
                .delete(&e.stored.key, e.stored.mod_revision)
                .await
            {
                Ok(_) => {
                    tracing::info!(
                        namespace = objects::name(&e.object),
                        "API stand-in: namespace finalized"
                    );
                    Ok(())
                }
                Err(err) => Err(err.to_string()),
            }
        }
    };
    if let Err(err) = result {
        tracing::debug!(?action, error = %err, "API stand-in GC: action skipped until the next sweep");
    }
}

/// Writes a GC change through the normal update path (so finalization applies).
async fn write(state: &State, e: &Entry, obj: Value) -> Result<(), String> {
    match crate::verbs::commit_update(state, &e.info, &e.stored, obj, false, &Default::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(err) => Err(err.to_string()),
    }
}

/// Runs the collector until the state is dropped.
pub async fn run(state: Arc<State>) {
    let mut quick = 0u32;
    loop {
        match sweep(&state).await {
            // Something changed: look again soon, the next level may be ready (bounded, so an
            // action that keeps failing does not spin).
            Ok(n) if n > 0 && quick < 20 => {
                quick += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "API stand-in GC: sweep failed"),
        }
        quick = 0;
        let _ = tokio::time::timeout(state.config.gc_interval, state.gc_wake.notified()).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn ns_item(ns: Value) -> Item {
        Item {
            is_namespace: true,
            namespaced: false,
            ..Item::plain(false, ns)
        }
    }

    #[test]
    fn deleting_a_crd_deletes_its_instances_first() {
        let crd = json!({"metadata": {"name": "widgets.example.com", "uid": "c", "deletionTimestamp": "t",
            "finalizers": [crate::crd::CLEANUP_FINALIZER]}});
        let crd_item = Item {
            is_crd: true,
            ..Item::plain(false, crd)
        };
        let widget = Item {
            defined_by: Some("widgets.example.com".into()),
            ..Item::plain(true, obj("w", "u", &[]))
        };
        assert_eq!(
            decide(&[crd_item.clone(), widget]),
            vec![Action::Delete {
                index: 1,
                propagation: Propagation::Background
            }]
        );
        assert_eq!(
            decide(&[crd_item]),
            vec![Action::RemoveFinalizer {
                index: 0,
                finalizer: crate::crd::CLEANUP_FINALIZER
            }]
        );
    }

    fn obj(name: &str, uid: &str, owners: &[&str]) -> Value {
        let refs: Vec<Value> = owners
            .iter()
            .map(|o| json!({"uid": o, "name": "x", "kind": "ConfigMap", "apiVersion": "v1"}))
            .collect();
        json!({"metadata": {"name": name, "namespace": "ns", "uid": uid, "ownerReferences": refs}})
    }

    #[test]
    fn dangling_dependents_are_deleted() {
        let input = vec![
            Item::plain(true, obj("owner", "u1", &[])),
            Item::plain(true, obj("kept", "u2", &["u1"])),
            Item::plain(true, obj("orphaned", "u3", &["gone"])),
            Item::plain(true, obj("half", "u4", &["gone", "u1"])),
        ];
        assert_eq!(
            decide(&input),
            vec![Action::Delete {
                index: 2,
                propagation: Propagation::Background
            }]
        );
    }

    #[test]
    fn foreground_waits_for_dependents() {
        let mut owner = obj("owner", "u1", &[]);
        owner["metadata"]["deletionTimestamp"] = json!("t");
        owner["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
        let input = vec![
            Item::plain(true, owner.clone()),
            Item::plain(true, obj("dep", "u2", &["u1"])),
        ];
        assert_eq!(
            decide(&input),
            vec![Action::Delete {
                index: 1,
                propagation: Propagation::Foreground
            }]
        );
        assert_eq!(
            decide(&[Item::plain(true, owner)]),
            vec![Action::RemoveFinalizer {
                index: 0,
                finalizer: "foregroundDeletion"
            }]
        );
    }

    #[test]
    fn orphan_strips_owner_references() {
        let mut owner = obj("owner", "u1", &[]);
        owner["metadata"]["deletionTimestamp"] = json!("t");
        owner["metadata"]["finalizers"] = json!(["orphan"]);
        let input = vec![
            Item::plain(true, owner),
            Item::plain(true, obj("dep", "u2", &["u1"])),
        ];
        assert_eq!(
            decide(&input),
            vec![Action::Orphan {
                index: 1,
                owner_uid: "u1".into()
            }]
        );
    }

    #[test]
    fn terminating_namespace_empties_then_goes() {
        let ns = json!({"metadata": {"name": "ns", "uid": "n", "deletionTimestamp": "t"}});
        let input = vec![ns_item(ns.clone()), Item::plain(true, obj("cm", "u", &[]))];
        assert_eq!(
            decide(&input),
            vec![Action::Delete {
                index: 1,
                propagation: Propagation::Background
            }]
        );
        assert_eq!(
            decide(&[ns_item(ns)]),
            vec![Action::RemoveNamespace { index: 0 }]
        );
    }
}
