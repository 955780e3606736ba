//! events.k8s.io/v1 ↔ core/v1 Event conversion. Like kube-apiserver, the stand-in stores both
//! APIs' events in one place (`/registry/events/`, core/v1 shape), so an event written through
//! one API is read through the other.

use serde_json::Value;

/// (events.k8s.io/v1 field, core/v1 field).
const RENAMES: [(&str, &str); 6] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
];
const COUNT: (&str, &str) = ("deprecatedCount", "count");

fn rename(obj: &mut Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) {
    if let Some(map) = obj.as_object_mut() {
        for (from, to) in pairs {
            if let Some(v) = map.remove(from) {
                map.insert(to.to_string(), v);
            }
        }
    }
}

/// events.k8s.io/v1 → stored core/v1.
pub fn to_core(mut obj: Value) -> Value {
    rename(&mut obj, RENAMES.into_iter().chain([COUNT]));
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), Value::String("v1".into()));
    }
    obj
}

/// Stored core/v1 → events.k8s.io/v1.
pub fn to_events_v1(mut obj: Value) -> Value {
    rename(
        &mut obj,
        RENAMES.into_iter().chain([COUNT]).map(|(a, b)| (b, a)),
    );
    if let Some(map) = obj.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            Value::String("events.k8s.io/v1".into()),
        );
    }
    obj
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reason": "Started",
            "reportingController": "op", "deprecatedCount": 2});
        let core = to_core(ev.clone());
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["count"], 2);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(to_events_v1(core), ev);
    }
}
