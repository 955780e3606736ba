//! What etcd (and Kubernetes, for etcd) has published about particular releases, each entry with
//! the page it comes from: releases known to be bad, and the patch release a minor version must
//! reach before the next minor version starts. Keep both current: add an entry only with a
//! source that says so.

use super::Version;

/// Releases `from..=to`, refused unless accepted by their exact name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownBad {
    pub from: Version,
    pub to: Version,
    pub why: &'static str,
    pub source: &'static str,
}

/// The patch release every member of `minor` must run before any member runs the next minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatchFloor {
    pub minor: (u32, u32),
    pub floor: Version,
    pub why: &'static str,
    pub source: &'static str,
}

pub const KNOWN_BAD: &[KnownBad] = &[
    KnownBad {
        from: Version::new(3, 4, 0),
        to: Version::new(3, 4, 21),
        why: "older than 3.4.22, the oldest etcd 3.4 Kubernetes recommends for production",
        source: "https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/",
    },
    KnownBad {
        from: Version::new(3, 5, 0),
        to: Version::new(3, 5, 2),
        why: "a member that crashes while applying can come back with revisions and data inconsistent with its peers (fixed in 3.5.3)",
        source: "https://github.com/etcd-io/etcd/blob/main/CHANGELOG/CHANGELOG-3.5.md#v353-2022-04-13 (etcd-io/etcd#13908)",
    },
    KnownBad {
        from: Version::new(3, 5, 3),
        to: Version::new(3, 5, 5),
        why: "auth data can diverge after a member recovers from a snapshot, and revisions between members when etcd crashes during a defragmentation (fixed in 3.5.6, the oldest etcd 3.5 Kubernetes recommends for production)",
        source: "https://github.com/etcd-io/etcd/blob/main/CHANGELOG/CHANGELOG-3.5.md#v356-2022-11-21 (etcd-io/etcd#14648, #14733)",
    },
];

pub const PATCH_FLOORS: &[PatchFloor] = &[
    PatchFloor {
        minor: (3, 5),
        floor: Version::new(3, 5, 32),
        why: "etcd's 3.6 upgrade guide requires every 3.5 member on 3.5.32 or later first (3.5.24 to 3.5.32 fix upgrade blockers: the \"too many learner members\" failure, zombie members, the v2store checks)",
        source: "https://etcd.io/docs/v3.6/upgrades/upgrade_3_6/",
    },
    PatchFloor {
        minor: (3, 6),
        floor: Version::new(3, 6, 11),
        why: "etcd's 3.7 upgrade guide requires every 3.6 member on 3.6.11 or later first (earlier 3.6 releases may not take a rolling upgrade to 3.7)",
        source: "https://etcd.io/docs/v3.7/upgrades/upgrade_3_7/",
    },
];

/// The known-bad entry `v` falls in, if any.
pub fn known_bad(v: Version) -> Option<&'static KnownBad> {
    KNOWN_BAD.iter().find(|b| b.from <= v && v <= b.to)
}

/// The first member (of `running`) still below its minor's floor while `target` is a later
/// minor, with the floor.
pub fn below_floor(
    target: Version,
    running: &[(String, Version)],
) -> Option<(&(String, Version), &'static PatchFloor)> {
    running
        .iter()
        .filter(|(_, v)| v.minor_line() < target.minor_line())
        .find_map(|m| {
            let floor = PATCH_FLOORS.iter().find(|f| f.minor == m.1.minor_line())?;
            (m.1 < floor.floor).then_some((m, floor))
        })
}
