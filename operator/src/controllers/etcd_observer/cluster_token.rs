//! The cluster's initial-cluster token, which every revision carries
//! (`ETCD_INITIAL_CLUSTER_TOKEN`).
//!
//! etcd keeps no record of the token it was made with, so the operator learns it from where it
//! was written: `etcd-operator render` puts a new token into the bootstrap manifest, and
//! `etcd-recover from-snapshot` puts its restore's token into the manifest it leaves; both run as
//! static pods whose mirror pods the operator sees. A token is taken only when it provably made
//! the live cluster: etcd derives a new cluster's member id from the peer URL and the token, and
//! the cluster id from the member ids ([`membership::new_cluster_member_id`],
//! [`membership::new_cluster_id`]), so a pod's `(peer URL, token)` that gives the live cluster id
//! is that cluster's. What was learned is kept in `status.clusterIdentity` with the cluster id,
//! so it survives the bootstrap manifest's replacement and an operator restart; once etcd answers
//! with another cluster id (a restore made a new cluster), the record no longer counts and the
//! token is learned anew from the restored node's manifest.
//!
//! Pure ([`learn`]): the previous record, the live cluster id and the etcd pods in, the record
//! out. A cluster bootstrapped before tokens were written (no pod carries one that fits) has no
//! record, and revisions keep etcd's default token (no `ETCD_INITIAL_CLUSTER_TOKEN`), as before.

use k8s_openapi::api::core::v1::Pod;
use membership::{new_cluster_id, new_cluster_member_id};

use crate::api::ClusterIdentity;

/// One etcd static pod's peer URL and token: what might have made the live cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenCandidate {
    /// `<namespace>/<name>` of the pod.
    pub pod: String,
    pub peer_url: String,
    pub token: String,
}

impl TokenCandidate {
    /// The id of the one-member cluster this peer URL and token make.
    fn cluster_id(&self) -> Option<u64> {
        let member = new_cluster_member_id(&[self.peer_url.as_str()], &self.token)?;
        new_cluster_id(&[member])
    }
}

/// The `(peer URL, token)` of every etcd pod (label `app=etcd`, container `etcd`) that sets
/// `ETCD_INITIAL_CLUSTER_TOKEN`, sorted by pod.
pub fn candidates(pods: &[Pod]) -> Vec<TokenCandidate> {
    let mut out: Vec<TokenCandidate> = pods
        .iter()
        .filter(|pod| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .is_some_and(|a| a == "etcd")
        })
        .filter_map(|pod| {
            let etcd = pod
                .spec
                .as_ref()?
                .containers
                .iter()
                .find(|c| c.name == "etcd")?;
            let var = |name: &str| {
                etcd.env
                    .iter()
                    .flatten()
                    .find(|e| e.name == name)
                    .and_then(|e| e.value.clone())
                    .filter(|v| !v.is_empty())
            };
            Some(TokenCandidate {
                pod: format!(
                    "{}/{}",
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.metadata.name.as_deref().unwrap_or_default()
                ),
                peer_url: var("ETCD_INITIAL_ADVERTISE_PEER_URLS")?,
                token: var("ETCD_INITIAL_CLUSTER_TOKEN")?,
            })
        })
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

/// The record for the live cluster `live` (`None`: etcd was not read; the record stays): the
/// previous one while it names this cluster, else the first candidate whose peer URL and token
/// make this cluster id, else none (the token is not known).
pub fn learn(
    prev: Option<&ClusterIdentity>,
    live: Option<u64>,
    candidates: &[TokenCandidate],
) -> Option<ClusterIdentity> {
    let Some(live) = live else {
        return prev.cloned();
    };
    let live_hex = format!("{live:x}");
    if let Some(p) = prev.filter(|p| p.cluster_id == live_hex) {
        return Some(p.clone());
    }
    candidates
        .iter()
        .find(|c| c.cluster_id() == Some(live))
        .map(|c| ClusterIdentity {
            cluster_id: live_hex,
            initial_cluster_token: c.token.clone(),
            learned_from: c.pod.clone(),
        })
}

/// Learns the token of the cluster the etcd observer just read, and says when it changed.
pub fn track(p: &mut crate::pass::Pass<'_>) {
    let found = learn(
        p.status.cluster_identity.as_ref(),
        p.o.etcd.cluster_id,
        &candidates(&p.inputs.pods),
    );
    if found != p.status.cluster_identity {
        match &found {
            Some(id) => p.note(format!(
                "cluster {} was made with initial-cluster token {} (read from {}): every revision carries it",
                id.cluster_id, id.initial_cluster_token, id.learned_from
            )),
            None => p.note(
                "the live cluster's initial-cluster token is not known: revisions keep etcd's default",
            ),
        }
    }
    p.status.cluster_identity = found;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn candidate(pod: &str, peer_url: &str, token: &str) -> TokenCandidate {
        TokenCandidate {
            pod: format!("etcd/{pod}"),
            peer_url: peer_url.into(),
            token: token.into(),
        }
    }

    fn made_by(peer_url: &str, token: &str) -> u64 {
        candidate("x", peer_url, token).cluster_id().unwrap()
    }

    const N1: &str = "https://10.0.0.1:2380";

    #[test]
    fn the_token_that_made_the_live_cluster_is_learned_and_kept() {
        let live = made_by(N1, "etcd-render");
        let pods = [
            candidate("etcd-pod-n2", "https://10.0.0.2:2380", "etcd-other"),
            candidate("etcd-pod-n1", N1, "etcd-render"),
        ];
        let learned = learn(None, Some(live), &pods).unwrap();
        assert_eq!(learned.initial_cluster_token, "etcd-render");
        assert_eq!(learned.cluster_id, format!("{live:x}"));
        assert_eq!(learned.learned_from, "etcd/etcd-pod-n1");
        // Kept once the bootstrap manifest is gone, and while etcd is not read.
        assert_eq!(
            learn(Some(&learned), Some(live), &[]),
            Some(learned.clone())
        );
        assert_eq!(learn(Some(&learned), None, &[]), Some(learned));
    }

    #[test]
    fn a_restore_replaces_the_token() {
        let old = learn(
            None,
            Some(made_by(N1, "etcd-render")),
            &[candidate("etcd-pod-n1", N1, "etcd-render")],
        )
        .unwrap();
        // The restore made a new cluster on n1 with its own token; n2 still runs the old one.
        let restored = made_by(N1, "etcd-recover-20261127T010203Z");
        let pods = [
            candidate("etcd-pod-n1", N1, "etcd-recover-20261127T010203Z"),
            candidate("etcd-pod-n2", "https://10.0.0.2:2380", "etcd-render"),
        ];
        let new = learn(Some(&old), Some(restored), &pods).unwrap();
        assert_eq!(new.initial_cluster_token, "etcd-recover-20261127T010203Z");
        // No pod shows the restore's token yet: not known, never the old cluster's.
        assert_eq!(learn(Some(&old), Some(restored), &pods[1..]), None);
    }

    #[test]
    fn a_cluster_made_with_the_default_token_has_none() {
        // Bootstrapped before render wrote tokens: no pod carries one that fits.
        let live = made_by(N1, "etcd-cluster");
        assert_eq!(
            learn(None, Some(live), &[candidate("etcd-pod-n2", N1, "etcd-x")]),
            None
        );
    }

    #[test]
    fn candidates_come_from_etcd_pods_that_set_a_token() {
        let pod = |name: &str, app: &str, token: Option<&str>| -> Pod {
            let mut env =
                vec![serde_json::json!({"name": "ETCD_INITIAL_ADVERTISE_PEER_URLS", "value": N1})];
            if let Some(t) = token {
                env.push(serde_json::json!({"name": "ETCD_INITIAL_CLUSTER_TOKEN", "value": t}));
            }
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "etcd", "labels": {"app": app}},
                "spec": {"containers": [{"name": "etcd", "env": env}]},
            }))
            .unwrap()
        };
        let pods = [
            pod("etcd-pod-n3", "etcd", Some("etcd-t")),
            pod("guard-n1", "guard", Some("etcd-t")),
            pod("etcd-pod-n2", "etcd", None),
            pod("etcd-pod-n1", "etcd", Some("etcd-t")),
        ];
        let got: Vec<String> = candidates(&pods).into_iter().map(|c| c.pod).collect();
        assert_eq!(got, ["etcd/etcd-pod-n1", "etcd/etcd-pod-n3"]);
    }
}
