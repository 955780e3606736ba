//! The etcd flags that depend on the etcd minor version. Everything else the pod passes etcd
//! means the same from 3.4 to 3.7; these do not:
//!
//! | minor | corruption checks | watch progress notify | snapshot count |
//! |---|---|---|---|
//! | 3.4 | `--experimental-initial-corrupt-check=true` (3.4 has no compact-hash check) | etcd's default (10 m) | `--snapshot-count=10000` |
//! | 3.5 | the same, and `--experimental-compact-hash-check-enabled=true` from 3.5.5 (the release that added it) | `--experimental-watch-progress-notify-interval=5s` | `--snapshot-count=10000` |
//! | 3.6 | `--feature-gates=CompactHashCheck=true,InitialCorruptCheck=true` (3.6 deprecates the experimental flags for these gates) | `--watch-progress-notify-interval=5s` (renamed) | etcd's default, 10000 from 3.6 |
//! | 3.7 | as 3.6 (3.7 removed every `--experimental-*` flag) | as 3.6 | as 3.6 |
//!
//! Sources: etcd's `server/features/etcd_features.go` (the gate names), `server/etcdmain/config.go`
//! of 3.6 (each deprecated flag and its replacement), CHANGELOG-3.5 (compact-hash check added in
//! 3.5.5), CHANGELOG-3.7 ("Removed all deprecated experimental flags"), the etcd 3.6
//! announcement (`--snapshot-count` default 100,000 → 10,000; 3.6.16's and 3.7.3's `--help` list
//! the flag without deprecation, so leaving it out from 3.6 is only for a shorter manifest). The
//! 5 s progress-notify interval is what kubeadm renders (it lets kube-apiserver's watch cache
//! learn the current revision without writes); 3.4 keeps etcd's default so its manifests stay
//! as they were.
//!
//! Checked by running them, not only by reading sources: `operator/tests/render_versions.rs`
//! starts each real binary (3.4.23, 3.5.16, 3.5.36, 3.6.16, 3.7.3) with exactly the etcd
//! container rendered for its image (bootstrap render, then the next revision on the same data
//! dir): each serves a put and a get over mutual TLS, runs the initial corruption check, and
//! logs no deprecated or unknown flag, feature gate or variable. Given the 3.5 set instead, 3.6.16
//! warns that `--experimental-compact-hash-check-enabled` and
//! `--experimental-watch-progress-notify-interval` are deprecated and 3.7.3 refuses to start
//! (`flag provided but not defined`). 3.6.16 and 3.7.3 (built from etcd's Go modules) also run
//! these flags in scenario `upgrade-minors`.
//!
//! An image whose tag names no version (`latest`, a digest only) gets the 3.4 set: those flags
//! are accepted by 3.4, 3.5 and 3.6 alike (3.6.16 does not even warn, though its `--help` calls
//! `--experimental-initial-corrupt-check` deprecated); 3.7 refuses them.

use crate::etcd_version::{Minor, Release, Version};

/// The first 3.5 release with `--experimental-compact-hash-check-enabled`.
const COMPACT_HASH_CHECK_SINCE: Version = Version {
    major: 3,
    minor: 5,
    patch: 5,
};

const SNAPSHOT_COUNT: &str = "--snapshot-count=10000";
const INITIAL_CORRUPT_CHECK_35: &str = "--experimental-initial-corrupt-check=true";
const COMPACT_HASH_CHECK_35: &str = "--experimental-compact-hash-check-enabled=true";
const PROGRESS_NOTIFY_35: &str = "--experimental-watch-progress-notify-interval=5s";
const FEATURE_GATES_36: &str = "--feature-gates=CompactHashCheck=true,InitialCorruptCheck=true";
const PROGRESS_NOTIFY_36: &str = "--watch-progress-notify-interval=5s";

/// The version-dependent etcd arguments for `release` (`None`: the image names no version), in
/// the order the manifest lists them.
pub fn version_args(release: Option<Release>) -> Vec<&'static str> {
    let Some(Release { minor, version }) = release else {
        return version_args_34();
    };
    match minor {
        Minor::V3_4 => version_args_34(),
        Minor::V3_5 => version_args_35(version),
        Minor::V3_6 | Minor::V3_7 => vec![FEATURE_GATES_36, PROGRESS_NOTIFY_36],
    }
}

fn version_args_34() -> Vec<&'static str> {
    vec![SNAPSHOT_COUNT, INITIAL_CORRUPT_CHECK_35]
}

fn version_args_35(version: Version) -> Vec<&'static str> {
    let mut args = vec![SNAPSHOT_COUNT, INITIAL_CORRUPT_CHECK_35];
    if version >= COMPACT_HASH_CHECK_SINCE {
        args.push(COMPACT_HASH_CHECK_35);
    }
    args.push(PROGRESS_NOTIFY_35);
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd_version::image_release;

    fn args(image: &str) -> Vec<&'static str> {
        version_args(image_release(image, "").unwrap())
    }

    #[test]
    fn each_known_minor_has_its_flags() {
        assert_eq!(
            args("etcd:3.4.23"),
            [
                "--snapshot-count=10000",
                "--experimental-initial-corrupt-check=true"
            ]
        );
        assert_eq!(
            args("etcd:3.5.16"),
            [
                "--snapshot-count=10000",
                "--experimental-initial-corrupt-check=true",
                "--experimental-compact-hash-check-enabled=true",
                "--experimental-watch-progress-notify-interval=5s"
            ]
        );
        let gates = [
            "--feature-gates=CompactHashCheck=true,InitialCorruptCheck=true",
            "--watch-progress-notify-interval=5s",
        ];
        assert_eq!(args("etcd:3.6.6"), gates);
        assert_eq!(args("etcd:v3.7.0"), gates);
    }

    #[test]
    fn the_compact_hash_check_starts_with_3_5_5() {
        assert!(!args("etcd:3.5.4").contains(&COMPACT_HASH_CHECK_35));
        assert!(args("etcd:3.5.5").contains(&COMPACT_HASH_CHECK_35));
    }

    #[test]
    fn from_3_6_no_experimental_or_deprecated_flag_is_rendered() {
        for image in ["etcd:3.6.0", "etcd:3.7.0"] {
            for arg in args(image) {
                assert!(!arg.starts_with("--experimental-"), "{image}: {arg}");
                assert!(!arg.starts_with("--snapshot-count"), "{image}: {arg}");
            }
        }
    }

    #[test]
    fn an_image_naming_no_version_gets_flags_3_4_to_3_6_accept() {
        assert_eq!(args("etcd:latest"), args("etcd:3.4.23"));
        assert_eq!(args("etcd@sha256:0123"), args("etcd:3.4.23"));
    }
}
