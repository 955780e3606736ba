//! DELETE and deletecollection: preconditions, finalizers (`deletionTimestamp` set, object kept
//! until `metadata.finalizers` is empty), propagation policies (Foreground adds the
//! `foregroundDeletion` finalizer, Orphan the `orphan` finalizer, both worked off by
//! [`crate::gc`]), graceful deletion of pods bound to a node, namespace termination, and what
//! removing a CRD does to its custom resources.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::objects;
use crate::resources::ResourceInfo;
use crate::state::{State, from_storage, to_storage};
use crate::store::{StoreError, Stored};
use crate::verbs::{self, ListOptions, Target, read, store_err};

/// `propagationPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete now, let the garbage collector delete dependents.
    #[default]
    Background,
    /// Keep the owner (finalizer `foregroundDeletion`) until its dependents are gone.
    Foreground,
    /// Keep the dependents, remove their owner references (finalizer `orphan`).
    Orphan,
}

/// DeleteOptions (body or query).
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `propagationPolicy`.
    pub propagation: Propagation,
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Reads a DeleteOptions JSON body (empty body = defaults).
    pub fn from_body(body: &[u8]) -> Result<Self, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::default());
        }
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
        let mut opts = Self::default();
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            opts.propagation = parse_propagation(p)?;
        } else if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            opts.propagation = Propagation::Orphan;
        }
        opts.grace_period_seconds = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        opts.uid = v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        opts.resource_version = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        opts.dry_run = v
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "All"));
        Ok(opts)
    }
}

/// Parses a `propagationPolicy` value.
pub fn parse_propagation(p: &str) -> Result<Propagation, ApiError> {
    match p {
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        "Orphan" => Ok(Propagation::Orphan),
        other => Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        ))),
    }
}

/// Namespaces the real server refuses to delete.
const PROTECTED_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// How long a pod bound to a node is given to terminate (0 = remove now).
fn pod_grace(state: &State, info: &ResourceInfo, pod: &Value, requested: Option<i64>) -> i64 {
    if !(state.config.graceful_pod_deletion && info.group.is_empty() && info.resource == "pods") {
        return 0;
    }
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30)
        .max(0)
}

/// Deletes one object. Answers 200 with the object when it is kept (finalizers, graceful
/// termination, namespace termination); when it is gone, 200 with the object for kinds whose
/// real storage returns it ([`ResourceInfo::return_deleted_object`]) or with a `Status` of
/// `Success` for the others.
pub async fn delete(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<(u16, Value), ApiError> {
    for _ in 0..16 {
        let current = read(state, info, ns, name)
            .await?
            .ok_or_else(|| ApiError::not_found(info.gr(), name))?;
        let obj = from_storage(info, current.object.clone());
        check_preconditions(info, name, opts, &obj, &current)?;
        let is_namespace = info.group.is_empty() && info.resource == "namespaces";
        let is_crd =
            info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions";
        if is_namespace && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(
                info.gr(),
                name,
                "this namespace may not be deleted",
            ));
        }
        if opts.dry_run {
            return Ok((200, obj));
        }
        let finalizers = finalizers_for_delete(&obj, opts.propagation, is_namespace, is_crd);
        let grace = pod_grace(state, info, &obj, opts.grace_period_seconds);
        if finalizers.is_empty() && grace == 0 && !is_namespace {
            match remove_now(state, info, ns, name, &current, obj).await? {
                Some(answer) => return Ok(answer),
                None => continue,
            }
        }
        let next = pending_deletion(&obj, grace, &finalizers, is_namespace, is_crd);
        if next == obj {
            return Ok((200, obj));
        }
        let Some(next) = store_pending(state, info, &current, next).await? else {
            continue;
        };
        tracing::debug!(resource = %info.resource, namespace = %ns, %name, grace, ?finalizers,
            "API stand-in: deletion pending");
        state.written(info);
        state.gc_wake.notify_one();
        return Ok((200, next));
    }
    Err(ApiError::stale(info.gr(), name))
}

/// Checks the `preconditions` of a delete (uid, resourceVersion) against the stored object.
fn check_preconditions(
    info: &ResourceInfo,
    name: &str,
    opts: &DeleteOptions,
    obj: &Value,
    current: &Stored,
) -> Result<(), ApiError> {
    if let Some(uid) = &opts.uid
        && uid != objects::uid(obj)
    {
        return Err(ApiError::conflict(
            info.gr(),
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                objects::uid(obj)
            ),
        ));
    }
    if let Some(rv) = &opts.resource_version
        && *rv != current.mod_revision.to_string()
    {
        return Err(ApiError::conflict(
            info.gr(),
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                current.mod_revision
            ),
        ));
    }
    Ok(())
}

/// The object's finalizers once a delete starts: the propagation policy's finalizer, and for a
/// CRD the cleanup finalizer (not added again when the object is already being deleted).
fn finalizers_for_delete(
    obj: &Value,
    propagation: Propagation,
    is_namespace: bool,
    is_crd: bool,
) -> Vec<String> {
    let mut finalizers = objects::finalizers(obj);
    // Namespaces are emptied by the namespace controller whatever the policy.
    if !objects::is_deleting(obj) && !is_namespace {
        let extra = match propagation {
            Propagation::Foreground => Some("foregroundDeletion"),
            Propagation::Orphan => Some("orphan"),
            Propagation::Background => None,
        };
        if let Some(f) = extra
            && !finalizers.iter().any(|x| x == f)
        {
            finalizers.push(f.to_string());
        }
        // Like apiextensions-apiserver's CRD storage: the first delete adds the cleanup
        // finalizer, so the custom resources go before the definition.
        if is_crd
            && !finalizers
                .iter()
                .any(|x| x == crate::crd::CLEANUP_FINALIZER)
        {
            finalizers.push(crate::crd::CLEANUP_FINALIZER.to_string());
        }
    }
    finalizers
}

/// Removes the object from etcd now. `None` when it changed meanwhile (try again).
async fn remove_now(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    current: &Stored,
    obj: Value,
) -> Result<Option<(u16, Value)>, ApiError> {
    match state.store.delete(&current.key, current.mod_revision).await {
        Ok(_) => {
            tracing::debug!(resource = %info.resource, namespace = %ns, %name, "API stand-in: deleted");
            state.written(info);
            after_remove(state, info, &obj).await;
            if info.return_deleted_object {
                return Ok(Some((200, obj)));
            }
            Ok(Some((200, success_status(info, &obj))))
        }
        Err(StoreError::Conflict) => Ok(None),
        Err(e) => Err(store_err(e)),
    }
}

/// The object marked for deletion: `deletionTimestamp` (moved earlier by a shorter grace
/// period), the finalizers, a namespace's `Terminating` phase, a CRD's `Terminating` condition.
fn pending_deletion(
    obj: &Value,
    grace: i64,
    finalizers: &[String],
    is_namespace: bool,
    is_crd: bool,
) -> Value {
    let mut next = obj.clone();
    let current_grace = obj
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64);
    if !objects::is_deleting(obj) || current_grace.is_some_and(|g| grace < g) {
        let meta = objects::metadata_mut(&mut next);
        meta.insert(
            "deletionTimestamp".into(),
            Value::String(objects::rfc3339_after(grace)),
        );
        meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
    }
    objects::set_finalizers(&mut next, finalizers);
    if is_namespace && let Some(map) = next.as_object_mut() {
        map.insert("status".into(), json!({"phase": "Terminating"}));
    }
    if is_crd {
        crate::crd::mark_terminating(&mut next, &objects::now_rfc3339());
    }
    next
}

/// Stores the object marked for deletion; answers it with its new `resourceVersion`, or `None`
/// when it changed meanwhile (try again).
async fn store_pending(
    state: &State,
    info: &ResourceInfo,
    current: &Stored,
    mut next: Value,
) -> Result<Option<Value>, ApiError> {
    match state
        .store
        .update(
            &current.key,
            &to_storage(info, next.clone()),
            current.mod_revision,
        )
        .await
    {
        Ok(rev) => {
            objects::set_meta_str(&mut next, "resourceVersion", &rev.to_string());
            Ok(Some(next))
        }
        Err(StoreError::Conflict) => Ok(None),
        Err(e) => Err(store_err(e)),
    }
}

/// The `Status` kube-apiserver answers an immediate delete with for most kinds.
fn success_status(info: &ResourceInfo, obj: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": objects::name(obj), "group": info.group, "kind": info.resource, "uid": objects::uid(obj)},
    })
}

/// Side effects of an object being removed from etcd: a CRD stops serving and its custom
/// resources are removed; the garbage collector is woken for dependents.
pub async fn after_remove(state: &State, info: &ResourceInfo, obj: &Value) {
    if info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions" {
        let name = objects::name(obj).to_string();
        let served = crate::crd::resources_of(obj);
        state.with_registry(|r| r.remove_crd(&name));
        if let Some(first) = served.first() {
            let prefix = first.collection_prefix(state.prefix(), None);
            if let Err(e) = state.store.delete_prefix(&prefix).await {
                tracing::warn!(crd = %name, error = %e, "API stand-in: removing custom resources failed");
            }
        }
        tracing::info!(crd = %name, "API stand-in: stopped serving custom resource");
    }
    state.gc_wake.notify_one();
}

/// DELETE on a collection: deletes every matching object; answers with the list of what was
/// deleted (or marked for deletion).
pub async fn delete_collection(
    state: &State,
    t: &Target,
    list_opts: &ListOptions,
    opts: &DeleteOptions,
) -> Result<Value, ApiError> {
    let listed = verbs::list(state, t, list_opts).await?;
    let mut items = Vec::new();
    for obj in listed
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        match delete(
            state,
            &t.info,
            objects::namespace(&obj),
            objects::name(&obj),
            opts,
        )
        .await
        {
            Ok((_, v)) if v.get("kind").and_then(Value::as_str) == Some("Status") => {
                items.push(obj)
            }
            Ok((_, v)) => items.push(v),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = state.store.revision().await.map_err(store_err)?;
    Ok(json!({
        "kind": format!("{}List", t.info.kind),
        "apiVersion": t.info.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn delete_options_from_body() {
        let o = DeleteOptions::from_body(
            br#"{"propagationPolicy":"Foreground","gracePeriodSeconds":0,
            "preconditions":{"uid":"u","resourceVersion":"5"},"dryRun":["All"]}"#,
        )
        .unwrap();
        assert_eq!(o.propagation, Propagation::Foreground);
        assert_eq!(o.grace_period_seconds, Some(0));
        assert_eq!(o.uid.as_deref(), Some("u"));
        assert_eq!(o.resource_version.as_deref(), Some("5"));
        assert!(o.dry_run);
        assert_eq!(
            DeleteOptions::from_body(b"").unwrap().propagation,
            Propagation::Background
        );
        assert_eq!(
            DeleteOptions::from_body(br#"{"orphanDependents":true}"#)
                .unwrap()
                .propagation,
            Propagation::Orphan
        );
        assert_eq!(
            DeleteOptions::from_body(br#"{"propagationPolicy":"Nope"}"#)
                .unwrap_err()
                .code,
            400
        );
    }
}
