//! Rendering: golden files, determinism, the env contract.

use std::net::{IpAddr, Ipv4Addr};

use membership::{Member, MemberId, MemberUrl};

use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn node(i: u8) -> NodeTarget {
    NodeTarget::new(
        &format!("master-{i}"),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)),
    )
}

fn url(s: String) -> MemberUrl {
    s.parse().unwrap()
}

fn voter(i: u8, id: u64) -> Member {
    Member::voter(
        MemberId::new(id).unwrap(),
        &format!("master-{i}"),
        url(format!("https://10.0.0.{i}:2380")),
    )
    .with_client_url(url(format!("https://10.0.0.{i}:2379")))
}

fn images() -> Images {
    Images {
        etcd: "registry.example/etcd:3.4.23".into(),
        operator: "registry.example/etcd-static-operator:0.1.0".into(),
    }
}

/// master-1 and master-2 are voters; master-3 was just added as a learner and has not started.
fn scale_up_members() -> Vec<Member> {
    vec![
        voter(1, 0x1111),
        voter(2, 0x2222),
        Member::unstarted_learner(
            MemberId::new(0x3333).unwrap(),
            url("https://10.0.0.3:2380".into()),
        ),
    ]
}

fn render_for(n: u8, members: &[Member], spec: &EtcdClusterSpec) -> String {
    try_render_for(n, members, spec).unwrap()
}

fn try_render_for(
    n: u8,
    members: &[Member],
    spec: &EtcdClusterSpec,
) -> Result<String, RenderError> {
    let nodes = [node(1), node(2), node(3)];
    let imgs = images();
    render_pod(&PodInput {
        node: &nodes[usize::from(n - 1)],
        nodes: &nodes,
        members,
        revision: Some(7),
        bootstrap: false,
        cluster_token: None,
        spec,
        images: &imgs,
        resource_host_dir: None,
    })
}

fn check_golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "{name} differs from the golden file; UPDATE_GOLDEN=1 regenerates it"
    );
}

#[test]
fn golden_learner_node() {
    check_golden(
        "etcd-pod-master-3.yaml",
        &render_for(3, &scale_up_members(), &EtcdClusterSpec::default()),
    );
}

#[test]
fn golden_voter_node() {
    check_golden(
        "etcd-pod-master-1.yaml",
        &render_for(1, &scale_up_members(), &EtcdClusterSpec::default()),
    );
}

#[test]
fn rendering_is_deterministic() {
    let spec = EtcdClusterSpec::default();
    let mut shuffled = scale_up_members();
    shuffled.reverse();
    assert_eq!(
        render_for(2, &scale_up_members(), &spec),
        render_for(2, &shuffled, &spec)
    );
}

/// The learner of [`scale_up_members`] once it started, and once it was promoted.
fn learner_started(promoted: bool) -> Vec<Member> {
    let mut members = scale_up_members();
    members[2] = Member {
        name: "master-3".into(),
        client_urls: vec![url("https://10.0.0.3:2379".into())],
        is_learner: !promoted,
        ..members[2].clone()
    };
    members
}

#[test]
fn a_learner_starting_or_promoted_changes_no_manifest() {
    let spec = EtcdClusterSpec::default();
    for n in 1..=3 {
        let added = render_for(n, &scale_up_members(), &spec);
        assert_eq!(
            added,
            render_for(n, &learner_started(false), &spec),
            "master-{n}: start"
        );
        assert_eq!(
            added,
            render_for(n, &learner_started(true), &spec),
            "master-{n}: promotion"
        );
    }
}

#[test]
fn env_follows_the_contract() {
    let nodes = [node(1), node(2), node(3)];
    let certs = paths::CertPaths::for_node("master-3");
    let env = contract_env(&EnvInput {
        node: &nodes[2],
        nodes: &nodes,
        members: &scale_up_members(),
        revision: "7",
        bootstrap: false,
        cluster_token: None,
        certs: &certs,
    })
    .unwrap();
    assert_eq!(
        env["ETCD_INITIAL_CLUSTER"],
        "master-1=https://10.0.0.1:2380,master-2=https://10.0.0.2:2380,master-3=https://10.0.0.3:2380"
    );
    assert_eq!(
        env["ETCD_MEMBER_IDS"],
        "1111=https://10.0.0.1:2380,2222=https://10.0.0.2:2380,3333=https://10.0.0.3:2380"
    );
    // Every member, the unstarted learner by its node's URL, so neither its start nor its
    // promotion changes the manifest (clients skip learners).
    assert_eq!(
        env["ETCDCTL_ENDPOINTS"],
        "https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379"
    );
    assert_eq!(env["ETCD_INITIAL_CLUSTER_STATE"], "existing");
    assert_eq!(env["ETCD_STATIC_POD_REVISION"], "7");
    let keys: Vec<&String> = env.keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

#[test]
fn the_rendered_pod_parses_with_the_contract_in_both_containers() {
    let text = render_for(3, &scale_up_members(), &EtcdClusterSpec::default());
    let pod = parse_pod(&text).unwrap();
    let spec = pod.spec.unwrap();
    let init = &spec.init_containers.unwrap()[0];
    assert_eq!(init.name, "etcd-verify");
    assert_eq!(
        init.command.as_ref().unwrap()[..2],
        ["etcd-verify".to_owned(), "membership".to_owned()]
    );
    let etcd = &spec.containers[0];
    let env_of = |c: &k8s_openapi::api::core::v1::Container| {
        c.env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    assert_eq!(env_of(init), env_of(etcd));
    assert!(env_of(etcd).contains(&("ETCD_NAME".into(), "master-3".into())));
    assert_eq!(spec.host_network, Some(true));
    let volumes = spec.volumes.unwrap();
    assert_eq!(
        volumes[0].host_path.as_ref().unwrap().path,
        "/etc/kubernetes/static-pod-resources/etcd-pod-7"
    );
}

#[test]
fn a_force_redeployment_reason_changes_every_manifest() {
    let plain = render_for(1, &scale_up_members(), &EtcdClusterSpec::default());
    let spec = EtcdClusterSpec {
        force_redeployment_reason: "rotate disks".into(),
        ..Default::default()
    };
    let forced = render_for(1, &scale_up_members(), &spec);
    assert_ne!(plain, forced);
    assert!(forced.contains("force-redeployment-reason: \"rotate disks\""));
}

#[test]
fn the_local_client_listener_and_auto_compaction() {
    let on = render_for(1, &scale_up_members(), &EtcdClusterSpec::default());
    assert!(on.contains(
        "- --listen-client-urls=https://10.0.0.1:2379,https://127.0.0.1:2379,https://[::1]:2379\n"
    ));
    assert!(
        on.contains("- --auto-compaction-mode=periodic\n    - --auto-compaction-retention=1h\n")
    );
    let spec = EtcdClusterSpec {
        local_client_listener: false,
        ..Default::default()
    };
    let off = render_for(1, &scale_up_members(), &spec);
    assert!(off.contains("- --listen-client-urls=https://10.0.0.1:2379\n"));
    assert!(!off.contains("127.0.0.1:2379"));
    assert!(!off.contains("[::1]:2379"));
}

/// Both loopback listeners, never the node's own address twice (etcd would fail to bind it).
#[test]
fn the_local_client_listener_serves_both_loopbacks_once() {
    let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
    let urls = |node: &str, on: bool| listen_client_urls(&NodeTarget::new("n1", ip(node)), on);
    assert_eq!(
        urls("10.0.0.1", true),
        [
            "https://10.0.0.1:2379",
            "https://127.0.0.1:2379",
            "https://[::1]:2379"
        ]
    );
    assert_eq!(
        urls("fd00::1", true),
        [
            "https://[fd00::1]:2379",
            "https://127.0.0.1:2379",
            "https://[::1]:2379"
        ]
    );
    assert_eq!(
        urls("::1", true),
        ["https://[::1]:2379", "https://127.0.0.1:2379"]
    );
    assert_eq!(
        urls("127.0.0.1", true),
        ["https://127.0.0.1:2379", "https://[::1]:2379"]
    );
    assert_eq!(urls("10.0.0.1", false), ["https://10.0.0.1:2379"]);
}

#[test]
fn hostile_values_stay_quoted() {
    let spec = EtcdClusterSpec {
        etcd_image: Some("etcd:latest\"\n  injected: yes #".into()),
        ..Default::default()
    };
    let text = render_for(1, &scale_up_members(), &spec);
    let pod = parse_pod(&text).unwrap();
    assert_eq!(
        pod.spec.unwrap().containers[0].image.as_deref(),
        Some("etcd:latest\"\n  injected: yes #")
    );
    // A tag that starts like a version but is not one is not rendered at all.
    let spec = EtcdClusterSpec {
        etcd_image: Some("etcd:3.4\"\n  injected: yes #".into()),
        ..Default::default()
    };
    let e = try_render_for(1, &scale_up_members(), &spec).unwrap_err();
    assert!(
        matches!(
            e,
            RenderError::EtcdVersion(VersionError::UnreadableTag { .. })
        ),
        "{e}"
    );
}

fn with_image(image: &str) -> EtcdClusterSpec {
    EtcdClusterSpec {
        etcd_image: Some(image.into()),
        ..Default::default()
    }
}

/// One golden file per etcd minor: 3.4 is `etcd-pod-master-1.yaml` (the default image, 3.4.23);
/// 3.6 and 3.7 are also run (scenario `upgrade-minors`); here their renders are pinned.
#[test]
fn golden_voter_node_per_minor() {
    for (minor, image) in [
        ("3.5", "registry.example/etcd:3.5.16"),
        ("3.6", "registry.example/etcd:3.6.6"),
        ("3.7", "registry.example/etcd:3.7.0"),
    ] {
        check_golden(
            &format!("etcd-pod-master-1-etcd{minor}.yaml"),
            &render_for(1, &scale_up_members(), &with_image(image)),
        );
    }
}

#[test]
fn minors_without_known_flags_are_not_rendered() {
    for image in ["etcd:3.3.27", "etcd:3.8.0", "etcd:3.5"] {
        let e = try_render_for(1, &scale_up_members(), &with_image(image)).unwrap_err();
        assert!(matches!(e, RenderError::EtcdVersion(_)), "{image}: {e}");
    }
}

#[test]
fn bootstrap_render_starts_a_new_single_member_cluster() {
    let nodes = [node(1)];
    let imgs = images();
    let text = render_pod(&PodInput {
        node: &nodes[0],
        nodes: &nodes,
        members: &[],
        revision: Some(0),
        bootstrap: true,
        cluster_token: Some("etcd-test-token"),
        spec: &EtcdClusterSpec::default(),
        images: &imgs,
        resource_host_dir: Some("/etc/kubernetes/bootstrap/etcd-certs".into()),
    })
    .unwrap();
    assert!(text.contains("value: \"new\""));
    assert!(text.contains("- name: ETCD_MEMBER_IDS\n      value: \"\""));
    assert!(text.contains("- name: ETCDCTL_ENDPOINTS\n      value: \"https://10.0.0.1:2379\""));
}

#[test]
fn installer_pod_is_pinned_and_names_the_revision() {
    let pod = render_installer("master-2", 5, 3, &images()).unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("installer-5-master-2-3"));
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("master-2"));
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    let args = spec.containers[0].args.clone().unwrap();
    assert!(args.contains(&"--revision=5".to_owned()));
    assert!(args.contains(&"--node-name=master-2".to_owned()));
    assert!(
        args.contains(&"--approval-window=30s".to_owned()),
        "a restart waits for the operator's approval: {args:?}"
    );
    assert!(
        args.contains(&"--own-key-prefixes=etcd-peer,etcd-serving,etcd-serving-metrics".to_owned()),
        "a node gets only its own private keys: {args:?}"
    );
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels["revision"], "5");
    assert_eq!(labels["attempt"], "3");
}

#[test]
fn the_source_carries_a_token_the_revision_replaces() {
    let nodes = [node(1), node(2), node(3)];
    let imgs = images();
    let spec = EtcdClusterSpec::default();
    let source = render_pod(&PodInput {
        node: &nodes[0],
        nodes: &nodes,
        members: &scale_up_members(),
        revision: None,
        bootstrap: false,
        cluster_token: None,
        spec: &spec,
        images: &imgs,
        resource_host_dir: None,
    })
    .unwrap();
    assert!(source.contains(REVISION_TOKEN));
    assert_eq!(
        substitute_revision(&source, 7),
        render_for(1, &scale_up_members(), &spec)
    );
}

#[test]
fn golden_guard_pod() {
    let pod = render_guard(&node(1), &images(), true).unwrap();
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("master-1"));
    let probe = spec.containers[0].readiness_probe.as_ref().unwrap();
    let get = probe.http_get.as_ref().unwrap();
    assert_eq!(
        (get.host.as_deref(), get.path.as_deref()),
        (Some("127.0.0.1"), Some("/health")),
        "the node's own loopback: the plain health listener is nowhere else"
    );
    assert_eq!(get.port, IntOrString::Int(2382));
    let shared = render_guard(&node(1), &images(), false).unwrap();
    let get = shared.spec.unwrap().containers[0]
        .readiness_probe
        .clone()
        .unwrap()
        .http_get
        .unwrap();
    assert_eq!(
        get.host.as_deref(),
        Some("10.0.0.1"),
        "nodes sharing one network namespace"
    );
    check_golden(
        "guard-pod-master-1.json",
        &format!("{}\n", serde_json::to_string_pretty(&pod).unwrap()),
    );
}
