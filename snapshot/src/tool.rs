//! Which tool of an etcd image restores a snapshot, decided from the image's tag.
//!
//! etcd 3.4 restores with `etcdctl snapshot restore`, 3.5 and later with `etcdutl`. Only
//! `etcdutl` from 3.5.10 (the backport of etcd PR 16029) and 3.6 can bump the store revision and
//! mark the old ones compacted, so watchers (the API server's watch cache, every informer) never
//! see revisions go back.

/// How far a bumping restore moves the store revision: far past anything clients can have seen
/// since the snapshot (a billion writes), as etcd's own restore documentation suggests.
pub const REVISION_BUMP: u64 = 1_000_000_000;

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
    Ok(match version {
        (3, 4, _) => Tool {
            binary: "etcdctl",
            bumps_revision: false,
            version,
        },
        (3, 5, patch) => Tool {
            binary: "etcdutl",
            bumps_revision: patch >= 10,
            version,
        },
        (3, minor, _) if minor >= 6 => Tool {
            binary: "etcdutl",
            bumps_revision: true,
            version,
        },
        _ => {
            return Err(format!(
                "image {image:?}: etcd {core} is not a version recovery knows (3.4 and later)"
            ));
        }
    })
}
