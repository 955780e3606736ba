//! A pass over an EtcdCluster the operator cannot decode ([`crate::api::Unreadable`]): no
//! controller runs, so nothing is changed on a spec the operator does not know (not a
//! membership change, a revision, a rollout, a backup, a certificate). What it does instead is
//! say so where an admin looks: `Degraded` and its own detail condition `SpecDegraded` True
//! with reason `SpecUnreadable` naming the object, the field and the decoder's message,
//! `Upgradeable` False, one warning Event per generation, the metrics
//! `etcd_operator_spec_unreadable` and `etcd_operator_spec_unreadable_generations_total`, and
//! `plan`'s one line (`plan` then exits non-zero). Only `status.conditions` is written;
//! `observedGeneration` stays at the last generation acted on. A spec edit wakes the loop, and
//! the first readable generation runs a whole pass again.

use time::OffsetDateTime;

use crate::api::{Condition, Unreadable};
use crate::context::Context;
use crate::pass::{Bookkeeping, IDLE_REQUEUE, PassReport, PlanEntry};
use crate::status::{Computed, ConditionType as C, Reason, merge};
use crate::writer::Writer;

/// Holds every action and reports the unreadable object.
pub(super) async fn hold(
    ctx: &Context,
    st: &mut Bookkeeping,
    u: &Unreadable,
    now: OffsetDateTime,
) -> PassReport {
    let line = held_line(u);
    let mut report = PassReport {
        requeue_after: IDLE_REQUEUE,
        plan: vec![PlanEntry {
            controller: "spec".into(),
            next: line.clone(),
        }],
        unreadable: Some(u.to_string()),
        ..PassReport::default()
    };
    ctx.metrics.spec_unreadable.set(1);
    if ctx.plan_only {
        return report;
    }
    let generation = u.generation.unwrap_or_default();
    if st.unreadable_reported != Some(generation) {
        tracing::warn!(field = %u.field, generation = ?u.generation, "{line}");
        ctx.metrics.spec_unreadable_generations.inc();
        ctx.events.publish(
            u.object.clone(),
            crate::events::EventReason::SpecUnreadable,
            line.clone(),
        );
        st.unreadable_reported = Some(generation);
    }
    let conditions = held_conditions(&u.conditions, u, &crate::certs::format_time(now));
    for c in &conditions {
        ctx.metrics.condition(&c.type_, &c.status);
    }
    if conditions != u.conditions {
        let name = u.object.name.clone().unwrap_or_default();
        let mut w = Writer::new(ctx.client.clone(), false);
        if let Err(e) = w.cluster_conditions(&name, &conditions).await {
            report.say(ctx, format!("could not write status: {e}"));
            ctx.metrics.error("status", e.category());
        }
    }
    report
}

/// What the operator does while `u` cannot be read, in one line.
pub fn held_line(u: &Unreadable) -> String {
    let acted = u
        .observed_generation
        .map_or_else(String::new, |g| format!(" (last generation acted on: {g})"));
    format!("{u}; holding every action until the EtcdCluster can be read{acted}")
}

/// The stored conditions with `SpecDegraded` and `Degraded` True and `Upgradeable` False for
/// `u`; every other condition as it was. `lastTransitionTime` moves only where a status does.
pub fn held_conditions(previous: &[Condition], u: &Unreadable, now: &str) -> Vec<Condition> {
    let message = held_line(u);
    let held = [
        Computed::new(
            C::SpecDegraded,
            true,
            Reason::SpecUnreadable,
            message.clone(),
        ),
        Computed::new(
            C::Degraded,
            true,
            Reason::SpecUnreadable,
            format!("{}: {message}", C::SpecDegraded.as_str()),
        ),
        Computed::new(
            C::Upgradeable,
            false,
            Reason::SpecUnreadable,
            "the EtcdCluster cannot be read, so the operator acts on nothing",
        ),
    ];
    let mut out = merge(previous, &held, now);
    out.extend(
        previous
            .iter()
            .filter(|p| !held.iter().any(|h| h.type_.as_str() == p.type_))
            .cloned(),
    );
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}
