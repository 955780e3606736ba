//! The version policy's decisions, pure.

use super::*;

pub(crate) fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

/// `n1`, `n2`, … running these versions.
pub(crate) fn running(vs: &[&str]) -> Vec<(String, Version)> {
    vs.iter()
        .enumerate()
        .map(|(i, s)| (format!("n{}", i + 1), v(s)))
        .collect()
}

#[test]
fn versions_come_from_the_image_tag() {
    assert_eq!(
        image_version("registry.k8s.io/etcd:3.5.9-0"),
        Some(v("3.5.9"))
    );
    assert_eq!(
        image_version("quay.io/coreos/etcd:v3.4.23"),
        Some(v("3.4.23"))
    );
    assert_eq!(
        image_version("localhost:5000/etcd:3.4.23"),
        Some(v("3.4.23"))
    );
    assert_eq!(image_version("localhost:5000/etcd"), None);
    assert_eq!(image_version("etcd@sha256:0123abcd"), None);
    assert_eq!(image_version("etcd:latest"), None);
}

#[test]
fn patch_and_next_minor_moves_are_allowed() {
    let r = running(&["3.4.23", "3.4.23", "3.4.23"]);
    let c34 = Some(v("3.4.0"));
    assert_eq!(check("etcd:3.4.27", "", c34, &r, ""), Ok(v("3.4.27")));
    assert_eq!(check("etcd:3.4.22", "", None, &r, ""), Ok(v("3.4.22")));
    assert_eq!(check("etcd:3.5.9", "", c34, &r, ""), Ok(v("3.5.9")));
    // Mid-upgrade, and after it until etcd moves the cluster version: going back is
    // allowed.
    let mid = running(&["3.5.9", "3.4.23", "3.5.9"]);
    assert_eq!(check("etcd:3.4.23", "", None, &mid, ""), Ok(v("3.4.23")));
    let all = running(&["3.5.9", "3.5.9", "3.5.9"]);
    assert_eq!(check("etcd:3.4.23", "", c34, &all, ""), Ok(v("3.4.23")));
    // Nothing answered: only the known-bad table applies.
    assert_eq!(check("etcd:3.7.0", "", None, &[], ""), Ok(v("3.7.0")));
}

#[test]
fn skipping_a_minor_and_going_below_the_cluster_version_are_refused() {
    let r = running(&["3.4.23", "3.4.23", "3.4.23"]);
    let e = check("etcd:3.6.0", "", Some(v("3.4.0")), &r, "").unwrap_err();
    assert!(matches!(e, VersionError::SkipsMinor { .. }), "{e}");
    assert!(e.to_string().contains("upgrade to 3.5.x first"), "{e}");
    let e = check("etcd:3.7.0", "", Some(v("3.5.0")), &r, "").unwrap_err();
    assert!(matches!(e, VersionError::SkipsMinor { .. }), "{e}");
    let upgraded = running(&["3.5.9", "3.5.9", "3.5.9"]);
    let e = check("etcd:3.4.23", "", Some(v("3.5.0")), &upgraded, "").unwrap_err();
    assert!(
        e.to_string()
            .contains("below the cluster version 3.5 (as etcd reports it)"),
        "{e}"
    );
    let e = check("etcd:3.4.23", "", None, &upgraded, "").unwrap_err();
    assert!(e.to_string().contains("member n1 runs 3.5.9"), "{e}");
}

#[test]
fn the_next_minor_waits_for_the_cluster_version_to_move() {
    // Every member runs 3.5 but etcd still says 3.4: 3.6 would join a 3.4 cluster.
    let all = running(&["3.5.9", "3.5.9", "3.5.9"]);
    let e = check("etcd:3.6.0", "", Some(v("3.4.0")), &all, "").unwrap_err();
    assert!(matches!(e, VersionError::UpgradeUnfinished { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("wait until etcd moves the cluster version to 3.5"),
        "{e}"
    );
    // Half way through the 3.5 rollout, the same.
    let mid = running(&["3.5.9", "3.4.23", "3.4.23"]);
    let e = check("etcd:3.6.0", "", None, &mid, "").unwrap_err();
    assert!(matches!(e, VersionError::UpgradeUnfinished { .. }), "{e}");
    let floor = running(&["3.5.32", "3.5.32", "3.5.32"]);
    assert_eq!(
        check("etcd:3.6.0", "", Some(v("3.5.0")), &floor, ""),
        Ok(v("3.6.0"))
    );
}

#[test]
fn known_bad_releases_need_their_exact_name_accepted() {
    let r = running(&["3.4.23"]);
    let e = check("etcd:3.5.1", "", None, &r, "").unwrap_err();
    assert!(matches!(e, VersionError::KnownBad { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("acceptKnownBadEtcdRelease is \"3.5.1\""),
        "{e}"
    );
    assert!(check("etcd:3.5.1", "", None, &r, "3.5.2").is_err());
    assert_eq!(check("etcd:3.5.1", "", None, &r, "3.5.1"), Ok(v("3.5.1")));
    assert_eq!(check("etcd:3.5.6", "", None, &r, ""), Ok(v("3.5.6")));
}

#[test]
fn minors_without_known_flags_and_unreadable_tags_are_refused() {
    let r = running(&["3.4.23", "3.4.23", "3.4.23"]);
    // Nothing answering: only the minor itself can be judged.
    for image in ["etcd:3.3.27", "etcd:3.8.0", "etcd:4.0.0", "etcd:v2.3.8"] {
        let e = check(image, "", None, &[], "").unwrap_err();
        assert!(
            matches!(e, VersionError::UnknownMinor { .. }),
            "{image}: {e}"
        );
        assert!(e.to_string().contains("3.4, 3.5, 3.6 and 3.7"), "{e}");
    }
    for image in ["etcd:3.5", "etcd:3.x.1", "etcd:v3", "etcd:3.5.x"] {
        let e = check(image, "", None, &r, "").unwrap_err();
        assert!(
            matches!(e, VersionError::UnreadableTag { .. }),
            "{image}: {e}"
        );
    }
    // Against a cluster, the more precise reason comes first; the next minor after 3.7
    // passes those checks and is refused for its flags.
    let e = check("etcd:3.3.27", "", None, &r, "").unwrap_err();
    assert!(matches!(e, VersionError::BelowCluster { .. }), "{e}");
    let e = check("etcd:3.8.0", "", None, &r, "").unwrap_err();
    assert!(matches!(e, VersionError::SkipsMinor { .. }), "{e}");
    let on37 = running(&["3.7.0", "3.7.0", "3.7.0"]);
    let e = check("etcd:3.8.0", "", Some(v("3.7.0")), &on37, "").unwrap_err();
    assert!(matches!(e, VersionError::UnknownMinor { .. }), "{e}");
}

#[test]
fn releases_name_their_minor() {
    let rel = |s: &str| image_release(s, "").unwrap().map(|r| (r.minor, r.version));
    assert_eq!(rel("etcd:3.4.23"), Some((Minor::V3_4, v("3.4.23"))));
    assert_eq!(
        rel("registry.k8s.io/etcd:3.5.16-0"),
        Some((Minor::V3_5, v("3.5.16")))
    );
    assert_eq!(rel("etcd:v3.6.6"), Some((Minor::V3_6, v("3.6.6"))));
    assert_eq!(rel("etcd:3.7.0@sha256:ab"), Some((Minor::V3_7, v("3.7.0"))));
    assert_eq!(rel("etcd:latest"), None);
    let names: Vec<&str> = Minor::ALL.iter().map(|m| m.as_str()).collect();
    assert_eq!(names, ["3.4", "3.5", "3.6", "3.7"]);
}

#[test]
fn every_known_bad_range_is_refused_with_its_source() {
    let r = running(&["3.4.23"]);
    for (release, fixed) in [("3.4.21", "3.4.22"), ("3.5.2", "3.5.6"), ("3.5.5", "3.5.6")] {
        let e = check(&format!("etcd:{release}"), "", None, &r, "").unwrap_err();
        assert!(matches!(e, VersionError::KnownBad { .. }), "{release}: {e}");
        assert!(e.to_string().contains("https://"), "{e}");
        let ok = check(&format!("etcd:{fixed}"), "", None, &r, "");
        assert_eq!(ok, Ok(v(fixed)));
    }
    for bad in releases::KNOWN_BAD {
        assert!(
            bad.from <= bad.to && bad.source.starts_with("https://"),
            "{bad:?}"
        );
    }
}

#[test]
fn the_next_minor_waits_for_every_member_to_reach_the_patch_floor() {
    let c35 = Some(v("3.5.0"));
    let mixed = running(&["3.5.32", "3.5.16", "3.5.40"]);
    let e = check("etcd:3.6.4", "", c35, &mixed, "").unwrap_err();
    match &e {
        VersionError::BelowUpgradeFloor {
            member,
            running,
            floor,
            ..
        } => {
            assert_eq!(member, "n2");
            assert_eq!((*running, floor.floor), (v("3.5.16"), v("3.5.32")));
            assert_eq!(
                floor.source,
                "https://etcd.io/docs/v3.6/upgrades/upgrade_3_6/"
            );
        }
        other => panic!("expected BelowUpgradeFloor, got {other:?}"),
    }
    assert!(
        e.to_string()
            .contains("move every member to 3.5.32 or later first"),
        "{e}"
    );
    // Patch moves within 3.5 are how the floor is reached: never held by it.
    assert_eq!(check("etcd:3.5.32", "", c35, &mixed, ""), Ok(v("3.5.32")));
    // Half way to 3.6 with one member still below the floor: held as well.
    let half = running(&["3.6.4", "3.5.20", "3.5.32"]);
    let e = check("etcd:3.6.4", "", c35, &half, "").unwrap_err();
    assert!(matches!(e, VersionError::BelowUpgradeFloor { .. }), "{e}");
    // 3.6 to 3.7 has its own floor.
    let c36 = Some(v("3.6.0"));
    let on36 = running(&["3.6.10", "3.6.11", "3.6.11"]);
    let e = check("etcd:3.7.0", "", c36, &on36, "").unwrap_err();
    assert!(e.to_string().contains("3.6.11"), "{e}");
    let on36 = running(&["3.6.11", "3.6.11", "3.6.12"]);
    assert_eq!(check("etcd:3.7.0", "", c36, &on36, ""), Ok(v("3.7.0")));
    // 3.4 to 3.5 has none.
    let on34 = running(&["3.4.23", "3.4.23", "3.4.23"]);
    assert_eq!(
        check("etcd:3.5.16", "", Some(v("3.4.0")), &on34, ""),
        Ok(v("3.5.16"))
    );
}

#[test]
fn an_image_without_a_version_needs_it_declared() {
    let r = running(&["3.5.16", "3.5.16", "3.5.16"]);
    let c35 = Some(v("3.5.0"));
    for image in ["etcd@sha256:0123", "etcd:latest", "registry.example/etcd"] {
        let e = check(image, "", c35, &r, "").unwrap_err();
        assert_eq!(
            e,
            VersionError::VersionUnknown {
                image: image.into()
            }
        );
        assert!(e.to_string().contains("spec.etcdImageVersion"), "{e}");
        // Declared, the policy checks it like a tag.
        assert_eq!(check(image, "3.5.30", c35, &r, ""), Ok(v("3.5.30")));
        let e = check(image, "3.4.23", c35, &r, "").unwrap_err();
        assert!(matches!(e, VersionError::BelowCluster { .. }), "{e}");
        let e = check(image, "3.5.1", c35, &r, "").unwrap_err();
        assert!(matches!(e, VersionError::KnownBad { .. }), "{e}");
    }
    let e = check("etcd@sha256:0123", "3.5", c35, &r, "").unwrap_err();
    assert!(
        matches!(e, VersionError::UnreadableDeclaredVersion { .. }),
        "{e}"
    );
    let e = check("etcd:3.5.16@sha256:0123", "3.5.30", c35, &r, "").unwrap_err();
    assert!(
        matches!(e, VersionError::DeclaredVersionDiffers { .. }),
        "{e}"
    );
    assert_eq!(
        check("etcd:3.5.16@sha256:0123", "3.5.16", c35, &r, ""),
        Ok(v("3.5.16"))
    );
    // Rendering picks the flags by the declared version too.
    let rel = image_release("etcd@sha256:0123", "3.6.4").unwrap().unwrap();
    assert_eq!((rel.minor, rel.version), (Minor::V3_6, v("3.6.4")));
    assert_eq!(image_release("etcd@sha256:0123", "").unwrap(), None);
}
