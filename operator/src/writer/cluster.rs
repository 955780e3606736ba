//! The EtcdCluster's own writes: its status (a merge patch that removes what became empty),
//! its conditions alone when its spec cannot be decoded, and its creation.

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use super::{Awaited, WriteError, Writer};
use crate::api::{EtcdCluster, EtcdClusterStatus};

impl Writer {
    /// Writes the EtcdCluster's status (a merge patch of the whole status).
    pub async fn cluster_status(
        &mut self,
        cluster: &EtcdCluster,
        status: &EtcdClusterStatus,
    ) -> Result<(), WriteError> {
        let name = cluster.name_any();
        if self.planned("patch status of", "EtcdCluster", "", &name) {
            return Ok(());
        }
        let new = serde_json::to_value(status).unwrap_or(serde_json::Value::Null);
        let old = serde_json::to_value(&cluster.status).unwrap_or(serde_json::Value::Null);
        let patch = serde_json::json!({ "status": with_removals(new, &old) });
        let written = self.patch_cluster_status(name, &patch).await?;
        // Awaited like every cached write: a pass deciding from a status older than its own last
        // write would write the older lists back (the patch carries whole lists), e.g. undo a
        // remediation attempt just counted.
        self.awaited.push(Awaited {
            kind: "EtcdCluster",
            namespace: String::new(),
            name: written.metadata.name.clone().unwrap_or_default(),
            resource_version: written.metadata.resource_version,
        });
        Ok(())
    }

    /// Writes `status.conditions` alone, for an EtcdCluster whose spec the operator cannot
    /// decode.
    pub async fn cluster_conditions(
        &mut self,
        name: &str,
        conditions: &[crate::api::Condition],
    ) -> Result<(), WriteError> {
        if self.planned("patch status of", "EtcdCluster", "", name) {
            return Ok(());
        }
        let patch = serde_json::json!({ "status": { "conditions": conditions } });
        self.patch_cluster_status(name.to_owned(), &patch)
            .await
            .map(|_| ())
    }

    /// A merge patch of the EtcdCluster's status, the answer read as stored (never decoded: it
    /// may hold a spec the operator cannot read).
    async fn patch_cluster_status(
        &self,
        name: String,
        patch: &serde_json::Value,
    ) -> Result<crate::api::StoredCluster, WriteError> {
        let api: Api<crate::api::StoredCluster> = Api::all(self.client.clone());
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|source| WriteError {
                action: "patching the status of",
                kind: "EtcdCluster",
                namespace: String::new(),
                name,
                source,
            })
    }

    /// Creates the EtcdCluster.
    pub async fn create_cluster(&self, cluster: &EtcdCluster) -> Result<(), WriteError> {
        let api: Api<EtcdCluster> = Api::all(self.client.clone());
        api.create(&PostParams::default(), cluster)
            .await
            .map(|_| ())
            .map_err(|source| WriteError {
                action: "creating",
                kind: "EtcdCluster",
                namespace: String::new(),
                name: cluster.name_any(),
                source,
            })
    }
}

/// `new` as a JSON merge patch over `old`: a field `old` has and `new` lacks (an optional field
/// that became empty) is sent as `null`, so the merge removes it instead of keeping it.
fn with_removals(new: serde_json::Value, old: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (new, old) {
        (Value::Object(mut n), Value::Object(o)) => {
            for (k, old_v) in o {
                match n.remove(k) {
                    Some(new_v) => {
                        n.insert(k.clone(), with_removals(new_v, old_v));
                    }
                    None => {
                        n.insert(k.clone(), Value::Null);
                    }
                }
            }
            Value::Object(n)
        }
        (new, _) => new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_field_that_became_empty_is_removed_by_the_merge_patch() {
        let old =
            serde_json::json!({"a": 1, "d": {"inProgress": {"x": 1}, "members": [1]}, "r": [1]});
        let new = serde_json::json!({"a": 2, "d": {"members": [2]}});
        assert_eq!(
            with_removals(new, &old),
            serde_json::json!({"a": 2, "d": {"inProgress": null, "members": [2]}, "r": null})
        );
    }
}
