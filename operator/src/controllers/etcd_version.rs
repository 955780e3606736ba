//! The etcd version policy: whether the cluster may move to the etcd image the spec names.
//!
//! Inputs: the image (`spec.etcdImage`, else the operator's `ETCD_IMAGE`), the version each
//! member reports, `spec.acceptKnownBadEtcdRelease`. Decision ([`check`], pure): the version is
//! read from the image tag (`etcd:3.5.9`, `v3.5.9`; a digest-only image has none and is not
//! checked); it may not be below the cluster version (etcd's own, read from `/version`; else the
//! lowest minor the members run: etcd cannot run a cluster whose version is above its own), may
//! not be more than one minor above it (etcd upgrades one minor at a time, and the next minor
//! waits until etcd has moved the cluster version to the one just rolled out), and may not be a
//! release in [`KNOWN_BAD`] unless that exact release is accepted in the spec. A refusal is a
//! permanent error of target-config, so nothing is rendered, no revision is created and no etcd
//! restarts until the spec (or, for an unfinished upgrade, the cluster version) changes. The rollout of an allowed version is the normal one: node by node
//! through the quorum gate, the leader last.
//!
//! The target must also be a release whose flags the operator knows ([`Minor`]: 3.4, 3.5, 3.6,
//! 3.7; `podspec::flags` renders each): a tag that starts like a version but is not
//! `major.minor.patch` (`3.5`, `3.x`, `v3`) is [`VersionError::UnreadableTag`] before anything
//! else; a version of another minor (3.3, 3.8, 4.0) that the checks against the cluster let
//! through (they name a downgrade or a skipped minor first, the more precise reason) is
//! [`VersionError::UnknownMinor`]. Both are refused like the policy's other refusals, and
//! rendering refuses an unknown minor on its own as well. A tag that is not a version at all (`latest`, a digest
//! only) names no release: nothing is checked and the flags every known minor up to 3.6 accepts
//! are rendered (see `podspec::flags`).

use std::fmt;

/// An etcd release number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Version {
    /// `3.5.9`, `v3.5.9`, `3.5.9-0` (a suffix after the patch number is ignored).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts = s.splitn(3, '.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let rest = parts.next()?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let patch = digits.parse().ok()?;
        Some(Self {
            major,
            minor,
            patch,
        })
    }

    fn minor_line(self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

/// The tag of an image reference (`registry:5000/etcd:3.5.16@sha256:…` → `3.5.16`), if any.
fn image_tag(image: &str) -> Option<&str> {
    let name = image.split('@').next()?;
    let last = name.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    Some(tag)
}

/// The version in an image reference's tag, if it has one.
pub fn image_version(image: &str) -> Option<Version> {
    Version::parse(image_tag(image)?)
}

/// The etcd minor versions the operator knows the flags of (`podspec::flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Minor {
    V3_4,
    V3_5,
    V3_6,
    V3_7,
}

impl Minor {
    /// Every known minor, oldest first.
    pub const ALL: [Self; 4] = [Self::V3_4, Self::V3_5, Self::V3_6, Self::V3_7];

    /// The minor of `v`, if the operator knows it.
    pub fn of(v: Version) -> Option<Self> {
        match (v.major, v.minor) {
            (3, 4) => Some(Self::V3_4),
            (3, 5) => Some(Self::V3_5),
            (3, 6) => Some(Self::V3_6),
            (3, 7) => Some(Self::V3_7),
            _ => None,
        }
    }

    /// `3.4`, `3.5`, …
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V3_4 => "3.4",
            Self::V3_5 => "3.5",
            Self::V3_6 => "3.6",
            Self::V3_7 => "3.7",
        }
    }
}

/// An etcd release the operator knows the flags of: its minor and its exact version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    pub minor: Minor,
    pub version: Version,
}

/// Whether a tag starts like a version (`3…`, `v3…`) rather than naming something else
/// (`latest`, `test`).
fn looks_like_version(tag: &str) -> bool {
    let digits = tag.strip_prefix('v').unwrap_or(tag);
    digits.starts_with(|c: char| c.is_ascii_digit())
}

/// The release an image runs, as its tag says: `Ok(None)` when the tag names no version (no tag,
/// a digest only, `latest`); an error when the tag starts like a version but cannot be read, or
/// reads as a minor the operator has no flags for.
pub fn image_release(image: &str) -> Result<Option<Release>, VersionError> {
    let Some(version) = image_target(image)? else {
        return Ok(None);
    };
    known_minor(image, version).map(|minor| Some(Release { minor, version }))
}

/// The version an image's tag names, whatever its minor: `Ok(None)` when the tag names none,
/// [`VersionError::UnreadableTag`] when it starts like a version but cannot be read.
fn image_target(image: &str) -> Result<Option<Version>, VersionError> {
    let Some(tag) = image_tag(image).filter(|t| looks_like_version(t)) else {
        return Ok(None);
    };
    Version::parse(tag)
        .map(Some)
        .ok_or_else(|| VersionError::UnreadableTag {
            image: image.to_owned(),
            tag: tag.to_owned(),
        })
}

/// The minor of `version`, or [`VersionError::UnknownMinor`].
fn known_minor(image: &str, version: Version) -> Result<Minor, VersionError> {
    match Minor::of(version) {
        Some(minor) => Ok(minor),
        None => Err(VersionError::UnknownMinor {
            image: image.to_owned(),
            target: version,
        }),
    }
}

/// Releases refused unless accepted by name, with why.
pub const KNOWN_BAD: &[(&str, &str, &str)] = &[(
    "3.5.0",
    "3.5.2",
    "a member that crashes while applying can come back with data inconsistent with its peers (fixed in 3.5.3)",
)];

/// Why a version is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error(
        "etcd image {image} is etcd {target}, below the cluster version {cluster} ({source_}): etcd cannot run a cluster whose version is above its own, so a downgrade is refused"
    )]
    BelowCluster {
        image: String,
        target: Version,
        cluster: String,
        source_: String,
    },
    #[error(
        "etcd image {image} is etcd {target}, more than one minor version above the cluster version {cluster}: etcd upgrades one minor version at a time, so upgrade to {next}.x first"
    )]
    SkipsMinor {
        image: String,
        target: Version,
        cluster: String,
        next: String,
    },
    #[error(
        "etcd image {image} is etcd {target}, but the upgrade to {running_minor} has not finished: the cluster version is still {cluster} (member {member} runs {running}); wait until etcd moves the cluster version to {running_minor}"
    )]
    UpgradeUnfinished {
        image: String,
        target: Version,
        cluster: String,
        member: String,
        running: Version,
        running_minor: String,
    },
    #[error(
        "etcd image {image} is etcd {target}, a known-bad release: {why}; refused unless spec.acceptKnownBadEtcdRelease is \"{target}\""
    )]
    KnownBad {
        image: String,
        target: Version,
        why: &'static str,
    },
    #[error(
        "etcd image {image} is etcd {target}, a minor version the operator does not know the flags of (it renders etcd 3.4, 3.5, 3.6 and 3.7)"
    )]
    UnknownMinor { image: String, target: Version },
    #[error(
        "etcd image {image} has the tag {tag:?}, which starts like a version but is not one the operator can read (major.minor.patch, e.g. 3.5.16, v3.5.16 or 3.5.16-0), so it cannot tell which flags etcd takes"
    )]
    UnreadableTag { image: String, tag: String },
}

/// The minor line the cluster runs at: etcd's own cluster version when it was read, else the
/// lowest minor a member runs (what etcd would decide), with where it came from.
fn cluster_line(
    cluster: Option<Version>,
    running: &[(String, Version)],
) -> Option<((u32, u32), String)> {
    if let Some(c) = cluster {
        return Some((c.minor_line(), "as etcd reports it".to_owned()));
    }
    let (name, v) = running.iter().min_by_key(|(_, v)| v.minor_line())?;
    Some((v.minor_line(), format!("member {name} runs {v}")))
}

/// Whether moving to `target` is an upgrade still to do (some member runs below it): `None`
/// when not, else whether it is under way (some member runs `target` or above already).
pub fn upgrade_state(target: Option<Version>, running: &[Version]) -> Option<bool> {
    let target = target?;
    running
        .iter()
        .any(|v| *v < target)
        .then(|| running.iter().any(|v| *v >= target))
}

/// Checks a move to `image` given the cluster version etcd reports (`None`: not read) and each
/// member's running version (`(name, version)`). `Ok(None)`: the image names no version,
/// nothing could be checked.
pub fn check(
    image: &str,
    cluster: Option<Version>,
    running: &[(String, Version)],
    accepted_bad: &str,
) -> Result<Option<Version>, VersionError> {
    let Some(target) = image_target(image)? else {
        return Ok(None);
    };
    if let Some(((major, minor), source_)) = cluster_line(cluster, running) {
        let line = format!("{major}.{minor}");
        if target.minor_line() < (major, minor) {
            return Err(VersionError::BelowCluster {
                image: image.to_owned(),
                target,
                cluster: line,
                source_,
            });
        }
        if target.major != major || target.minor > minor + 1 {
            let ahead = running
                .iter()
                .filter(|(_, v)| v.minor_line() > (major, minor))
                .max_by_key(|(_, v)| v.minor_line());
            return Err(match ahead {
                Some((member, v)) if v.minor_line() < target.minor_line() => {
                    VersionError::UpgradeUnfinished {
                        image: image.to_owned(),
                        target,
                        cluster: line,
                        member: member.clone(),
                        running: *v,
                        running_minor: format!("{}.{}", v.major, v.minor),
                    }
                }
                _ => VersionError::SkipsMinor {
                    image: image.to_owned(),
                    target,
                    cluster: line,
                    next: format!("{major}.{}", minor + 1),
                },
            });
        }
    }
    known_minor(image, target)?;
    let bad = KNOWN_BAD.iter().find(|(from, to, _)| {
        let (from, to) = (Version::parse(from), Version::parse(to));
        from.is_some_and(|f| target >= f) && to.is_some_and(|t| target <= t)
    });
    if let Some((_, _, why)) = bad
        && accepted_bad != target.to_string()
    {
        return Err(VersionError::KnownBad {
            image: image.to_owned(),
            target,
            why,
        });
    }
    Ok(Some(target))
}

#[cfg(test)]
pub(crate) mod tests {
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
        assert_eq!(check("etcd:3.4.27", c34, &r, ""), Ok(Some(v("3.4.27"))));
        assert_eq!(check("etcd:3.4.20", None, &r, ""), Ok(Some(v("3.4.20"))));
        assert_eq!(check("etcd:3.5.9", c34, &r, ""), Ok(Some(v("3.5.9"))));
        // Mid-upgrade, and after it until etcd moves the cluster version: going back is
        // allowed.
        let mid = running(&["3.5.9", "3.4.23", "3.5.9"]);
        assert_eq!(check("etcd:3.4.23", None, &mid, ""), Ok(Some(v("3.4.23"))));
        let all = running(&["3.5.9", "3.5.9", "3.5.9"]);
        assert_eq!(check("etcd:3.4.23", c34, &all, ""), Ok(Some(v("3.4.23"))));
        assert_eq!(check("etcd@sha256:0123", c34, &r, ""), Ok(None));
        // Nothing answered: only the known-bad table applies.
        assert_eq!(check("etcd:3.7.0", None, &[], ""), Ok(Some(v("3.7.0"))));
    }

    #[test]
    fn skipping_a_minor_and_going_below_the_cluster_version_are_refused() {
        let r = running(&["3.4.23", "3.4.23", "3.4.23"]);
        let e = check("etcd:3.6.0", Some(v("3.4.0")), &r, "").unwrap_err();
        assert!(matches!(e, VersionError::SkipsMinor { .. }), "{e}");
        assert!(e.to_string().contains("upgrade to 3.5.x first"), "{e}");
        let e = check("etcd:3.7.0", Some(v("3.5.0")), &r, "").unwrap_err();
        assert!(matches!(e, VersionError::SkipsMinor { .. }), "{e}");
        let upgraded = running(&["3.5.9", "3.5.9", "3.5.9"]);
        let e = check("etcd:3.4.23", Some(v("3.5.0")), &upgraded, "").unwrap_err();
        assert!(
            e.to_string()
                .contains("below the cluster version 3.5 (as etcd reports it)"),
            "{e}"
        );
        let e = check("etcd:3.4.23", None, &upgraded, "").unwrap_err();
        assert!(e.to_string().contains("member n1 runs 3.5.9"), "{e}");
    }

    #[test]
    fn the_next_minor_waits_for_the_cluster_version_to_move() {
        // Every member runs 3.5 but etcd still says 3.4: 3.6 would join a 3.4 cluster.
        let all = running(&["3.5.9", "3.5.9", "3.5.9"]);
        let e = check("etcd:3.6.0", Some(v("3.4.0")), &all, "").unwrap_err();
        assert!(matches!(e, VersionError::UpgradeUnfinished { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("wait until etcd moves the cluster version to 3.5"),
            "{e}"
        );
        // Half way through the 3.5 rollout, the same.
        let mid = running(&["3.5.9", "3.4.23", "3.4.23"]);
        let e = check("etcd:3.6.0", None, &mid, "").unwrap_err();
        assert!(matches!(e, VersionError::UpgradeUnfinished { .. }), "{e}");
        assert_eq!(
            check("etcd:3.6.0", Some(v("3.5.0")), &all, ""),
            Ok(Some(v("3.6.0")))
        );
    }

    #[test]
    fn known_bad_releases_need_their_exact_name_accepted() {
        let r = running(&["3.4.23"]);
        let e = check("etcd:3.5.1", None, &r, "").unwrap_err();
        assert!(matches!(e, VersionError::KnownBad { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("acceptKnownBadEtcdRelease is \"3.5.1\""),
            "{e}"
        );
        assert!(check("etcd:3.5.1", None, &r, "3.5.2").is_err());
        assert_eq!(check("etcd:3.5.1", None, &r, "3.5.1"), Ok(Some(v("3.5.1"))));
        assert_eq!(check("etcd:3.5.3", None, &r, ""), Ok(Some(v("3.5.3"))));
    }

    #[test]
    fn minors_without_known_flags_and_unreadable_tags_are_refused() {
        let r = running(&["3.4.23", "3.4.23", "3.4.23"]);
        // Nothing answering: only the minor itself can be judged.
        for image in ["etcd:3.3.27", "etcd:3.8.0", "etcd:4.0.0", "etcd:v2.3.8"] {
            let e = check(image, None, &[], "").unwrap_err();
            assert!(
                matches!(e, VersionError::UnknownMinor { .. }),
                "{image}: {e}"
            );
            assert!(e.to_string().contains("3.4, 3.5, 3.6 and 3.7"), "{e}");
        }
        for image in ["etcd:3.5", "etcd:3.x.1", "etcd:v3", "etcd:3.5.x"] {
            let e = check(image, None, &r, "").unwrap_err();
            assert!(
                matches!(e, VersionError::UnreadableTag { .. }),
                "{image}: {e}"
            );
        }
        // Against a cluster, the more precise reason comes first; the next minor after 3.7
        // passes those checks and is refused for its flags.
        let e = check("etcd:3.3.27", None, &r, "").unwrap_err();
        assert!(matches!(e, VersionError::BelowCluster { .. }), "{e}");
        let e = check("etcd:3.8.0", None, &r, "").unwrap_err();
        assert!(matches!(e, VersionError::SkipsMinor { .. }), "{e}");
        let on37 = running(&["3.7.0", "3.7.0", "3.7.0"]);
        let e = check("etcd:3.8.0", Some(v("3.7.0")), &on37, "").unwrap_err();
        assert!(matches!(e, VersionError::UnknownMinor { .. }), "{e}");
        // Tags that are no version at all are not refused here (nothing to check).
        for image in ["etcd:latest", "etcd@sha256:0123", "registry.example/etcd"] {
            assert_eq!(check(image, None, &r, ""), Ok(None), "{image}");
        }
    }

    #[test]
    fn releases_name_their_minor() {
        let rel = |s: &str| image_release(s).unwrap().map(|r| (r.minor, r.version));
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
}
