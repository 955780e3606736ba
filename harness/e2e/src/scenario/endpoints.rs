//! What `etcd-endpoints` publishes, as a consumer reads it: every control-plane node with its
//! member and vote (annotation `etcd.static-operator.io/nodes`, read with the operator's own
//! [`read_nodes`]), consistent with the voters' addresses in `data` (what a reader that dials
//! every value dials).

use std::net::IpAddr;
use std::time::Duration;

use etcd_operator::controllers::host_endpoints::{ENDPOINTS_CONFIGMAP, EndpointNode, read_nodes};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::harness::Harness;
use crate::controlplane::{ControlPlaneError, STATIC_NS, wait_for};

/// Bound on the next pass publishing what etcd shows.
const PUBLISHED: Duration = Duration::from_secs(30);

/// Waits until `etcd-endpoints` lists exactly the control plane's nodes, sorted by name, each a
/// voter at `https://<its address>:2379`, and `data` holds each one's member id →
/// `<address>:2379`.
pub(super) async fn every_node_published(h: &Harness) -> Result<(), ControlPlaneError> {
    let mut nodes: Vec<(&str, IpAddr)> =
        h.cp.nodes
            .iter()
            .map(|n| (n.name.as_str(), n.ip()))
            .collect();
    nodes.sort();
    let nodes = &nodes;
    let api: Api<ConfigMap> = Api::namespaced(h.cp.client(), STATIC_NS);
    let what = format!("{ENDPOINTS_CONFIGMAP} to list every node as a voter: {nodes:?}");
    wait_for(PUBLISHED, &what, || async {
        let cm = api
            .get_opt(ENDPOINTS_CONFIGMAP)
            .await
            .map_err(|e| format!("reading {ENDPOINTS_CONFIGMAP}: {e}"))?
            .ok_or("not published yet")?;
        let listed = read_nodes(&cm).map_err(|e| format!("the nodes annotation: {e}"))?;
        let data = cm.data.clone().unwrap_or_default();
        check(&listed, &data, nodes)
    })
    .await
}

/// `listed` is `nodes`, in order, every one a voter whose member `data` lists at its address.
fn check(
    listed: &[EndpointNode],
    data: &std::collections::BTreeMap<String, String>,
    nodes: &[(&str, IpAddr)],
) -> Result<(), String> {
    let names: Vec<&str> = listed.iter().map(|n| n.node.as_str()).collect();
    let wanted: Vec<&str> = nodes.iter().map(|(n, _)| *n).collect();
    if names != wanted {
        return Err(format!("nodes {names:?}, wanted {wanted:?}: {listed:?}"));
    }
    for (n, (_, ip)) in listed.iter().zip(nodes) {
        let addr = format!("{}:2379", membership::url_host(*ip));
        let in_data = n.member_id.as_ref().and_then(|id| data.get(id));
        if !n.voter || n.client_url != format!("https://{addr}") || in_data != Some(&addr) {
            return Err(format!("{n:?} (data {data:?}): not a voter at {addr}"));
        }
    }
    Ok(())
}
