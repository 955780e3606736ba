use super::*;

fn data(v: &str) -> Data {
    BTreeMap::from([("k".to_owned(), v.as_bytes().to_vec())])
}

fn sources(pod: &str, certs: &str) -> Sources {
    Sources {
        by_name: BTreeMap::from([
            ("etcd-pod".to_owned(), data(pod)),
            ("etcd-all-certs".to_owned(), data(certs)),
        ]),
    }
}

fn revision(n: i64, pod: &str, certs: &str) -> FoundRevision {
    let s = sources(pod, certs);
    FoundRevision {
        number: n,
        status: Some(s.fingerprints()),
        copies: s.by_name.keys().cloned().collect(),
    }
}

fn view<'a>(
    s: &'a Sources,
    found: &'a [FoundRevision],
    published: i64,
    in_use: &'a InUse,
) -> RevisionView<'a> {
    RevisionView {
        sources: s,
        found,
        published,
        on_nodes: 0,
        in_use,
        limits: Limits {
            succeeded: 2,
            failed: 1,
        },
    }
}

#[test]
fn first_revision_then_only_on_real_change() {
    let s = sources("a", "x");
    let none = InUse::default();
    assert_eq!(
        decide(&view(&s, &[], 0, &none)),
        RevisionStep::Create {
            number: 1,
            reason: "no revision yet".into()
        }
    );
    let found = [revision(1, "a", "x")];
    assert_eq!(
        decide(&view(&s, &found, 0, &none)),
        RevisionStep::Publish { number: 1 }
    );
    assert_eq!(decide(&view(&s, &found, 1, &none)), RevisionStep::None);
    let changed = sources("a", "y");
    assert_eq!(
        decide(&view(&changed, &found, 1, &none)),
        RevisionStep::Create {
            number: 2,
            reason: "etcd-all-certs changed".into()
        }
    );
}

#[test]
fn a_published_revision_that_lost_a_copy_is_superseded_never_deleted() {
    let s = sources("b", "x");
    let mut lost = revision(2, "b", "x");
    lost.copies.remove("etcd-all-certs");
    let found = [revision(1, "a", "x"), lost.clone()];
    let none = InUse::default();
    // Published: a new revision, whatever the sources say; revision 2 stays.
    match decide(&view(&s, &found, 2, &none)) {
        RevisionStep::Create { number: 3, reason } => assert!(
            reason.contains("revision 2 was published and lost etcd-all-certs"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // Not published, but a node runs it (the status write was lost) or moves to it.
    let mut on_node = view(&s, &found, 1, &none);
    on_node.on_nodes = 2;
    assert!(matches!(
        decide(&on_node),
        RevisionStep::Create { number: 3, .. }
    ));
    let targeted = InUse {
        nodes: BTreeSet::from([2]),
        failed: vec![],
    };
    assert!(matches!(
        decide(&view(&s, &found, 1, &targeted)),
        RevisionStep::Create { number: 3, .. }
    ));
    // Once revision 3 is complete, revision 2 is no longer the broken latest: 3 is published.
    let found = [revision(1, "a", "x"), lost, revision(3, "b", "x")];
    assert_eq!(
        decide(&view(&s, &found, 2, &none)),
        RevisionStep::Publish { number: 3 }
    );
}

#[test]
fn a_crash_mid_creation_is_discarded_and_redone() {
    let s = sources("b", "x");
    let mut partial = revision(2, "b", "x");
    partial.copies.remove("etcd-all-certs");
    let found = [revision(1, "a", "x"), partial];
    let in_use = InUse::default();
    match decide(&view(&s, &found, 1, &in_use)) {
        RevisionStep::Discard { number: 2, reason } => {
            assert!(reason.contains("missing etcd-all-certs"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // Copies without a status (crash after deleting the status) are discarded too.
    let mut orphan = revision(2, "b", "x");
    orphan.status = None;
    let found = [revision(1, "a", "x"), orphan];
    assert!(matches!(
        decide(&view(&s, &found, 1, &in_use)),
        RevisionStep::Discard { number: 2, .. }
    ));
    // After the discard, revision 2 is created again from the current sources.
    let found = [revision(1, "a", "x")];
    assert!(matches!(
        decide(&view(&s, &found, 1, &in_use)),
        RevisionStep::Create { number: 2, .. }
    ));
}

#[test]
fn numbers_never_go_back_even_if_status_is_ahead() {
    let s = sources("c", "x");
    let found = [revision(3, "a", "x")];
    assert!(matches!(
        decide(&view(&s, &found, 5, &InUse::default())),
        RevisionStep::Create { number: 6, .. }
    ));
}

/// After a restore from a snapshot the API knows revisions 1..=2 and publishes 2, while the
/// nodes run 4 (two rollouts after the snapshot): the next revision is 5, not 3, which the nodes
/// would count as installed-below and refuse (measured: `refusing revision 3: revision 4 is
/// already installed`, the cluster left at one member).
#[test]
fn numbers_go_above_every_revision_a_node_runs() {
    let s = sources("c", "x");
    let found = [revision(1, "a", "x"), revision(2, "b", "x")];
    let none = InUse::default();
    let restored = RevisionView {
        on_nodes: 4,
        ..view(&s, &found, 2, &none)
    };
    assert!(matches!(
        decide(&restored),
        RevisionStep::Create { number: 5, .. }
    ));
    // A forged label beyond any history is not followed past the bound, nor overflows.
    let forged = RevisionView {
        on_nodes: i64::MAX,
        ..view(&s, &found, 2, &none)
    };
    assert!(matches!(
        decide(&forged),
        RevisionStep::Create { number, .. } if number == MAX_NODE_REVISION + 1
    ));
    // Nodes behind the API change nothing.
    let behind = RevisionView {
        on_nodes: 1,
        ..view(&s, &found, 2, &none)
    };
    assert!(matches!(
        decide(&behind),
        RevisionStep::Create { number: 3, .. }
    ));
}

#[test]
fn fingerprints_are_stable_and_sensitive() {
    let a = data("v");
    assert_eq!(fingerprint(&a), fingerprint(&data("v")));
    assert_ne!(fingerprint(&a), fingerprint(&data("w")));
    // Key/value boundaries matter.
    let ab = BTreeMap::from([("ab".to_owned(), b"c".to_vec())]);
    let a_bc = BTreeMap::from([("a".to_owned(), b"bc".to_vec())]);
    assert_ne!(fingerprint(&ab), fingerprint(&a_bc));
}

#[test]
fn prunes_beyond_limits_but_keeps_what_nodes_use() {
    let s = sources("e", "x");
    let found: Vec<FoundRevision> = (1..=6)
        .map(|n| revision(n, if n == 6 { "e" } else { "old" }, "x"))
        .collect();
    let in_use = InUse {
        nodes: BTreeSet::from([2]),
        failed: vec![3, 1],
    };
    // Keep: 6 (latest), 5 (second newest), 2 (a node is on it), 3 (newest failure).
    assert_eq!(
        decide(&view(&s, &found, 6, &in_use)),
        RevisionStep::Prune {
            numbers: vec![1, 4]
        }
    );
}

fn meta(
    ns: Option<&str>,
    name: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.to_owned()),
        namespace: ns.map(str::to_owned),
        ..Default::default()
    }
}

fn cm(ns: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: meta(Some(ns), name),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn secret(ns: Option<&str>, name: &str) -> Secret {
    Secret {
        metadata: meta(ns, name),
        ..Default::default()
    }
}

/// A complete revision `n` in namespace `ns`: status (with extra keys) and the three copies.
fn complete(ns: &str, n: i64) -> (Vec<ConfigMap>, Vec<Secret>) {
    (
        vec![
            cm(
                ns,
                &format!("revision-status-{n}"),
                &[
                    ("etcd-pod", "fp-pod"),
                    ("etcd-all-bundles", "fp-bundles"),
                    ("etcd-all-certs", "fp-certs"),
                    ("revision", "ignored"),
                    ("reason", "ignored"),
                ],
            ),
            cm(ns, &format!("etcd-pod-{n}"), &[("pod-n1.yaml", "x")]),
            cm(ns, &format!("etcd-all-bundles-{n}"), &[]),
        ],
        vec![secret(Some(ns), &format!("etcd-all-certs-{n}"))],
    )
}

fn found(n: i64, status: Option<&[(&str, &str)]>, copies: &[&str]) -> FoundRevision {
    FoundRevision {
        number: n,
        status: status.map(|s| {
            s.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        }),
        copies: copies.iter().map(|c| (*c).to_owned()).collect(),
    }
}

const ALL_COPIES: [&str; 3] = ["etcd-all-bundles", "etcd-all-certs", "etcd-pod"];
const ALL_FPS: [(&str, &str); 3] = [
    ("etcd-all-bundles", "fp-bundles"),
    ("etcd-all-certs", "fp-certs"),
    ("etcd-pod", "fp-pod"),
];

/// (name, configmaps, secrets, expected)
type FoundCase = (
    &'static str,
    Vec<ConfigMap>,
    Vec<Secret>,
    Vec<FoundRevision>,
);

#[test]
fn found_revisions_table() {
    let (cms3, secrets3) = complete("etcd", 3);
    let (cms_other, secrets_other) = complete("kube-system", 4);
    let (cms10, secrets10) = complete("etcd", 10);
    let (cms2, secrets2) = complete("etcd", 2);
    let cases: Vec<FoundCase> = vec![
        ("nothing", vec![], vec![], vec![]),
        (
            "a complete revision: status fingerprints only, every copy",
            cms3.clone(),
            secrets3.clone(),
            vec![found(3, Some(&ALL_FPS), &ALL_COPIES)],
        ),
        (
            "a status without data",
            vec![ConfigMap {
                metadata: meta(Some("etcd"), "revision-status-5"),
                ..Default::default()
            }],
            vec![],
            vec![found(5, Some(&[]), &[])],
        ),
        (
            "copies without a status",
            cms3[1..].to_vec(),
            secrets3.clone(),
            vec![found(3, None, &ALL_COPIES)],
        ),
        (
            "only the certs copy",
            vec![],
            secrets3.clone(),
            vec![found(3, None, &["etcd-all-certs"])],
        ),
        (
            "objects of other namespaces (or none) are ignored",
            cms_other,
            {
                let mut s = secrets_other;
                s.push(secret(None, "etcd-all-certs-6"));
                s
            },
            vec![],
        ),
        (
            "unrelated names are ignored",
            vec![
                cm("etcd", "etcd-pod", &[("pod-n1.yaml", "x")]),
                cm("etcd", "etcd-all-bundles", &[]),
                cm("etcd", "etcd-pod-x", &[]),
                cm("etcd", "etcd-pod-", &[]),
                cm("etcd", "etcd-pod7", &[]),
                cm("etcd", "etcd-podx-7", &[]),
                cm("etcd", "revision-status-", &[]),
                cm("etcd", "revision-status-abc", &[]),
                cm("etcd", "revision-status", &[]),
                cm("etcd", "kube-root-ca.crt", &[]),
                // A certs copy is a Secret, never a ConfigMap.
                cm("etcd", "etcd-all-certs-7", &[]),
            ],
            vec![
                secret(Some("etcd"), "etcd-all-certs"),
                // Pod and bundle copies are ConfigMaps, never Secrets.
                secret(Some("etcd"), "etcd-pod-7"),
                secret(Some("etcd"), "etcd-all-bundles-7"),
                secret(Some("etcd"), "revision-status-7"),
            ],
            vec![],
        ),
        (
            "several revisions, sorted by number (not by name)",
            [cms10, cms2].concat(),
            [secrets10, secrets2].concat(),
            vec![
                found(2, Some(&ALL_FPS), &ALL_COPIES),
                found(10, Some(&ALL_FPS), &ALL_COPIES),
            ],
        ),
    ];
    for (name, configmaps, secrets, want) in cases {
        assert_eq!(found_revisions(&configmaps, &secrets), want, "case: {name}");
    }
}

fn node_status(
    name: &str,
    current: i64,
    target: Option<i64>,
    failed: Option<i64>,
) -> crate::api::NodeStatus {
    crate::api::NodeStatus {
        node_name: name.to_owned(),
        current_revision: current,
        target_revision: target,
        last_failed_revision: failed,
        ..Default::default()
    }
}

#[test]
fn in_use_table() {
    let cases: Vec<(&str, Vec<crate::api::NodeStatus>, InUse)> = vec![
        ("no nodes", vec![], InUse::default()),
        (
            "current revisions",
            vec![
                node_status("n1", 3, None, None),
                node_status("n2", 3, None, None),
            ],
            InUse {
                nodes: BTreeSet::from([3]),
                failed: vec![],
            },
        ),
        (
            "current and target revisions",
            vec![
                node_status("n1", 3, Some(5), None),
                node_status("n2", 4, None, None),
            ],
            InUse {
                nodes: BTreeSet::from([3, 4, 5]),
                failed: vec![],
            },
        ),
        (
            "failed revisions newest first, not counted as in use",
            vec![
                node_status("n1", 3, None, Some(5)),
                node_status("n2", 3, None, Some(7)),
                node_status("n3", 3, Some(8), Some(6)),
            ],
            InUse {
                nodes: BTreeSet::from([3, 8]),
                failed: vec![7, 6, 5],
            },
        ),
        (
            "two nodes failed on one revision: it counts once",
            vec![
                node_status("n1", 3, None, Some(7)),
                node_status("n2", 3, None, Some(7)),
                node_status("n3", 3, None, Some(5)),
            ],
            InUse {
                nodes: BTreeSet::from([3]),
                failed: vec![7, 5],
            },
        ),
    ];
    for (name, statuses, want) in cases {
        assert_eq!(in_use(&statuses), want, "case: {name}");
    }
}

#[test]
fn describe_each_step() {
    let cases: Vec<(RevisionStep, i64, &str)> = vec![
        (
            RevisionStep::None,
            4,
            "revision 4 is the latest and matches the sources",
        ),
        (
            RevisionStep::Publish { number: 5 },
            4,
            "publish revision 5 as the latest",
        ),
        (
            RevisionStep::Create {
                number: 6,
                reason: "etcd-pod changed".into(),
            },
            5,
            "create revision 6: etcd-pod changed",
        ),
        (
            RevisionStep::Discard {
                number: 2,
                reason: "revision 2 is incomplete (missing etcd-all-certs)".into(),
            },
            1,
            "discard revision 2: revision 2 is incomplete (missing etcd-all-certs)",
        ),
        (
            RevisionStep::Prune {
                numbers: vec![1, 3],
            },
            6,
            "prune revisions [1, 3]",
        ),
    ];
    for (step, latest, want) in cases {
        assert_eq!(describe(&step, latest), want, "step: {step:?}");
    }
}
