//! Leader election on a `coordination.k8s.io/v1` Lease: one operator instance acts, the others
//! wait. The holder renews every `renew` interval; another instance takes over once
//! `renewTime + leaseDurationSeconds` has passed. Every write is a replace guarded by the Lease's
//! resourceVersion, so two instances can never both believe they won the same round.

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
    let duration = i64::from(lease.lease_duration_seconds.unwrap_or(15));
    match &lease.renew_time {
        Some(MicroTime(renewed)) => {
            let expires = renewed.as_second() + duration;
            now.as_second() > expires
        }
        None => true,
    }
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
            match api
                .replace(LEASE_NAME, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
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
        assert!(may_take(&held, "me", at(16)));
        assert!(may_take(&held, "other", at(1)));
        assert!(may_take(&LeaseSpec::default(), "me", at(0)));
    }
}
