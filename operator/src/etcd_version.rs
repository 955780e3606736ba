//! The etcd version policy: whether the cluster may move to the etcd image the spec names.
//!
//! Inputs: the image (`spec.etcdImage`, else the operator's `ETCD_IMAGE`), `spec.etcdImageVersion`,
//! the version each member reports, `spec.acceptKnownBadEtcdRelease`. Decision ([`check`], pure):
//!
//! 1. The version ([`resolve`]) is read from the image tag (`etcd:3.5.9`, `v3.5.9`), else from
//!    `spec.etcdImageVersion`. An image whose tag names none (a digest only, `latest`) and no
//!    declared version is [`VersionError::VersionUnknown`]: refused, saying how to declare it,
//!    never let through unchecked. A declared version that disagrees with the tag is refused too.
//! 2. It may not be below the cluster version (etcd's own, read from `/version`; else the lowest
//!    minor the members run: etcd cannot run a cluster whose version is above its own), nor more
//!    than one minor above it (etcd upgrades one minor at a time, and the next minor waits until
//!    etcd has moved the cluster version to the one just rolled out).
//! 3. It must be a minor whose flags the operator knows ([`Minor`]: 3.4 to 3.7; `podspec::flags`
//!    renders each): a tag that starts like a version but is not `major.minor.patch` is
//!    [`VersionError::UnreadableTag`] first; another minor (3.3, 3.8) that step 2 let through is
//!    [`VersionError::UnknownMinor`].
//! 4. Patch floors ([`releases::PATCH_FLOORS`]): a move to the next minor is refused while a
//!    member of the old minor runs below the patch etcd's upgrade guide requires (3.5.32 before
//!    3.6, 3.6.11 before 3.7), naming the member, the floor and the guide.
//! 5. Known-bad releases ([`releases::KNOWN_BAD`], each with its source) are refused unless that
//!    exact release is accepted in the spec.
//!
//! An allowed move to the next minor then waits, before its first new pod, until every member
//! has snapshotted past what an older minor wrote to its log ([`minor_log`]).
//!
//! A refusal is a permanent error of target-config, so nothing is rendered, no revision is
//! created and no etcd restarts until the spec (or, for an unfinished upgrade, the cluster
//! version) changes. The rollout of an allowed version is the normal one: node by node through
//! the quorum gate, the leader last. Rendering picks the flags by the same version
//! ([`image_release`]), and refuses an unknown minor on its own as well.

use std::fmt;

pub mod minor_log;
pub mod releases;

use releases::{below_floor, known_bad};

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
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

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

/// The release an image runs, as its tag says, else as `declared` (`spec.etcdImageVersion`)
/// says: `Ok(None)` when neither names one (no tag, a digest only, `latest`; the version policy
/// refuses such an image before anything renders); an error when the tag starts like a version
/// but cannot be read, or reads as a minor the operator has no flags for.
pub fn image_release(image: &str, declared: &str) -> Result<Option<Release>, VersionError> {
    let version = match image_target(image)? {
        Some(v) => v,
        None => match Version::parse(declared.trim()) {
            Some(v) => v,
            None => return Ok(None),
        },
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
        "etcd image {image} is etcd {target}, a known-bad release: {why} ({source_}); refused unless spec.acceptKnownBadEtcdRelease is \"{target}\""
    )]
    KnownBad {
        image: String,
        target: Version,
        why: &'static str,
        source_: &'static str,
    },
    #[error(
        "etcd image {image} is etcd {target}, but member {member} runs {running}, below {}: {} ({}); move every member to {} or later first",
        .floor.floor, .floor.why, .floor.source, .floor.floor
    )]
    BelowUpgradeFloor {
        image: String,
        target: Version,
        member: String,
        running: Version,
        floor: &'static releases::PatchFloor,
    },
    #[error(
        "etcd image {image} names no etcd version (no version tag, e.g. a digest only), so the version policy cannot check it: set spec.etcdImageVersion to the version the image runs (etcd --version), e.g. \"3.5.16\""
    )]
    VersionUnknown { image: String },
    #[error(
        "spec.etcdImageVersion {declared:?} is not an etcd version major.minor.patch (e.g. 3.5.16)"
    )]
    UnreadableDeclaredVersion { declared: String },
    #[error(
        "etcd image {image} is etcd {tagged} by its tag, but spec.etcdImageVersion says {declared}: remove one or make them agree"
    )]
    DeclaredVersionDiffers {
        image: String,
        tagged: Version,
        declared: Version,
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

/// The version `image` runs: its tag's, else `declared` (`spec.etcdImageVersion`); both given
/// must agree, and neither is [`VersionError::VersionUnknown`].
pub fn resolve(image: &str, declared: &str) -> Result<Version, VersionError> {
    let declared_version =
        match declared.trim() {
            "" => None,
            text => Some(Version::parse(text).ok_or_else(|| {
                VersionError::UnreadableDeclaredVersion {
                    declared: text.to_owned(),
                }
            })?),
        };
    match (image_target(image)?, declared_version) {
        (Some(tagged), Some(declared)) if tagged != declared => {
            Err(VersionError::DeclaredVersionDiffers {
                image: image.to_owned(),
                tagged,
                declared,
            })
        }
        (Some(v), _) | (None, Some(v)) => Ok(v),
        (None, None) => Err(VersionError::VersionUnknown {
            image: image.to_owned(),
        }),
    }
}

/// Checks a move to `image` (running `declared` when its tag names no version) given the
/// cluster version etcd reports (`None`: not read) and each member's running version
/// (`(name, version)`); the version moved to when allowed.
pub fn check(
    image: &str,
    declared: &str,
    cluster: Option<Version>,
    running: &[(String, Version)],
    accepted_bad: &str,
) -> Result<Version, VersionError> {
    let target = resolve(image, declared)?;
    if let Some(((major, minor), source_)) = cluster_line(cluster, running) {
        check_line(image, target, (major, minor), source_, running)?;
    }
    known_minor(image, target)?;
    if let Some((member, floor)) = below_floor(target, running) {
        return Err(VersionError::BelowUpgradeFloor {
            image: image.to_owned(),
            target,
            member: member.0.clone(),
            running: member.1,
            floor,
        });
    }
    if let Some(bad) = known_bad(target)
        && accepted_bad != target.to_string()
    {
        return Err(VersionError::KnownBad {
            image: image.to_owned(),
            target,
            why: bad.why,
            source_: bad.source,
        });
    }
    Ok(target)
}

/// Refuses a target below the cluster's minor line, or more than one minor above it.
fn check_line(
    image: &str,
    target: Version,
    (major, minor): (u32, u32),
    source_: String,
    running: &[(String, Version)],
) -> Result<(), VersionError> {
    let line = format!("{major}.{minor}");
    if target.minor_line() < (major, minor) {
        return Err(VersionError::BelowCluster {
            image: image.to_owned(),
            target,
            cluster: line,
            source_,
        });
    }
    if target.major == major && target.minor <= minor + 1 {
        return Ok(());
    }
    let ahead = running
        .iter()
        .filter(|(_, v)| v.minor_line() > (major, minor))
        .max_by_key(|(_, v)| v.minor_line());
    Err(match ahead {
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
    })
}

#[cfg(test)]
pub(crate) mod tests;
