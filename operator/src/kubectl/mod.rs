//! `kubectl etcd`, the kubectl plugin: the `etcd-operator` binary acts as the plugin when it is
//! run under the name `kubectl-etcd` (copy or link it onto `PATH`; kubectl finds it). It uses
//! the user's kubeconfig and talks only to the API: `status` reads the EtcdCluster, and each
//! admin action is one guarded patch of a spec field or Node annotation the operator already
//! acts on ([`actions`] decides it, purely, with every refusal; this module reads and writes).
//! `plan` and `gather` are the operator's own, which also ask etcd with the operator's client
//! certificate read through the API. The entry points the binary calls return boxed futures, so
//! their state machines are compiled once, in this crate (docs/benchmarks.md, "Release build").

pub mod actions;
pub mod summary;

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::api::{EtcdCluster, SINGLETON};
use crate::writer::describe;
use actions::{Action, Change, Done, FIELD_MANAGER, Refusal, Target};

/// The name kubectl runs the plugin by (`kubectl etcd ...`).
pub const PLUGIN_NAME: &str = "kubectl-etcd";

/// Whether the binary was run as the plugin (its file name, as `argv[0]` gives it).
pub fn invoked_as_plugin(arg0: Option<&OsStr>) -> bool {
    arg0.and_then(|a| Path::new(a).file_name())
        .is_some_and(|n| n == PLUGIN_NAME)
}

/// What went wrong, naming the object.
#[derive(Debug, thiserror::Error)]
pub enum KubectlError {
    #[error("{what}: {}", describe(.source))]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "EtcdCluster {SINGLETON} does not exist: the operator creates it when it first runs (is it running against this cluster?)"
    )]
    NoCluster,
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    #[error("not done within {deadline:?}: {last}")]
    NotDone { deadline: Duration, last: String },
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> KubectlError {
    let what = what.into();
    move |source| KubectlError::Api { what, source }
}

/// Reads the EtcdCluster (an undecodable one fails naming the decoder's complaint).
pub fn cluster(client: &Client) -> BoxFuture<'_, Result<EtcdCluster, KubectlError>> {
    Box::pin(read_cluster(client))
}

async fn read_cluster(client: &Client) -> Result<EtcdCluster, KubectlError> {
    Api::<EtcdCluster>::all(client.clone())
        .get_opt(SINGLETON)
        .await
        .map_err(api_error(format!("reading EtcdCluster {SINGLETON}")))?
        .ok_or(KubectlError::NoCluster)
}

/// Reads what `action` needs and decides the change.
pub fn prepare<'a>(
    client: &'a Client,
    action: &'a Action,
) -> BoxFuture<'a, Result<Change, KubectlError>> {
    Box::pin(prepare_change(client, action))
}

async fn prepare_change(client: &Client, action: &Action) -> Result<Change, KubectlError> {
    let cluster = read_cluster(client).await?;
    let node = match action {
        Action::StopEtcd { node, .. } | Action::StartEtcd { node } => {
            Api::<Node>::all(client.clone())
                .get_opt(node)
                .await
                .map_err(api_error(format!("reading node {node}")))?
        }
        _ => None,
    };
    Ok(actions::decide(action, &cluster, node.as_ref())?)
}

/// Sends the change; with `dry_run` the API server validates and admits it without storing it.
pub fn apply<'a>(
    client: &'a Client,
    change: &'a Change,
    dry_run: bool,
) -> BoxFuture<'a, Result<(), KubectlError>> {
    Box::pin(apply_change(client, change, dry_run))
}

async fn apply_change(client: &Client, change: &Change, dry_run: bool) -> Result<(), KubectlError> {
    let params = PatchParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(&change.patch);
    match &change.target {
        Target::Cluster => Api::<EtcdCluster>::all(client.clone())
            .patch(SINGLETON, &params, &patch)
            .await
            .map(drop)
            .map_err(api_error(format!("patching EtcdCluster {SINGLETON}"))),
        Target::Node(name) => Api::<Node>::all(client.clone())
            .patch(name, &params, &patch)
            .await
            .map(drop)
            .map_err(api_error(format!("patching node {name}"))),
    }
}

/// Waits until the status shows `done`, reading it every `every`; the error carries what was
/// last seen.
pub fn wait<'a>(
    client: &'a Client,
    done: &'a Done,
    deadline: Duration,
    every: Duration,
) -> BoxFuture<'a, Result<String, KubectlError>> {
    Box::pin(wait_until_done(client, done, deadline, every))
}

async fn wait_until_done(
    client: &Client,
    done: &Done,
    deadline: Duration,
    every: Duration,
) -> Result<String, KubectlError> {
    let start = Instant::now();
    loop {
        let last = match read_cluster(client).await {
            Ok(c) => match actions::progress(done, &c.status.unwrap_or_default()) {
                Ok(done) => return Ok(done),
                Err(pending) => pending,
            },
            Err(e) => e.to_string(),
        };
        if start.elapsed() + every > deadline {
            return Err(KubectlError::NotDone { deadline, last });
        }
        tokio::time::sleep(every).await;
    }
}
