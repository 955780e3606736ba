//! The pass's writes to the API (objects, the EtcdCluster's status, Events), made in one place so
//! `etcd-operator plan` is one flag here: in a dry run every write is recorded, none is made. And
//! the read-your-writes barrier: every write records the
//! resourceVersion it produced, and the next pass acts only once the watch caches show it (or
//! show a deletion), so decisions are never made from a cache that predates the operator's own
//! writes.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};

mod barrier;
mod cluster;
mod error;
pub mod etcd;
pub use barrier::{Awaited, satisfied};
pub use error::{WriteError, describe};

/// Labels and annotations a written Secret must carry, set among its own (see
/// [`Writer::secret`]).
#[derive(Clone, Copy, Debug)]
pub struct Marks<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
}

/// No labels or annotations to set.
pub const NO_MARKS: Marks<'static> = Marks {
    labels: &BTreeMap::new(),
    annotations: &BTreeMap::new(),
};

impl Marks<'_> {
    /// `meta` carries every one of them.
    pub fn carried_by(&self, meta: &ObjectMeta) -> bool {
        let has = |want: &BTreeMap<String, String>, have: Option<&BTreeMap<String, String>>| {
            want.iter()
                .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
        };
        has(self.labels, meta.labels.as_ref()) && has(self.annotations, meta.annotations.as_ref())
    }

    /// Sets them on `meta`, keeping the others it has.
    fn set_on(&self, meta: &mut ObjectMeta) {
        let add = |want: &BTreeMap<String, String>, have: &mut Option<BTreeMap<String, String>>| {
            if !want.is_empty() {
                have.get_or_insert_with(BTreeMap::new).extend(want.clone());
            }
        };
        add(self.labels, &mut meta.labels);
        add(self.annotations, &mut meta.annotations);
    }
}

/// A namespaced object the writer reads back as it is stored.
pub trait Namespaced:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Writes the pass makes, collecting what the caches must show next.
pub struct Writer {
    client: Client,
    pub awaited: Vec<Awaited>,
    /// Plan only: record what would be written instead of writing.
    dry_run: bool,
    /// The writes a dry run would have made.
    pub planned: Vec<String>,
    /// The namespaces the caches watch (`None`: every one). A write elsewhere (a consumer's
    /// Secret in its own namespace) is not awaited: no cache would ever show it.
    cached: Option<Vec<String>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("awaited", &self.awaited)
            .finish_non_exhaustive()
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl Writer {
    pub fn new(client: Client, dry_run: bool) -> Self {
        Self {
            client,
            awaited: Vec::new(),
            dry_run,
            planned: Vec::new(),
            cached: None,
        }
    }

    /// Awaits only writes in `namespaces`, the ones the caches watch.
    pub fn caching(mut self, namespaces: &[&str]) -> Self {
        self.cached = Some(namespaces.iter().map(|n| (*n).to_owned()).collect());
        self
    }

    fn awaits(&self, ns: &str) -> bool {
        self.cached
            .as_ref()
            .is_none_or(|c| c.iter().any(|n| n == ns))
    }

    /// In a dry run, records the write and returns true (skip the API call).
    pub(super) fn planned(&mut self, action: &str, kind: &str, ns: &str, name: &str) -> bool {
        if self.dry_run {
            self.planned
                .push(format!("would {action} {kind} {ns}/{name}"));
        }
        self.dry_run
    }

    fn remember(&mut self, kind: &'static str, meta: &ObjectMeta) {
        let namespace = meta.namespace.clone().unwrap_or_default();
        if !self.awaits(&namespace) {
            return;
        }
        self.awaited.push(Awaited {
            kind,
            namespace,
            name: meta.name.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone(),
        });
    }

    /// Makes ConfigMap `name` hold exactly `data` (creating it, or replacing its data).
    /// Returns true when something was (or, in a dry run, would be) written.
    pub async fn configmap(
        &mut self,
        ns: &str,
        name: &str,
        current: Option<&ConfigMap>,
        data: &BTreeMap<String, String>,
        owner: Option<&OwnerReference>,
    ) -> Result<bool, WriteError> {
        let same = current.is_some_and(|cm| cm.data.as_ref() == Some(data));
        self.ensure(ns, name, current, same, owner, |cm: &mut ConfigMap| {
            cm.data = Some(data.clone());
        })
        .await
    }

    /// Makes ConfigMap `name` hold exactly `data` and carry `annotations` (its other
    /// annotations are kept).
    pub async fn configmap_annotated(
        &mut self,
        ns: &str,
        name: &str,
        current: Option<&ConfigMap>,
        data: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<bool, WriteError> {
        let has = |cm: &ConfigMap| {
            let have = cm.metadata.annotations.clone().unwrap_or_default();
            annotations.iter().all(|(k, v)| have.get(k) == Some(v))
        };
        let same = current.is_some_and(|cm| cm.data.as_ref() == Some(data) && has(cm));
        self.ensure(ns, name, current, same, None, |cm: &mut ConfigMap| {
            cm.data = Some(data.clone());
            let mut have = cm.metadata.annotations.clone().unwrap_or_default();
            have.extend(annotations.clone());
            cm.metadata.annotations = Some(have);
        })
        .await
    }

    /// Creates ConfigMap `name` holding `data` and returns an owner reference to it (for objects
    /// that must go when it goes). In a dry run the reference has no uid.
    pub async fn configmap_owner(
        &mut self,
        ns: &str,
        name: &str,
        data: &BTreeMap<String, String>,
    ) -> Result<OwnerReference, WriteError> {
        let mut owner = OwnerReference {
            api_version: "v1".to_owned(),
            kind: "ConfigMap".to_owned(),
            name: name.to_owned(),
            ..Default::default()
        };
        if self.planned("create", "ConfigMap", ns, name) {
            return Ok(owner);
        }
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(ns.to_owned()),
                ..Default::default()
            },
            data: Some(data.clone()),
            ..Default::default()
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let created = api
            .create(&PostParams::default(), &cm)
            .await
            .map_err(|source| WriteError {
                action: "creating",
                kind: "ConfigMap",
                namespace: ns.to_owned(),
                name: name.to_owned(),
                source,
            })?;
        self.remember("ConfigMap", created.meta());
        owner.uid = created.metadata.uid.clone().unwrap_or_default();
        Ok(owner)
    }

    /// Makes Secret `name` hold exactly `data`, with `marks` set among its own labels and
    /// annotations ([`NO_MARKS`]: none).
    pub async fn secret(
        &mut self,
        ns: &str,
        name: &str,
        current: Option<&Secret>,
        data: &BTreeMap<String, Vec<u8>>,
        owner: Option<&OwnerReference>,
        marks: Marks<'_>,
    ) -> Result<bool, WriteError> {
        let wanted: BTreeMap<String, ByteString> = data
            .iter()
            .map(|(k, v)| (k.clone(), ByteString(v.clone())))
            .collect();
        let same = current
            .is_some_and(|s| s.data.as_ref() == Some(&wanted) && marks.carried_by(&s.metadata));
        self.ensure(ns, name, current, same, owner, |s: &mut Secret| {
            s.data = Some(wanted.clone());
            s.string_data = None;
            if s.type_.is_none() {
                s.type_ = Some("Opaque".to_owned());
            }
            marks.set_on(&mut s.metadata);
        })
        .await
    }

    /// Makes PodDisruptionBudget `name` have exactly `spec`.
    pub async fn pdb(
        &mut self,
        ns: &str,
        name: &str,
        current: Option<&PodDisruptionBudget>,
        spec: PodDisruptionBudgetSpec,
        owner: Option<&OwnerReference>,
    ) -> Result<bool, WriteError> {
        let same = current.is_some_and(|p| p.spec.as_ref() == Some(&spec));
        self.ensure(
            ns,
            name,
            current,
            same,
            owner,
            |p: &mut PodDisruptionBudget| {
                p.spec = Some(spec.clone());
            },
        )
        .await
    }

    /// Creates `name` (with `owner`) or replaces the current object, after `fill` set its data.
    #[allow(clippy::too_many_arguments)]
    async fn ensure<K>(
        &mut self,
        ns: &str,
        name: &str,
        current: Option<&K>,
        same: bool,
        owner: Option<&OwnerReference>,
        fill: impl Fn(&mut K),
    ) -> Result<bool, WriteError>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Default
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        if same {
            return Ok(false);
        }
        let kind = static_kind::<K>();
        if self.planned(
            if current.is_some() {
                "replace"
            } else {
                "create"
            },
            kind,
            ns,
            name,
        ) {
            return Ok(true);
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let err = |action, source| WriteError {
            action,
            kind,
            namespace: ns.to_owned(),
            name: name.to_owned(),
            source,
        };
        let written = match current {
            Some(obj) => {
                let mut next = obj.clone();
                fill(&mut next);
                api.replace(name, &PostParams::default(), &next)
                    .await
                    .map_err(|e| err("replacing", e))?
            }
            None => {
                let mut obj = K::default();
                *obj.meta_mut() = ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(ns.to_owned()),
                    owner_references: owner.map(|o| vec![o.clone()]),
                    ..Default::default()
                };
                fill(&mut obj);
                api.create(&PostParams::default(), &obj)
                    .await
                    .map_err(|e| err("creating", e))?
            }
        };
        self.remember(kind, written.meta());
        Ok(true)
    }

    /// Creates an object; AlreadyExists counts as done (a previous pass made it).
    pub async fn create<K>(&mut self, ns: &str, object: &K) -> Result<(), WriteError>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let kind = static_kind::<K>();
        if self.planned(
            "create",
            kind,
            ns,
            object.meta().name.as_deref().unwrap_or(""),
        ) {
            return Ok(());
        }
        match api.create(&PostParams::default(), object).await {
            Ok(created) => {
                self.remember(kind, created.meta());
                Ok(())
            }
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(source) => Err(WriteError {
                action: "creating",
                kind,
                namespace: ns.to_owned(),
                name: object.meta().name.clone().unwrap_or_default(),
                source,
            }),
        }
    }

    /// Sets one annotation on an object (a merge patch of that key alone); the caches must then
    /// show it.
    pub async fn annotate<K>(
        &mut self,
        ns: &str,
        name: &str,
        key: &str,
        value: &str,
    ) -> Result<(), WriteError>
    where
        K: Namespaced,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let kind = static_kind::<K>();
        if self.planned("annotate", kind, ns, name) {
            return Ok(());
        }
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(patched) => {
                self.remember(kind, patched.meta());
                Ok(())
            }
            Err(source) => Err(WriteError {
                action: "annotating",
                kind,
                namespace: ns.to_owned(),
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// Deletes an object; NotFound counts as done. The caches must then show it gone.
    pub async fn delete<K>(&mut self, ns: &str, name: &str) -> Result<(), WriteError>
    where
        K: Namespaced,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let kind = static_kind::<K>();
        if self.planned("delete", kind, ns, name) {
            return Ok(());
        }
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(source) => {
                return Err(WriteError {
                    action: "deleting",
                    kind,
                    namespace: ns.to_owned(),
                    name: name.to_owned(),
                    source,
                });
            }
        }
        // A deleted pod bound to a node is gone only once that node's kubelet finalizes it, which
        // may be never while the node is down: waiting for it would wedge every later pass. No
        // decision depends on a deleted pod's absence, so pod deletions are not awaited.
        if kind != "Pod" && self.awaits(ns) {
            self.awaited.push(Awaited {
                kind,
                namespace: ns.to_owned(),
                name: name.to_owned(),
                resource_version: None,
            });
        }
        Ok(())
    }
}

fn static_kind<K: kube::Resource>() -> &'static str
where
    K::DynamicType: Default,
{
    match K::kind(&K::DynamicType::default()).as_ref() {
        "ConfigMap" => "ConfigMap",
        "Secret" => "Secret",
        "Pod" => "Pod",
        "PodDisruptionBudget" => "PodDisruptionBudget",
        _ => "Object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_outside_the_cached_namespaces_are_not_awaited() {
        let ctx = crate::context::Context::for_tests();
        let mut w = Writer::new(ctx.client.clone(), false).caching(&["etcd", "etcd-operator"]);
        assert!(w.awaits("etcd") && w.awaits("etcd-operator"));
        assert!(!w.awaits("kube-system"));
        w.cached = None;
        assert!(
            w.awaits("kube-system"),
            "without a list every namespace is awaited"
        );
    }
}
