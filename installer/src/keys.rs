//! Which private keys a node receives. A revision is one cluster-wide unit (one Secret holds
//! every node's certificates), but a node gets only its own private keys: with
//! `--own-key-prefixes etcd-peer,etcd-serving,…`, a Secret entry named `*.key` is laid down
//! only when it is `<prefix>-<this node>.key`; every other `.key` entry is withheld (certificates
//! and other entries are public and always laid down). A manifest that names a withheld key
//! would make this node use another node's identity: the revision is refused. Without prefixes
//! every entry is laid down, as before.

/// What a Secret entry is to this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Public (a certificate, a bundle) or no prefixes given: laid down.
    Shared,
    /// This node's own private key: laid down.
    Own,
    /// Another node's private key (or one of no node): not laid down.
    Withheld,
}

/// The scope of the Secret entry `key` on `node`.
pub fn scope(prefixes: &[String], node: &str, key: &str) -> Scope {
    if prefixes.is_empty() || !key.ends_with(".key") {
        return Scope::Shared;
    }
    if prefixes.iter().any(|p| key == format!("{p}-{node}.key")) {
        Scope::Own
    } else {
        Scope::Withheld
    }
}

/// The first withheld key (`secret/key`) the manifest names as a file.
pub fn named_in<'a>(
    manifest: &[u8],
    withheld: &'a [(String, String)],
) -> Option<&'a (String, String)> {
    let text = String::from_utf8_lossy(manifest);
    withheld
        .iter()
        .find(|(secret, key)| text.contains(&format!("{secret}/{key}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes() -> Vec<String> {
        ["etcd-peer", "etcd-serving", "etcd-serving-metrics"]
            .map(str::to_owned)
            .to_vec()
    }

    #[test]
    fn a_node_gets_its_own_keys_and_every_certificate() {
        let p = prefixes();
        assert_eq!(scope(&p, "n1", "etcd-peer-n1.key"), Scope::Own);
        assert_eq!(scope(&p, "n1", "etcd-serving-metrics-n1.key"), Scope::Own);
        assert_eq!(scope(&p, "n1", "etcd-peer-n2.key"), Scope::Withheld);
        assert_eq!(scope(&p, "n1", "etcd-peer-n2.crt"), Scope::Shared);
        assert_eq!(
            scope(&[], "n1", "etcd-peer-n2.key"),
            Scope::Shared,
            "no prefixes: as before"
        );
    }

    #[test]
    fn hyphenated_names_never_match_another_node() {
        let p = prefixes();
        // Node `n1` must not receive node `x-n1`'s key, nor `metrics-n1`'s serving key.
        assert_eq!(scope(&p, "n1", "etcd-peer-x-n1.key"), Scope::Withheld);
        assert_eq!(
            scope(&p, "metrics-n1", "etcd-serving-metrics-n1.key"),
            Scope::Own
        );
        assert_eq!(scope(&p, "n1", "etcd-serving-metrics-n1.key"), Scope::Own);
        assert_eq!(scope(&p, "x", "other.key"), Scope::Withheld);
    }

    #[test]
    fn a_manifest_naming_a_withheld_key_is_found() {
        let withheld = vec![("etcd-all-certs".to_owned(), "etcd-peer-n2.key".to_owned())];
        let m = b"--peer-key-file=/etc/kubernetes/static-pod-certs/secrets/etcd-all-certs/etcd-peer-n2.key";
        assert_eq!(named_in(m, &withheld), withheld.first());
        assert_eq!(
            named_in(
                b"--peer-key-file=.../etcd-all-certs/etcd-peer-n1.key",
                &withheld
            ),
            None
        );
    }

    fn revision(manifest_key_file: &str) -> Vec<crate::plan::Resource> {
        use crate::plan::{Kind, Resource};
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  labels:\n    revision: \"3\"\nspec:\n  containers:\n  - name: etcd\n    image: etcd\n    args:\n    - --peer-key-file=/etc/kubernetes/static-pod-certs/secrets/etcd-all-certs/{manifest_key_file}\n    env:\n    - name: ETCD_NAME\n      value: n1\n"
        );
        vec![
            Resource {
                kind: Kind::ConfigMap,
                name: "etcd-pod".into(),
                data: [("pod-n1.yaml".to_string(), manifest.into_bytes())].into(),
            },
            Resource {
                kind: Kind::Secret,
                name: "etcd-all-certs".into(),
                data: [
                    ("etcd-peer-n1.crt".to_string(), b"c1".to_vec()),
                    ("etcd-peer-n1.key".to_string(), b"k1".to_vec()),
                    ("etcd-peer-n2.crt".to_string(), b"c2".to_vec()),
                    ("etcd-peer-n2.key".to_string(), b"k2".to_vec()),
                ]
                .into(),
            },
        ]
    }

    #[test]
    fn the_plan_lays_down_only_this_nodes_keys_and_refuses_a_manifest_using_another() {
        let p = prefixes();
        let res = revision("etcd-peer-n1.key");
        let input = crate::plan::PlanInput {
            node: "n1",
            revision: 3,
            pod: "etcd-pod",
            resources: &res,
            own_key_prefixes: &p,
        };
        let plan = crate::plan::plan(&input).unwrap();
        let secrets: Vec<String> = plan
            .files
            .iter()
            .filter(|f| f.dir.starts_with("secrets"))
            .map(|f| format!("{} {:o}", f.name, f.mode))
            .collect();
        assert_eq!(
            secrets,
            [
                "etcd-peer-n1.crt 600",
                "etcd-peer-n1.key 600",
                "etcd-peer-n2.crt 600"
            ]
        );
        let res = revision("etcd-peer-n2.key");
        let e = crate::plan::plan(&crate::plan::PlanInput {
            resources: &res,
            ..input
        })
        .unwrap_err();
        assert!(
            matches!(&e, crate::plan::PlanError::ForeignKey { key, .. } if key == "etcd-peer-n2.key"),
            "{e}"
        );
        assert!(e.to_string().contains("another node's private key"), "{e}");
    }
}
