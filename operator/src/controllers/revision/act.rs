//! The revision controller's writes: publishing, creating (status first, then the copies),
//! discarding and pruning revisions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::{RevisionStep, STATUS_PREFIX, Sources};
use crate::events::EventReason;
use crate::pass::Pass;
use crate::podspec::paths::{ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET, POD_CONFIGMAP};
use crate::podspec::{STATIC_POD_NAMESPACE as NS, substitute_revision};
use crate::writer::{WriteError, Writer};

/// Carries out one decided step.
pub(super) async fn act(
    p: &mut Pass<'_>,
    step: &RevisionStep,
    sources: &Sources,
) -> Result<(), WriteError> {
    match step {
        RevisionStep::None => {}
        RevisionStep::Publish { number } => {
            p.status.latest = *number;
            p.note(format!("revision {number} is available"));
            let note = format!("revision {number} is available to roll out");
            p.event(EventReason::RevisionAvailable, note).await;
        }
        RevisionStep::Create { number, reason } => {
            create(p, *number, reason, sources).await?;
            p.note(format!("created revision {number}: {reason}"));
            let note = format!("revision {number}: {reason}");
            p.event(EventReason::RevisionCreated, note).await;
        }
        RevisionStep::Discard { number, reason } => {
            delete(&mut p.w, *number).await?;
            p.note(format!("discarded revision {number}: {reason}"));
            let note = format!("revision {number}: {reason}");
            p.event(EventReason::RevisionDiscarded, note).await;
        }
        RevisionStep::Prune { numbers } => {
            for n in numbers {
                delete(&mut p.w, *n).await?;
            }
            p.note(format!("pruned revisions {numbers:?}"));
        }
    }
    Ok(())
}

/// Writes revision `number`: its status first (the owner of the copies), then each copy.
async fn create(
    p: &mut Pass<'_>,
    number: i64,
    reason: &str,
    sources: &Sources,
) -> Result<(), WriteError> {
    let status_name = format!("{STATUS_PREFIX}{number}");
    let mut fp = sources.fingerprints();
    fp.insert("revision".to_owned(), number.to_string());
    fp.insert("reason".to_owned(), reason.to_owned());
    let owner = p.w.configmap_owner(NS, &status_name, &fp).await?;
    let text = |source: &str| -> BTreeMap<String, String> {
        sources
            .by_name
            .get(source)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
            .collect()
    };
    let pods = text(POD_CONFIGMAP)
        .into_iter()
        .map(|(k, v)| (k, substitute_revision(&v, number)))
        .collect();
    p.w.configmap(
        NS,
        &format!("{POD_CONFIGMAP}-{number}"),
        None,
        &pods,
        Some(&owner),
    )
    .await?;
    let bundles = text(ALL_BUNDLES_CONFIGMAP);
    p.w.configmap(
        NS,
        &format!("{ALL_BUNDLES_CONFIGMAP}-{number}"),
        None,
        &bundles,
        Some(&owner),
    )
    .await?;
    let certs = sources
        .by_name
        .get(ALL_CERTS_SECRET)
        .cloned()
        .unwrap_or_default();
    p.w.secret(
        NS,
        &format!("{ALL_CERTS_SECRET}-{number}"),
        None,
        &certs,
        Some(&owner),
        crate::writer::NO_MARKS,
    )
    .await?;
    Ok(())
}

/// Deletes a revision's copies, then its status (nothing relies on owner-reference cascade).
async fn delete(w: &mut Writer, n: i64) -> Result<(), WriteError> {
    w.delete::<ConfigMap>(NS, &format!("{POD_CONFIGMAP}-{n}"))
        .await?;
    w.delete::<ConfigMap>(NS, &format!("{ALL_BUNDLES_CONFIGMAP}-{n}"))
        .await?;
    w.delete::<Secret>(NS, &format!("{ALL_CERTS_SECRET}-{n}"))
        .await?;
    w.delete::<ConfigMap>(NS, &format!("{STATUS_PREFIX}{n}"))
        .await
}
