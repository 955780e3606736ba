//! Shared server state: the store, the resource registry, the configuration and the wake-up
//! signals of the in-process controllers (garbage collector, disruption controller).

use std::sync::{Arc, RwLock};

use serde_json::Value;
use tokio::sync::Notify;

use crate::StandInConfig;
use crate::events;
use crate::objects;
use crate::resources::{Registry, Representation, ResourceInfo};
use crate::store::Store;

/// Everything a request handler needs.
#[derive(Debug)]
pub struct State {
    /// etcd store.
    pub store: Store,
    /// Served resources (built-ins + CRDs).
    pub registry: RwLock<Registry>,
    /// Configuration.
    pub config: StandInConfig,
    /// Wakes the garbage collector after deletions.
    pub gc_wake: Notify,
    /// Wakes the disruption controller after pod and PodDisruptionBudget writes.
    pub disruption_wake: Notify,
    /// The URL clients reach the stand-in at (for discovery).
    pub address: String,
}

/// Shared handle.
pub type Shared = Arc<State>;

impl State {
    /// A snapshot of the registry.
    pub fn registry(&self) -> Registry {
        match self.registry.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Changes the registry.
    pub fn with_registry(&self, f: impl FnOnce(&mut Registry)) {
        match self.registry.write() {
            Ok(mut r) => f(&mut r),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Tells the in-process controllers that an object of `info` was written.
    pub fn written(&self, info: &ResourceInfo) {
        if crate::disruption::watches(info) {
            self.disruption_wake.notify_one();
        }
    }

    /// The etcd key prefix (`/registry` by default).
    pub fn prefix(&self) -> &str {
        &self.config.key_prefix
    }

    /// The etcd key of one object.
    pub fn key(&self, info: &ResourceInfo, namespace: &str, name: &str) -> String {
        info.key(self.prefix(), namespace, name)
    }
}

/// Served form → stored form.
pub fn to_storage(info: &ResourceInfo, obj: Value) -> Value {
    match info.representation {
        Representation::EventsV1 => events::to_core(obj),
        Representation::Native => obj,
    }
}

/// Stored form → served form (the requested version's `apiVersion` and `kind`).
pub fn from_storage(info: &ResourceInfo, obj: Value) -> Value {
    let mut obj = match info.representation {
        Representation::EventsV1 => events::to_events_v1(obj),
        Representation::Native => obj,
    };
    let map = objects::object_mut(&mut obj);
    map.insert("apiVersion".into(), Value::String(info.api_version()));
    map.insert("kind".into(), Value::String(info.kind.clone()));
    crate::custom::on_read(info, &mut obj);
    obj
}
