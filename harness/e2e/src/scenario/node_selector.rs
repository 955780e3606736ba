//! `node-selector`: the spec's control-plane selector changes while etcd runs. The operator
//! watches only the Nodes the selector picks, so a new selector starts its Node watch over; the
//! scenario checks that no member is touched while it does (a list made for the old selector,
//! read with the new one, would look like every node left), that a selector the API server
//! would refuse stops the operator with a Degraded condition naming the key and changes
//! nothing, and that fixing it brings the cluster back to settled with the same members.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::harness::{Harness, member_ids};
use crate::controlplane::ControlPlaneError;

const SETTLE: Duration = Duration::from_secs(240);
const LABEL: &str = "etcd.static-operator.io/etcd-node";
const BAD_KEY: &str = "etcd node";

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

pub(super) async fn node_selector(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let before = member_ids(&h.status().await);
    let same = |h: &Harness, ids: &std::collections::BTreeSet<String>, when: &str| {
        if *ids == before {
            Ok(())
        } else {
            Err(failed(format!(
                "{when}: members {ids:?}, before {before:?} ({:?})",
                h.steps.last()
            )))
        }
    };
    let nodes: Api<Node> = Api::all(h.cp.client());
    for n in ["n1", "n2", "n3"] {
        let patch = serde_json::json!({"metadata": {"labels": {LABEL: "true"}}});
        nodes
            .patch(n, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    h.step(format!("n1, n2 and n3 labelled {LABEL}=true"));

    // A new selector that picks the same nodes: the watch starts over, nothing else moves.
    h.patch_spec(serde_json::json!({"controlPlaneNodeSelector": {LABEL: "true"}}))
        .await?;
    let wanted = h.generation().await?;
    let s = h
        .wait_status("the operator settled on the new selector", SETTLE, |s| {
            s.observed_generation >= Some(wanted) && crate::view::settled(s, 3)
        })
        .await?;
    same(h, &member_ids(&s), "after the new selector")?;

    // A key the API server would refuse in a label selector: Degraded, and nothing changes.
    h.patch_spec(serde_json::json!({"controlPlaneNodeSelector": {LABEL: null, BAD_KEY: "true"}}))
        .await?;
    let s = h
        .wait_status(
            "MembershipControllerDegraded names the invalid key",
            SETTLE,
            |s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "MembershipControllerDegraded"
                        && c.status == "True"
                        && c.message.contains(&format!("{BAD_KEY:?}"))
                })
            },
        )
        .await?;
    same(h, &member_ids(&s), "with the invalid selector")?;

    // Fixed: the condition clears and the cluster is settled with the same members.
    h.patch_spec(serde_json::json!({"controlPlaneNodeSelector": {BAD_KEY: null, LABEL: "true"}}))
        .await?;
    let s = h
        .wait_status("the selector fixed, settled again", SETTLE, |s| {
            crate::view::settled(s, 3)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "MembershipControllerDegraded" && c.status == "False")
        })
        .await?;
    same(h, &member_ids(&s), "after the fix")
}
