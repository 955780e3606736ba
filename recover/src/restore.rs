//! `from-snapshot`: restoring a verified snapshot into a fresh data dir with the etcd image's own
//! tool, then starting it as a one-member cluster.
//!
//! The tool runs where etcd runs: in the static pod, as an init container `etcd-restore` ahead
//! of `etcd-verify`, with the etcd container's image (`etcdctl snapshot restore` for 3.4,
//! `etcdutl` for 3.5 and later, with `--bump-revision --mark-compacted` where the tool has them;
//! the command line is [`restore_command`], and the margin is decided in [`crate::plan`]).
//! It restores into `<data-dir>/restore-<stamp>` (etcd 3.4 refuses a data dir that exists), and
//! etcd starts there once: when it answers as its own leader, the restore is complete. Then the
//! restored `member` dir takes the place of the data dir's (the old one was moved aside first)
//! and etcd starts normally, in the layout every revision expects.
//!
//! The restore makes a new cluster: its cluster token is unique to this restore
//! (`etcd-recover-<stamp>`), so its member and cluster ids differ from any earlier cluster's and
//! `etcd-verify` archives the stale data of the other nodes instead of mixing it in. etcd
//! derives the member id from the peer URLs and the token ([`restored_member_id`]), which the
//! one-member manifests name in `ETCD_MEMBER_IDS` and carry in `ETCD_INITIAL_CLUSTER_TOKEN`
//! ([`restored_member_pod`]): the operator learns the restored cluster's token from there.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    Container, HostPathVolumeSource, Pod, PodSpec, Volume, VolumeMount,
};
use membership::MemberId;

use crate::pod::{self, ETCD_CONTAINER, EtcdPod};
use crate::snapshot::Tool;

/// The init container that restores the snapshot.
pub const RESTORE_CONTAINER: &str = "etcd-restore";
/// Where the restore container sees the snapshot.
pub const SNAPSHOT_MOUNT: &str = "/var/lib/etcd-recovery/snapshot.db";
const SNAPSHOT_VOLUME: &str = "recovery-snapshot";

/// The member id etcd gives the member `peer_urls` in a cluster made with `token` (etcd's own
/// rule: SHA-1 of the sorted peer URLs and the token, its first 8 bytes big-endian).
pub fn restored_member_id(peer_urls: &[&str], token: &str) -> Option<MemberId> {
    membership::new_cluster_member_id(peer_urls, token)
}

/// The cluster token of the restore made at `stamp`.
pub fn token(stamp: &str) -> String {
    format!("etcd-recover-{stamp}")
}

/// The one-member pod of the cluster the restore at `stamp` makes: [`pod::one_member`] with the
/// restore's token in `ETCD_INITIAL_CLUSTER_TOKEN`. The operator learns the restored cluster's
/// token from it (its peer URL and token give the live cluster id), so its later revisions carry
/// the new token, not the lost cluster's; `etcd-verify` computes the restored member's id with it.
pub fn restored_member_pod(current: &EtcdPod, member_id: MemberId, stamp: &str, note: &str) -> Pod {
    let mut p = pod::one_member(current, member_id, false, note);
    pod::set_cluster_token(&mut p, &token(stamp));
    p
}

/// What the restore phase needs.
#[derive(Clone, Debug)]
pub struct RestoreSpec {
    pub stamp: String,
    pub tool: Tool,
    /// How far to bump the revision (`None`: the tool cannot, and that was waived).
    pub bump: Option<u64>,
    /// The copied snapshot's path on the node (absolute, as the kubelet sees it).
    pub snapshot_node_path: PathBuf,
    pub member_id: MemberId,
}

/// The data dir (container path) the restore writes and the first start runs on.
pub fn restore_dir(data_dir: &Path, stamp: &str) -> PathBuf {
    data_dir.join(format!("restore-{stamp}"))
}

/// The restore phase's pod: the one-member pod with `ETCD_DATA_DIR` at the restore dir and the
/// `etcd-restore` init container first.
pub fn restore_phase(current: &EtcdPod, container_data_dir: &Path, spec: &RestoreSpec) -> Pod {
    let mut p = restored_member_pod(
        current,
        spec.member_id,
        &spec.stamp,
        &format!(
            "from-snapshot {}: restoring with {} {}.{}.{}",
            spec.stamp,
            spec.tool.binary,
            spec.tool.version.0,
            spec.tool.version.1,
            spec.tool.version.2
        ),
    );
    let data = restore_dir(container_data_dir, &spec.stamp);
    let Some(podspec) = p.spec.as_mut() else {
        return p;
    };
    let restore = restore_container(current, podspec, container_data_dir, &data, spec);
    podspec
        .init_containers
        .get_or_insert_with(Vec::new)
        .insert(0, restore);
    podspec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: SNAPSHOT_VOLUME.into(),
        host_path: Some(HostPathVolumeSource {
            path: spec.snapshot_node_path.display().to_string(),
            type_: Some("File".into()),
        }),
        ..Default::default()
    });
    point_data_dir_at(podspec, &data.display().to_string());
    p
}

/// The `etcd-restore` init container: the etcd container's image and data mount, the snapshot
/// mounted read-only, running [`restore_command`] into `data`.
fn restore_container(
    current: &EtcdPod,
    podspec: &PodSpec,
    container_data_dir: &Path,
    data: &Path,
    spec: &RestoreSpec,
) -> Container {
    let etcd = podspec.containers.iter().find(|c| c.name == ETCD_CONTAINER);
    let image = etcd.and_then(|c| c.image.clone());
    let data_mount = etcd.and_then(|c| {
        c.volume_mounts
            .iter()
            .flatten()
            .filter(|m| container_data_dir.starts_with(&m.mount_path))
            .max_by_key(|m| m.mount_path.len())
            .cloned()
    });
    let command = restore_command(
        spec,
        &current.name,
        current.peer_url.as_str(),
        data,
        Path::new(SNAPSHOT_MOUNT),
    );
    Container {
        name: RESTORE_CONTAINER.into(),
        image,
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(command),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        volume_mounts: Some(
            data_mount
                .into_iter()
                .chain([VolumeMount {
                    name: SNAPSHOT_VOLUME.into(),
                    mount_path: SNAPSHOT_MOUNT.into(),
                    read_only: Some(true),
                    ..Default::default()
                }])
                .collect(),
        ),
        ..Default::default()
    }
}

/// Sets `ETCD_DATA_DIR` to `data_dir` in every container but the restore one, where it is set.
fn point_data_dir_at(podspec: &mut PodSpec, data_dir: &str) {
    let containers = podspec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(podspec.containers.iter_mut());
    for c in containers.filter(|c| c.name != RESTORE_CONTAINER) {
        if let Some(var) = c
            .env
            .iter_mut()
            .flatten()
            .find(|e| e.name == "ETCD_DATA_DIR")
        {
            var.value = Some(data_dir.to_owned());
        }
    }
}

/// The restore tool's command line: restore `snapshot` into `data_dir` as the only member `name`
/// (peer URL `peer`) of a new cluster with the restore's token, bumping the revision by
/// `spec.bump` and marking the older revisions compacted when it is set.
pub fn restore_command(
    spec: &RestoreSpec,
    name: &str,
    peer: &str,
    data_dir: &Path,
    snapshot: &Path,
) -> Vec<String> {
    let mut command = vec![
        spec.tool.binary.to_owned(),
        "snapshot".into(),
        "restore".into(),
        snapshot.display().to_string(),
        format!("--data-dir={}", data_dir.display()),
        format!("--name={name}"),
        format!("--initial-cluster={name}={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster-token={}", token(&spec.stamp)),
    ];
    if let Some(bump) = spec.bump {
        command.push(format!("--bump-revision={bump}"));
        command.push("--mark-compacted".into());
    }
    command
}

/// The restored member's id for this node at `stamp`.
pub fn member_id_for(current: &EtcdPod, stamp: &str) -> Option<MemberId> {
    restored_member_id(&[current.peer_url.as_str()], &token(stamp))
}

/// `ETCD_DATA_DIR` of the etcd container (a container path).
pub fn container_data_dir(current: &EtcdPod) -> Option<PathBuf> {
    pod::etcd_container(&current.pod)?
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "ETCD_DATA_DIR")?
        .value
        .as_ref()
        .map(PathBuf::from)
}

/// The image of the etcd container.
pub fn etcd_image(current: &EtcdPod) -> Option<String> {
    pod::etcd_container(&current.pod)?.image.clone()
}
