//! The pod `eviction` subresource (`POST .../pods/<name>/eviction` with a policy/v1 `Eviction`),
//! with kube-apiserver's rules (its `EvictionREST`):
//!
//! ```text
//! pod being deleted, or phase Succeeded/Failed/Pending ─▶ delete (no budget check)
//! budgets selecting the pod:  none ─▶ delete      more than one ─▶ 500
//! one budget:  pod not Ready and (AlwaysAllow, or IfHealthyBudget with
//!              currentHealthy >= desiredHealthy > 0) ─▶ delete, pinned to the pod's version
//!              otherwise check-and-decrement ([`check_and_decrement`]): 429 while the
//!              budget's generation is not observed or no disruption is allowed, 403 for a
//!              negative budget; else disruptionsAllowed - 1 and disruptedPods[pod] = now,
//!              written over the budget's resourceVersion (re-read and retried on conflict)
//!              ─▶ delete
//! ```
//! "Delete" first marks the pod with the `DisruptionTarget` condition (reason
//! `EvictionByEvictionAPI`), then deletes it with the eviction's `deleteOptions` (preconditions
//! respected; a pod bound to a node is deleted gracefully, [`crate::delete`]). Success is a 201
//! `Status`. `dryRun=All` (query or `deleteOptions.dryRun`) checks everything and changes nothing.
//! The pure decisions are in [`crate::eviction_rules`]; this module does the I/O.

use serde_json::Value;
use time::OffsetDateTime;

use crate::admission;
use crate::delete::{self, DeleteOptions};
use crate::error::ApiError;
use crate::eviction_rules::{
    Verdict, check_and_decrement, check_preconditions, ignores_budgets, still_processing, success,
    verdict, with_disruption_target,
};
use crate::objects;
use crate::pdb::{Budget, phase};
use crate::resources::ResourceInfo;
use crate::state::{State, from_storage};
use crate::verbs::{self, Commit, read};

/// Attempts at a write that keeps losing races.
const RETRIES: usize = 20;

/// A decoded `Eviction` body.
#[derive(Clone, Debug, Default)]
pub struct Eviction {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `deleteOptions`.
    pub delete_options: DeleteOptions,
}

impl Eviction {
    /// Decodes a policy/v1 (or v1beta1) `Eviction`; unknown fields are dropped, as by the real
    /// server (so kube-rs's `delete_options` key is ignored there too).
    pub fn from_body(body: &[u8]) -> Result<Self, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::bad_request(
                "the object provided is unrecognized (must be of type Eviction): couldn't get version/kind; json parse error: unexpected end of JSON input (<empty>)",
            ));
        }
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding Eviction: {e}")))?;
        let field = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        let version_ok = matches!(api_version, "" | "policy/v1" | "policy/v1beta1");
        if !version_ok || !matches!(kind, "" | "Eviction") {
            return Err(ApiError::bad_request(format!(
                "{kind} in version {api_version:?} cannot be handled as a Eviction"
            )));
        }
        // Typed decoding checks field types (both versions share the shape).
        let mut untyped = v.clone();
        if let Some(map) = untyped.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
        serde_json::from_value::<k8s_openapi::api::policy::v1::Eviction>(untyped).map_err(|e| {
            ApiError::bad_request(format!(
                "Eviction in version \"v1\" cannot be handled as a Eviction: {e}"
            ))
        })?;
        let delete_options = match v.get("deleteOptions").filter(|o| !o.is_null()) {
            Some(o) => DeleteOptions::from_body(o.to_string().as_bytes())?,
            None => DeleteOptions::default(),
        };
        Ok(Self {
            name: objects::name(&v).to_string(),
            namespace: objects::namespace(&v).to_string(),
            delete_options,
        })
    }
}

fn pods_info(state: &State) -> Result<ResourceInfo, ApiError> {
    state
        .registry()
        .lookup("", "v1", "pods")
        .ok_or_else(ApiError::no_such_resource)
}

/// `POST /api/v1/namespaces/{ns}/pods/{name}/eviction`: 201 with a `Status` when the pod was
/// evicted (deleted, or its graceful deletion started).
pub async fn evict(
    state: &State,
    ns: &str,
    name: &str,
    body: &[u8],
    dry_run_query: bool,
) -> Result<Value, ApiError> {
    let eviction = Eviction::from_body(body)?;
    if !eviction.namespace.is_empty() && eviction.namespace != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if eviction.name != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let info = pods_info(state)?;
    admission::namespace_admission(state, &info, ns, name).await?;
    let mut original = eviction.delete_options;
    original.dry_run |= dry_run_query;
    let pinned_by_client = original.resource_version.is_some();

    // Pods that are finished, not started, or already going are deleted outright.
    let mut pod = None;
    for _ in 0..RETRIES {
        let current = read(state, &info, ns, name)
            .await?
            .ok_or_else(|| ApiError::not_found(info.gr(), name))?;
        let obj = from_storage(&info, current.object);
        if !ignores_budgets(&obj) {
            pod = Some(obj);
            break;
        }
        let mut opts = original.clone();
        let terminal = objects::is_deleting(&obj) || matches!(phase(&obj), "Succeeded" | "Failed");
        if !terminal && !pinned_by_client {
            opts.resource_version = Some(objects::resource_version(&obj).to_string());
        }
        match mark_and_delete(state, &info, ns, name, &opts).await {
            Ok(()) => return Ok(success()),
            Err(e) if e.code == 409 && !pinned_by_client => continue,
            Err(e) => return Err(e),
        }
    }
    let Some(pod) = pod else {
        return Err(ApiError::stale(info.gr(), name));
    };

    let (pdbs, budgets) = namespace_budgets(state, ns).await?;
    let mut opts = original.clone();
    let mut pinned_budget = None;
    match verdict(&pod, &budgets) {
        Verdict::NoBudget => {}
        Verdict::MoreThanOneBudget => {
            return Err(ApiError {
                code: 500,
                reason: "",
                message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                details: None,
            });
        }
        Verdict::Unhealthy { budget } => {
            opts.resource_version = Some(objects::resource_version(&pod).to_string());
            pinned_budget = Some(budget);
        }
        Verdict::Decrement { index } => {
            let budget_name = budgets
                .get(index)
                .map(|b| b.name.clone())
                .unwrap_or_default();
            decrement(state, &pdbs, ns, &budget_name, name, original.dry_run).await?;
        }
    }
    match mark_and_delete(state, &info, ns, name, &opts).await {
        Ok(()) => Ok(success()),
        Err(e) if e.code == 409 && !pinned_by_client => match pinned_budget {
            Some(budget) => Err(still_processing(&budget)),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// The PodDisruptionBudgets of a namespace.
async fn namespace_budgets(
    state: &State,
    ns: &str,
) -> Result<(ResourceInfo, Vec<Budget>), ApiError> {
    let pdbs = state
        .registry()
        .lookup("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(ApiError::no_such_resource)?;
    let page = state
        .store
        .list(
            &pdbs.collection_prefix(state.prefix(), Some(ns)),
            None,
            0,
            0,
        )
        .await
        .map_err(verbs::store_err)?;
    let budgets = page
        .items
        .iter()
        .map(|s| Budget::from_value(&s.object))
        .collect();
    Ok((pdbs, budgets))
}

/// Check-and-decrement against the stored budget, retried (re-read) when its status write
/// loses a race; a dry run writes nothing.
async fn decrement(
    state: &State,
    pdbs: &ResourceInfo,
    ns: &str,
    budget: &str,
    pod: &str,
    dry_run: bool,
) -> Result<(), ApiError> {
    for _ in 0..RETRIES {
        let stored = read(state, pdbs, ns, budget)
            .await?
            .ok_or_else(|| ApiError::not_found(pdbs.gr(), budget))?;
        let next = check_and_decrement(
            &Budget::from_value(&stored.object),
            pod,
            OffsetDateTime::now_utc(),
        )?;
        if dry_run {
            return Ok(());
        }
        match crate::disruption::write_status(state, pdbs, &stored, &next).await {
            Ok(()) => return Ok(()),
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::timeout(&format!(
        "couldn't update PodDisruptionBudget {budget:?} due to conflicts"
    )))
}

/// Marks the pod with `DisruptionTarget` (unless a dry run), then deletes it with `opts`. The
/// mark checks the preconditions against the live pod and moves a resourceVersion
/// precondition past its own write.
async fn mark_and_delete(
    state: &State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    let mut opts = opts.clone();
    if !opts.dry_run {
        let mut marked = false;
        for _ in 0..RETRIES {
            let current = read(state, info, ns, name)
                .await?
                .ok_or_else(|| ApiError::not_found(info.gr(), name))?;
            let pod = from_storage(info, current.object.clone());
            check_preconditions(&pod, &opts)?;
            let next = with_disruption_target(pod, &objects::now_rfc3339());
            if let Commit::Done(written) =
                verbs::commit_update(state, info, &current, next, true, &Default::default()).await?
            {
                if opts.resource_version.is_some() {
                    opts.resource_version = Some(objects::resource_version(&written).to_string());
                }
                marked = true;
                break;
            }
        }
        if !marked {
            return Err(ApiError::stale(info.gr(), name));
        }
    }
    delete::delete(state, info, ns, name, &opts)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn eviction_bodies() {
        let e = Eviction::from_body(
            br#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p","namespace":"ns"},
            "deleteOptions":{"gracePeriodSeconds":0,"preconditions":{"uid":"u"},"dryRun":["All"]}}"#,
        )
        .unwrap();
        assert_eq!((e.name.as_str(), e.namespace.as_str()), ("p", "ns"));
        assert_eq!(e.delete_options.grace_period_seconds, Some(0));
        assert_eq!(e.delete_options.uid.as_deref(), Some("u"));
        assert!(e.delete_options.dry_run);
        // kube-rs's body: no type, and a key the server does not know.
        let e = Eviction::from_body(
            br#"{"delete_options":{"gracePeriodSeconds":0},"metadata":{"name":"p"}}"#,
        )
        .unwrap();
        assert_eq!(e.delete_options.grace_period_seconds, None);
        assert!(
            Eviction::from_body(br#"{"apiVersion":"policy/v1beta1","metadata":{"name":"p"}}"#)
                .is_ok()
        );
        assert_eq!(Eviction::from_body(b"").unwrap_err().code, 400);
        assert_eq!(
            Eviction::from_body(br#"{"apiVersion":"v1","kind":"Pod"}"#)
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            Eviction::from_body(
                br#"{"metadata":{"name":"p"},"deleteOptions":{"gracePeriodSeconds":"x"}}"#
            )
            .unwrap_err()
            .code,
            400
        );
    }
}
