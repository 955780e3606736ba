//! Lists the control-plane pods the quorum gate's rule 10 requires Ready on the other nodes
//! (`spec.controlPlanePods`: kube-apiserver, kube-controller-manager and kube-scheduler in
//! kubeadm's layout) once per pass, before any controller that takes a voter down asks the
//! gate. An empty selector lists nothing; a refused list is kept as such, so the gate holds
//! instead of taking "no pods" for "all Ready".

use crate::api::ControlPlanePodSelector;
use crate::controllers::cert_signer::consumers::{self, Refused};
use membership::ControlPlanePods;

/// The pods `selector` picks, as the gate sees them (sorted by `<namespace>/<name>`), less
/// those of a deleted Node (`known`: Nodes that exist).
pub async fn observe(
    client: &kube::Client,
    selector: &ControlPlanePodSelector,
    known: &std::collections::BTreeSet<String>,
) -> ControlPlanePods {
    if selector.match_labels.is_empty() {
        return ControlPlanePods::NotListed;
    }
    match consumers::list_selected(client, &selector.namespace, &selector.match_labels, known).await
    {
        Ok(pods) => {
            let mut seen: Vec<_> = pods
                .iter()
                .filter_map(consumers::control_plane_pod)
                .collect();
            seen.sort_by(|a, b| a.pod.cmp(&b.pod));
            ControlPlanePods::Listed(seen)
        }
        Err(Refused { message, .. }) => ControlPlanePods::Unreadable(message),
    }
}
