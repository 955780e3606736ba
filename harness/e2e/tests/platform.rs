//! The operator as the platform runs it, on the real control plane (kube-apiserver,
//! controller-manager and scheduler from `../shared/kas`): `manifests/` applied as shipped, in one
//! `kubectl apply --server-side -k manifests/`, the
//! Deployment's ReplicaSet made by the controller-manager, its pods placed by the scheduler onto
//! the control-plane nodes and run by their node agents, the operator authenticating with its own
//! ServiceAccount's token (so every request it makes is checked against
//! `manifests/02-rbac-operator.yaml`), and from there the bootstrapped member grown to three
//! voters. kube-apiserver's audit log records every request of the operator's and the installer's
//! ServiceAccounts: none may be refused (403, a missing permission), and the permissions the
//! manifests grant but this run never used are listed. A second test kills the leading replica
//! in the middle of a scale-up (operator HA for real). Skipped loudly where kas is absent.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeSet;
use std::time::Duration;

use e2e::controlplane::{LocalControlPlane, OPERATOR_NS, wait_for};
use e2e::scenario::Harness;
use e2e::scenario::failover::{OperatorInstances, kill_leader_mid_scale_up};
use etcd_operator::api::{EtcdCluster, EtcdClusterSpec, SINGLETON};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_testapi::{KasOptions, TestApi};

const OPERATOR_USER: &str = "system:serviceaccount:etcd-operator:etcd-operator";
const INSTALLER_USER: &str = "system:serviceaccount:etcd:etcd-installer";

/// One audited request.
struct Request {
    user: String,
    verb: String,
    group: String,
    /// `pods`, or `pods/status` for a subresource.
    resource: String,
    namespace: String,
    code: i64,
}

/// The requests in a kube-apiserver audit log (JSON lines, stage ResponseComplete).
fn audited(log: &str) -> Vec<Request> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .map(|e| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            let o = &e["objectRef"];
            let mut resource = s(&o["resource"]);
            if let Some(sub) = o["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            Request {
                user: s(&e["user"]["username"]),
                verb: s(&e["verb"]),
                group: s(&o["apiGroup"]),
                resource,
                namespace: s(&o["namespace"]),
                code: e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            }
        })
        .collect()
}

/// Every (group, resource, verb) the Roles and ClusterRoles of a manifest file grant.
fn granted(manifest: &str) -> BTreeSet<(String, String, String)> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(manifest).unwrap();
    let mut out = BTreeSet::new();
    for d in docs
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
    {
        for rule in d["rules"].as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            for g in list("apiGroups") {
                for r in list("resources") {
                    for v in list("verbs") {
                        out.insert((g.clone(), r.clone(), v));
                    }
                }
            }
        }
    }
    out
}

/// Names of the nodes running a Ready operator pod, or what the pods look like.
fn ready_operator_nodes(pods: &[Pod]) -> Result<BTreeSet<String>, String> {
    let mut nodes = BTreeSet::new();
    let mut seen = Vec::new();
    for p in pods {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let status = p.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        seen.push(format!(
            "{} on {:?}: {:?} ready={ready} {:?}",
            p.metadata.name.clone().unwrap_or_default(),
            node,
            status.phase,
            status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.state.clone())
                .collect::<Vec<_>>()
        ));
        if let (Some(n), true) = (node, ready) {
            nodes.insert(n);
        }
    }
    if nodes.len() >= 2 {
        Ok(nodes)
    } else {
        Err(seen.join("; "))
    }
}

/// Three nodes, n1 bootstrapped, the EtcdCluster created and the whole of `manifests/` applied
/// as an admin installs it (one apply, in kustomize's order), on a kas control plane; `None`
/// (and a loud SKIPPED) where kas is absent.
async fn operator_deployment(options: KasOptions, test: &str) -> Option<LocalControlPlane> {
    let Some(api) = TestApi::kas(options).await.unwrap() else {
        eprintln!(
            "SKIPPED {test}: no kas control plane beside the repository (../shared/kas/kas) and \
             no $KAS; the operator was not run as a Deployment"
        );
        return None;
    };
    let mut cp = LocalControlPlane::start_on(api).await.unwrap();
    for i in 1..=3 {
        cp.add_node(&format!("n{i}")).await.unwrap();
    }
    cp.bootstrap("n1").await.unwrap();
    cp.create_cluster(EtcdClusterSpec::default()).await.unwrap();
    let applied = cp
        .apply_kustomization(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests"),
        )
        .await
        .unwrap();
    eprintln!("kubectl apply -k manifests/:\n{applied}");
    for object in [
        "namespace/etcd-operator serverside-applied",
        "customresourcedefinition.apiextensions.k8s.io/etcdclusters.etcd.static-operator.io serverside-applied",
        "deployment.apps/etcd-operator serverside-applied",
    ] {
        assert!(applied.contains(object), "{object} not in:\n{applied}");
    }
    Some(cp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_deployment_runs_on_the_nodes_and_grows_etcd() {
    let audit = tempfile::tempdir().unwrap();
    let policy = audit.path().join("policy.yaml");
    let log = audit.path().join("audit.log");
    std::fs::write(
        &policy,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
             - level: Metadata\n  users: [\"{OPERATOR_USER}\", \"{INSTALLER_USER}\"]\n\
             - level: None\n"
        ),
    )
    .unwrap();
    let options = KasOptions {
        controller_manager: true,
        scheduler: true,
        apiserver_args: vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", log.display()),
        ],
    };
    let Some(cp) = operator_deployment(
        options,
        "the_operator_deployment_runs_on_the_nodes_and_grows_etcd",
    )
    .await
    else {
        return;
    };
    let pods: Api<Pod> = Api::namespaced(cp.client(), OPERATOR_NS);
    let selector = ListParams::default().labels("app.kubernetes.io/name=etcd-operator");
    wait_for(
        Duration::from_secs(180),
        "two Ready operator pods, scheduled onto two control-plane nodes",
        || {
            let (pods, selector) = (pods.clone(), selector.clone());
            async move {
                let list = pods.list(&selector).await.map_err(|e| e.to_string())?;
                ready_operator_nodes(&list.items).map(|_| ())
            }
        },
    )
    .await
    .unwrap();
    let clusters: Api<EtcdCluster> = Api::all(cp.client());
    let settled = wait_for(
        Duration::from_secs(240),
        "3 healthy voters, every node on the latest revision",
        || {
            let clusters = clusters.clone();
            async move {
                let c = clusters.get(SINGLETON).await.map_err(|e| e.to_string())?;
                let status = c.status.clone().unwrap_or_default();
                if e2e::view::settled(&status, 3) {
                    Ok(())
                } else {
                    Err(e2e::view::render(&[], Some(&c)).join("\n"))
                }
            }
        },
    )
    .await;
    let list = pods.list(&selector).await.unwrap();
    let nodes = ready_operator_nodes(&list.items);
    cp.shutdown().await;
    settled.unwrap();
    let requests = audited(&std::fs::read_to_string(&log).unwrap());
    let refused: Vec<String> = requests
        .iter()
        .filter(|r| r.code == 403)
        .map(|r| {
            format!(
                "{} {} {}/{} in {:?}",
                r.user, r.verb, r.group, r.resource, r.namespace
            )
        })
        .collect();
    assert!(
        refused.is_empty(),
        "requests the manifests' RBAC refused: {refused:#?}"
    );
    for (user, file) in [
        (OPERATOR_USER, "02-rbac-operator.yaml"),
        (INSTALLER_USER, "03-rbac-installer.yaml"),
    ] {
        let used: BTreeSet<(String, String, String)> = requests
            .iter()
            .filter(|r| r.user == user)
            .map(|r| (r.group.clone(), r.resource.clone(), r.verb.clone()))
            .collect();
        assert!(!used.is_empty(), "no request of {user} was audited");
        let text = std::fs::read_to_string(format!(
            "{}/../../manifests/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let unused: Vec<_> = granted(&text)
            .into_iter()
            .filter(|g| !used.contains(g))
            .collect();
        eprintln!(
            "{user}: {} distinct requests, none refused; granted by {file} but not used in this \
             run: {unused:?}",
            used.len()
        );
    }
    let nodes = nodes.unwrap();
    assert!(
        nodes.iter().all(|n| n.starts_with('n')),
        "operator pods on unexpected nodes: {nodes:?}"
    );
}

/// Operator HA on the real control plane: the Deployment's two replicas, a scale-up from 3 to 5
/// voters, and the replica holding the Lease killed (SIGKILL to its container, its pod deleted
/// with grace period 0) as soon as etcd lists the first new learner. Another replica holds the
/// Lease within the lease duration (15 s) + 1 s + the renew period (5 s) + 1 s, never before the
/// lease expired; the scale-up completes with no membership action done twice, no acknowledged
/// write lost and every member's `HashKV` equal (see `e2e::scenario::failover`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_takes_over_when_the_leader_is_killed_mid_scale_up() {
    let options = KasOptions {
        controller_manager: true,
        scheduler: true,
        ..KasOptions::default()
    };
    let Some(cp) = operator_deployment(
        options,
        "a_replica_takes_over_when_the_leader_is_killed_mid_scale_up",
    )
    .await
    else {
        return;
    };
    let mut h = Harness::around(cp);
    let outcome = async {
        h.start_load().await?;
        h.wait_settled(3, Duration::from_secs(240)).await?;
        kill_leader_mid_scale_up(&mut h, OperatorInstances::Deployment).await
    }
    .await;
    let f = h.finish().await;
    for s in &f.steps {
        eprintln!("[{:6.1}s] {}", s.at_s, s.what);
    }
    outcome.unwrap();
    assert_eq!(f.load.writes_lost, 0, "{:?}", f.load);
    assert!(f.load.writes_acknowledged > 0, "{:?}", f.load);
    let hashes = f.check.unwrap();
    assert_eq!(hashes.members.len(), 5, "{hashes:?}");
}

/// The CRD's own validation (CEL rules, schema limits), as kube-apiserver evaluates it: bad
/// `spec.clients` are refused at the API with the rule's message, before the operator sees them.
/// (The API stand-in does not evaluate CEL, so this runs on kas only.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crd_refuses_bad_consumers() {
    // The controller-manager publishes kube-root-ca.crt, which the control plane's start awaits.
    let options = KasOptions {
        controller_manager: true,
        scheduler: false,
        apiserver_args: Vec::new(),
    };
    let Some(api) = TestApi::kas(options).await.unwrap() else {
        eprintln!(
            "SKIPPED the_crd_refuses_bad_consumers: no kas control plane beside the repository \
             (../shared/kas/kas) and no $KAS; CEL rules are evaluated by kube-apiserver only"
        );
        return;
    };
    let cp = LocalControlPlane::start_on(api).await.unwrap();
    let clusters: Api<EtcdCluster> = Api::all(cp.client());
    let client = |name: &str, extra: serde_json::Value| {
        let mut c = serde_json::json!({"name": name, "commonName": "cn"});
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        c
    };
    let cases = [
        (
            vec![client("a", serde_json::json!({"namespace": "Kube_System"}))],
            "namespace must be a DNS label",
        ),
        (
            vec![client("a", serde_json::json!({"secretName": "bad/name"}))],
            "secretName must be a DNS subdomain",
        ),
        (
            vec![client("UPPER", serde_json::json!({}))],
            "name must be a DNS label",
        ),
        (
            vec![
                client("a", serde_json::json!({})),
                client("a", serde_json::json!({})),
            ],
            "clients: each name at most once",
        ),
    ];
    for (clients, message) in cases {
        let mut spec = serde_json::to_value(EtcdClusterSpec::default()).unwrap();
        spec["clients"] = serde_json::Value::Array(clients.clone());
        let body = serde_json::json!({
            "apiVersion": "etcd.static-operator.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": SINGLETON},
            "spec": spec,
        });
        let cluster: EtcdCluster = serde_json::from_value(body).unwrap();
        match clusters.create(&Default::default(), &cluster).await {
            Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(message) => {}
            other => panic!("clients {clients:?}: expected 422 naming {message:?}, got {other:?}"),
        }
    }
    let good = vec![client(
        "kube-apiserver",
        serde_json::json!({"namespace": "kube-system", "secretName": "apiserver-etcd-client.v1"}),
    )];
    let spec = EtcdClusterSpec {
        clients: serde_json::from_value(serde_json::Value::Array(good)).unwrap(),
        ..Default::default()
    };
    clusters
        .create(&Default::default(), &EtcdCluster::new(SINGLETON, spec))
        .await
        .unwrap();
    cp.shutdown().await;
}
