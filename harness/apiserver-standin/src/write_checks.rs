//! The checks of a write, between the strategy and storage: decoding (a built-in kind through
//! its type, a custom resource pruned and defaulted by its schema, unknown and duplicate fields
//! handled as `fieldValidation` says) and validation on create and update, each failure a 422
//! `Invalid` listing its causes.

use serde_json::Value;

use crate::custom::{self, Scope};
use crate::error::{ApiError, Cause};
use crate::field_validation;
use crate::objects;
use crate::pdb_validation;
use crate::resources::ResourceInfo;
use crate::validation;
use crate::verbs::WriteOptions;

pub(crate) fn invalid(
    info: &ResourceInfo,
    obj: &Value,
    causes: Vec<Cause>,
) -> Result<(), ApiError> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &info.kind,
            &info.group,
            objects::name(obj),
            causes,
        ))
    }
}

pub(crate) fn is(info: &ResourceInfo, group: &str, resource: &str) -> bool {
    info.group == group && info.resource == resource
}

/// Decodes and re-encodes a built-in kind (400 when it does not decode; unknown fields dropped).
pub(crate) fn normalize(info: &ResourceInfo, obj: &Value) -> Result<Value, ApiError> {
    validation::normalize_builtin(info, obj).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {e}",
            kind = info.kind,
            version = info.version
        ))
    })
}

/// Decodes a candidate object as kube-apiserver does: a built-in kind through its type, a
/// custom resource pruned and defaulted by its schema; the unknown and duplicate fields found
/// are then warned about or refused as `fieldValidation` says.
///
/// `unknown` holds what [`custom::normalize`] pruned from a custom resource before the
/// strategy ran (kube-apiserver prunes and defaults while decoding the request).
pub(crate) fn decode(
    info: &ResourceInfo,
    obj: &Value,
    mut unknown: Vec<String>,
    opts: &WriteOptions,
) -> Result<Value, ApiError> {
    let decoded = normalize(info, obj)?;
    if info.schema.is_none() {
        unknown.extend(field_validation::dropped_fields(obj, &decoded));
    }
    let problems = field_validation::problems(&unknown, &opts.duplicates);
    field_validation::enforce(
        info,
        opts.field_validation,
        problems,
        opts.patched.then_some(obj),
    )?;
    Ok(decoded)
}

pub(crate) fn validate_create(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let mut causes = validation::validate_object_meta(info, obj);
    causes.extend(custom::validate(info, obj, Scope::of(info, false)));
    if is(info, "", "configmaps") || is(info, "", "secrets") {
        causes.extend(validation::validate_data_keys(obj));
        causes.extend(validation::validate_data_size(obj, is(info, "", "secrets")));
    }
    if is(info, "", "pods") {
        causes.extend(validation::validate_pod_spec(obj));
    }
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions") {
        causes.extend(validation::validate_crd(obj));
    }
    if is(info, "policy", "poddisruptionbudgets") {
        causes.extend(pdb_validation::validate_spec(obj));
    }
    invalid(info, obj, causes)
}

pub(crate) fn validate_update(
    info: &ResourceInfo,
    old: &Value,
    new: &Value,
    status: bool,
) -> Result<(), ApiError> {
    let mut causes = validation::validate_object_meta(info, new);
    causes.extend(validation::validate_meta_update(old, new));
    causes.extend(custom::validate(info, new, Scope::of(info, status)));
    if is(info, "", "configmaps") || is(info, "", "secrets") {
        causes.extend(validation::validate_data_keys(new));
        causes.extend(validation::validate_data_size(new, is(info, "", "secrets")));
        causes.extend(validation::validate_immutable_data(old, new));
    }
    if is(info, "", "secrets") {
        causes.extend(validation::validate_secret_type(old, new));
    }
    if is(info, "", "pods") && !status {
        causes.extend(validation::validate_pod_spec_update(old, new));
    }
    if is(info, "policy", "poddisruptionbudgets") {
        causes.extend(if status {
            pdb_validation::validate_status(new)
        } else {
            pdb_validation::validate_spec(new)
        });
    }
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions") && !status {
        causes.extend(validation::validate_crd(new));
        let scope = |v: &Value| v.pointer("/spec/scope").cloned();
        if scope(old) != scope(new) {
            causes.push(Cause::invalid("spec.scope", "", "field is immutable"));
        }
    }
    invalid(info, new, causes)
}
