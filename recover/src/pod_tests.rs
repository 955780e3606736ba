//! Reading the operator's rendered static pod (its golden file) and rewriting it as a
//! one-member cluster.

use std::path::{Path, PathBuf};

use membership::MemberId;

use crate::pod::{self, EtcdPod, PodError};

const GOLDEN: &str = include_str!("../../operator/tests/golden/etcd-pod-master-1.yaml");
const ROOT: &str = "/srv/nodes/master-1";

fn read(text: &str) -> Result<EtcdPod, PodError> {
    EtcdPod::read(text.as_bytes(), Path::new("etcd-pod.yaml"), Path::new(ROOT))
}

fn env_of(p: &k8s_openapi::api::core::v1::Pod, container: &str, name: &str) -> Option<String> {
    let spec = p.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == container)?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

#[test]
fn host_paths_come_from_the_hostpath_volumes_below_the_node_root() {
    let p = read(GOLDEN).unwrap();
    assert_eq!(p.name, "master-1");
    assert_eq!(p.revision.as_deref(), Some("7"));
    assert_eq!(p.client_url.as_str(), "https://10.0.0.1:2379");
    assert_eq!(p.endpoints.len(), 3);
    assert_eq!(p.data_dir, PathBuf::from(ROOT).join("var/lib/etcd"));
    let tls = p.tls.unwrap();
    assert_eq!(
        tls.cert,
        PathBuf::from(ROOT).join(
            "etc/kubernetes/static-pod-resources/etcd-pod-7/secrets/etcd-all-certs/etcd-peer-master-1.crt"
        )
    );
    assert_eq!(
        tls.ca,
        PathBuf::from(ROOT).join(
            "etc/kubernetes/static-pod-resources/etcd-pod-7/configmaps/etcd-all-bundles/server-ca-bundle.crt"
        )
    );
}

#[test]
fn the_one_member_pod_names_only_this_member_and_forces_only_when_asked() {
    let current = read(GOLDEN).unwrap();
    let id = MemberId::new(0x1111).unwrap();
    let forced = pod::one_member(&current, id, true, "from-member T");
    for container in ["etcd-verify", "etcd"] {
        assert_eq!(
            env_of(&forced, container, "ETCD_INITIAL_CLUSTER").as_deref(),
            Some("master-1=https://10.0.0.1:2380"),
            "{container}"
        );
        assert_eq!(
            env_of(&forced, container, "ETCD_MEMBER_IDS").as_deref(),
            Some("1111=https://10.0.0.1:2380"),
            "{container}"
        );
        assert_eq!(
            env_of(&forced, container, "ETCDCTL_ENDPOINTS").as_deref(),
            Some("https://10.0.0.1:2379"),
            "{container}"
        );
        // Everything else is the revision's: the certificates, the data dir, the revision.
        assert_eq!(
            env_of(&forced, container, "ETCD_STATIC_POD_REVISION"),
            env_of(&current.pod, container, "ETCD_STATIC_POD_REVISION")
        );
    }
    assert!(pod::forces_new_cluster(&forced));
    assert_eq!(
        forced
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(pod::RECOVERY_ANNOTATION))
            .map(String::as_str),
        Some("from-member T")
    );
    // The normal start drops the flag, also from a pod that had it.
    let again = EtcdPod {
        pod: forced,
        ..current.clone()
    };
    let normal = pod::one_member(&again, id, false, "from-member T, normal");
    assert!(!pod::forces_new_cluster(&normal));
    assert_eq!(
        normal.spec.as_ref().map(|s| s.volumes.clone()),
        current.pod.spec.as_ref().map(|s| s.volumes.clone()),
        "same resource dir and data dir"
    );
}

#[test]
fn the_rendered_manifest_reads_back_as_the_same_pod() {
    let current = read(GOLDEN).unwrap();
    let id = MemberId::new(0x1111).unwrap();
    let forced = pod::one_member(&current, id, true, "from-member T");
    let text = pod::render(&forced, "written by a test\nsecond line").unwrap();
    assert!(
        text.starts_with("# written by a test\n# second line\n"),
        "{text}"
    );
    let back = read(&text).unwrap();
    assert_eq!(back.pod, forced);
    assert_eq!(back.member_ids.len(), 1);
}

#[test]
fn a_data_dir_outside_every_hostpath_volume_is_refused_by_name() {
    let text = GOLDEN.replace("value: \"/var/lib/etcd\"", "value: \"/somewhere/else\"");
    let e = read(&text).unwrap_err();
    assert!(
        matches!(
            &e,
            PodError::NotOnHost {
                what: "ETCD_DATA_DIR",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("/somewhere/else"), "{e}");
}

#[test]
fn a_path_that_climbs_out_of_its_volume_is_refused() {
    let text = GOLDEN.replace(
        "secrets/etcd-all-certs/etcd-peer-master-1.key",
        "secrets/../../../../etc/shadow",
    );
    assert!(matches!(
        read(&text),
        Err(PodError::NotOnHost {
            what: "ETCDCTL_KEY",
            ..
        })
    ));
    assert_eq!(pod::below_root(Path::new(ROOT), Path::new("/a/../b")), None);
    assert_eq!(
        pod::below_root(Path::new(ROOT), Path::new("relative")),
        None
    );
}

#[test]
fn a_broken_manifest_or_contract_names_the_file_and_the_variable() {
    let e = read("kind: ConfigMap\n").unwrap_err();
    assert!(e.to_string().contains("etcd-pod.yaml"), "{e}");
    let text = GOLDEN.replace("ETCD_MEMBER_IDS", "ETCD_MEMBER_IDZ");
    let e = read(&text).unwrap_err();
    assert!(e.to_string().contains("ETCD_MEMBER_IDS"), "{e}");
}

mod restore_phase {
    use std::path::{Path, PathBuf};

    use super::{GOLDEN, env_of, read};
    use crate::restore::{self, RESTORE_CONTAINER, RestoreSpec, SNAPSHOT_MOUNT};
    use crate::snapshot::restore_tool;

    fn spec(bump: Option<u64>) -> RestoreSpec {
        RestoreSpec {
            stamp: "20261126T010203Z".into(),
            tool: restore_tool("registry.example/etcd:3.4.23").unwrap(),
            bump,
            snapshot_node_path: PathBuf::from(
                "/var/lib/etcd-recovery/20261126T010203Z/snapshot.db",
            ),
            member_id: restore::restored_member_id(&["https://10.0.0.1:2380"], "t").unwrap(),
        }
    }

    #[test]
    fn the_restore_runs_first_with_the_etcd_image_and_etcd_starts_on_its_output() {
        let current = read(GOLDEN).unwrap();
        let p = restore::restore_phase(&current, Path::new("/var/lib/etcd"), &spec(None));
        let s = p.spec.as_ref().unwrap();
        let inits: Vec<&str> = s
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(inits, [RESTORE_CONTAINER, "etcd-verify"]);
        let r = &s.init_containers.as_ref().unwrap()[0];
        assert_eq!(r.image.as_deref(), Some("registry.example/etcd:3.4.23"));
        let command = r.command.clone().unwrap();
        assert_eq!(
            command[..4],
            ["etcdctl", "snapshot", "restore", SNAPSHOT_MOUNT]
        );
        assert!(command.contains(&"--data-dir=/var/lib/etcd/restore-20261126T010203Z".to_owned()));
        assert!(command.contains(&"--initial-cluster=master-1=https://10.0.0.1:2380".to_owned()));
        assert!(
            command.contains(&"--initial-cluster-token=etcd-recover-20261126T010203Z".to_owned())
        );
        assert!(!command.iter().any(|a| a.starts_with("--bump-revision")));
        assert!(
            r.env.is_none(),
            "no ETCDCTL_* variable reaches the restore tool"
        );
        for c in ["etcd-verify", "etcd"] {
            assert_eq!(
                env_of(&p, c, "ETCD_DATA_DIR").as_deref(),
                Some("/var/lib/etcd/restore-20261126T010203Z"),
                "{c}"
            );
        }
        let snapshot_volume = s
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "recovery-snapshot")
            .and_then(|v| v.host_path.clone())
            .unwrap();
        assert_eq!(
            snapshot_volume.path,
            "/var/lib/etcd-recovery/20261126T010203Z/snapshot.db"
        );
        assert_eq!(snapshot_volume.type_.as_deref(), Some("File"));
    }

    #[test]
    fn the_restored_cluster_s_manifests_carry_the_restore_s_token() {
        // The golden revision carries no token (a cluster made with etcd's default one); both
        // manifests of the restore name the restore's, so the operator learns the new cluster's
        // token from them, and the member id it gives is the restored member's.
        let current = read(GOLDEN).unwrap();
        let stamp = "20261126T010203Z";
        assert_eq!(
            env_of(&current.pod, "etcd", "ETCD_INITIAL_CLUSTER_TOKEN"),
            None
        );
        let id = restore::member_id_for(&current, stamp).unwrap();
        let phase = restore::restore_phase(&current, Path::new("/var/lib/etcd"), &spec(None));
        let normal = restore::restored_member_pod(&current, id, stamp, "normal start");
        for p in [&phase, &normal] {
            for c in ["etcd-verify", "etcd"] {
                let token = env_of(p, c, "ETCD_INITIAL_CLUSTER_TOKEN");
                assert_eq!(
                    token.as_deref(),
                    Some("etcd-recover-20261126T010203Z"),
                    "{c}"
                );
                assert_eq!(
                    membership::new_cluster_member_id(
                        &["https://10.0.0.1:2380"],
                        &token.unwrap_or_default()
                    ),
                    Some(id)
                );
            }
        }
        // Read back as a manifest, the contract still parses (the variable sits in name order).
        let text = crate::pod::render(&normal, "test").unwrap();
        let again = read(&text).unwrap();
        assert_eq!(again.member_ids.len(), 1);
    }

    #[test]
    fn a_bumping_tool_gets_the_bump_flags() {
        let current = read(GOLDEN).unwrap();
        let mut s = spec(Some(1_234_567_890));
        s.tool = restore_tool("registry.k8s.io/etcd:3.5.16-0").unwrap();
        let p = restore::restore_phase(&current, Path::new("/var/lib/etcd"), &s);
        let command = p.spec.unwrap().init_containers.unwrap()[0]
            .command
            .clone()
            .unwrap();
        assert_eq!(command[0], "etcdutl");
        assert!(command.contains(&"--bump-revision=1234567890".to_owned()));
        assert!(command.contains(&"--mark-compacted".to_owned()));
    }

    #[test]
    fn the_tool_and_its_revision_bump_follow_the_image_version() {
        let t = |image: &str| restore_tool(image).map(|t| (t.binary, t.bumps_revision));
        assert_eq!(t("etcd:3.4.23"), Ok(("etcdctl", false)));
        assert_eq!(t("quay.io/coreos/etcd:v3.5.1"), Ok(("etcdutl", false)));
        assert_eq!(t("registry.k8s.io/etcd:3.5.9-0"), Ok(("etcdutl", false)));
        assert_eq!(t("registry.k8s.io/etcd:3.5.10-0"), Ok(("etcdutl", true)));
        assert_eq!(
            t("gcr.io/etcd-development/etcd:v3.6.4"),
            Ok(("etcdutl", true))
        );
        assert_eq!(t("etcd:3.5.16@sha256:abcd"), Ok(("etcdutl", true)));
        assert!(t("etcd").is_err());
        assert!(t("etcd:latest").is_err());
        assert!(t("etcd:3.3.27").is_err());
        assert!(t("registry:5000/etcd").is_err());
    }
}

#[test]
fn a_moved_pod_listens_advertises_and_probes_at_the_new_address_only() {
    use crate::readdress;
    let current = read(GOLDEN).unwrap();
    let ip: std::net::IpAddr = "10.9.9.9".parse().unwrap();
    assert!(!readdress::already_at(&current, ip));
    let resources = Path::new("/var/lib/etcd-recovery/T/resources");
    let readdress::Moved {
        pod: moved,
        tls_from,
        tls_to,
    } = readdress::moved(&current, ip, Path::new(ROOT), resources).unwrap();
    assert_eq!(
        tls_from,
        PathBuf::from(ROOT).join("etc/kubernetes/static-pod-resources/etcd-pod-7")
    );
    assert_eq!(
        tls_to,
        PathBuf::from(ROOT).join("var/lib/etcd-recovery/T/resources")
    );
    assert!(readdress::already_at(&moved, ip));
    assert_eq!(moved.peer_url.as_str(), "https://10.9.9.9:2380");
    assert_eq!(moved.client_url.as_str(), "https://10.9.9.9:2379");
    let one = pod::one_member(&moved, MemberId::new(0x1111).unwrap(), true, "T");
    let text = pod::render(&one, "T").unwrap();
    assert!(
        !text.contains("10.0.0.1:") && !text.contains("\"10.0.0.1\""),
        "{text}"
    );
    for want in [
        "--listen-client-urls=https://10.9.9.9:2379,https://127.0.0.1:2379,https://[::1]:2379",
        "--listen-peer-urls=https://10.9.9.9:2380",
        "--listen-metrics-urls=http://127.0.0.1:2382",
        "--listen=10.9.9.9:2381",
        "master-1=https://10.9.9.9:2380",
        "1111=https://10.9.9.9:2380",
        "/var/lib/etcd-recovery/T/resources",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    let probes: Vec<String> = one.spec.as_ref().unwrap().containers[0]
        .readiness_probe
        .iter()
        .chain(&one.spec.as_ref().unwrap().containers[0].startup_probe)
        .filter_map(|p| {
            p.http_get
                .as_ref()
                .and_then(|h| h.host.clone())
                .or_else(|| p.tcp_socket.as_ref().and_then(|t| t.host.clone()))
        })
        .collect();
    assert_eq!(probes, ["127.0.0.1", "10.9.9.9"]);
    let tls = moved.tls.unwrap();
    assert_eq!(
        tls.cert,
        PathBuf::from(ROOT).join(
            "var/lib/etcd-recovery/T/resources/secrets/etcd-all-certs/etcd-peer-master-1.crt"
        )
    );
    assert_eq!(
        tls.ca,
        PathBuf::from(ROOT).join(
            "var/lib/etcd-recovery/T/resources/configmaps/etcd-all-bundles/server-ca-bundle.crt"
        )
    );
}

#[test]
fn only_url_hosts_equal_to_the_old_address_move() {
    let current = read(&GOLDEN.replace(
        "- --listen-peer-urls=https://10.0.0.1:2380",
        "- --listen-peer-urls=https://10.0.0.1:2380\n    - --note=https://10.0.0.12:1/10.0.0.1:2",
    ))
    .unwrap();
    let ip: std::net::IpAddr = "fd00::9".parse().unwrap();
    let moved = crate::readdress::moved(
        &current,
        ip,
        Path::new(ROOT),
        Path::new("/var/lib/etcd-recovery/T/resources"),
    )
    .unwrap()
    .pod;
    assert_eq!(moved.peer_url.as_str(), "https://[fd00::9]:2380");
    let text = pod::render(&moved.pod, "T").unwrap();
    assert!(
        text.contains("--note=https://10.0.0.12:1/10.0.0.1:2"),
        "{text}"
    );
    assert!(
        text.contains("--listen-peer-urls=https://[fd00::9]:2380"),
        "{text}"
    );
}
