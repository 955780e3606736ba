//! The REST verbs on one resource: get, create, update (PUT), patch. List lives in
//! [`crate::list`], delete in [`crate::delete`], watch in [`crate::watch`]. Every write is a
//! read-modify-write guarded by the object's etcd mod revision, retried on a lost race unless
//! the client pinned a `resourceVersion` (then the race is the client's 409 Conflict).

use serde_json::{Value, json};

use crate::admission;
use crate::apply;
use crate::crd;
use crate::custom;
use crate::error::{ApiError, Cause};
use crate::field_validation::FieldValidation;
use crate::objects;
use crate::patch::{self, PatchKind};
use crate::resources::ResourceInfo;
use crate::state::{State, from_storage, to_storage};
use crate::store::{StoreError, Stored, encode};
use crate::strategic;
use crate::strategy;
use crate::write_checks::{decode, is, validate_create, validate_update};

pub use crate::list::{ListOptions, list, selectors};
pub use patching::patch;

mod patching;

/// How many times a write is retried after losing a race it did not pin.
const RETRIES: usize = 16;

/// What a request addresses.
#[derive(Clone, Debug)]
pub struct Target {
    /// The resource.
    pub info: ResourceInfo,
    /// Namespace from the URL (namespaced resources; `None` = all namespaces for lists).
    pub namespace: Option<String>,
    /// Object name from the URL.
    pub name: Option<String>,
    /// The request is on the `/status` subresource.
    pub status: bool,
}

impl Target {
    fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }
}

/// Write parameters.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `force` (apply).
    pub force: bool,
    /// `fieldValidation`: what unknown and duplicate fields do.
    pub field_validation: FieldValidation,
    /// Keys the request body repeats (see [`crate::field_validation::duplicate_fields`]).
    pub duplicates: Vec<String>,
    /// The write is a patch (a Strict refusal is then a 422 on `patch`).
    pub patched: bool,
}

/// Maps a storage error to the API error kube-apiserver would give.
pub fn store_err(e: StoreError) -> ApiError {
    match e {
        StoreError::Compacted {
            requested,
            compacted,
        } => {
            tracing::debug!(requested, compacted, "read from a compacted revision");
            ApiError::expired("list")
        }
        StoreError::Timeout(what) => ApiError::timeout(what),
        other => ApiError::internal(other.to_string()),
    }
}

/// Reads one object (stored form).
pub async fn read(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
) -> Result<Option<Stored>, ApiError> {
    state
        .store
        .get(&state.key(info, ns, name))
        .await
        .map_err(store_err)
}

/// GET one object.
pub async fn get(state: &State, t: &Target) -> Result<Value, ApiError> {
    match read(state, &t.info, t.ns(), t.name()).await? {
        Some(s) => Ok(from_storage(&t.info, s.object)),
        None => Err(ApiError::not_found(t.info.gr(), t.name())),
    }
}

/// Rejects a body whose `apiVersion`/`kind` name another type.
fn check_type(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let expected = info.api_version();
    let version_ok = api_version.is_empty()
        || api_version == expected
        // The real server decodes any served version of the group and converts.
        || api_version.split('/').next() == Some(info.group.as_str()) && !info.group.is_empty();
    if !version_ok || (!kind.is_empty() && kind != info.kind) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected})"
        )));
    }
    Ok(())
}

/// Fills or checks `metadata.namespace` against the URL; clears it for cluster-scoped kinds.
fn normalize_namespace(info: &ResourceInfo, url_ns: &str, obj: &mut Value) -> Result<(), ApiError> {
    if !info.namespaced {
        objects::remove_meta(obj, "namespace");
        return Ok(());
    }
    let body_ns = objects::namespace(obj).to_string();
    if body_ns.is_empty() {
        objects::set_meta_str(obj, "namespace", url_ns);
    } else if body_ns != url_ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// The body's name must be the URL's (kube-apiserver's `checkName`); `fill` lets an empty body
/// name take the URL's (apply and patch), otherwise it is a mismatch too (PUT).
fn check_name(url_name: &str, obj: &mut Value, fill: bool) -> Result<(), ApiError> {
    let body_name = objects::name(obj).to_string();
    if body_name.is_empty() && fill {
        objects::set_meta_str(obj, "name", url_name);
    } else if body_name != url_name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
        )));
    }
    Ok(())
}

/// `generateName` + five random characters from kube-apiserver's alphabet.
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let prefix: String = prefix.chars().take(58).collect();
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes
        .iter()
        .take(5)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    format!("{prefix}{suffix}")
}

/// POST: create an object.
pub async fn create(
    state: &State,
    t: &Target,
    mut obj: Value,
    opts: &WriteOptions,
) -> Result<Value, ApiError> {
    let info = &t.info;
    check_type(info, &obj)?;
    if !objects::resource_version(&obj).is_empty() {
        // kube-apiserver's etcd3 storage refuses this with an internal error.
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    normalize_namespace(info, t.ns(), &mut obj)?;
    let ns = t.ns().to_string();
    let generate_prefix = obj
        .pointer("/metadata/generateName")
        .and_then(Value::as_str)
        .filter(|_| objects::name(&obj).is_empty())
        .map(str::to_string);
    if info.namespaced {
        admission::namespace_admission(state, info, &ns, objects::name(&obj)).await?;
    }
    if let Some(crd_name) = &info.crd {
        admission::crd_not_terminating(state, info, crd_name).await?;
    }
    if is(info, "", "pods") {
        admission::service_account_admission(state, &ns, &mut obj).await?;
    }
    for _ in 0..RETRIES {
        let (mut candidate, unknown) = custom::normalize(info, &obj);
        if let Some(prefix) = &generate_prefix {
            objects::set_meta_str(&mut candidate, "name", &generate_name(prefix));
        }
        let now = objects::now_rfc3339();
        let uid = uuid::Uuid::new_v4().to_string();
        strategy::prepare_for_create(info, &mut candidate, &uid, &now);
        let mut candidate = decode(info, &candidate, unknown, opts)?;
        validate_create(info, &candidate)?;
        if is(info, "apiextensions.k8s.io", "customresourcedefinitions") {
            crd::set_status(&mut candidate, None, &now);
        }
        if opts.dry_run {
            return Ok(candidate);
        }
        let name = objects::name(&candidate).to_string();
        let key = state.key(info, &ns, &name);
        match state
            .store
            .create(&key, &to_storage(info, candidate.clone()))
            .await
        {
            Ok(rev) => {
                objects::set_meta_str(&mut candidate, "resourceVersion", &rev.to_string());
                tracing::debug!(resource = %info.resource, namespace = %ns, %name, rev, "API stand-in: created");
                state.written(info);
                after_create(state, info, &candidate).await;
                if !objects::owner_uids(&candidate).is_empty() {
                    // An owner that does not exist makes this a garbage-collection candidate.
                    state.gc_wake.notify_one();
                }
                return Ok(candidate);
            }
            Err(StoreError::Exists) if generate_prefix.is_some() => continue,
            Err(StoreError::Exists) => return Err(ApiError::already_exists(info.gr(), &name)),
            Err(e) => return Err(store_err(e)),
        }
    }
    Err(ApiError::already_exists(info.gr(), objects::name(&obj)))
}

/// Side effects of a create: CRDs start serving, namespaces get their `default` service
/// account (the stand-in plays the service-account controller).
async fn after_create(state: &State, info: &ResourceInfo, obj: &Value) {
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions") {
        register_crd(state, obj);
    }
    if is(info, "", "namespaces") && state.config.default_service_accounts {
        let reg = state.registry();
        if let Some(sa_info) = reg.lookup("", "v1", "serviceaccounts") {
            let ns = objects::name(obj).to_string();
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
            let t = Target {
                info: sa_info,
                namespace: Some(ns.clone()),
                name: None,
                status: false,
            };
            match Box::pin(create(state, &t, sa, &WriteOptions::default())).await {
                Ok(_) => {}
                Err(e) if e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(namespace = %ns, error = %e, "API stand-in: creating the default service account failed")
                }
            }
        }
    }
}

/// Starts serving a CRD's resources.
pub fn register_crd(state: &State, crd_obj: &Value) {
    let resources = crd::resources_of(crd_obj);
    let name = objects::name(crd_obj).to_string();
    tracing::info!(crd = %name, versions = resources.len(), "API stand-in: serving custom resource");
    state.with_registry(|r| r.set_crd(&name, resources));
}

/// Outcome of one guarded write attempt.
#[derive(Debug)]
pub enum Commit {
    /// Written (or deleted, or unchanged): the object as served.
    Done(Value),
    /// Lost a race: re-read and try again.
    Retry,
}

/// Writes `new` over `current` (main resource or `/status`), applying the update strategy,
/// validation, finalization (an object being deleted whose last finalizer is gone is removed)
/// and the no-op rule (an unchanged object is not written, its resourceVersion stays).
pub async fn commit_update(
    state: &State,
    info: &ResourceInfo,
    current: &Stored,
    new: Value,
    status: bool,
    opts: &WriteOptions,
) -> Result<Commit, ApiError> {
    let old = from_storage(info, current.object.clone());
    let (mut new, unknown) = custom::normalize(info, &new);
    let next = if status {
        strategy::prepare_for_status_update(info, &old, &new)
    } else {
        strategy::prepare_for_update(info, &old, &mut new);
        new
    };
    let mut next = decode(info, &next, unknown, opts)?;
    validate_update(info, &old, &next, status)?;
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions") && !status {
        crd::set_status(&mut next, old.get("status"), &objects::now_rfc3339());
    }
    if opts.dry_run {
        return Ok(Commit::Done(next));
    }
    let grace = next
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let namespace = is(info, "", "namespaces");
    if objects::is_deleting(&next)
        && objects::finalizers(&next).is_empty()
        && grace == 0
        && !namespace
    {
        return match state.store.delete(&current.key, current.mod_revision).await {
            Ok(_) => {
                state.written(info);
                crate::delete::after_remove(state, info, &next).await;
                Ok(Commit::Done(next))
            }
            Err(StoreError::Conflict) => Ok(Commit::Retry),
            Err(e) => Err(store_err(e)),
        };
    }
    let stored = to_storage(info, next.clone());
    if encode(&stored) == encode(&current.object) {
        return Ok(Commit::Done(old));
    }
    match state
        .store
        .update(&current.key, &stored, current.mod_revision)
        .await
    {
        Ok(rev) => {
            objects::set_meta_str(&mut next, "resourceVersion", &rev.to_string());
            state.written(info);
            if is(info, "apiextensions.k8s.io", "customresourcedefinitions") {
                register_crd(state, &next);
            }
            if objects::is_deleting(&next)
                || objects::owner_uids(&old) != objects::owner_uids(&next)
            {
                state.gc_wake.notify_one();
            }
            Ok(Commit::Done(next))
        }
        Err(StoreError::Conflict) => Ok(Commit::Retry),
        Err(e) => Err(store_err(e)),
    }
}

/// PUT: replace an object (or its status). Returns 201 when it created a missing object of a
/// kind that allows create-on-update (Endpoints, Events), 200 otherwise.
pub async fn update(
    state: &State,
    t: &Target,
    mut body: Value,
    opts: &WriteOptions,
) -> Result<(u16, Value), ApiError> {
    let info = &t.info;
    check_type(info, &body)?;
    check_name(t.name(), &mut body, false)?;
    normalize_namespace(info, t.ns(), &mut body)?;
    let pinned = objects::resource_version(&body).to_string();
    for _ in 0..RETRIES {
        let Some(current) = read(state, info, t.ns(), t.name()).await? else {
            if info.allow_create_on_update && !t.status {
                let mut obj = body.clone();
                objects::remove_meta(&mut obj, "resourceVersion");
                match create(state, t, obj, opts).await {
                    Ok(v) => return Ok((201, v)),
                    Err(e) if e.code == 409 && e.reason == "AlreadyExists" => continue,
                    Err(e) => return Err(e),
                }
            }
            return Err(ApiError::not_found(info.gr(), t.name()));
        };
        if !pinned.is_empty() && pinned != current.mod_revision.to_string() {
            return Err(ApiError::stale(info.gr(), t.name()));
        }
        match commit_update(state, info, &current, body.clone(), t.status, opts).await? {
            Commit::Done(v) => return Ok((200, v)),
            Commit::Retry if pinned.is_empty() => continue,
            Commit::Retry => return Err(ApiError::stale(info.gr(), t.name())),
        }
    }
    Err(ApiError::stale(info.gr(), t.name()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn generated_names_use_the_prefix() {
        let n = generate_name("installer-");
        assert!(n.starts_with("installer-"));
        assert_eq!(n.len(), "installer-".len() + 5);
        assert!(crate::validation::is_dns1123_subdomain(&n));
        let long = generate_name(&"a".repeat(80));
        assert_eq!(long.len(), 63);
    }

    #[test]
    fn body_type_must_match_the_url() {
        let reg = crate::resources::Registry::default();
        let pods = reg.lookup("", "v1", "pods").unwrap();
        assert!(check_type(&pods, &json!({"apiVersion": "v1", "kind": "Pod"})).is_ok());
        assert!(check_type(&pods, &json!({})).is_ok());
        assert_eq!(
            check_type(&pods, &json!({"kind": "ConfigMap"}))
                .unwrap_err()
                .code,
            400
        );
        let mut obj = json!({"metadata": {"name": "a"}});
        assert_eq!(check_name("b", &mut obj, true).unwrap_err().code, 400);
        let mut nameless = json!({"metadata": {}});
        assert_eq!(check_name("b", &mut nameless, false).unwrap_err().code, 400);
        check_name("b", &mut nameless, true).unwrap();
        assert_eq!(nameless["metadata"]["name"], "b");
        let mut obj = json!({"metadata": {"namespace": "x"}});
        assert_eq!(
            normalize_namespace(&pods, "y", &mut obj).unwrap_err().code,
            400
        );
    }
}
