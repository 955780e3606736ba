//! ClusterOperator mirror: where the API serves `config.openshift.io/v1` ClusterOperators (an
//! OpenShift-style payload), the EtcdCluster's payload status is mirrored into ClusterOperator
//! `etcd`: `Available`, `Progressing`, `Degraded` and `Upgradeable` with their reasons, messages
//! and transition times, `versions` and `relatedObjects`. Elsewhere the EtcdCluster's status is
//! the payload status and nothing more is written.
//!
//! Inputs: the status this pass wrote, whether the API serves the kind (asked through discovery,
//! again every [`RECHECK`], so a CRD installed later is found). Decision ([`desired_status`],
//! pure): the ClusterOperator's status. Writes: ClusterOperator `etcd` (created empty when
//! missing, as a payload's orchestrator would have), its status by merge patch, only when it
//! differs. Never touches the spec or another operator's ClusterOperator.

use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::api::EtcdClusterStatus;

/// The ClusterOperator this operator reports on.
pub const CLUSTER_OPERATOR: &str = "etcd";
/// How often a missing ClusterOperator API is looked for again.
pub const RECHECK: Duration = Duration::from_secs(60);
/// The conditions a ClusterOperator carries.
const TYPES: [&str; 4] = ["Available", "Progressing", "Degraded", "Upgradeable"];

/// `config.openshift.io/v1` ClusterOperator.
pub fn resource() -> ApiResource {
    ApiResource {
        group: "config.openshift.io".into(),
        version: "v1".into(),
        api_version: "config.openshift.io/v1".into(),
        kind: "ClusterOperator".into(),
        plural: "clusteroperators".into(),
    }
}

/// The ClusterOperator's status for an EtcdCluster status.
pub fn desired_status(status: &EtcdClusterStatus) -> Value {
    let conditions: Vec<Value> = TYPES
        .iter()
        .filter_map(|t| status.conditions.iter().find(|c| c.type_ == *t))
        .map(|c| {
            json!({
                "type": c.type_,
                "status": c.status,
                "lastTransitionTime": c.last_transition_time,
                "reason": c.reason,
                "message": c.message,
            })
        })
        .collect();
    json!({
        "conditions": conditions,
        "versions": status.versions,
        "relatedObjects": status.related_objects,
    })
}

/// Whether the API serves ClusterOperators (discovery of `config.openshift.io/v1`).
pub async fn served(client: &Client) -> bool {
    client
        .list_api_group_resources("config.openshift.io/v1")
        .await
        .is_ok_and(|list| list.resources.iter().any(|r| r.name == "clusteroperators"))
}

/// Why the mirror could not be written.
#[derive(Debug, thiserror::Error)]
#[error(
    "{action} ClusterOperator {CLUSTER_OPERATOR}: {}",
    crate::writer::describe(source)
)]
pub struct MirrorError {
    action: &'static str,
    source: kube::Error,
}

/// Makes ClusterOperator `etcd`'s status `desired`; true when it wrote.
pub async fn mirror(client: &Client, desired: &Value) -> Result<bool, MirrorError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let err = |action| move |source| MirrorError { action, source };
    let current = match api
        .get_opt(CLUSTER_OPERATOR)
        .await
        .map_err(err("reading"))?
    {
        Some(co) => co,
        None => {
            let mut co = DynamicObject::new(CLUSTER_OPERATOR, &resource());
            co.data = json!({ "spec": {} });
            api.create(&PostParams::default(), &co)
                .await
                .map_err(err("creating"))?
        }
    };
    if current.data.get("status") == Some(desired) {
        return Ok(false);
    }
    api.patch_status(
        CLUSTER_OPERATOR,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": desired })),
    )
    .await
    .map_err(err("writing the status of"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Condition, OperandVersion};

    #[test]
    fn the_payload_conditions_versions_and_related_objects_are_mirrored() {
        let cond = |t: &str, s: &str| Condition {
            type_: t.into(),
            status: s.into(),
            last_transition_time: "2026-11-25T10:00:00Z".into(),
            reason: "AsExpected".into(),
            message: format!("{t} says so"),
        };
        let status = EtcdClusterStatus {
            conditions: vec![
                cond("EtcdMembersAvailable", "True"),
                cond("Upgradeable", "False"),
                cond("Available", "True"),
                cond("Degraded", "False"),
                cond("Progressing", "False"),
            ],
            versions: vec![OperandVersion {
                name: "etcd".into(),
                version: "3.4.23".into(),
            }],
            related_objects: crate::driver::payload_status::related_objects("etcd-operator"),
            ..EtcdClusterStatus::default()
        };
        let got = desired_status(&status);
        let types: Vec<&str> = got["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types, TYPES,
            "the aggregate conditions only, in a stable order"
        );
        assert_eq!(got["conditions"][3]["status"], "False");
        assert_eq!(
            got["conditions"][0]["lastTransitionTime"],
            "2026-11-25T10:00:00Z"
        );
        assert_eq!(got["versions"][0]["version"], "3.4.23");
        assert_eq!(got["relatedObjects"][3]["resource"], "poddisruptionbudgets");
        assert_eq!(got["relatedObjects"][0].get("namespace"), None);
    }
}
