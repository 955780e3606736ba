//! Says what [`super::reload`] decided about each consumer: its entry in
//! `status.certificates.consumers`, metric `etcd_operator_consumer_reload_pending{consumer}`
//! (1 while it has not picked up its Secret's material: a CA rotation waits for it, and after a
//! renewal its pods still present the certificate of before), `CertSignerDegraded` with reason
//! `ConsumerNotReloaded` (not picked up within the consumer's `reload.deadlineSeconds`, in a
//! rotation or after a renewal) or `ConsumerPodsUnreadable` (its pods cannot be listed, or none
//! are named: never taken as picked up), and a warning Event `ConsumerReloadOverdue` when a
//! consumer becomes overdue.

use super::reload::{Pickup, Verdict};
use crate::api::ConsumerStatus;
use crate::controller::ControllerName;
use crate::events::EventReason;
use crate::metrics::ConsumerLabel;
use crate::pass::Pass;
use crate::status::{ConditionType as C, Reason};

/// How soon a whole pass comes back while a consumer is waited for: pods in the consumer's
/// namespace are not watched, so nothing else wakes the operator when one restarts.
pub const RECHECK: time::Duration = time::Duration::seconds(5);
/// The same outside a CA rotation (after a renewal, nothing waits on the consumer: the pass
/// comes back only to see it pick up, and to say so once its deadline passes).
pub const RENEWAL_RECHECK: time::Duration = time::Duration::seconds(30);

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
        pending
            .get_or_create(&ConsumerLabel {
                consumer: pk.consumer.clone(),
            })
            .set(i64::from(!pk.verdict.is_current()));
        let s = pk.status();
        let line = pk.line().unwrap_or_default();
        if matches!(pk.verdict, Verdict::Unreadable { .. } | Verdict::NoSelector) {
            unreadable.push(line.clone());
        }
        if s.overdue {
            let was = previous.iter().any(|r| r.name == pk.consumer && r.overdue);
            if !was {
                let note = format!("{}: {line}", overdue_what(rotating));
                p.event(EventReason::ConsumerReloadOverdue, note).await;
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
            format!("{}: {}", overdue_what(rotating), overdue.join("; ")),
        );
    }
    if pickups.iter().any(|pk| !pk.verdict.is_current()) {
        let every = if rotating { RECHECK } else { RENEWAL_RECHECK };
        p.not_yet(
            ControllerName::CertSigner,
            p.o.now + every,
            "consumer pods checked again",
        );
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What an overdue consumer holds up: a CA rotation waits for it; otherwise (a renewal) it
/// still presents the certificate of before, which etcd accepts until that one expires.
fn overdue_what(rotating: bool) -> &'static str {
    if rotating {
        "CA rotation held past the consumer's reload deadline"
    } else {
        "renewed client certificate not picked up within the consumer's reload deadline (its pods still present the certificate of before, which works until it expires)"
    }
}
