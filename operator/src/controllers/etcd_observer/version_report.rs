//! Version report: which etcd version the cluster runs and where a version change stands.
//!
//! Inputs: the cluster version etcd reports (`/version`), each member's version (its status),
//! the version the etcd image's tag names, the last `status.etcdVersion`. Decision
//! ([`report`], pure): `status.etcdVersion` with the state (`Rolling` while members run
//! different versions, `WaitingForClusterVersion` once every member runs the target and etcd
//! has not yet moved the cluster version, `AtTarget`, `Unknown`) and a message naming each
//! version and its members. Writes: an Event when the cluster version changes, version metrics.
//! While a change is under way the pass stays busy, so the move of the cluster version (etcd's
//! leader decides it a few seconds after the last member restarted) is seen at once. Never
//! refuses or orders anything: the policy is [`crate::etcd_version`], the rollout the installer's.

use std::collections::BTreeMap;

use crate::api::EtcdVersionStatus;
use crate::etcd_version::{Version, image_version};
use crate::events::EventReason;
use crate::metrics::{MemberVersionLabels, VersionLabel};
use crate::pass::Pass;

/// `status.etcdVersion` from this pass's view; `cluster` is `None` when it could not be read
/// (the last known one is kept).
pub fn report(
    cluster: Option<Version>,
    running: &[(String, Version)],
    target: Option<Version>,
    prev: Option<&EtcdVersionStatus>,
    now: &str,
) -> EtcdVersionStatus {
    let prev = prev.cloned().unwrap_or_default();
    let mut out = EtcdVersionStatus {
        cluster_version: cluster.map_or_else(|| prev.cluster_version.clone(), |c| c.to_string()),
        target_version: target.map(|t| t.to_string()).unwrap_or_default(),
        ..prev.clone()
    };
    if !prev.cluster_version.is_empty() && out.cluster_version != prev.cluster_version {
        out.previous_cluster_version = prev.cluster_version.clone();
        out.cluster_version_changed_time = now.to_owned();
    }
    let mut by_version: BTreeMap<Version, Vec<&str>> = BTreeMap::new();
    for (name, v) in running {
        by_version.entry(*v).or_default().push(name);
    }
    let members = by_version
        .iter()
        .map(|(v, names)| format!("{} {v}", names.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let cluster_text = if out.cluster_version.is_empty() {
        "not known yet".to_owned()
    } else {
        out.cluster_version.clone()
    };
    let (state, message) = match target {
        _ if running.is_empty() => ("Unknown", "no member reported its version".to_owned()),
        None => (
            "Unknown",
            format!(
                "the etcd image names no version; members run: {members}; cluster version {cluster_text}"
            ),
        ),
        Some(t) if by_version.keys().any(|v| *v != t) => {
            let at = by_version.get(&t).map_or(0, Vec::len);
            (
                "Rolling",
                format!(
                    "{at} of {} members run the target {t}; members run: {members}; cluster version {cluster_text}",
                    running.len()
                ),
            )
        }
        Some(t) if cluster.is_none_or(|c| (c.major, c.minor) < (t.major, t.minor)) => (
            "WaitingForClusterVersion",
            format!(
                "every member runs {t}; etcd has not moved the cluster version ({cluster_text}) to {}.{} yet",
                t.major, t.minor
            ),
        ),
        Some(t) => (
            "AtTarget",
            format!("every member runs {t}; cluster version {cluster_text}"),
        ),
    };
    out.state = state.to_owned();
    out.message = message;
    out
}

/// `clusterVersionRaftIndex` for `cluster_version`: the one recorded while the cluster version
/// stays, else (it moved, or none was recorded) the raft index now (`None`: not read this pass).
pub fn cluster_version_index(
    prev: Option<&EtcdVersionStatus>,
    cluster_version: &str,
    raft_index: Option<u64>,
) -> Option<u64> {
    if cluster_version.is_empty() {
        return None;
    }
    prev.filter(|p| p.cluster_version == cluster_version)
        .and_then(|p| p.cluster_version_raft_index)
        .or(raft_index)
}

/// A version change is under way: members differ, or etcd has yet to move the cluster version.
pub fn in_flight(s: &EtcdVersionStatus) -> bool {
    matches!(s.state.as_str(), "Rolling" | "WaitingForClusterVersion")
}

/// Reports the versions (status, metrics, an Event when the cluster version moved).
pub async fn reconcile(p: &mut Pass<'_>) {
    let running = p.o.etcd.member_versions();
    let target = image_version(&p.etcd_image());
    let stamp = crate::certs::format_time(p.o.now);
    let prev = p.status.etcd_version.clone();
    let mut now = report(
        p.o.etcd.cluster_version(),
        &running,
        target,
        prev.as_ref(),
        &stamp,
    );
    now.cluster_version_raft_index = cluster_version_index(
        prev.as_ref(),
        &now.cluster_version,
        p.o.etcd.raft_index_at_least(),
    );
    let moved = prev
        .as_ref()
        .is_some_and(|s| !s.cluster_version.is_empty() && s.cluster_version != now.cluster_version);
    if moved {
        let line = format!(
            "etcd moved the cluster version from {} to {}",
            now.previous_cluster_version, now.cluster_version
        );
        p.note(line.clone());
        p.event(EventReason::EtcdClusterVersionChanged, line).await;
    }
    if in_flight(&now) {
        p.busy = true;
        p.next(
            crate::controller::ControllerName::EtcdObserver,
            format!("etcd version change: {}", now.message),
        );
    }
    record(p, &running, &now);
    p.status.etcd_version = Some(now);
}

fn record(p: &Pass<'_>, running: &[(String, Version)], s: &EtcdVersionStatus) {
    let m = &p.ctx.metrics;
    m.member_version.clear();
    for (member, v) in running {
        m.member_version
            .get_or_create(&MemberVersionLabels {
                member: member.clone(),
                version: v.to_string(),
            })
            .set(1);
    }
    m.cluster_version.clear();
    if !s.cluster_version.is_empty() {
        m.cluster_version
            .get_or_create(&VersionLabel {
                version: s.cluster_version.clone(),
            })
            .set(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd_version::tests::{running, v};

    #[test]
    fn an_upgrade_is_rolling_then_waits_for_the_cluster_version_then_is_done() {
        let t = Some(v("3.5.1"));
        let c34 = Some(v("3.4.0"));
        let start = report(c34, &running(&["3.4.23"; 3]), t, None, "t0");
        assert_eq!(start.state, "Rolling");
        assert_eq!(
            start.message,
            "0 of 3 members run the target 3.5.1; members run: n1, n2, n3 3.4.23; cluster version 3.4.0"
        );
        let mid = report(
            c34,
            &running(&["3.5.1", "3.4.23", "3.4.23"]),
            t,
            Some(&start),
            "t1",
        );
        assert_eq!(mid.state, "Rolling");
        assert!(mid.message.contains("n2, n3 3.4.23; n1 3.5.1"), "{mid:?}");
        let all = running(&["3.5.1"; 3]);
        let waiting = report(c34, &all, t, Some(&mid), "t2");
        assert_eq!(waiting.state, "WaitingForClusterVersion");
        assert!(in_flight(&waiting));
        // The cluster version could not be read this pass: the last one is kept.
        let unread = report(None, &all, t, Some(&waiting), "t3");
        assert_eq!(unread.cluster_version, "3.4.0");
        assert_eq!(unread.cluster_version_changed_time, "");
        let done = report(Some(v("3.5.0")), &all, t, Some(&unread), "t4");
        assert_eq!(done.state, "AtTarget");
        assert!(!in_flight(&done));
        assert_eq!(
            (
                done.cluster_version.as_str(),
                done.previous_cluster_version.as_str(),
                done.cluster_version_changed_time.as_str()
            ),
            ("3.5.0", "3.4.0", "t4")
        );
        // Later passes keep when it changed.
        let later = report(Some(v("3.5.0")), &all, t, Some(&done), "t5");
        assert_eq!(later, done);
    }

    #[test]
    fn the_raft_index_of_a_cluster_version_is_kept_until_it_moves() {
        let at = |cluster: &str, index| EtcdVersionStatus {
            cluster_version: cluster.into(),
            cluster_version_raft_index: index,
            ..Default::default()
        };
        // First seen: the index now; kept while the version stays, even when unread.
        assert_eq!(cluster_version_index(None, "3.5.0", Some(40)), Some(40));
        let seen = at("3.5.0", Some(40));
        assert_eq!(
            cluster_version_index(Some(&seen), "3.5.0", Some(900)),
            Some(40)
        );
        assert_eq!(cluster_version_index(Some(&seen), "3.5.0", None), Some(40));
        // Moved: recorded anew; a status from before the field: recorded now.
        assert_eq!(
            cluster_version_index(Some(&seen), "3.6.0", Some(900)),
            Some(900)
        );
        assert_eq!(
            cluster_version_index(Some(&at("3.6.0", None)), "3.6.0", Some(950)),
            Some(950)
        );
        // No cluster version known: nothing.
        assert_eq!(cluster_version_index(Some(&seen), "", Some(900)), None);
    }

    #[test]
    fn no_version_to_compare_is_unknown_not_in_flight() {
        let r = report(Some(v("3.4.0")), &running(&["3.4.23"]), None, None, "t");
        assert_eq!(r.state, "Unknown");
        assert!(r.message.contains("names no version"), "{r:?}");
        assert!(!in_flight(&r));
        let r = report(None, &[], Some(v("3.4.23")), None, "t");
        assert_eq!(
            (r.state.as_str(), r.cluster_version.as_str()),
            ("Unknown", "")
        );
    }
}
