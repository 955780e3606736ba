//! The PATCH verb: JSON, merge and strategic-merge patches and server-side apply (the applier,
//! its field-manager conflicts and the checks on an apply body), committed like an update.

use serde_json::{Value, json};

use super::*;

fn applier<'a>(api_version: &'a str, opts: &'a WriteOptions, now: &'a str) -> apply::Applier<'a> {
    apply::Applier {
        manager: opts.field_manager.as_deref().unwrap_or_default(),
        api_version,
        now,
        force: opts.force,
    }
}

/// 409 for apply conflicts, worded like kube-apiserver.
fn apply_conflict(info: &ResourceInfo, name: &str, conflicts: &[apply::Conflict]) -> ApiError {
    let list: Vec<String> = conflicts
        .iter()
        .map(|c| format!("conflict with {:?}: {}", c.manager, c.field))
        .collect();
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {:?}", c.manager), "field": c.field}))
        .collect();
    let noun = if conflicts.len() == 1 {
        "conflict"
    } else {
        "conflicts"
    };
    ApiError {
        code: 409,
        reason: "Conflict",
        message: format!(
            "Apply failed with {} {noun}: {}",
            conflicts.len(),
            list.join("\n")
        ),
        details: Some(
            json!({"name": name, "group": info.group, "kind": info.resource, "causes": causes}),
        ),
    }
}

/// Checks an apply patch: a `fieldManager` is required, and the body names its `apiVersion`
/// and `kind`, which must be the resource's.
fn check_apply_body(
    info: &ResourceInfo,
    opts: &WriteOptions,
    patch_doc: &Value,
) -> Result<(), ApiError> {
    if opts.field_manager.as_deref().is_none_or(str::is_empty) {
        let mut cause = Cause::required("fieldManager");
        cause.message = "Required value: is required for apply patch".into();
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            vec![cause],
        ));
    }
    let has_type = |f: &str| {
        patch_doc
            .get(f)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !has_type("apiVersion") || !has_type("kind") {
        return Err(ApiError::bad_request(format!(
            "invalid object type: {}, Kind={}",
            patch_doc
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            patch_doc
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )));
    }
    check_type(info, patch_doc)
}

/// Applies a patch of the given kind to `doc` (an apply as the manager `who`).
fn patch_document(
    info: &ResourceInfo,
    name: &str,
    kind: PatchKind,
    patch_doc: &Value,
    doc: &mut Value,
    who: apply::Applier<'_>,
) -> Result<(), ApiError> {
    match kind {
        PatchKind::Merge => patch::merge(doc, patch_doc)?,
        PatchKind::Strategic => strategic::apply(doc, patch_doc, &info.group, &info.resource)?,
        PatchKind::Json => patch::json_patch(doc, patch_doc)?,
        PatchKind::Apply => {
            apply::apply(doc, patch_doc, who).map_err(|c| apply_conflict(info, name, &c))?
        }
    }
    Ok(())
}

/// PATCH: merge / strategic (as merge) / JSON patch / apply. Returns the HTTP code (201 when an
/// apply created the object) and the object.
pub async fn patch(
    state: &State,
    t: &Target,
    kind: PatchKind,
    body: &[u8],
    opts: &WriteOptions,
) -> Result<(u16, Value), ApiError> {
    let info = &t.info;
    if kind == PatchKind::Strategic && info.crd.is_some() {
        return Err(ApiError::unsupported_media_type(
            "application/strategic-merge-patch+json (not supported for custom resources)",
        ));
    }
    let patch_doc = patch::parse_body(kind, body)?;
    let opts = &WriteOptions {
        patched: true,
        ..opts.clone()
    };
    if kind == PatchKind::Apply {
        check_apply_body(info, opts, &patch_doc)?;
    }
    let api_version = info.api_version();
    for _ in 0..RETRIES {
        let now = objects::now_rfc3339();
        let current = read(state, info, t.ns(), t.name()).await?;
        let Some(current) = current else {
            if kind == PatchKind::Apply && !t.status {
                let mut obj = json!({});
                apply::apply(&mut obj, &patch_doc, applier(&api_version, opts, &now))
                    .map_err(|c| apply_conflict(info, t.name(), &c))?;
                objects::remove_meta(&mut obj, "resourceVersion");
                check_name(t.name(), &mut obj, true)?;
                match create(state, t, obj, opts).await {
                    Ok(v) => return Ok((201, v)),
                    Err(e) if e.code == 409 && e.reason == "AlreadyExists" => continue,
                    Err(e) => return Err(e),
                }
            }
            return Err(ApiError::not_found(info.gr(), t.name()));
        };
        let old = from_storage(info, current.object.clone());
        let mut doc = old.clone();
        let who = applier(&api_version, opts, &now);
        patch_document(info, t.name(), kind, &patch_doc, &mut doc, who)?;
        let patched_rv = objects::resource_version(&doc).to_string();
        let pinned = !patched_rv.is_empty() && patched_rv != current.mod_revision.to_string();
        if pinned {
            return Err(ApiError::stale(info.gr(), t.name()));
        }
        check_name(t.name(), &mut doc, true)?;
        normalize_namespace(info, t.ns(), &mut doc)?;
        match commit_update(state, info, &current, doc, t.status, opts).await? {
            Commit::Done(v) => return Ok((200, v)),
            Commit::Retry => continue,
        }
    }
    Err(ApiError::stale(info.gr(), t.name()))
}
