//! Per-container mount namespaces (the container runtime stand-in's filesystem part).
//!
//! Inside the container's fresh mount namespace (created by [`crate::helper`]),
//! [`setup_mounts`]:
//!
//! 1. makes `/` recursively private, so nothing mounted here is seen by the host or by other
//!    containers, and every mount vanishes with the namespace's last process;
//! 2. mounts a tmpfs on the staging directory (a per-node directory the agent owns,
//!    `<root>/run/kubelet-standin/staging`) as scratch space;
//! 3. for each bind, parents first: if the target does not exist, it finds the deepest
//!    existing ancestor `A` and mounts an **overlay** on `A` (lower = `A`, upper/work on the
//!    tmpfs), re-binding `A`'s submounts on top, then creates the target inside the overlay.
//!    So `/etc/kubernetes/manifests` or `/dev/termination-log` are created only inside the
//!    container's view: the host's `/etc` and `/dev` are never written. Below an earlier bind
//!    target the path is created in the node's own directory (as the kubelet would). Only
//!    when `A` is `/` is the target created on the host (logged; avoid such mount paths);
//! 4. bind-mounts `SRC` on the target (recursive; remounted read-only for `readOnly`).
//!
//! Paths containing `:` or `,` are refused (they would be ambiguous in `--bind` and in
//! overlay options).

use std::path::{Component, Path, PathBuf};

use nix::mount::{MsFlags, mount};

/// Errors of the mount namespace helper.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("invalid bind spec {0:?} (want SRC:DST or SRC:DST:ro, absolute paths)")]
    BadSpec(String),
    #[error("path {0:?} contains ':' or ',' which the stand-in cannot mount")]
    BadPath(PathBuf),
    #[error("{op} {path}: {source}")]
    Sys {
        op: &'static str,
        path: PathBuf,
        source: nix::Error,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One bind mount: host `source` at container `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

impl BindMount {
    /// The `--bind` argument value.
    pub fn to_arg(&self) -> Result<String, MountError> {
        for p in [&self.source, &self.target] {
            let s = p.to_string_lossy();
            if s.contains(':') || s.contains(',') {
                return Err(MountError::BadPath(p.clone()));
            }
        }
        Ok(format!(
            "{}:{}{}",
            self.source.display(),
            self.target.display(),
            if self.read_only { ":ro" } else { "" }
        ))
    }

    /// Parses a `--bind` argument value.
    pub fn parse(spec: &str) -> Result<Self, MountError> {
        let parts: Vec<&str> = spec.split(':').collect();
        let (src, dst, ro) = match parts[..] {
            [s, d] => (s, d, false),
            [s, d, "ro"] => (s, d, true),
            [s, d, "rw"] => (s, d, false),
            _ => return Err(MountError::BadSpec(spec.into())),
        };
        if !src.starts_with('/') || !dst.starts_with('/') {
            return Err(MountError::BadSpec(spec.into()));
        }
        Ok(BindMount {
            source: src.into(),
            target: dst.into(),
            read_only: ro,
        })
    }
}

/// Sorts binds so parents are mounted before children (stable for equal depth).
pub fn order_binds(binds: &mut [BindMount]) {
    binds.sort_by_key(|b| b.target.components().count());
}

/// The mount points strictly below `dir` from a mountinfo text, outermost first, skipping
/// ones nested under another listed one (those come along with a recursive bind).
pub fn submounts_below(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    let mut below: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p != dir && p.starts_with(dir))
        .collect();
    below.sort_by_key(|p| p.components().count());
    below.dedup();
    let mut top: Vec<PathBuf> = Vec::new();
    for p in below {
        if !top.iter().any(|t| p.starts_with(t)) {
            top.push(p);
        }
    }
    top
}

/// The deepest existing ancestor of `path` (may be `/`).
pub fn deepest_existing_ancestor(path: &Path) -> PathBuf {
    let mut cur = path.to_path_buf();
    while !cur.exists() {
        match cur.parent() {
            Some(p) => cur = p.to_path_buf(),
            None => return PathBuf::from("/"),
        }
    }
    cur
}

fn sys<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(nix::Error) -> MountError + 'a {
    move |source| MountError::Sys {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> MountError + 'a {
    move |source| MountError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// State of the helper while it prepares the namespace.
struct Namespace {
    staging: PathBuf,
    overlays: Vec<PathBuf>,
    /// Targets already bind-mounted: creating below them writes into the node's own dirs.
    bound: Vec<PathBuf>,
}

impl Namespace {
    fn overlay(&mut self, dir: &Path) -> Result<(), MountError> {
        let s = dir.to_string_lossy();
        if s.contains(':') || s.contains(',') {
            return Err(MountError::BadPath(dir.to_path_buf()));
        }
        let n = self.overlays.len();
        let lower_view = self.staging.join(format!("orig-{n}"));
        let upper = self.staging.join(format!("upper-{n}"));
        let work = self.staging.join(format!("work-{n}"));
        for d in [&lower_view, &upper, &work] {
            std::fs::create_dir_all(d).map_err(io("mkdir", d))?;
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(io("read", Path::new("/proc/self/mountinfo")))?;
        let subs = submounts_below(&mountinfo, dir);
        // Keep a view of the original tree (with its submounts) to re-bind them later.
        mount(
            Some(dir),
            &lower_view,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(sys("bind", dir))?;
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            dir.display(),
            upper.display(),
            work.display()
        );
        mount(
            Some("overlay"),
            dir,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .map_err(sys("overlay", dir))?;
        for sub in subs {
            let Ok(rel) = sub.strip_prefix(dir) else {
                continue;
            };
            let from = lower_view.join(rel);
            mount(
                Some(&from),
                &sub,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(sys("rebind", &sub))?;
        }
        self.overlays.push(dir.to_path_buf());
        Ok(())
    }

    fn ensure_target(&mut self, bind: &BindMount) -> Result<(), MountError> {
        let target = &bind.target;
        if target.exists() {
            return Ok(());
        }
        let ancestor = deepest_existing_ancestor(target);
        let writable_here = self
            .overlays
            .iter()
            .chain(self.bound.iter())
            .any(|o| ancestor.starts_with(o));
        if !writable_here {
            if ancestor == Path::new("/") {
                eprintln!(
                    "kubelet-standin exec-container: creating {} on the host (its top-level directory does not exist)",
                    target.display()
                );
            } else {
                self.overlay(&ancestor)?;
            }
        }
        let source_is_dir = bind.source.is_dir();
        if source_is_dir {
            std::fs::create_dir_all(target).map_err(io("mkdir", target))?;
        } else {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(io("mkdir", parent))?;
            }
            std::fs::File::create(target).map_err(io("create", target))?;
        }
        Ok(())
    }
}

/// Sets up the bind mounts in the current (already unshared) mount namespace: makes `/`
/// recursively private, mounts the staging tmpfs, then each bind (parents first), creating
/// missing targets inside overlays (see module docs).
pub fn setup_mounts(staging: &Path, binds: &[BindMount]) -> Result<(), MountError> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(sys("make-rprivate", Path::new("/")))?;
    let mut ns = Namespace {
        staging: staging.to_path_buf(),
        overlays: Vec::new(),
        bound: Vec::new(),
    };
    if !binds.is_empty() {
        std::fs::create_dir_all(staging).map_err(io("mkdir", staging))?;
        mount(
            Some("tmpfs"),
            staging,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0700"),
        )
        .map_err(sys("tmpfs", staging))?;
    }
    let mut binds = binds.to_vec();
    order_binds(&mut binds);
    for b in &binds {
        if b.target
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(MountError::BadSpec(b.target.display().to_string()));
        }
        ns.ensure_target(b)?;
        mount(
            Some(&b.source),
            &b.target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(sys("bind", &b.target))?;
        if b.read_only {
            mount(
                None::<&str>,
                &b.target,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                None::<&str>,
            )
            .map_err(sys("remount-ro", &b.target))?;
        }
        ns.bound.push(b.target.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn bind_args_round_trip() {
        let b = BindMount {
            source: "/r/n1/var/lib/etcd".into(),
            target: "/var/lib/etcd".into(),
            read_only: true,
        };
        assert_eq!(b.to_arg().unwrap(), "/r/n1/var/lib/etcd:/var/lib/etcd:ro");
        assert_eq!(BindMount::parse(&b.to_arg().unwrap()).unwrap(), b);
        assert!(BindMount::parse("rel:/x").is_err());
        assert!(BindMount::parse("/a:/b:/c:/d").is_err());
        let bad = BindMount {
            source: "/a:b".into(),
            target: "/x".into(),
            read_only: false,
        };
        assert!(bad.to_arg().is_err());
    }

    #[test]
    fn binds_are_ordered_parents_first() {
        let mk = |t: &str| BindMount {
            source: "/s".into(),
            target: t.into(),
            read_only: false,
        };
        let mut v = vec![
            mk("/etc/kubernetes/manifests"),
            mk("/etc/kubernetes"),
            mk("/var"),
        ];
        order_binds(&mut v);
        let t: Vec<_> = v.iter().map(|b| b.target.display().to_string()).collect();
        assert_eq!(t, ["/var", "/etc/kubernetes", "/etc/kubernetes/manifests"]);
    }

    #[test]
    fn submounts_are_found_outermost_first() {
        let mi = "24 27 0:6 / /dev rw - devtmpfs devtmpfs rw\n\
                  25 24 0:23 / /dev/shm rw - tmpfs tmpfs rw\n\
                  26 24 0:24 / /dev/pts rw - devpts devpts rw\n\
                  29 26 0:26 / /dev/pts/x rw - devpts devpts rw\n\
                  27 1 254:0 / / rw - ext4 /dev/vda rw\n";
        assert_eq!(
            submounts_below(mi, Path::new("/dev")),
            vec![PathBuf::from("/dev/shm"), PathBuf::from("/dev/pts")]
        );
        assert!(submounts_below(mi, Path::new("/etc")).is_empty());
    }
}
