//! Which tool of an etcd image restores a snapshot, decided from the image's tag.
//!
//! etcd 3.4 restores with `etcdctl snapshot restore`, 3.5 and later with `etcdutl`. Only
//! `etcdutl` from 3.5.10 (the backport of etcd PR 16029) and 3.6 can bump the store revision and
//! mark the old ones compacted, so watchers (the API server's watch cache, every informer) never
//! see revisions go back.

/// The least a bumping restore moves the store revision: a billion writes after the snapshot
/// (about eleven days at 1000 writes/s), what cluster-etcd-operator bumps by when it has no
/// record of the lost cluster's raft index.
pub const REVISION_BUMP: u64 = 1_000_000_000;

/// How far a restore moves the store revision past the snapshot's, given the highest raft index
/// seen of the lost cluster (`observed`, see `etcd_recover::snapshot`): the larger of
/// [`REVISION_BUMP`] and `observed` × 1.2, rounded up.
///
/// Why it is enough: every write that moved the revision after the snapshot is its own raft
/// entry, so the writes a watcher can have seen after the snapshot number at most the lost
/// cluster's last raft index minus the snapshot's. `observed` × 1.2 covers that when the index
/// seen is within a sixth of the last one (cluster-etcd-operator's rule, from the raft index its
/// `etcd-rev` sidecar records every 10 s: `bindata/etcd/restore-pod.yaml`); the floor covers a
/// billion writes when nothing better was seen. The revision is an `i64`: a billion per restore
/// leaves room for billions of restores.
pub fn revision_bump(observed: u64) -> u64 {
    let margin = observed.saturating_add(observed.div_ceil(5));
    margin.max(REVISION_BUMP)
}

/// The etcd image's restore tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tool {
    /// `etcdctl` (3.4) or `etcdutl` (3.5+).
    pub binary: &'static str,
    /// Whether it takes `--bump-revision` and `--mark-compacted`.
    pub bumps_revision: bool,
    /// The version read from the image tag.
    pub version: (u64, u64, u64),
}

/// The tool of the etcd image `image` (by its tag's version).
pub fn restore_tool(image: &str) -> Result<Tool, String> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let tag = last
        .split_once(':')
        .map(|(_, t)| t)
        .ok_or_else(|| format!("image {image:?} has no tag: cannot tell its etcd version"))?;
    let core = tag.trim_start_matches('v');
    let core = core.split(['-', '+']).next().unwrap_or(core);
    let parts: Vec<u64> = core
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("image {image:?}: tag {tag:?} is not an etcd version"))?;
    let version = match parts.as_slice() {
        [a, b, c] => (*a, *b, *c),
        _ => {
            return Err(format!(
                "image {image:?}: tag {tag:?} is not an etcd version x.y.z"
            ));
        }
    };
    tool_of_version(version).ok_or_else(|| {
        format!("image {image:?}: etcd {core} is not a version recovery knows (3.4 and later)")
    })
}

/// The restore tool of etcd `version` (major, minor, patch); `None` before 3.4.
pub fn tool_of_version(version: (u64, u64, u64)) -> Option<Tool> {
    let (binary, bumps_revision) = match version {
        (3, 4, _) => ("etcdctl", false),
        (3, 5, patch) => ("etcdutl", patch >= 10),
        (3, minor, _) if minor >= 6 => ("etcdutl", true),
        _ => return None,
    };
    Some(Tool {
        binary,
        bumps_revision,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bump_is_a_billion_or_a_fifth_above_the_raft_index_seen() {
        assert_eq!(revision_bump(0), REVISION_BUMP);
        assert_eq!(revision_bump(800_000_000), REVISION_BUMP);
        assert_eq!(revision_bump(1_000_000_000), 1_200_000_000);
        assert_eq!(revision_bump(1_000_000_001), 1_200_000_002);
        assert_eq!(revision_bump(u64::MAX), u64::MAX);
    }
}
