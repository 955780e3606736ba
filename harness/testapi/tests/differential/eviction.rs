//! The differential case "disruption budgets and eviction": PodDisruptionBudgets, the status
//! the disruption controller gives them, and the pod eviction subresource (what `kubectl drain`
//! meets), run against kube-apiserver + controller-manager and the stand-in alike.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::outcome;

/// A PodDisruptionBudget's status, reduced to what the disruption controller decides.
fn budget_summary(pdb: &PodDisruptionBudget) -> Value {
    let status = pdb.status.clone().unwrap_or_default();
    let condition = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed");
    json!({
        "currentHealthy": status.current_healthy.unwrap_or(0),
        "desiredHealthy": status.desired_healthy.unwrap_or(0),
        "disruptionsAllowed": status.disruptions_allowed.unwrap_or(0),
        "expectedPods": status.expected_pods.unwrap_or(0),
        "generation observed": status.observed_generation == pdb.metadata.generation,
        "disruptedPods": status.disrupted_pods.unwrap_or_default().into_keys().collect::<Vec<_>>(),
        "condition": condition.map(|c| format!("{} {} {}", c.status, c.reason, c.message)),
    })
}

/// The disruption controller has written a condition on the budget.
fn has_conditions(p: &PodDisruptionBudget) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// Waits (30 s at most) for a budget's status to satisfy `done`; panics with what it saw.
async fn budget_when(
    pdbs: &Api<PodDisruptionBudget>,
    name: &str,
    done: impl Fn(&PodDisruptionBudget) -> bool,
) -> PodDisruptionBudget {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let pdb = pdbs.get(name).await.unwrap();
        if done(&pdb) {
            return pdb;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "budget {name} not as expected within 30s; last seen: {}",
            serde_json::to_string(&pdb.status).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn observed(pdb: &PodDisruptionBudget) -> bool {
    pdb.status.as_ref().and_then(|s| s.observed_generation) == pdb.metadata.generation
}

/// What an eviction answered: the Status of success, or the error's code, reason and causes.
fn eviction_summary(r: Result<kube::core::Status, kube::Error>) -> Value {
    let causes = |d: Option<kube::core::response::StatusDetails>| -> Vec<String> {
        d.map(|d| {
            d.causes
                .into_iter()
                .map(|c| format!("{}: {}", c.reason, c.message))
                .collect()
        })
        .unwrap_or_default()
    };
    match r {
        Ok(s) => json!({"status": s.status, "code": s.code}),
        Err(kube::Error::Api(s)) => {
            let s = *s;
            json!({"code": s.code, "reason": s.reason, "causes": causes(s.details)})
        }
        Err(other) => json!({"error": other.to_string()}),
    }
}

/// What became of an evicted pod.
async fn pod_after(pods: &Api<Pod>, name: &str) -> Value {
    match pods.get_opt(name).await.unwrap() {
        None => json!("gone"),
        Some(p) => {
            let target = p
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "DisruptionTarget")
                .map(|c| format!("{} {}", c.status, c.reason.unwrap_or_default()));
            json!({"being deleted": p.metadata.deletion_timestamp.is_some(), "DisruptionTarget": target})
        }
    }
}

/// PodDisruptionBudgets, their status (the disruption controller's) and the pod eviction
/// subresource, with bare pods bound to a Node and made Running (Ready or not) through their
/// status, as a kubelet would.
pub(super) async fn disruption_budgets(client: Client, ns: String) -> Value {
    let pp = PostParams::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let node = format!("pdb-{ns}");
    let node_obj: Node = serde_json::from_value(json!({"metadata": {"name": node}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&pp, &node_obj)
        .await
        .unwrap();
    let owner = ConfigMap {
        metadata: ObjectMeta {
            name: Some("owner".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let owner = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&pp, &owner)
        .await
        .unwrap();
    // The controller-manager makes the namespace's default ServiceAccount, which pods need.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while accounts.get_opt("default").await.unwrap().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no default ServiceAccount in {ns}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (name, app, status) in [
        ("p1", "g", Some(true)),
        ("p2", "g", Some(true)),
        ("p3", "g", Some(true)),
        ("p4", "g", Some(false)),
        ("pending", "g", None),
        ("ih", "ih", Some(false)),
        ("aa", "aa", Some(false)),
        ("owned", "owned", Some(true)),
    ] {
        let mut pod = json!({"metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}});
        if name == "owned" {
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
                "name": "owner", "uid": owner.metadata.uid, "controller": true}]);
        }
        pods.create(&pp, &serde_json::from_value(pod).unwrap())
            .await
            .unwrap();
        if let Some(ready) = status {
            let ready = if ready { "True" } else { "False" };
            let status = json!({"status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": ready}]}});
            pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
                .await
                .unwrap();
        }
    }
    let pdb = |name: &str, spec: Value| -> PodDisruptionBudget {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let by_app = |app: &str| json!({"matchLabels": {"app": app}});
    let mut out = BTreeMap::new();
    let created = pdbs
        .create(
            &pp,
            &pdb(
                "budget",
                json!({"minAvailable": 2, "selector": by_app("g")}),
            ),
        )
        .await
        .unwrap();
    out.insert("status on create", budget_summary(&created));
    let settled = budget_when(&pdbs, "budget", |p| {
        observed(p)
            && p.status
                .as_ref()
                .is_some_and(|s| s.disruptions_allowed == Some(1))
    })
    .await;
    out.insert(
        "budget minAvailable 2 over 3 ready pods of 5",
        budget_summary(&settled),
    );
    for (name, spec) in [
        ("both set", json!({"minAvailable": 1, "maxUnavailable": 1})),
        ("negative minAvailable", json!({"minAvailable": -1})),
        (
            "maxUnavailable over 100%",
            json!({"maxUnavailable": "150%"}),
        ),
        ("not a percentage", json!({"minAvailable": "half"})),
        (
            "unknown unhealthyPodEvictionPolicy",
            json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "Sometimes"}),
        ),
        (
            "In without values",
            json!({"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
        ),
    ] {
        out.insert(name, outcome(pdbs.create(&pp, &pdb("invalid", spec)).await));
    }
    let negative = json!({"status": {"disruptionsAllowed": -1, "currentHealthy": 0,
        "desiredHealthy": 0, "expectedPods": -1}});
    let negative = pdbs
        .patch_status("budget", &PatchParams::default(), &Patch::Merge(negative))
        .await;
    out.insert("negative status counters", outcome(negative));

    let evict = |name: &'static str, dry_run: bool| {
        let pods = pods.clone();
        async move {
            let mut ep = EvictParams::default();
            ep.post_options.dry_run = dry_run;
            eviction_summary(pods.evict(name, &ep).await)
        }
    };
    let raw = |name: &'static str, body: Value| {
        let pods = pods.clone();
        async move {
            eviction_summary(
                pods.create_subresource("eviction", name, &PostParams::default(), &body)
                    .await,
            )
        }
    };
    let eviction = |name: &str, delete_options: Value| {
        json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns}, "deleteOptions": delete_options})
    };
    out.insert("evict p1, dry run", evict("p1", true).await);
    let after_dry_run = pdbs.get("budget").await.unwrap();
    out.insert(
        "budget unchanged by the dry run",
        json!(after_dry_run.metadata.resource_version == settled.metadata.resource_version),
    );
    out.insert("p1 after the dry run", pod_after(&pods, "p1").await);
    out.insert("evict p1 (Ready)", evict("p1", false).await);
    out.insert("p1 after its eviction", pod_after(&pods, "p1").await);
    let spent = budget_when(&pdbs, "budget", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.current_healthy == Some(2) && s.disrupted_pods.as_ref().is_none_or(|d| d.is_empty())
        })
    })
    .await;
    out.insert("budget after evicting p1", budget_summary(&spent));
    out.insert(
        "evict p2 (Ready) with no disruption left",
        evict("p2", false).await,
    );
    // A budget without a selector selects nothing, so p4 still has exactly one budget.
    pdbs.create(&pp, &pdb("nil-selector", json!({"minAvailable": 1})))
        .await
        .unwrap();
    let nothing = budget_when(&pdbs, "nil-selector", observed).await;
    out.insert("budget with no selector", budget_summary(&nothing));
    out.insert(
        "evict p4 (not Ready, IfHealthyBudget, budget met)",
        evict("p4", false).await,
    );
    out.insert("p4 after its eviction", pod_after(&pods, "p4").await);
    let name_differs = raw("p3", eviction("p2", json!(null))).await;
    out.insert("eviction body naming another pod", name_differs);
    out.insert("evict a missing pod", evict("no-such-pod", false).await);
    let wrong_uid = raw(
        "pending",
        eviction("pending", json!({"preconditions": {"uid": "not-it"}})),
    )
    .await;
    out.insert(
        "evict a Pending pod with a wrong uid precondition",
        wrong_uid,
    );
    out.insert("evict a Pending pod", evict("pending", false).await);
    out.insert(
        "pending after its eviction",
        pod_after(&pods, "pending").await,
    );

    pdbs.create(
        &pp,
        &pdb(
            "strict",
            json!({"minAvailable": 1, "selector": by_app("ih")}),
        ),
    )
    .await
    .unwrap();
    let strict = budget_when(&pdbs, "strict", observed).await;
    out.insert("budget of one unready pod", budget_summary(&strict));
    out.insert(
        "evict an unready pod, IfHealthyBudget, budget not met",
        evict("ih", false).await,
    );
    let always = json!({"minAvailable": 1, "selector": by_app("aa"), "unhealthyPodEvictionPolicy": "AlwaysAllow"});
    pdbs.create(&pp, &pdb("always", always)).await.unwrap();
    budget_when(&pdbs, "always", observed).await;
    out.insert(
        "evict an unready pod, AlwaysAllow",
        evict("aa", false).await,
    );

    // A pod with a controller: the budget's scale cannot be computed for maxUnavailable.
    let owned = json!({"maxUnavailable": 1, "selector": by_app("owned")});
    pdbs.create(&pp, &pdb("owned", owned)).await.unwrap();
    let failed = budget_when(&pdbs, "owned", has_conditions).await;
    out.insert(
        "budget of a controlled pod, maxUnavailable",
        budget_summary(&failed),
    );
    out.insert(
        "evict under a budget not yet observed",
        evict("owned", false).await,
    );

    let everything = json!({"maxUnavailable": 1, "selector": {}});
    pdbs.create(&pp, &pdb("everything", everything))
        .await
        .unwrap();
    let everything = budget_when(&pdbs, "everything", has_conditions).await;
    out.insert(
        "budget with an empty selector over unmanaged pods",
        budget_summary(&everything),
    );
    out.insert(
        "evict p3, selected by two budgets",
        evict("p3", false).await,
    );
    let percent = json!({"minAvailable": "50%", "selector": by_app("g")});
    pdbs.create(&pp, &pdb("percent", percent)).await.unwrap();
    let percent = budget_when(&pdbs, "percent", observed).await;
    out.insert(
        "budget of 50% over unmanaged pods",
        budget_summary(&percent),
    );
    let bumped = pdbs
        .patch(
            "budget",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 1}})),
        )
        .await
        .unwrap();
    out.insert(
        "generation after a spec change",
        json!(bumped.metadata.generation),
    );
    let caught_up = budget_when(&pdbs, "budget", observed).await;
    out.insert(
        "budget minAvailable 1 after the change",
        budget_summary(&caught_up),
    );
    json!(out)
}
