//! Leader election on a `coordination.k8s.io/v1` Lease: one operator instance acts, the others
//! wait. The holder renews every `renew` interval; another instance takes over once
//! `renewTime + leaseDurationSeconds` has passed. Every write is a replace guarded by the Lease's
//! resourceVersion, so two instances can never both believe they won the same round. The holder
//! acts only until [`renew_deadline`] after its last successful renewal (a pass still running
//! then is cut short), and gives the lease up on SIGTERM ([`release`]).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// The lease's name.
pub const LEASE_NAME: &str = "etcd-operator-lock";

/// Who holds the lease, decided from one observation (pure).
pub fn may_take(lease: &LeaseSpec, me: &str, now: k8s_openapi::jiff::Timestamp) -> bool {
    let holder = lease.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == me {
        return true;
    }
    let duration = i64::from(lease.lease_duration_seconds.unwrap_or(15)) * 1000;
    match &lease.renew_time {
        Some(MicroTime(renewed)) => now.as_millisecond() > renewed.as_millisecond() + duration,
        None => true,
    }
}

/// How long after starting a successful renewal the holder may still act: two thirds of the
/// lease (client-go's renew deadline is 10 s of 15). Another instance takes over only once
/// `renewTime + leaseDurationSeconds` has passed on its own clock, so an instance that stops
/// acting at this deadline never acts together with its successor, with a third of the lease to
/// spare for clock skew and a slow API call.
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

/// Tries to acquire or renew the lease; returns whether this instance leads now.
pub async fn try_lead(
    client: &Client,
    namespace: &str,
    me: &str,
    duration: Duration,
) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let now = k8s_openapi::jiff::Timestamp::now();
    let seconds = i32::try_from(duration.as_secs()).unwrap_or(15);
    match api.get_opt(LEASE_NAME).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.to_owned()),
                    namespace: Some(namespace.to_owned()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me.to_owned()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
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
        Some(mut lease) => {
            let spec = lease.spec.clone().unwrap_or_default();
            if !may_take(&spec, me, now) {
                return Ok(false);
            }
            let taking_over = spec.holder_identity.as_deref() != Some(me);
            let mut next = spec.clone();
            next.holder_identity = Some(me.to_owned());
            next.lease_duration_seconds = Some(seconds);
            next.renew_time = Some(MicroTime(now));
            if taking_over {
                next.acquire_time = Some(MicroTime(now));
                next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            lease.spec = Some(next);
            write(&api, &lease).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> k8s_openapi::jiff::Timestamp {
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn takes_only_a_free_own_or_expired_lease() {
        let held = LeaseSpec {
            holder_identity: Some("other".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(at(0))),
            ..Default::default()
        };
        assert!(!may_take(&held, "me", at(10)));
        assert!(
            !may_take(&held, "me", at(15)),
            "not before the whole lease ran out"
        );
        assert!(may_take(&held, "me", at(16)));
        assert!(may_take(&held, "other", at(1)));
        assert!(may_take(&LeaseSpec::default(), "me", at(0)));
        let released = LeaseSpec {
            holder_identity: None,
            ..held
        };
        assert!(
            may_take(&released, "me", at(1)),
            "a released lease is free at once"
        );
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
