//! The pass's error policy under an injected clock: transient errors back off (capped, doubling),
//! a controller waiting out its back-off keeps its Degraded condition and is not run, permanent
//! errors wait for an input instead.

use super::*;
use crate::api::EtcdClusterSpec;

fn at(ms: i64) -> OffsetDateTime {
    // A whole second: no jitter, so the delays are exact.
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + time::Duration::milliseconds(ms)
}

fn pass_at<'a>(
    ctx: &'a Context,
    st: &'a mut PassState,
    inputs: &'a Inputs,
    now: OffsetDateTime,
) -> Pass<'a> {
    let cluster = EtcdCluster::new(crate::api::SINGLETON, EtcdClusterSpec::default());
    Pass {
        ctx,
        st,
        inputs,
        o: Observed::new(inputs, cluster, now),
        w: Writer::new(ctx.client.clone(), true, ctx.reporter.clone()),
        conds: Vec::new(),
        report: PassReport {
            requeue_after: IDLE_REQUEUE,
            ..Default::default()
        },
        busy: true,
        latest: 0,
        node_statuses: Vec::new(),
        remediations: Vec::new(),
    }
}

fn conflict() -> ControllerError {
    ControllerError::new(
        ControllerName::Revision,
        ErrorKind::Transient,
        "conflict",
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
    let mut st = PassState::default();
    let mut delays = Vec::new();
    let mut t = 0;
    for _ in 0..7 {
        let mut p = pass_at(&ctx, &mut st, &inputs, at(t));
        failed(&mut p, conflict());
        let c = degraded(&p).expect("Degraded set");
        assert!(c.status && c.reason == Reason::Failed("conflict"), "{c:?}");
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
    let mut st = PassState::default();
    let mut p = pass_at(&ctx, &mut st, &inputs, at(0));
    let e = ControllerError::new(
        ControllerName::TargetConfig,
        ErrorKind::Permanent,
        "render",
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
