//! The scenario harness: a bootstrapped local control plane, the write load, a clock for the
//! report's step log, and waits on the operator's status with a deadline that print what was
//! last seen (the view, the operator's log tail) when they time out.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use etcd_operator::api::{EtcdClusterSpec, EtcdClusterStatus};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use membership::MemberUrl;

use super::load::WriteLoad;
use crate::controlplane::{ControlPlaneError, LocalControlPlane, OPERATOR_NS, STATIC_NS};
use crate::status_watch::{Sighting, StatusWatch};

/// One line of the scenario's step log.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Step {
    pub at_s: f64,
    pub what: String,
}

/// A running scenario.
pub struct Harness {
    pub cp: LocalControlPlane,
    pub load: Option<WriteLoad>,
    pub started: Instant,
    pub steps: Vec<Step>,
    /// What the status showed that a normal run must not (see [`crate::status_watch`]).
    pub watch: Option<StatusWatch>,
    /// Recovery figures a scenario measured for its report (`quorum-loss` only).
    pub recovery: Option<Recovery>,
    /// What the API's clients saw, per phase (`api-availability` only).
    pub api_phases: Vec<super::api_report::ApiPhase>,
}

/// What a disaster-recovery scenario measured ([`super::ScenarioReport::rto_s`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Recovery {
    /// Seconds from the loss to the first write acknowledged afterwards (`None`: none was).
    pub rto_s: Option<f64>,
    /// The same, as the API's clients see it: to the first create acknowledged through
    /// kube-apiserver (the stacked control plane only).
    pub api_rto_s: Option<f64>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("cp", &self.cp)
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// `nodes` simulated nodes, n1 bootstrapped with `etcd-operator render`, the operator running.
    pub async fn bootstrapped(nodes: usize) -> Result<Self, ControlPlaneError> {
        Self::bootstrapped_on_etcd(nodes, None).await
    }

    /// Like [`Harness::bootstrapped`], the cluster starting on `etcd_image` when given (else the
    /// operator's default etcd image).
    pub async fn bootstrapped_on_etcd(
        nodes: usize,
        etcd_image: Option<&str>,
    ) -> Result<Self, ControlPlaneError> {
        let mut cp = LocalControlPlane::start().await?;
        if let Some(image) = etcd_image {
            cp.starting_etcd_image(image);
        }
        let mut h = Self::around(cp);
        for i in 1..=nodes {
            h.cp.add_node(&format!("n{i}")).await?;
        }
        h.cp.bootstrap("n1").await?;
        h.operating(nodes).await
    }

    /// Like [`Harness::bootstrapped`], with the API served from the managed etcd (every node's
    /// member, n1's first), as in a real control plane: losing quorum takes the API down.
    /// `etcd_image`: the etcd it starts on, when not the operator's default.
    pub async fn bootstrapped_on_managed_etcd(
        nodes: usize,
        etcd_image: Option<&str>,
    ) -> Result<Self, ControlPlaneError> {
        let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let h = Self::around(LocalControlPlane::start_on_managed_etcd(&refs, etcd_image).await?);
        h.operating(nodes).await
    }

    /// The EtcdCluster created, the status watched, the operator started.
    async fn operating(self, nodes: usize) -> Result<Self, ControlPlaneError> {
        let mut h = self;
        h.cp.create_cluster(EtcdClusterSpec::default()).await?;
        h.watch = Some(StatusWatch::start(h.cp.client(), h.started));
        h.cp.start_operator()?;
        h.step(format!(
            "{nodes} nodes up, n1 bootstrapped, operator started"
        ));
        Ok(h)
    }

    /// A harness around a control plane brought up elsewhere (the platform test's, where the
    /// operator runs as the Deployment): no write load nor status watch yet.
    pub fn around(cp: LocalControlPlane) -> Self {
        Self {
            cp,
            load: None,
            started: Instant::now(),
            steps: Vec::new(),
            watch: None,
            recovery: None,
            api_phases: Vec::new(),
        }
    }

    /// When the write load first got a write acknowledged after `since`, waiting up to
    /// `deadline` for one.
    pub async fn first_write_after(
        &self,
        since: Instant,
        deadline: Duration,
    ) -> Result<Instant, ControlPlaneError> {
        let load = self
            .load
            .as_ref()
            .ok_or_else(|| ControlPlaneError::Failed("the write load is not running".into()))?;
        let until = Instant::now() + deadline;
        loop {
            if let Some(at) = load.first_ack_after(since).await {
                return Ok(at);
            }
            if Instant::now() > until {
                return Err(ControlPlaneError::Failed(format!(
                    "no write acknowledged within {deadline:?}; the load's last error: {:?}",
                    load.last_error().await
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn step(&mut self, what: impl Into<String>) {
        let what = what.into();
        tracing::info!(at_s = self.started.elapsed().as_secs_f64(), "{what}");
        self.steps.push(Step {
            at_s: self.started.elapsed().as_secs_f64(),
            what,
        });
    }

    /// Client URLs of every node (used until the operator publishes its endpoints).
    pub fn node_endpoints(&self) -> Vec<MemberUrl> {
        self.cp
            .nodes
            .iter()
            .filter_map(|n| format!("https://{}:2379", n.ip()).parse().ok())
            .collect()
    }

    /// An etcd client as an admin would use one (the operator's client certificate).
    pub async fn etcd(&self) -> Result<membership::EtcdClient, ControlPlaneError> {
        super::load::etcd_client(
            &self.cp.client(),
            OPERATOR_NS,
            STATIC_NS,
            &self.node_endpoints(),
        )
        .await
        .map_err(ControlPlaneError::Failed)
    }

    /// Starts the write load once the first write is acknowledged.
    pub async fn start_load(&mut self) -> Result<(), ControlPlaneError> {
        let load = WriteLoad::start(
            self.cp.client(),
            OPERATOR_NS,
            STATIC_NS,
            self.node_endpoints(),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while load.acknowledged().await == 0 {
            if Instant::now() > deadline {
                return Err(ControlPlaneError::Failed(format!(
                    "the write load got no write acknowledged in 60s; last error: {:?}",
                    load.last_error().await
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.load = Some(load);
        self.step("write load running");
        Ok(())
    }

    /// What a bound on the operator's work adds on the stacked control plane: one full kubelet
    /// back-off of a kube-controller-manager or kube-scheduler, which the quorum gate's
    /// control-plane preflight waits out (`control_plane_pods`); nothing elsewhere.
    pub fn control_plane_slack(&self) -> Duration {
        if self.cp.stacked().is_some() {
            super::control_plane_pods::KUBELET_MAX_BACKOFF
        } else {
            Duration::ZERO
        }
    }

    /// The EtcdCluster status now (default when absent).
    pub async fn status(&self) -> EtcdClusterStatus {
        self.cp
            .cluster_status()
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// The current view, for failure messages.
    pub async fn describe(&self) -> String {
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(self.cp.client())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let cluster = self.cp.cluster().await.ok().flatten();
        let view = crate::view::render(&nodes, cluster.as_ref()).join("\n  ");
        let mut out = format!("view:\n  {view}");
        // Every operator process's log tail (a standby's too, when one was started).
        for p in self.cp.operators() {
            let log = p.log();
            let tail: Vec<&str> = log
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            out.push_str(&format!(
                "\noperator {} log tail:\n  {}",
                p.identity,
                tail.join("\n  ")
            ));
        }
        out
    }

    /// What the status showed so far that a normal run must not.
    pub fn sightings(&self) -> Vec<Sighting> {
        self.watch
            .as_ref()
            .map(StatusWatch::sightings)
            .unwrap_or_default()
    }

    /// Waits until `check` accepts the status.
    pub async fn wait_status<F>(
        &mut self,
        what: &str,
        deadline: Duration,
        check: F,
    ) -> Result<EtcdClusterStatus, ControlPlaneError>
    where
        F: Fn(&EtcdClusterStatus) -> bool,
    {
        let started = Instant::now();
        loop {
            let s = self.status().await;
            if check(&s) {
                self.step(format!(
                    "{what} (after {:.1}s)",
                    started.elapsed().as_secs_f64()
                ));
                return Ok(s);
            }
            if started.elapsed() > deadline {
                return Err(ControlPlaneError::Failed(format!(
                    "timed out after {deadline:?} waiting for {what}\n{}",
                    self.describe().await
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for `voters` healthy voters, no learner, every node on the latest revision.
    pub async fn wait_settled(
        &mut self,
        voters: usize,
        deadline: Duration,
    ) -> Result<EtcdClusterStatus, ControlPlaneError> {
        self.wait_status(
            &format!("{voters} healthy voters, every node on the latest revision"),
            deadline,
            |s| crate::view::settled(s, voters),
        )
        .await
    }

    /// Waits until `voters` healthy voters run and every node is on a revision newer than
    /// `after`: right after a change the status may still show the pass before it, settled on
    /// the old revision.
    pub async fn wait_settled_after(
        &mut self,
        voters: usize,
        after: i64,
        deadline: Duration,
    ) -> Result<EtcdClusterStatus, ControlPlaneError> {
        self.wait_status(
            &format!("{voters} healthy voters, every node on a revision newer than {after}"),
            deadline,
            |s| crate::view::settled(s, voters) && s.latest_available_revision > after,
        )
        .await
    }

    /// `etcd-operator plan` against the cluster, as an admin runs it: its stdout, and its
    /// stderr in the error when it exits non-zero.
    pub async fn plan(&self) -> Result<String, ControlPlaneError> {
        let io = |e: std::io::Error| ControlPlaneError::Io("running etcd-operator plan".into(), e);
        let bin = crate::binaries::binary("etcd-operator").map_err(io)?;
        let out = tokio::process::Command::new(bin)
            .arg("plan")
            .env("KUBECONFIG", self.cp.admin_kubeconfig())
            .output()
            .await
            .map_err(io)?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(ControlPlaneError::Failed(format!(
                "etcd-operator plan: {}\nstdout: {stdout}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(stdout)
    }

    /// Secret `ns/name`'s data, if it exists.
    pub async fn secret_data(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, Vec<u8>>>, ControlPlaneError> {
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.cp.client(), ns)
            .get_opt(name)
            .await
            .map(|s| {
                s.as_ref()
                    .map(etcd_operator::controllers::cert_signer::secret_bytes)
            })
            .map_err(|e| ControlPlaneError::Failed(format!("reading Secret {ns}/{name}: {e}")))
    }

    /// Secret `ns/name`'s data; its absence is an error naming it.
    pub async fn secret_data_of(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<std::collections::BTreeMap<String, Vec<u8>>, ControlPlaneError> {
        self.secret_data(ns, name)
            .await?
            .ok_or_else(|| ControlPlaneError::Failed(format!("no Secret {ns}/{name}")))
    }

    /// The etcd CA the operator signs with now (Secret `etcd-signer`).
    pub async fn signer(&self) -> Result<etcd_operator::certs::EtcdCa, ControlPlaneError> {
        self.signer_of(etcd_operator::certs::CaRole::Etcd).await
    }

    /// The CA of `role` as its Secret holds it now.
    pub async fn signer_of(
        &self,
        role: etcd_operator::certs::CaRole,
    ) -> Result<etcd_operator::certs::EtcdCa, ControlPlaneError> {
        let name = role.secret_name();
        let data = self.secret_data_of(OPERATOR_NS, name).await?;
        etcd_operator::certs::EtcdCa::from_role_data(role, &data)
            .map_err(|e| ControlPlaneError::Failed(format!("{name}: {e}")))
    }

    /// The EtcdCluster's `metadata.generation`, read as stored.
    pub async fn generation(&self) -> Result<i64, ControlPlaneError> {
        let api: Api<etcd_operator::api::StoredCluster> = Api::all(self.cp.client());
        let c = api.get(etcd_operator::api::SINGLETON).await?;
        Ok(c.metadata.generation.unwrap_or(0))
    }

    /// Patches the EtcdCluster spec.
    pub async fn patch_spec(&mut self, patch: serde_json::Value) -> Result<(), ControlPlaneError> {
        // Read back as stored: the patch may make a spec the operator cannot decode.
        let api: Api<etcd_operator::api::StoredCluster> = Api::all(self.cp.client());
        let (merge, params) = (
            Patch::Merge(serde_json::json!({ "spec": patch })),
            PatchParams::default(),
        );
        crate::controlplane::retry_transport("patching the EtcdCluster's spec", || {
            api.patch(etcd_operator::api::SINGLETON, &params, &merge)
        })
        .await?;
        self.step(format!("patched spec: {patch}"));
        Ok(())
    }

    /// Tears everything down without checking writes (the bench, which checks its own).
    pub async fn shutdown(mut self) {
        // Stop watching before the API goes away.
        self.watch = None;
        self.cp.shutdown().await;
    }
}

/// What the end of a scenario checks: [`Harness::finish`].
mod finish;
pub use finish::Finished;

/// The status's members, one `name id role` each, for a step line.
pub fn describe_members(s: &EtcdClusterStatus) -> String {
    s.members
        .iter()
        .map(|m| {
            format!(
                "{} {} {}{}",
                m.name,
                m.id,
                m.role,
                if m.healthy { "" } else { " (unhealthy)" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Ids of the members in a status.
pub fn member_ids(s: &EtcdClusterStatus) -> BTreeSet<String> {
    s.members.iter().map(|m| m.id.clone()).collect()
}

/// Each of `nodes` with its member id in a status; the first without one is an error.
pub fn members_of<'a>(
    s: &EtcdClusterStatus,
    nodes: &[&'a str],
) -> Result<Vec<(&'a str, String)>, ControlPlaneError> {
    nodes
        .iter()
        .map(|n| {
            member_of(s, n)
                .map(|id| (*n, id))
                .ok_or_else(|| ControlPlaneError::Failed(format!("{n} has no member")))
        })
        .collect()
}

/// The member id of `node` in a status.
pub fn member_of(s: &EtcdClusterStatus, node: &str) -> Option<String> {
    s.members
        .iter()
        .find(|m| m.name == node)
        .map(|m| m.id.clone())
}
