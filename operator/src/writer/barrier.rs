//! The read-your-writes barrier: what a write leaves for the next pass to wait on ([`Awaited`]:
//! an object at a resourceVersion, or its absence), and whether a watch cache shows it yet
//! ([`satisfied`]).

/// An object the caches must show before the next pass acts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Awaited {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// `Some(rv)`: present with at least this resourceVersion; `None`: absent.
    pub resource_version: Option<String>,
}

/// True when `seen` (the cache's resourceVersion, if the object is there) satisfies `want`.
pub fn satisfied(want: &Awaited, seen: Option<&str>) -> bool {
    match (&want.resource_version, seen) {
        (None, None) => true,
        (None, Some(_)) | (Some(_), None) => false,
        (Some(w), Some(s)) => match (w.parse::<u64>(), s.parse::<u64>()) {
            (Ok(w), Ok(s)) => s >= w,
            _ => s == w,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(rv: Option<&str>) -> Awaited {
        Awaited {
            kind: "ConfigMap",
            namespace: "etcd".into(),
            name: "x".into(),
            resource_version: rv.map(str::to_owned),
        }
    }

    #[test]
    fn the_barrier_compares_versions_numerically() {
        assert!(satisfied(&want(Some("100")), Some("100")));
        assert!(satisfied(&want(Some("100")), Some("120")));
        assert!(!satisfied(&want(Some("100")), Some("99")));
        assert!(!satisfied(&want(Some("100")), None));
        assert!(satisfied(&want(None), None));
        assert!(!satisfied(&want(None), Some("5")));
        assert!(satisfied(&want(Some("abc")), Some("abc")));
    }
}
