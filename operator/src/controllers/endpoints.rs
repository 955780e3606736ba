//! Endpoints (host endpoints): what etcd's consumers (kube-apiserver's `--etcd-servers`, backup
//! tools) dial. Published as ConfigMap `etcd-endpoints` (member id → `host:port`), voters only
//! (learners reject client traffic; unlike the manifests' `ETCDCTL_ENDPOINTS`, which list every
//! member so that a promotion needs no new revision, this ConfigMap is not part of a revision
//! and costs no restart to change). A promoted learner appears and a removed member (the
//! bootstrap member included) disappears on the next pass.
//!
//! There is no Endpoints object: no consumer reads one (they read this ConfigMap, as
//! cluster-etcd-operator's consumers do), Endpoints is deprecated in favour of EndpointSlice, and
//! kube-apiserver rejects loopback addresses in it, so it could only fail.

use std::collections::BTreeMap;

use membership::Member;

use super::{ControllerError, ControllerName};
use crate::observed::find;
use crate::pass::Pass;
use crate::podspec::{STATIC_POD_NAMESPACE as NS, voter_endpoints};

const NAME: ControllerName = ControllerName::Endpoints;

/// ConfigMap of member id → client address.
pub const ENDPOINTS_CONFIGMAP: &str = "etcd-endpoints";

/// Member id (hex) → `host:port` of every voter with a client URL
/// ([`voter_endpoints`]).
pub fn endpoint_data(members: &[Member]) -> BTreeMap<String, String> {
    voter_endpoints(members)
        .into_iter()
        .map(|(id, url)| (id.to_string(), url.authority().to_owned()))
        .collect()
}

/// Publishes the voters' client addresses (not in a plan).
pub async fn reconcile(p: &mut Pass<'_>) -> Result<(), ControllerError> {
    let _t = p.ctx.metrics.time(NAME.as_str());
    let data = endpoint_data(&p.o.etcd.members);
    p.next(NAME, format!("publish {} voter endpoint(s)", data.len()));
    if !data.is_empty() && !p.w.dry_run() {
        let current = find(&p.inputs.configmaps, NS, ENDPOINTS_CONFIGMAP);
        p.w.configmap(NS, ENDPOINTS_CONFIGMAP, current, &data, None)
            .await
            .map_err(|e| ControllerError::write(NAME, &e))?;
    }
    p.succeeded(NAME);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use membership::{MemberId, MemberUrl};

    #[test]
    fn voters_only_sorted_by_id() {
        let u = |s: &str| -> MemberUrl { s.parse().unwrap() };
        let members = [
            Member::voter(
                MemberId::new(0xb).unwrap(),
                "n2",
                u("https://10.0.0.2:2380"),
            )
            .with_client_url(u("https://10.0.0.2:2379")),
            Member::voter(
                MemberId::new(0xa).unwrap(),
                "n1",
                u("https://10.0.0.1:2380"),
            )
            .with_client_url(u("https://10.0.0.1:2379")),
            Member::unstarted_learner(MemberId::new(0xc).unwrap(), u("https://10.0.0.3:2380")),
        ];
        let data = endpoint_data(&members);
        assert_eq!(
            data,
            BTreeMap::from([
                ("a".to_owned(), "10.0.0.1:2379".to_owned()),
                ("b".to_owned(), "10.0.0.2:2379".to_owned())
            ])
        );
    }
}
