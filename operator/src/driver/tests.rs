//! The pass's error policy under an injected clock: transient errors back off (capped, doubling),
//! a controller waiting out its back-off keeps its Degraded condition and is not run, permanent
//! errors wait for an input instead.

use super::*;
use crate::api::EtcdClusterSpec;
use crate::category::Category;
use crate::pass::CACHES_POLL;
use crate::status::{Computed, ConditionType as C};

fn at(ms: i64) -> OffsetDateTime {
    // A whole second: no jitter, so the delays are exact.
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + time::Duration::milliseconds(ms)
}

fn pass_at<'a>(
    ctx: &'a Context,
    st: &'a mut Bookkeeping,
    inputs: &'a Inputs,
    now: OffsetDateTime,
) -> Pass<'a> {
    let cluster = EtcdCluster::new(crate::api::SINGLETON, EtcdClusterSpec::default());
    Pass {
        ctx,
        st,
        inputs,
        o: Observed::new(inputs, cluster, now),
        w: Writer::new(ctx.client.clone(), true),
        ew: crate::writer::etcd::EtcdWriter::new(true),
        conds: Vec::new(),
        report: PassReport {
            requeue_after: IDLE_REQUEUE,
            ..Default::default()
        },
        busy: true,
        api_servers: Vec::new(),
        control_plane: ::membership::ControlPlanePods::NotListed,
        status: crate::pass::StatusDraft::default(),
    }
}

fn conflict() -> ControllerError {
    ControllerError::new(
        ControllerName::Revision,
        ErrorKind::Transient,
        Category::Conflict,
        "replacing ConfigMap etcd/etcd-pod: the API server answered 409 Conflict",
    )
}

fn degraded(p: &Pass<'_>) -> Option<Computed> {
    p.conds
        .iter()
        .find(|c| c.type_ == C::RevisionControllerDegraded)
        .cloned()
}

#[tokio::test]
async fn transient_errors_back_off_and_the_controller_waits() {
    let ctx = Context::for_tests();
    let inputs = Inputs::default();
    let mut st = Bookkeeping::default();
    let mut delays = Vec::new();
    let mut t = 0;
    for _ in 0..7 {
        let mut p = pass_at(&ctx, &mut st, &inputs, at(t));
        failed(&mut p, conflict());
        let c = degraded(&p).expect("Degraded set");
        assert!(
            c.status && c.reason == Reason::Failed(Category::Conflict),
            "{c:?}"
        );
        delays.push(p.report.requeue_after.as_millis());
        // Woken by a cache change before the delay is over: the controller does not run.
        let mut early = pass_at(&ctx, &mut st, &inputs, at(t + 100));
        assert!(early.waits(ControllerName::Revision));
        let kept = degraded(&early).expect("the condition stays while waiting");
        assert!(
            kept.status && kept.message.contains("409 Conflict"),
            "{kept:?}"
        );
        assert!(early.report.requeue_after.as_millis() < delays[delays.len() - 1]);
        t += i64::try_from(delays[delays.len() - 1]).unwrap();
        let mut due = pass_at(&ctx, &mut st, &inputs, at(t));
        assert!(!due.waits(ControllerName::Revision), "due again at {t} ms");
    }
    assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 10000, 10000]);
    // Success clears the back-off.
    let mut ok = pass_at(&ctx, &mut st, &inputs, at(t));
    ok.succeeded(ControllerName::Revision);
    assert!(!st.failures.contains_key(&ControllerName::Revision));
}

#[tokio::test]
async fn permanent_errors_wait_for_an_input_not_a_timer() {
    let ctx = Context::for_tests();
    let inputs = Inputs::default();
    let mut st = Bookkeeping::default();
    let mut p = pass_at(&ctx, &mut st, &inputs, at(0));
    let e = ControllerError::new(
        ControllerName::TargetConfig,
        ErrorKind::Permanent,
        Category::Render,
        "rendering the etcd pod of n1: spec.quotaBackendBytes is not a size",
    );
    failed(&mut p, e);
    assert_eq!(p.report.requeue_after, IDLE_REQUEUE);
    assert!(!p.waits(ControllerName::TargetConfig), "never held back");
    let c = p
        .conds
        .iter()
        .find(|c| c.type_ == C::TargetConfigControllerDegraded)
        .unwrap();
    assert!(c.status && c.message.contains("quotaBackendBytes"), "{c:?}");
}

#[tokio::test]
async fn an_invalid_node_selector_stops_every_controller_with_a_precise_message() {
    let ctx = Context::for_tests();
    let inputs = Inputs::default();
    let mut st = Bookkeeping::default();
    let mut p = pass_at(&ctx, &mut st, &inputs, at(0));
    p.o.spec.control_plane_node_selector = [("node role".to_owned(), String::new())].into();
    let mut cs = Controllers::default();
    let e = controllers(&mut p, &mut cs, &mut HandOffs::default())
        .await
        .expect_err("refused");
    assert_eq!(
        (e.controller, e.kind, e.category),
        (
            ControllerName::Membership,
            ErrorKind::Permanent,
            Category::Spec
        )
    );
    assert!(
        e.message.contains("\"node role\" is not a valid label key"),
        "{e:?}"
    );
    assert!(
        p.report.lines.is_empty(),
        "no controller ran: {:?}",
        p.report
    );
}

#[test]
fn a_pass_waits_for_the_node_cache_listed_with_the_specs_selector() {
    use crate::observed::NodeListing;
    let default = crate::api::CONTROL_PLANE_LABEL.to_owned();
    let with = |spec: Option<EtcdClusterSpec>, listing| Inputs {
        cluster: spec.map(|s| EtcdCluster::new(crate::api::SINGLETON, s)),
        node_listing: listing,
        ..Inputs::default()
    };
    let custom = EtcdClusterSpec {
        control_plane_node_selector: [("role".to_owned(), "etcd".to_owned())].into(),
        ..EtcdClusterSpec::default()
    };
    let invalid = EtcdClusterSpec {
        control_plane_node_selector: [("role".to_owned(), "-".to_owned())].into(),
        ..EtcdClusterSpec::default()
    };
    // Read once with every Node (plan, tests): nothing to wait for.
    assert_eq!(
        with(Some(custom.clone()), NodeListing::All).nodes_lag(),
        None
    );
    // Not listed yet, or listed for another selector: wait, naming the selector.
    let lag = with(None, NodeListing::Selected(None)).nodes_lag();
    assert_eq!(
        lag.as_deref(),
        Some(
            "waiting for the Node cache to list the nodes selected by \"node-role.kubernetes.io/control-plane\""
        )
    );
    let stale = with(
        Some(custom.clone()),
        NodeListing::Selected(Some(default.clone())),
    );
    assert!(stale.nodes_lag().unwrap().contains("role=etcd"));
    // Listed with the spec's selector: go.
    let fresh = with(
        Some(custom),
        NodeListing::Selected(Some("role=etcd".into())),
    );
    assert_eq!(fresh.nodes_lag(), None);
    assert_eq!(
        with(None, NodeListing::Selected(Some(default.clone()))).nodes_lag(),
        None
    );
    // An invalid selector is not waited for: the pass reports it (above).
    assert_eq!(
        with(Some(invalid), NodeListing::Selected(Some(default))).nodes_lag(),
        None
    );
}

fn unreadable_inputs(generation: i64) -> Inputs {
    let stored: crate::api::StoredCluster = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cluster", "generation": generation},
        "spec": {"clients": [{"name": "kas"}], "forceRedeploymentReason": "now"},
        "status": {"observedGeneration": 1, "conditions": [
            {"type": "Degraded", "status": "False", "reason": "AsExpected",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Available", "status": "True", "reason": "Quorate",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }))
    .unwrap();
    let (cluster, unreadable) = crate::observed::decode_cluster(Some(&stored));
    assert!(cluster.is_none());
    Inputs {
        unreadable,
        ..Inputs::default()
    }
}

#[tokio::test]
async fn an_unreadable_cluster_runs_no_controller_and_says_why_once_per_generation() {
    let ctx = Context::for_tests();
    let mut d = Driver::default();
    let report = d.pass(&ctx, &unreadable_inputs(3), at(0)).await;
    let why = report.unreadable.clone().expect("reported as unreadable");
    assert!(
        why.starts_with("EtcdCluster/cluster (generation 3) cannot be read: spec.clients[0]: ")
            && why.contains("commonName"),
        "{why}"
    );
    // One plan line, and no controller ran (each would have said or planned something).
    assert_eq!(report.plan.len(), 1, "{:?}", report.plan);
    assert_eq!(report.plan[0].controller, "spec");
    assert!(
        report.plan[0].next.contains("holding every action")
            && report.plan[0].next.contains("last generation acted on: 1"),
        "{:?}",
        report.plan
    );
    assert_eq!(ctx.metrics.spec_unreadable.get(), 1);
    assert_eq!(ctx.metrics.spec_unreadable_generations.get(), 1);
    // The same generation again: no second announcement; a new one is announced.
    d.pass(&ctx, &unreadable_inputs(3), at(1000)).await;
    assert_eq!(ctx.metrics.spec_unreadable_generations.get(), 1);
    d.pass(&ctx, &unreadable_inputs(4), at(2000)).await;
    assert_eq!(ctx.metrics.spec_unreadable_generations.get(), 2);
    // Readable again (here: no EtcdCluster at all): the gauge goes back to 0.
    let readable = d.pass(&ctx, &Inputs::default(), at(3000)).await;
    assert_eq!(readable.unreadable, None);
    assert_eq!(ctx.metrics.spec_unreadable.get(), 0);
    assert_eq!(d.st.unreadable_reported, None);
}

#[test]
fn held_conditions_set_spec_degraded_and_keep_the_rest() {
    let inputs = unreadable_inputs(3);
    let u = inputs.unreadable.as_ref().unwrap();
    let now = "2026-02-02T00:00:00Z";
    let held = unreadable::held_conditions(&u.conditions, u, now);
    let get = |t: &str| held.iter().find(|c| c.type_ == t).unwrap().clone();
    let types: Vec<&str> = held.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        ["Available", "Degraded", "SpecDegraded", "Upgradeable"],
        "sorted, nothing dropped"
    );
    assert_eq!(
        get("Available").last_transition_time,
        "2026-01-01T00:00:00Z"
    );
    for t in ["Degraded", "SpecDegraded"] {
        let c = get(t);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "SpecUnreadable")
        );
        assert!(c.message.contains("spec.clients[0]"), "{c:?}");
        assert_eq!(c.last_transition_time, now, "it just turned True");
    }
    assert_eq!(get("Upgradeable").status, "False");
    // Held again later: nothing moves, so the status is not rewritten.
    let again = unreadable::held_conditions(&held, u, "2026-03-03T00:00:00Z");
    assert_eq!(again, held);
}

#[tokio::test]
async fn an_etcd_minor_without_known_flags_is_refused_before_anything_is_rendered() {
    let ctx = Context::for_tests();
    let inputs = Inputs::default();
    let mut st = Bookkeeping::default();
    for (image, named) in [
        (
            "registry.example/etcd:3.8.0",
            "a minor version the operator does not know",
        ),
        (
            "registry.example/etcd:3.3.27",
            "a minor version the operator does not know",
        ),
        ("registry.example/etcd:3.5", "starts like a version"),
    ] {
        let mut p = pass_at(&ctx, &mut st, &inputs, at(0));
        p.o.spec.etcd_image = Some(image.into());
        let e = crate::controllers::target_config::reconcile(&mut p)
            .await
            .expect_err("refused");
        assert_eq!(
            (e.controller, e.kind, e.category),
            (
                ControllerName::TargetConfig,
                ErrorKind::Permanent,
                Category::EtcdVersion
            ),
            "{image}"
        );
        assert!(
            e.message.contains(image) && e.message.contains(named),
            "{e:?}"
        );
        failed(&mut p, e);
        let c = p
            .conds
            .iter()
            .find(|c| c.type_ == C::TargetConfigControllerDegraded)
            .unwrap();
        assert!(
            c.status && c.reason == Reason::Failed(Category::EtcdVersion),
            "{image}: {c:?}"
        );
    }
}

#[tokio::test]
async fn a_pass_waiting_for_its_own_write_comes_back_as_a_whole_pass() {
    let ctx = Context::for_tests();
    let inputs = Inputs::default();
    let mut d = Driver::default();
    d.st.awaited.push(Awaited {
        kind: "EtcdCluster",
        namespace: String::new(),
        name: crate::api::SINGLETON.into(),
        resource_version: Some("7".into()),
    });
    let report = d.pass(&ctx, &inputs, at(0)).await;
    assert_eq!(
        report.plan[0].next,
        "waiting for the caches to show 1 write(s), e.g. EtcdCluster /cluster"
    );
    // A status write wakes no watch and etcd may look the same: the idle check must not hold
    // the next look back until the resync.
    assert_eq!(report.full_pass_within, Some(CACHES_POLL));
    assert_eq!(report.requeue_after, CACHES_POLL);
}

/// #65: a member list no quorum confirmed (a voter cut off from it answers the list it was left
/// with) renders nothing: no manifest, so no revision; the plan says why.
#[tokio::test]
async fn an_unconfirmed_member_list_renders_nothing() {
    let ctx = Context::for_tests();
    let inputs = Inputs::default();
    let mut st = Bookkeeping::default();
    let mut p = pass_at(&ctx, &mut st, &inputs, at(0));
    p.o.etcd.unconfirmed_list = Some("no etcd endpoint answered linearizable member list".into());
    let mut h = steps::HandOffs::default();
    let flow = steps::render(&mut p, &mut h).await.unwrap();
    assert!(matches!(flow, Flow::Continue));
    assert!(!h.has_rendered(), "rendered from an unconfirmed list");
    let held: Vec<&str> = p
        .report
        .plan
        .iter()
        .filter(|e| e.next.contains("not confirmed by a quorum"))
        .map(|e| e.controller.as_str())
        .collect();
    assert_eq!(held, ["target-config", "revision"], "{:?}", p.report.plan);
}
