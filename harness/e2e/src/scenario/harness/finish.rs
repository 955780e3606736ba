//! The end of a scenario: the write load stopped and every acknowledged write read back, the
//! members' `HashKV` compared, the two-leader check over etcd's logs, no private key in what
//! admins read; then the sandbox torn down.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use super::{Harness, Step};
use crate::scenario::consistency::{self, HashReport};
use crate::scenario::leader_terms;
use crate::scenario::load::LoadReport;

impl Harness {
    /// Stops the load, checks every acknowledged write and that the members hold the same
    /// data (`HashKV` at one revision), tears everything down.
    pub async fn finish(mut self) -> Finished {
        let endpoints = self.node_endpoints();
        let load = match self.load.take() {
            Some(l) => l.finish(&endpoints).await,
            None => Ok(LoadReport::default()),
        };
        let hashes = match self.etcd().await {
            Ok(client) => consistency::check(&client, HASH_DEADLINE).await,
            Err(e) => Err(format!("no etcd client for HashKV: {e}")),
        };
        match &hashes {
            Ok(h) => self.step(format!(
                "HashKV at revision {}: {} member(s) equal{}",
                h.revision,
                h.members.len(),
                if h.skipped.is_empty() {
                    String::new()
                } else {
                    format!("; skipped {}", h.skipped.join("; "))
                }
            )),
            Err(e) => self.step(format!("HashKV check failed: {e}")),
        }
        for seen in self.sightings() {
            self.step(format!(
                "the status showed (first at {:.1}s): {}",
                seen.at_s, seen.what
            ));
        }
        let (leaks, events) = self.leaked_keys().await;
        if leaks.is_empty() {
            self.step(format!(
                "no private key in the operator's logs or any of {events} Events"
            ));
        }
        let runtime = self.runtime_check().await;
        if let Ok(Some(seen)) = &runtime {
            self.step(seen.clone());
        }
        let two_leaders = self.two_leaders();
        self.step("load stopped and verified; tearing down");
        let steps = std::mem::take(&mut self.steps);
        self.shutdown().await;
        let (load, mut check) = match load {
            Ok(r) => (
                r,
                hashes.map_err(|e| format!("checking the members' data: {e}")),
            ),
            Err(e) => (
                LoadReport::default(),
                Err(format!("checking the writes: {e}")),
            ),
        };
        if check.is_ok()
            && let Err(e) = two_leaders
        {
            check = Err(e);
        }
        if check.is_ok()
            && let Err(e) = runtime
        {
            check = Err(e);
        }
        if check.is_ok() && !leaks.is_empty() {
            check = Err(format!(
                "private key material shown to admins: {}",
                leaks.join("; ")
            ));
        }
        Finished { load, steps, check }
    }

    /// The two-leader check over every etcd log of the sandbox ([`leader_terms`]).
    fn two_leaders(&mut self) -> Result<(), String> {
        let elections = leader_terms::read(self.cp.path());
        let violations = elections.violations();
        if elections.leaders.is_empty() {
            return Err(format!(
                "the two-leader check found no election in any etcd log ({})",
                elections.summary()
            ));
        }
        if !violations.is_empty() {
            return Err(format!(
                "two leaders in one term, by etcd's own logs: {}",
                violations.join("; ")
            ));
        }
        self.step(format!(
            "no two leaders in one term: {}",
            elections.summary()
        ));
        Ok(())
    }

    /// Under `CONTAINER_RUNTIME=runc`, that every container the pods report ran under runc (the
    /// stacked control plane's kube-apiservers, controller-managers and schedulers included):
    /// its id is `runc://...`. So a run that asked for runc cannot pass on the host-binary
    /// runtime.
    async fn runtime_check(&self) -> Result<Option<String>, String> {
        let runc = matches!(crate::container_runtime::from_env(), Ok(Some(_)));
        if !runc {
            return Ok(None);
        }
        let pods: Api<Pod> = Api::all(self.cp.client());
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing pods for their container ids: {e}"))?;
        let ids: Vec<(String, String)> = list
            .items
            .iter()
            .flat_map(|p| {
                let name = p.metadata.name.clone().unwrap_or_default();
                let status = p.status.iter();
                let all = status.flat_map(|s| {
                    s.init_container_statuses
                        .iter()
                        .flatten()
                        .chain(s.container_statuses.iter().flatten())
                });
                all.filter_map(move |c| Some((name.clone(), c.container_id.clone()?)))
            })
            .collect();
        let other: Vec<String> = ids
            .iter()
            .filter(|(_, id)| !id.starts_with("runc://"))
            .map(|(pod, id)| format!("{pod}: {id}"))
            .collect();
        match (ids.is_empty(), other.is_empty()) {
            (true, _) => Err("CONTAINER_RUNTIME=runc: no pod reported a container id".into()),
            (false, false) => Err(format!(
                "CONTAINER_RUNTIME=runc, but containers ran on another runtime: {}",
                other.join(", ")
            )),
            (false, true) => Ok(Some(format!(
                "{} container(s) of {} pod(s) ran under runc",
                ids.len(),
                list.items.len()
            ))),
        }
    }

    /// Where a private key shows in what admins read: each operator process's log, every Event;
    /// and how many Events were read.
    async fn leaked_keys(&self) -> (Vec<String>, usize) {
        const MARK: &str = "PRIVATE KEY";
        let mut found: Vec<String> = self
            .cp
            .operators()
            .iter()
            .filter(|p| p.log().contains(MARK))
            .map(|p| format!("the log of operator {}", p.identity))
            .collect();
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(self.cp.client());
        let mut read = 0;
        match events.list(&ListParams::default()).await {
            Ok(list) => {
                read = list.items.len();
                found.extend(
                    list.items
                        .iter()
                        .filter(|e| e.note.as_deref().is_some_and(|n| n.contains(MARK)))
                        .map(|e| format!("Event {:?}", e.metadata.name)),
                );
            }
            Err(e) => found.push(format!("(Events could not be listed: {e})")),
        }
        (found, read)
    }
}

/// How long the members get to reach one revision (and one compaction) for `HashKV`.
const HASH_DEADLINE: Duration = Duration::from_secs(15);

/// What [`Harness::finish`] found.
#[derive(Debug)]
pub struct Finished {
    pub load: LoadReport,
    pub steps: Vec<Step>,
    /// Every acknowledged write read back and the members' `HashKV` equal, or why not.
    pub check: Result<HashReport, String>,
}
