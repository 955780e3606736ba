//! etcd's history changing under the caches. A restore from a snapshot makes a new etcd cluster
//! (a new cluster id) whose store revisions can be lower than the ones the caches hold, when the
//! restore tool could not bump them (etcd before 3.5.10). Then the write barrier would wait for
//! resourceVersions the new store reaches only after as many writes, and watches resumed from
//! those revisions hang until then: the operator would stall, or act on objects of the lost
//! cluster. So the caches are thrown away and listed anew when:
//!
//! * etcd answers with another cluster id than the one the caches were filled from (seen by the
//!   etcd observer, or asked by the barrier once it has waited [`ASK_AFTER`]);
//! * the barrier has waited [`BARRIER_LIMIT`] for its own writes, whatever the cause.
//!
//! Each relist is logged and published as a Warning Event `CachesRelisted` with the reason.

use std::time::Duration;

use time::OffsetDateTime;

use crate::context::Context;
use crate::observed::Inputs;
use crate::pass::Bookkeeping;
use crate::pass::{PassReport, PlanEntry};

/// How long the barrier waits before asking etcd whether its cluster changed.
pub const ASK_AFTER: Duration = Duration::from_secs(5);
/// The longest the barrier waits for the caches to show the operator's own writes.
pub const BARRIER_LIMIT: Duration = Duration::from_secs(60);

/// Why the caches must relist, if etcd's cluster id `seen` is not the `known` one they were
/// filled from (pure).
pub fn replaced(known: Option<u64>, seen: Option<u64>) -> Option<String> {
    match (known, seen) {
        (Some(known), Some(seen)) if known != seen => Some(format!(
            "etcd's cluster id changed from {known:x} to {seen:x} (a restore made a new cluster): the caches hold objects of the lost one"
        )),
        _ => None,
    }
}

/// Why the caches must relist, if the barrier has waited `waited` for `count` writes (`first`
/// one of them) past [`BARRIER_LIMIT`] (pure).
pub fn barrier_expired(waited: Duration, count: usize, first: Option<&str>) -> Option<String> {
    (waited >= BARRIER_LIMIT).then(|| {
        format!(
            "the caches did not show {count} write(s) of this operator (e.g. {}) within {}s: etcd's history may have changed under them",
            first.unwrap_or("?"),
            BARRIER_LIMIT.as_secs()
        )
    })
}

/// The barrier's check, while it has waited since `since` for `count` writes: past
/// [`ASK_AFTER`], etcd's cluster id through the last client (one bounded member list); past
/// [`BARRIER_LIMIT`], the wait itself.
pub async fn barrier_check(
    state: &Bookkeeping,
    since: OffsetDateTime,
    now: OffsetDateTime,
    count: usize,
    first: Option<&str>,
) -> Option<String> {
    let waited = Duration::try_from(now - since).unwrap_or_default();
    if waited >= ASK_AFTER
        && let Some(client) = state.etcd.current()
        && let Ok(live) = client.member_list().await
        && let Some(why) = replaced(state.cluster_id, Some(live.cluster_id))
    {
        return Some(why);
    }
    barrier_expired(waited, count, first)
}

/// Forgets what the old caches left (awaited writes, the settled view, the cluster id), says
/// why, and asks the run loop to list every cache anew before the next pass.
pub fn relist(ctx: &Context, state: &mut Bookkeeping, inputs: &Inputs, why: String) -> PassReport {
    state.awaited.clear();
    state.awaited_since = None;
    state.settled_etcd = None;
    state.cluster_id = None;
    tracing::warn!(reason = %why, "every cache relists before the operator acts again");
    if !ctx.plan_only
        && let Some(cluster) = &inputs.cluster
    {
        let object = kube::Resource::object_ref(cluster, &());
        ctx.events.publish(
            object,
            crate::events::EventReason::CachesRelisted,
            format!("{why}; relisting every cache"),
        );
    }
    PassReport {
        requeue_after: Duration::from_millis(100),
        plan: vec![PlanEntry {
            controller: "caches".into(),
            next: format!("relisting every cache: {why}"),
        }],
        relist: Some(why),
        ..PassReport::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_different_known_cluster_id_relists() {
        assert_eq!(replaced(None, Some(1)), None, "first sight");
        assert_eq!(replaced(Some(1), None), None, "etcd not read");
        assert_eq!(replaced(Some(1), Some(1)), None);
        let why = replaced(Some(0xab), Some(0xcd)).unwrap();
        assert!(why.contains("from ab to cd"), "{why}");
    }

    #[test]
    fn the_barrier_gives_up_at_its_limit() {
        assert_eq!(
            barrier_expired(
                BARRIER_LIMIT - Duration::from_millis(1),
                2,
                Some("Pod etcd/p")
            ),
            None
        );
        let why = barrier_expired(BARRIER_LIMIT, 2, Some("Pod etcd/p")).unwrap();
        assert!(
            why.contains("2 write(s)") && why.contains("Pod etcd/p"),
            "{why}"
        );
    }
}
