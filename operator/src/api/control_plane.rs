//! What the operator knows of the control plane around etcd: the control-plane pods the quorum
//! gate requires Ready on the other nodes (`spec.controlPlanePods`), and an admin's approval to
//! restart a lone voter (`spec.loneVoterRestart`).

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// `spec.loneVoterRestart`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoneVoterRestart {
    /// Revisions up to this one may be installed on a lone voter's node, each restart an
    /// outage for as long as etcd takes to start. The waiting revision is named in
    /// `NodeInstallerProgressing`, `plan`, metric
    /// `etcd_operator_lone_voter_restart_pending_revision` and alert
    /// `EtcdLoneVoterRestartPending`. Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("approvedRevision must be at least 1"))]
    pub approved_revision: Option<i64>,
}

impl LoneVoterRestart {
    pub fn is_unset(&self) -> bool {
        self.approved_revision.is_none()
    }

    /// The restart into `revision` is approved.
    pub fn approves(&self, revision: i64) -> bool {
        self.approved_revision.is_some_and(|a| a >= revision)
    }
}

/// `spec.controlPlanePods`: kubeadm's static pods by default.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlanePodSelector {
    /// Their namespace (default `kube-system`). The operator needs `list` on pods there (Role
    /// `etcd-operator-kube-apiserver-pods` in the shipped manifests grants it in kube-system).
    #[serde(default = "kube_system")]
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("namespace must be a DNS label"))]
    pub namespace: String,
    /// Labels every such pod carries (default `tier: control-plane`). Empty: no pod is
    /// checked. Pods that cannot be listed hold every voter's removal and restart.
    #[serde(default = "control_plane_labels")]
    pub match_labels: BTreeMap<String, String>,
}

impl Default for ControlPlanePodSelector {
    fn default() -> Self {
        Self {
            namespace: kube_system(),
            match_labels: control_plane_labels(),
        }
    }
}

fn kube_system() -> String {
    "kube-system".to_owned()
}

fn control_plane_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("tier".to_owned(), "control-plane".to_owned())])
}
