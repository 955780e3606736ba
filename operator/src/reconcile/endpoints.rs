//! Host endpoints: what etcd's consumers (kube-apiserver's `--etcd-servers`, backup tools) dial.
//! Published as ConfigMap `etcd-endpoints` (member id → `host:port`) and Endpoints `etcd`, voters
//! only (learners reject client traffic), from the same function that fills the manifests'
//! `ETCDCTL_ENDPOINTS`. A promoted learner appears and a removed member (the bootstrap member
//! included) disappears on the next pass.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints};
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};
use membership::Member;

use crate::podspec::voter_endpoints;

/// ConfigMap of member id → client address.
pub const ENDPOINTS_CONFIGMAP: &str = "etcd-endpoints";
/// Endpoints object name.
pub const ENDPOINTS_NAME: &str = "etcd";

/// Member id (hex) → `host:port` of every voter with a client URL
/// ([`voter_endpoints`], the same selection as the manifests' `ETCDCTL_ENDPOINTS`).
pub fn endpoint_data(members: &[Member]) -> BTreeMap<String, String> {
    voter_endpoints(members)
        .into_iter()
        .map(|(id, url)| (id.to_string(), url.authority().to_owned()))
        .collect()
}

/// The Endpoints object for `data`.
pub fn endpoints_object(namespace: &str, data: &BTreeMap<String, String>) -> Endpoints {
    let mut ips: Vec<String> = data
        .values()
        .filter_map(|a| {
            a.rsplit_once(':')
                .map(|(h, _)| h.trim_matches(['[', ']']).to_owned())
        })
        .collect();
    ips.sort();
    ips.dedup();
    Endpoints {
        metadata: ObjectMeta {
            name: Some(ENDPOINTS_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        subsets: (!ips.is_empty()).then(|| {
            vec![EndpointSubset {
                addresses: Some(
                    ips.into_iter()
                        .map(|ip| EndpointAddress {
                            ip,
                            ..Default::default()
                        })
                        .collect(),
                ),
                ports: Some(vec![EndpointPort {
                    name: Some("etcd".to_owned()),
                    port: 2379,
                    protocol: Some("TCP".to_owned()),
                    ..Default::default()
                }]),
                ..Default::default()
            }]
        }),
    }
}

/// Applies the Endpoints object (server-side apply; unchanged content writes nothing new).
pub async fn apply_endpoints(
    client: &Client,
    namespace: &str,
    object: &Endpoints,
) -> Result<(), kube::Error> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), namespace);
    api.patch(
        ENDPOINTS_NAME,
        &PatchParams::apply("etcd-operator").force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
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
        let ep = endpoints_object("etcd", &data);
        let addrs: Vec<String> = ep.subsets.unwrap()[0]
            .addresses
            .clone()
            .unwrap()
            .into_iter()
            .map(|a| a.ip)
            .collect();
        assert_eq!(addrs, ["10.0.0.1", "10.0.0.2"]);
    }
}
