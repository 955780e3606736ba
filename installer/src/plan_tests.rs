//! Tests of the install plan ([`super`]): keys, names, modes and what a plan lays down.

use super::*;

fn manifest_for(node: &str) -> Vec<u8> {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  labels:\n    revision: \"3\"\nspec:\n  containers:\n  - name: etcd\n    image: etcd\n    env:\n    - name: ETCD_NAME\n      value: {node}\n"
    )
    .into_bytes()
}

fn resources() -> Vec<Resource> {
    vec![
        Resource {
            kind: Kind::ConfigMap,
            name: "etcd-pod".into(),
            data: [
                ("pod-n1.yaml".to_string(), manifest_for("n1")),
                ("pod-n2.yaml".to_string(), manifest_for("n2")),
                ("version".to_string(), b"3".to_vec()),
            ]
            .into(),
        },
        Resource {
            kind: Kind::Secret,
            name: "etcd-all-certs".into(),
            data: [("n1.key".to_string(), b"secret".to_vec())].into(),
        },
    ]
}

fn input<'a>(node: &'a str, res: &'a [Resource]) -> PlanInput<'a> {
    PlanInput {
        node,
        revision: 3,
        pod: "etcd-pod",
        resources: res,
        own_key_prefixes: &[],
    }
}

#[test]
fn plans_files_modes_and_the_nodes_manifest() {
    let res = resources();
    let plan = plan(&input("n1", &res)).unwrap();
    assert_eq!(plan.dir_name, "etcd-pod-3");
    assert_eq!(plan.manifest, manifest_for("n1"));
    let files: Vec<(String, u32)> = plan
        .files
        .iter()
        .map(|f| (f.path().display().to_string(), f.mode))
        .collect();
    assert_eq!(
        files,
        vec![
            ("configmaps/etcd-pod/pod-n1.yaml".into(), 0o644),
            ("configmaps/etcd-pod/pod-n2.yaml".into(), 0o644),
            ("configmaps/etcd-pod/version".into(), 0o644),
            ("secrets/etcd-all-certs/n1.key".into(), 0o600),
            ("etcd-pod.yaml".into(), 0o644),
        ]
    );
    assert_eq!(
        plan.dirs,
        vec![
            PathBuf::from("configmaps"),
            PathBuf::from("configmaps/etcd-pod"),
            PathBuf::from("secrets"),
            PathBuf::from("secrets/etcd-all-certs"),
        ]
    );
    assert!(plan.matches(&plan.tree()));
}

#[test]
fn every_hostile_key_is_refused() {
    for (key, problem) in [
        ("", KeyProblem::Empty),
        ("a/b", KeyProblem::PathSeparator),
        ("/etc/passwd", KeyProblem::PathSeparator),
        ("a\\b", KeyProblem::PathSeparator),
        ("..", KeyProblem::DotDot),
        ("../x", KeyProblem::PathSeparator),
        ("a..b", KeyProblem::DotDot),
        (".", KeyProblem::LeadingDot),
        (".hidden", KeyProblem::LeadingDot),
        ("a\0b", KeyProblem::Nul),
    ] {
        assert_eq!(check_key(key), Err(problem), "key {key:?}");
        let mut res = resources();
        res[1].data.insert(key.to_string(), b"x".to_vec());
        let err = plan(&input("n1", &res)).unwrap_err();
        assert_eq!(err.category(), "HostileKey", "key {key:?}: {err}");
    }
    assert_eq!(check_key(&"a".repeat(254)), Err(KeyProblem::TooLong));
    for ok in ["ca.crt", "pod-n1.yaml", "a_b-C.9", "x."] {
        assert_eq!(check_key(ok), Ok(()), "key {ok:?}");
    }
}

#[test]
fn missing_or_foreign_manifest_is_refused() {
    let res = resources();
    let err = plan(&input("n3", &res)).unwrap_err();
    assert!(matches!(err, PlanError::NoManifestForNode { .. }), "{err}");
    assert!(err.to_string().contains("pod-n3.yaml"), "{err}");

    // n1's key holds n2's manifest.
    let mut res = resources();
    res[0].data.insert("pod-n1.yaml".into(), manifest_for("n2"));
    let err = plan(&input("n1", &res)).unwrap_err();
    assert_eq!(err.category(), "ManifestForAnotherNode", "{err}");

    let res: Vec<Resource> = resources().into_iter().skip(1).collect();
    let err = plan(&input("n1", &res)).unwrap_err();
    assert!(matches!(err, PlanError::NoPodConfigMap { .. }), "{err}");
}

#[test]
fn duplicate_resources_are_refused() {
    let mut res = resources();
    res.push(res[1].clone());
    assert!(matches!(
        plan(&input("n1", &res)),
        Err(PlanError::Duplicate { .. })
    ));
}

#[test]
fn revision_dir_names_and_leftovers() {
    assert_eq!(parse_revision_dir_name("etcd-pod", "etcd-pod-12"), Some(12));
    for bad in [
        "etcd-pod-",
        "etcd-pod-1a",
        "etcd-pod-+1",
        ".etcd-pod-3.staging",
        "etcd-pod",
        "other-3",
        "etcd-pod-3.old",
    ] {
        assert_eq!(parse_revision_dir_name("etcd-pod", bad), None, "{bad}");
    }
    assert!(is_leftover_work(
        "etcd-pod",
        &staging_dir_name("etcd-pod", 4)
    ));
    assert!(is_leftover_work("etcd-pod", &old_dir_name("etcd-pod", 4)));
    assert!(!is_leftover_work("etcd-pod", "etcd-pod-4"));
    assert!(!is_leftover_work("etcd-pod", &lock_file_name("etcd-pod")));
    assert!(!is_leftover_work("etcd-pod", ".other-4.staging"));
    assert_eq!(
        installed_revision(
            "etcd-pod",
            ["etcd-pod-2", "etcd-pod-5", ".etcd-pod-9.staging", "x"],
            Some(4)
        ),
        Some(5)
    );
    assert_eq!(
        installed_revision("etcd-pod", ["etcd-pod-2"], Some(7)),
        Some(7)
    );
    assert_eq!(installed_revision("etcd-pod", [], None), None);
}

#[test]
fn a_tree_with_another_mode_or_an_extra_file_does_not_match() {
    let res = resources();
    let plan = plan(&input("n1", &res)).unwrap();
    let mut tree = plan.tree();
    tree.insert(
        PathBuf::from("secrets/etcd-all-certs/n1.key"),
        TreeEntry::File {
            mode: 0o644,
            bytes: b"secret".to_vec(),
        },
    );
    assert!(!plan.matches(&tree));
    let mut tree = plan.tree();
    tree.insert(PathBuf::from("extra"), TreeEntry::Other);
    assert!(!plan.matches(&tree));
}
