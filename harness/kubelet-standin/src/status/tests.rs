//! Pod phase and status as the kubelet derives them, checked rule by rule.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use super::*;
use k8s_openapi::api::core::v1::Container;

fn spec(policy: &str, init: &[&str], app: &[&str]) -> PodSpec {
    let c = |n: &&str| Container {
        name: n.to_string(),
        image: Some("busybox".into()),
        ..Default::default()
    };
    PodSpec {
        restart_policy: Some(policy.into()),
        init_containers: Some(init.iter().map(c).collect()),
        containers: app.iter().map(c).collect(),
        ..Default::default()
    }
}

fn term(code: i32, msg: &str) -> Termination {
    Termination {
        exit_code: code,
        signal: None,
        reason: if code == 0 { "Completed" } else { "Error" }.into(),
        message: Some(msg.into()),
        started_at: Some(Timestamp::UNIX_EPOCH),
        finished_at: Timestamp::UNIX_EPOCH,
        container_id: "kubelet-standin://1".into(),
    }
}

fn running(ready: bool) -> ContainerPhase {
    ContainerPhase::Running {
        started_at: Timestamp::UNIX_EPOCH,
        started: true,
        ready,
        container_id: "kubelet-standin://2".into(),
    }
}

#[test]
fn phases_follow_kubelet_rules() {
    let s = spec("Never", &["init"], &["main"]);
    let mut o = PodObservation::for_spec(&s, "127.0.0.2");
    assert_eq!(pod_phase(&s, &o), Phase::Pending);
    o.init_containers[0].state = ContainerPhase::Terminated(term(1, "no"));
    assert_eq!(pod_phase(&s, &o), Phase::Failed);
    o.init_containers[0].state = ContainerPhase::Terminated(term(0, ""));
    assert_eq!(pod_phase(&s, &o), Phase::Pending);
    o.containers[0].state = running(false);
    assert_eq!(pod_phase(&s, &o), Phase::Running);
    o.containers[0].state = ContainerPhase::Terminated(term(0, "done"));
    assert_eq!(pod_phase(&s, &o), Phase::Succeeded);
    o.containers[0].state = ContainerPhase::Terminated(term(2, "bad"));
    assert_eq!(pod_phase(&s, &o), Phase::Failed);

    let s = spec("Always", &["init"], &["main"]);
    o.init_containers[0].state = ContainerPhase::Terminated(term(1, "no"));
    assert_eq!(
        pod_phase(&s, &o),
        Phase::Pending,
        "init restarts under Always"
    );
    o.init_containers[0].state = ContainerPhase::Terminated(term(0, ""));
    o.containers[0].state = ContainerPhase::Waiting {
        reason: "CrashLoopBackOff".into(),
        message: None,
    };
    o.containers[0].last_termination = Some(term(1, "x"));
    assert_eq!(pod_phase(&s, &o), Phase::Running);
    let s = spec("OnFailure", &[], &["a"]);
    let mut o = PodObservation::for_spec(&s, "127.0.0.2");
    o.containers[0].state = ContainerPhase::Terminated(term(0, ""));
    assert_eq!(pod_phase(&s, &o), Phase::Succeeded);
}

#[test]
fn status_carries_messages_ips_and_readiness() {
    let s = spec("Always", &["verify"], &["etcd"]);
    let mut o = PodObservation::for_spec(&s, "127.0.0.7");
    o.init_containers[0].state = ContainerPhase::Terminated(term(0, "{\"decision\":\"start\"}"));
    o.containers[0].state = running(false);
    let now = Timestamp::from_second(1000).unwrap();
    let st = pod_status(&s, &o, None, now);
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert_eq!(st.pod_ip.as_deref(), Some("127.0.0.7"));
    let init = &st.init_container_statuses.as_ref().unwrap()[0];
    let t = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(t.message.as_deref(), Some("{\"decision\":\"start\"}"));
    let ready = |st: &PodStatus| {
        st.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .cloned()
            .unwrap()
    };
    assert_eq!(ready(&st).status, "False");
    // Same status later keeps the transition time; a flip takes the new time.
    let later = Timestamp::from_second(2000).unwrap();
    let st2 = pod_status(&s, &o, Some(&st), later);
    assert_eq!(ready(&st2).last_transition_time, Some(Time(now)));
    o.containers[0].state = running(true);
    let st3 = pod_status(&s, &o, Some(&st2), later);
    assert_eq!(ready(&st3).status, "True");
    assert_eq!(ready(&st3).last_transition_time, Some(Time(later)));
    assert!(st3.container_statuses.as_ref().unwrap()[0].ready);
}
