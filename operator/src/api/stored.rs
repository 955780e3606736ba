//! The `EtcdCluster` as the API server stores it, read in two steps: the object with its spec
//! and status left as JSON ([`StoredCluster`]), then those decoded into the operator's types
//! ([`StoredCluster::decode`]). Read in one step, an object the operator cannot decode (a field
//! the API server let through that this operator's types refuse: an older operator under a
//! newer CRD, a schema loosened by hand, an API without schema validation) failed the whole
//! watch, and the operator went on acting on the last spec it had decoded without a word. Read
//! in two, such an object is an [`Unreadable`] value that names the object, the field the
//! decoder stopped at and its message, and the pass holds every action until it is fixed.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Condition, EtcdCluster, EtcdClusterSpec, EtcdClusterStatus};

/// An `EtcdCluster` whose spec and status are not decoded yet.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct StoredCluster {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

impl Resource for StoredCluster {
    type DynamicType = ();
    type Scope = <EtcdCluster as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        EtcdCluster::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        EtcdCluster::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        EtcdCluster::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        EtcdCluster::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// An `EtcdCluster` the operator cannot decode, and what it can still tell of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    /// The object, for Events.
    pub object: ObjectReference,
    /// `metadata.generation` of the object that could not be decoded.
    pub generation: Option<i64>,
    /// Where the decoder stopped, from the object's root (`spec.clients[0]`).
    pub field: String,
    /// The decoder's message (``missing field `commonName` ``).
    pub message: String,
    /// `status.observedGeneration` as stored: the last generation the operator acted on.
    pub observed_generation: Option<i64>,
    /// `status.conditions` as stored (empty when they do not decode either).
    pub conditions: Vec<Condition>,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.object.name.as_deref().unwrap_or_default();
        write!(f, "EtcdCluster/{name}")?;
        if let Some(g) = self.generation {
            write!(f, " (generation {g})")?;
        }
        write!(f, " cannot be read: {}: {}", self.field, self.message)
    }
}

impl StoredCluster {
    /// The object in the operator's types, or what stops it from being read.
    pub fn decode(&self) -> Result<EtcdCluster, Box<Unreadable>> {
        let spec: EtcdClusterSpec = decode(&self.spec).map_err(|e| self.unreadable("spec", e))?;
        let status: Option<EtcdClusterStatus> = match &self.status {
            None | Some(Value::Null) => None,
            Some(v) => Some(decode(v).map_err(|e| self.unreadable("status", e))?),
        };
        let mut cluster = EtcdCluster::new(self.metadata.name.as_deref().unwrap_or_default(), spec);
        cluster.metadata = self.metadata.clone();
        cluster.status = status;
        Ok(cluster)
    }

    fn unreadable(&self, part: &str, (path, message): (String, String)) -> Box<Unreadable> {
        let field = if path.is_empty() || path == "." {
            part.to_owned()
        } else {
            format!("{part}.{path}")
        };
        let status = self.status.as_ref();
        Box::new(Unreadable {
            object: self.object_ref(&()),
            generation: self.metadata.generation,
            field,
            message,
            observed_generation: status
                .and_then(|s| s.get("observedGeneration"))
                .and_then(Value::as_i64),
            conditions: status
                .and_then(|s| s.get("conditions"))
                .and_then(|c| serde_json::from_value(c.clone()).ok())
                .unwrap_or_default(),
        })
    }
}

/// Decodes `value`; on failure, the path the decoder stopped at and its message.
fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(value)
        .map_err(|e| (e.path().to_string(), e.inner().to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn stored(spec: Value, status: Value) -> StoredCluster {
        serde_json::from_value(json!({
            "apiVersion": "etcd.static-operator.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "cluster", "generation": 3},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_readable_object_decodes_whole() {
        let s = stored(
            json!({"backendQuotaGib": 8}),
            json!({"observedGeneration": 2}),
        );
        let c = s.decode().unwrap();
        assert_eq!(c.metadata.name.as_deref(), Some("cluster"));
        assert_eq!(c.metadata.generation, Some(3));
        assert_eq!(c.status.unwrap().observed_generation, Some(2));
    }

    #[test]
    fn a_client_without_common_name_names_the_field_and_keeps_the_status() {
        let s = stored(
            json!({"clients": [{"name": "kas"}]}),
            json!({
                "observedGeneration": 1,
                "conditions": [{"type": "Available", "status": "True", "reason": "Quorate",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            }),
        );
        let u = s.decode().unwrap_err();
        assert_eq!(u.field, "spec.clients[0]");
        assert!(u.message.contains("commonName"), "{}", u.message);
        assert_eq!(u.generation, Some(3));
        assert_eq!(u.observed_generation, Some(1));
        assert_eq!(u.conditions.len(), 1);
        assert_eq!(u.object.kind.as_deref(), Some("EtcdCluster"));
        assert_eq!(
            u.to_string(),
            format!(
                "EtcdCluster/cluster (generation 3) cannot be read: spec.clients[0]: {}",
                u.message
            )
        );
    }

    #[test]
    fn a_wrong_type_names_the_field_itself() {
        let u = stored(
            json!({"memberRemediation": {"unhealthySeconds": "ten"}}),
            Value::Null,
        )
        .decode()
        .unwrap_err();
        assert_eq!(u.field, "spec.memberRemediation.unhealthySeconds");
        assert!(u.message.contains("invalid type"), "{}", u.message);
        assert!(u.conditions.is_empty());
    }

    #[test]
    fn an_unreadable_status_is_named_as_such() {
        let u = stored(json!({}), json!({"latestAvailableRevision": "x"}))
            .decode()
            .unwrap_err();
        assert_eq!(u.field, "status.latestAvailableRevision");
    }
}
