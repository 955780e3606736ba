//! Leader election on a `coordination.k8s.io/v1` Lease: one operator instance acts, the others
//! wait. The holder renews every `renew` interval. Another instance takes over once the Lease
//! has not changed for `leaseDurationSeconds` **as timed on its own monotonic clock** from when
//! it saw the record change last ([`observe`], [`may_take`]), the way client-go does: the
//! holder's `renewTime` is written for people to read and never compared with another machine's
//! clock, so a holder whose wall clock runs ahead or behind cannot make its lease look expired
//! (or valid) to a standby. A standby that just started has seen no change yet and waits a whole
//! lease. Every write is a replace guarded by the Lease's resourceVersion, so two instances can
//! never both believe they won the same round. The holder acts only until [`renew_deadline`]
//! after its last successful renewal (a pass still running then is cut short), and gives the
//! lease up on SIGTERM ([`release`]).
//!
//! ```text
//!  holder:   renew ──────────── act until asked + 2/3 L ┤
//!  standby:      sees the change ─────────────── L ───────────────┤ may take
//! ```

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

/// The lease's name.
pub const LEASE_NAME: &str = "etcd-operator-lock";

/// The parts of a Lease whose change shows that its holder is alive.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    renew_time: Option<MicroTime>,
    transitions: Option<i32>,
    duration_seconds: Option<i32>,
    resource_version: Option<String>,
}

impl Record {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.unwrap_or_default(),
            renew_time: spec.renew_time,
            transitions: spec.lease_transitions,
            duration_seconds: spec.lease_duration_seconds,
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

/// What this instance last saw of the Lease, and since when (on its own monotonic clock) it has
/// seen it unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    record: Record,
    since: Instant,
}

/// The observation after reading `lease` at `now` (pure): `since` stays while the record is the
/// one seen before, and is `now` when it changed or is seen for the first time.
pub fn observe(last: Option<&Observed>, lease: &Lease, now: Instant) -> Observed {
    let record = Record::of(lease);
    match last {
        Some(last) if last.record == record => Observed {
            record,
            since: last.since,
        },
        _ => Observed { record, since: now },
    }
}

/// Whether `me` may take (or renew) the lease it observed as `seen`, at `now` on the same clock
/// (pure): a free lease or its own at once, another holder's only once the lease's
/// `leaseDurationSeconds` passed since `seen` last changed.
pub fn may_take(seen: &Observed, me: &str, now: Instant) -> bool {
    let holder = seen.record.holder.as_str();
    if holder.is_empty() || holder == me {
        return true;
    }
    let seconds = seen.record.duration_seconds.unwrap_or(15);
    let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    now.saturating_duration_since(seen.since) > duration
}

/// How long after starting a successful renewal the holder may still act: two thirds of the
/// lease (client-go's renew deadline is 10 s of 15). Another instance takes over only once the
/// whole lease passed on its own clock since it saw that renewal, which it can only see after
/// the renewal was asked for, so an instance that stops acting at this deadline never acts
/// together with its successor, with a third of the lease to spare for clocks running at
/// slightly different rates and a slow API call. Wall-clock offsets between the machines do not
/// matter.
pub fn renew_deadline(lease_duration: Duration) -> Duration {
    lease_duration * 2 / 3
}

/// Replaces the Lease, guarded by the resourceVersion it was read at: false when another
/// instance wrote it in between (409).
async fn write(api: &Api<Lease>, lease: &Lease) -> Result<bool, kube::Error> {
    match api.replace(LEASE_NAME, &PostParams::default(), lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the lease up (SIGTERM): the holder is cleared, so a standby takes over at its next
/// try instead of after the lease runs out. Only a lease this instance holds is touched.
pub async fn release(client: &Client, namespace: &str, me: &str) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let Some(mut lease) = api.get_opt(LEASE_NAME).await? else {
        return Ok(false);
    };
    let mut spec = lease.spec.clone().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(me) {
        return Ok(false);
    }
    spec.holder_identity = None;
    lease.spec = Some(spec);
    write(&api, &lease).await
}

/// Tries to acquire or renew the lease; returns whether this instance leads now. `seen` is
/// this instance's observation of the Lease, kept between calls (start with `None`): it is
/// updated from every read, timed by the monotonic clock when the answer arrived.
pub async fn try_lead(
    client: &Client,
    namespace: &str,
    me: &str,
    duration: Duration,
    seen: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let wall = k8s_openapi::jiff::Timestamp::now();
    let seconds = i32::try_from(duration.as_secs()).unwrap_or(15);
    let Some(mut lease) = api.get_opt(LEASE_NAME).await? else {
        return create(&api, namespace, me, seconds, wall).await;
    };
    let now = Instant::now();
    let observed = observe(seen.as_ref(), &lease, now);
    let free = may_take(&observed, me, now);
    *seen = Some(observed);
    if !free {
        return Ok(false);
    }
    let spec = lease.spec.clone().unwrap_or_default();
    let taking_over = spec.holder_identity.as_deref() != Some(me);
    let mut next = spec.clone();
    next.holder_identity = Some(me.to_owned());
    next.lease_duration_seconds = Some(seconds);
    next.renew_time = Some(MicroTime(wall));
    if taking_over {
        next.acquire_time = Some(MicroTime(wall));
        next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    lease.spec = Some(next);
    write(&api, &lease).await
}

/// Creates the Lease held by `me`: false when another instance created it first (409).
async fn create(
    api: &Api<Lease>,
    namespace: &str,
    me: &str,
    seconds: i32,
    wall: k8s_openapi::jiff::Timestamp,
) -> Result<bool, kube::Error> {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(me.to_owned()),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(MicroTime(wall)),
            renew_time: Some(MicroTime(wall)),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    match api.create(&PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wall-clock time `s` seconds after a fixed origin (what a holder writes).
    fn wall(s: i64) -> MicroTime {
        MicroTime(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + s).unwrap())
    }

    /// The Lease as `holder` wrote it at its `version`th write, stamped `renewed` by its clock.
    fn lease(holder: Option<&str>, renewed: i64, version: u64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.to_string()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(15),
                renew_time: Some(wall(renewed)),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        }
    }

    /// A standby reading the Lease every 5 s of its own clock while the holder, whose clock reads
    /// `skew` seconds off, renews every 5 s until `renewals` writes were made. Returns the
    /// standby's times (seconds since it started) at which it may take the lease.
    fn standby_may_take_at(skew: i64, renewals: u64, polls: u64) -> Vec<u64> {
        let t0 = Instant::now();
        let mut seen: Option<Observed> = None;
        let mut free = Vec::new();
        for k in 0..polls {
            let version = k.min(renewals - 1);
            let renewed = skew + 5 * i64::try_from(version).unwrap();
            let current = lease(Some("holder"), renewed, version + 1);
            // The standby reads a second after each renewal.
            let now = t0 + Duration::from_secs(5 * k + 1);
            let observed = observe(seen.as_ref(), &current, now);
            if may_take(&observed, "standby", now) {
                free.push(5 * k + 1);
            }
            seen = Some(observed);
        }
        free
    }

    #[test]
    fn takes_only_a_free_own_or_expired_lease() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let held = lease(Some("other"), 0, 1);
        let seen = observe(None, &held, s(0));
        assert!(!may_take(&seen, "me", s(10)));
        assert!(
            !may_take(&seen, "me", s(15)),
            "not before the whole lease ran out"
        );
        assert!(may_take(&seen, "me", s(16)));
        assert!(may_take(&seen, "other", s(1)));
        assert!(may_take(
            &observe(None, &Lease::default(), s(0)),
            "me",
            s(0)
        ));
        let released = lease(None, 0, 2);
        assert!(
            may_take(&observe(Some(&seen), &released, s(1)), "me", s(1)),
            "a released lease is free at once"
        );
    }

    #[test]
    fn any_change_of_the_record_restarts_the_wait() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let first = observe(None, &lease(Some("a"), 0, 1), s(0));
        let same = observe(Some(&first), &lease(Some("a"), 0, 1), s(10));
        assert_eq!(same, first, "an unchanged record keeps its first sight");
        assert!(may_take(&same, "me", s(16)));
        // Only the resourceVersion moved (a holder whose clock stood still), or only the holder.
        for changed in [lease(Some("a"), 0, 2), lease(Some("b"), 0, 1)] {
            let now = observe(Some(&first), &changed, s(10));
            assert!(!may_take(&now, "me", s(16)), "{changed:?}");
            assert!(may_take(&now, "me", s(26)), "{changed:?}");
        }
    }

    #[test]
    fn a_holder_whose_clock_runs_far_ahead_keeps_the_lease_only_while_it_renews() {
        // renewTime an hour in the standby's future: the lease never looks expired by wall
        // clock, yet once renewals stop the standby takes it after a lease of its own time.
        let free = standby_may_take_at(3600, 4, 12);
        // Last renewal seen at 16 s (the fourth read); free once more than 15 s passed.
        assert_eq!(free, vec![36, 41, 46, 51, 56]);
    }

    #[test]
    fn a_holder_whose_clock_runs_far_behind_keeps_the_lease_while_it_renews() {
        // renewTime an hour in the standby's past: every renewal looks long expired by wall
        // clock, yet the standby waits while the record keeps changing.
        assert_eq!(standby_may_take_at(-3600, 12, 12), Vec::<u64>::new());
        assert_eq!(standby_may_take_at(-3600, 4, 12), vec![36, 41, 46, 51, 56]);
    }

    #[test]
    fn a_fresh_standby_waits_a_whole_lease() {
        // The holder stopped renewing long ago (by any clock), but this instance has just
        // started: it has seen no change, so it cannot tell a dead holder from a live one yet.
        let t0 = Instant::now();
        let stale = lease(Some("gone"), -86_400, 7);
        let seen = observe(None, &stale, t0);
        for later in [0, 5, 10, 15] {
            let now = t0 + Duration::from_secs(later);
            let seen = observe(Some(&seen), &stale, now);
            assert!(!may_take(&seen, "me", now), "taken after {later} s");
        }
        let now = t0 + Duration::from_millis(15_001);
        assert!(may_take(&observe(Some(&seen), &stale, now), "me", now));
    }

    #[test]
    fn the_holder_stops_acting_a_third_of_the_lease_before_anyone_may_take_it() {
        assert_eq!(
            renew_deadline(Duration::from_secs(15)),
            Duration::from_secs(10)
        );
        assert_eq!(
            renew_deadline(Duration::from_secs(6)),
            Duration::from_secs(4)
        );
    }
}
