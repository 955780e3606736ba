//! Says what [`super::reload`] decided about each consumer: its entry in
//! `status.certificates.consumers`, metric `etcd_operator_consumer_reload_pending{consumer}`
//! (1 while a CA rotation waits for it), `CertSignerDegraded` with reason
//! `ConsumerNotReloaded` (a rotation waited past the consumer's `reload.deadlineSeconds`) or
//! `ConsumerPodsUnreadable` (its pods cannot be listed, or none are named: never taken as
//! picked up), and a warning Event `ConsumerReloadOverdue` when a consumer becomes overdue.

use super::reload::{Pickup, Verdict};
use crate::api::ConsumerStatus;
use crate::controllers::ControllerName;
use crate::metrics::ConsumerLabel;
use crate::pass::Pass;
use crate::status::{ConditionType as C, Reason};

/// How soon a whole pass comes back while a consumer is waited for: pods in the consumer's
/// namespace are not watched, so nothing else wakes the operator when one restarts.
pub const RECHECK: time::Duration = time::Duration::seconds(5);

/// Reports `pickups`; `rotating`: a CA rotation is under way (it waits for every consumer
/// that is not current). `previous` is the last status. Returns the status entries, by name.
pub async fn report(
    p: &mut Pass<'_>,
    pickups: &[Pickup],
    rotating: bool,
    previous: &[ConsumerStatus],
) -> Vec<ConsumerStatus> {
    let pending = &p.ctx.metrics.consumer_reload_pending;
    pending.clear();
    let mut out = Vec::new();
    let (mut overdue, mut unreadable) = (Vec::new(), Vec::new());
    for pk in pickups {
        let held = rotating && !pk.verdict.is_current();
        pending
            .get_or_create(&ConsumerLabel {
                consumer: pk.consumer.clone(),
            })
            .set(i64::from(held));
        let mut s = pk.status();
        s.overdue = held && pk.overdue;
        let line = pk.line().unwrap_or_default();
        if matches!(pk.verdict, Verdict::Unreadable { .. } | Verdict::NoSelector) {
            unreadable.push(line.clone());
        }
        if s.overdue {
            let was = previous.iter().any(|r| r.name == pk.consumer && r.overdue);
            if !was {
                let note = format!("CA rotation held past the consumer's reload deadline: {line}");
                p.event(true, "ConsumerReloadOverdue", note).await;
            }
            overdue.push(line);
        }
        out.push(s);
    }
    if !unreadable.is_empty() {
        p.cond(
            C::CertSignerDegraded,
            true,
            Reason::ConsumerPodsUnreadable,
            unreadable.join("; "),
        );
    }
    if !overdue.is_empty() {
        p.cond(
            C::CertSignerDegraded,
            true,
            Reason::ConsumerNotReloaded,
            format!(
                "CA rotation held past the reload deadline: {}",
                overdue.join("; ")
            ),
        );
    }
    if rotating && pickups.iter().any(|pk| !pk.verdict.is_current()) {
        p.not_yet(
            ControllerName::CertSigner,
            p.o.now + RECHECK,
            "consumer pods checked again",
        );
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
