//! When a consumer has picked up its Secret's material: pods, write times and records.

use super::*;
use crate::api::{ConsumerPods, Reload};
use crate::certs::{self, parse_time};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

fn t(s: &str) -> OffsetDateTime {
    parse_time(s).unwrap()
}

fn restart(deadline: i64) -> ReloadPolicy {
    ReloadPolicy::Restart {
        namespace: "kube-system".into(),
        match_labels: [("component".to_owned(), "kube-apiserver".to_owned())].into(),
        deadline: time::Duration::seconds(deadline),
    }
}

fn target(consumer: &str, reload: ReloadPolicy) -> Target {
    Target {
        consumer: consumer.into(),
        namespace: "kube-system".into(),
        name: format!("{consumer}-etcd-client"),
        spec: certs::LeafSpec {
            common_name: consumer.into(),
            sans: certs::Sans::default(),
            usage: certs::Usage::CLIENT,
        },
        reload,
    }
}

fn pod(name: &str, started: Option<&str>) -> PodStart {
    PodStart {
        api_server: None,
        name: format!("kube-system/{name}"),
        mirror: false,
        started: started.map(t),
        material: None,
    }
}

/// `pod` annotated with the digest of the material it was laid down with.
fn laid(name: &str, started: Option<&str>, digest: &str) -> PodStart {
    PodStart {
        material: Some(digest.into()),
        ..pod(name, started)
    }
}

fn listed(pods: Vec<PodStart>) -> BTreeMap<String, PodsSeen> {
    [("kas".to_owned(), PodsSeen::Listed(pods))].into()
}

const WRITTEN: &str = "2026-11-26T10:00:01Z";

fn record(digest: &str) -> ConsumerStatus {
    ConsumerStatus {
        name: "kas".into(),
        secret: "kube-system/kas-etcd-client".into(),
        reload: ReloadMode::Restart,
        material_written_time: WRITTEN.into(),
        material_digest: digest.into(),
        ..Default::default()
    }
}

#[test]
fn a_restart_consumer_is_current_only_once_every_pod_started_since_the_write() {
    let written = Some(t(WRITTEN));
    let seen = |pods| PodsSeen::Listed(pods);
    let p = restart(600);
    assert_eq!(
        judge(
            &p,
            written,
            "aa",
            &seen(vec![
                pod("kas-n1", Some("2026-11-26T10:00:01Z")),
                pod("kas-n2", Some("2026-11-26T10:00:00Z")),
                pod("kas-n3", None),
                pod("kas-n4", Some("2026-11-26T09:59:59Z")),
            ])
        ),
        Verdict::Waiting(vec![
            ("kube-system/kas-n2".into(), Behind::SameSecond),
            ("kube-system/kas-n3".into(), Behind::NotRunning),
            ("kube-system/kas-n4".into(), Behind::StartedBefore),
        ]),
        "started within the second before the recorded write, before it, or not running: not picked up"
    );
    assert_eq!(
        judge(
            &p,
            written,
            "aa",
            &seen(vec![pod("kas-n1", Some("2026-11-26T10:00:01Z"))])
        ),
        Verdict::Current,
        "started in the whole second at or after the write"
    );
    assert_eq!(judge(&p, written, "aa", &seen(vec![])), Verdict::NoPods);
    assert!(Verdict::NoPods.is_current(), "nothing to wait for");
    assert_eq!(
        judge(&p, None, "aa", &seen(vec![pod("kas-n1", Some(WRITTEN))])),
        Verdict::WriteUnknown,
        "no record of the write: never assumed picked up"
    );
    assert!(!Verdict::WriteUnknown.is_current());
}

#[test]
fn a_pod_carrying_the_material_digest_is_judged_by_it_not_by_its_start() {
    let written = Some(t(WRITTEN));
    let p = restart(600);
    let seen = |pods| PodsSeen::Listed(pods);
    // Restarted within the second of the write, by a platform that laid the new material: the
    // start time cannot tell, the digest can (the race a 1 s kube-apiserver restart exposed).
    assert_eq!(
        judge(
            &p,
            written,
            "bb",
            &seen(vec![laid("kas-n1", Some("2026-11-26T10:00:00Z"), "bb")])
        ),
        Verdict::Current
    );
    // Restarted after the write from the revision laid before it: its start time would count
    // it, the digest does not.
    assert_eq!(
        judge(
            &p,
            written,
            "bb",
            &seen(vec![laid("kas-n1", Some("2026-11-26T10:00:09Z"), "aa")])
        ),
        Verdict::Waiting(vec![(
            "kube-system/kas-n1".into(),
            Behind::OtherMaterial("aa".into())
        )])
    );
    assert_eq!(
        judge(&p, written, "bb", &seen(vec![laid("kas-n1", None, "bb")])),
        Verdict::Waiting(vec![("kube-system/kas-n1".into(), Behind::NotRunning)]),
        "the right material, but not running"
    );
    assert_eq!(
        judge(
            &p,
            None,
            "bb",
            &seen(vec![laid("kas-n1", Some("2026-11-26T08:00:00Z"), "bb")])
        ),
        Verdict::Current,
        "every pod carries the digest: the write time is not needed"
    );
    assert_eq!(
        judge(
            &p,
            None,
            "bb",
            &seen(vec![
                laid("kas-n1", Some("2026-11-26T08:00:00Z"), "bb"),
                pod("kas-n2", Some("2026-11-26T08:00:00Z")),
            ])
        ),
        Verdict::WriteUnknown,
        "a pod without the digest still needs the write time"
    );
    let annotated = seen(vec![laid("kas-n1", Some("2026-11-26T10:00:05Z"), "bb")]);
    assert_eq!(
        judge(&p, None, "", &annotated),
        Verdict::WriteUnknown,
        "no digest on record: nothing to compare the annotation with"
    );
    assert_eq!(
        judge(&p, written, "", &annotated),
        Verdict::Current,
        "no digest on record: judged by the write time"
    );
}

#[test]
fn the_status_line_says_why_each_pod_is_waited_for() {
    let targets = [target("kas", restart(600))];
    let pods = listed(vec![
        pod("kas-n1", Some("2026-11-26T10:00:00Z")),
        PodStart {
            mirror: true,
            ..laid("kas-n2", Some("2026-11-26T10:00:05Z"), "old")
        },
    ]);
    let p = before(&targets, &[record("aa")], &pods, t("2026-11-26T10:01:00Z"));
    let line = p[0].line().unwrap();
    assert!(
        line.contains("material aa written at 2026-11-26T10:00:01Z"),
        "{line}"
    );
    assert!(
        line.contains("restarted within the second of the write")
            && line.ends_with("material-digest on it): kube-system/kas-n1"),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "laid down with other material ({MATERIAL_DIGEST_ANNOTATION}=old): kube-system/kas-n2 (static pod)"
        )),
        "{line}"
    );
    assert_eq!(
        p[0].status().waiting_for,
        vec!["kube-system/kas-n1", "kube-system/kas-n2"]
    );
}

#[test]
fn files_needs_no_pods_and_a_refused_list_or_a_missing_selector_is_never_current() {
    let refused = PodsSeen::Unreadable {
        forbidden: true,
        message: "pods is forbidden".into(),
    };
    assert_eq!(
        judge(&ReloadPolicy::Files, None, "aa", &refused),
        Verdict::Current
    );
    let v = judge(&restart(600), Some(t(WRITTEN)), "aa", &refused);
    assert!(
        matches!(
            v,
            Verdict::Unreadable {
                forbidden: true,
                ..
            }
        ),
        "{v:?}"
    );
    assert!(!v.is_current());
    let v = judge(
        &ReloadPolicy::RestartWithoutPods,
        None,
        "aa",
        &PodsSeen::NotNeeded,
    );
    assert_eq!(v, Verdict::NoSelector);
    assert!(!v.is_current());
}

#[test]
fn the_write_time_is_rounded_up_to_the_whole_second() {
    assert_eq!(
        ceil_second(t("2026-11-26T10:00:00.300Z")),
        t("2026-11-26T10:00:01Z")
    );
    assert_eq!(ceil_second(t(WRITTEN)), t(WRITTEN));
}

#[test]
fn material_not_on_record_counts_as_written_now_and_a_kept_digest_keeps_its_time() {
    let targets = [target("kas", restart(600))];
    let pods = listed(vec![pod("kas-n1", Some("2026-11-26T10:00:05Z"))]);
    let now = t("2026-11-26T10:05:00.5Z");
    let d = |s: &str| BTreeMap::from([("kas".to_owned(), s.to_owned())]);
    let kept = settle(&targets, &[record("aa")], &d("aa"), &pods, now);
    assert_eq!(kept[0].written, Some(t(WRITTEN)));
    assert_eq!(kept[0].verdict, Verdict::Current);
    let changed = settle(&targets, &[record("aa")], &d("bb"), &pods, now);
    assert_eq!(changed[0].written, Some(t("2026-11-26T10:05:01Z")));
    assert_eq!(
        changed[0].verdict,
        Verdict::Waiting(vec![("kube-system/kas-n1".into(), Behind::StartedBefore)])
    );
    let unwritten = settle(&targets, &[record("aa")], &BTreeMap::new(), &pods, now);
    assert_eq!(
        (unwritten[0].written, unwritten[0].digest.as_str()),
        (Some(t(WRITTEN)), "aa"),
        "a Secret not written this pass keeps its record"
    );
    let fresh = settle(&targets, &[], &d("bb"), &pods, now);
    assert_eq!(fresh[0].written, Some(t("2026-11-26T10:05:01Z")));
}

#[test]
fn the_rotation_judges_the_previous_record_and_the_deadline_marks_it_overdue() {
    let targets = [
        target("kas", restart(600)),
        target("backup", ReloadPolicy::Files),
    ];
    let pods = listed(vec![
        pod("kas-n1", Some("2026-11-26T09:00:00Z")),
        PodStart {
            mirror: true,
            ..pod("kas-n2", Some("2026-11-26T09:00:00Z"))
        },
    ]);
    let early = before(&targets, &[record("aa")], &pods, t("2026-11-26T10:09:00Z"));
    assert!(!early[0].overdue);
    assert!(
        early[1].verdict.is_current(),
        "Files: the written Secret is enough"
    );
    assert_eq!(early[1].line(), None);
    let line = early[0].line().unwrap();
    assert!(
        line.contains("consumer kas (Secret kube-system/kas-etcd-client)")
            && line.contains(WRITTEN)
            && line.contains("kube-system/kas-n1, kube-system/kas-n2 (static pod)"),
        "{line}"
    );
    let late = before(&targets, &[record("aa")], &pods, t("2026-11-26T10:10:01Z"));
    assert!(late[0].overdue);
    let s = late[0].status();
    assert_eq!(
        (s.current, s.overdue, s.waiting_for.len(), s.pods.len()),
        (false, true, 2, 2)
    );
    let none = before(&targets, &[], &pods, t("2026-11-26T10:10:01Z"));
    assert_eq!(none[0].verdict, Verdict::WriteUnknown);
    assert!(!none[0].overdue);
}

fn k8s_pod(phase: &str, containers: Vec<Option<&str>>, mirror: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("kas-n1".into()),
            namespace: Some("kube-system".into()),
            annotations: mirror.then(|| [(MIRROR_ANNOTATION.to_owned(), "x".to_owned())].into()),
            ..Default::default()
        },
        status: Some(PodStatus {
            phase: Some(phase.into()),
            start_time: Some(Time("2026-11-26T08:00:00Z".parse().unwrap())),
            container_statuses: Some(
                containers
                    .into_iter()
                    .map(|s| ContainerStatus {
                        state: Some(match s {
                            Some(at) => ContainerState {
                                running: Some(ContainerStateRunning {
                                    started_at: Some(Time(at.parse().unwrap())),
                                }),
                                ..Default::default()
                            },
                            None => ContainerState {
                                waiting: Some(ContainerStateWaiting::default()),
                                ..Default::default()
                            },
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_pod_started_when_its_last_container_did_and_never_by_its_start_time() {
    let p = PodStart::of(&k8s_pod(
        "Running",
        vec![Some("2026-11-26T10:00:00Z"), Some("2026-11-26T10:00:07Z")],
        true,
    ))
    .unwrap();
    assert_eq!(
        (p.name.as_str(), p.mirror, p.started, p.material),
        (
            "kube-system/kas-n1",
            true,
            Some(t("2026-11-26T10:00:07Z")),
            None
        )
    );
    let mut annotated = k8s_pod("Running", vec![Some("2026-11-26T10:00:00Z")], true);
    annotated
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(MATERIAL_DIGEST_ANNOTATION.to_owned(), "0123abcd".to_owned());
    assert_eq!(
        PodStart::of(&annotated).unwrap().material.as_deref(),
        Some("0123abcd")
    );
    let waiting = PodStart::of(&k8s_pod(
        "Running",
        vec![Some("2026-11-26T10:00:00Z"), None],
        false,
    ))
    .unwrap();
    assert_eq!(waiting.started, None, "a container not running");
    let unreported = PodStart::of(&k8s_pod("Pending", vec![], false)).unwrap();
    assert_eq!(unreported.started, None, "status.startTime is not used");
    assert_eq!(PodStart::of(&k8s_pod("Succeeded", vec![], false)), None);
}

#[test]
fn the_policy_comes_from_the_spec_and_the_selector_is_sorted() {
    let mut c = EtcdConsumer {
        name: "kas".into(),
        common_name: "kas".into(),
        namespace: Some("kube-system".into()),
        secret_name: None,
        reload: Reload::default(),
    };
    assert_eq!(ReloadPolicy::of(&c, "kube-system"), ReloadPolicy::Files);
    c.reload.mode = ReloadMode::Restart;
    assert_eq!(
        ReloadPolicy::of(&c, "kube-system"),
        ReloadPolicy::RestartWithoutPods
    );
    c.reload.pods = Some(ConsumerPods {
        namespace: None,
        match_labels: [
            ("tier".to_owned(), "control-plane".to_owned()),
            ("component".to_owned(), "kube-apiserver".to_owned()),
        ]
        .into(),
    });
    c.reload.deadline_seconds = 30;
    let p = ReloadPolicy::of(&c, "kube-system");
    let ReloadPolicy::Restart {
        namespace,
        match_labels,
        deadline,
    } = &p
    else {
        panic!("{p:?}")
    };
    assert_eq!(
        (namespace.as_str(), *deadline),
        ("kube-system", time::Duration::seconds(30)),
        "the pods' namespace defaults to the Secret's"
    );
    assert_eq!(
        label_selector(match_labels),
        "component=kube-apiserver,tier=control-plane"
    );
}
