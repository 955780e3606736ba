//! Starting one backup from the pass: the backup marked in progress in status, and everything
//! its run needs gathered from the pass (destination, source member, client, the revision's
//! resources) or the reason it cannot start, handed to [`super::run::take`] off the pass.

use std::sync::Arc;

use etcd_snapshot::store::BackupName;
use membership::EtcdClient;

use super::{BackupRun, FailReason, Failure, destination, pick_source, run};
use crate::api::Backup;
use crate::certs::format_time;
use crate::pass::Pass;

/// Marks the backup `name` in progress in status and spawns its run.
pub(super) fn start(
    p: &mut Pass<'_>,
    name: BackupName,
    spec: Backup,
    client: Option<Arc<EtcdClient>>,
) -> BackupRun {
    let mut status = p.status.backup.clone().unwrap_or_default();
    status.last_attempt_time = format_time(p.o.now);
    status.in_progress = name.to_string();
    p.status.backup = Some(status);
    let prepared = prepare(p, &spec, client);
    let handle = tokio::spawn(run::take(name.clone(), spec.clone(), prepared));
    p.busy = true;
    BackupRun {
        name,
        request: spec.request,
        handle,
    }
}

/// Everything the run needs from the pass, or why it cannot start.
fn prepare(
    p: &Pass<'_>,
    spec: &Backup,
    client: Option<Arc<EtcdClient>>,
) -> Result<run::Inputs, Failure> {
    let destination = destination(
        spec,
        &p.ctx.config.backup.dir,
        &p.ctx.config.operator_namespace,
        &p.inputs.operator_secrets,
    )?;
    let source = pick_source(&p.o.etcd)?;
    let client = client.ok_or_else(|| {
        Failure::new(
            FailReason::NoSource,
            "no etcd client (etcd was not reached in this pass)",
        )
    })?;
    let image =
        p.o.spec
            .etcd_image
            .clone()
            .unwrap_or_else(|| p.ctx.config.images.etcd.clone());
    Ok(run::Inputs {
        destination,
        source,
        client,
        members: p
            .o
            .etcd
            .members
            .iter()
            .map(|m| format!("{}={}", m.id, m.name))
            .collect(),
        cluster_id: p
            .o
            .etcd
            .cluster_id
            .map(|c| format!("{c:x}"))
            .unwrap_or_default(),
        etcd_version: p.o.etcd.cluster_version.clone().unwrap_or_default(),
        image,
        image_version: p.o.spec.etcd_image_version.clone(),
        resources: run::resources(&p.inputs.configmaps, &p.inputs.secrets, p.status.latest),
        paths: p.ctx.config.backup.clone(),
    })
}
