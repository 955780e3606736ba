//! Named scenarios on the local control plane, each under a write load that checks no
//! acknowledged write is lost, and ending with every member's `HashKV` compared at one revision
//! and the two-leader check over etcd's own logs ([`leader_terms`]). `sandbox run <name>` runs
//! one and writes `report.json`.
//! Every scenario runs etcd 3.6.16 (the operator's default image, built from etcd's Go modules)
//! but `upgrade`, which starts on 3.4.23, and `upgrade-minors`, which starts on 3.5.36
//! ([`STARTING_ETCD`]).
//!
//! | name | what happens |
//! |---|---|
//! | `bootstrap` | n1 rendered, grows to 3 voting members, every node on the latest revision; the status never shows Degraded nor a member without a name; `status.certificates` lists the CA and 10 leaves, each renewed before it expires; every node's revision dir holds only its own private keys, 0600; the metrics port (the pod's `etcd-metrics` proxy) answers `/metrics` only (404 for `/health`), only to a client with a certificate of the metrics CA (`etcd-metric-client`), which etcd's client port refuses for a write and a read; the probes' plain listener is on the node's loopback; `etcd-endpoints` lists every node as a voter at its address; kube-apiserver's Secret as `render` wrote it, applied and named in `spec.clients`, is adopted byte-identical and etcd accepts its certificate; a consumer in `spec.clients` gets a Secret whose certificate etcd accepts, deleted when it leaves the list |
//! | `data-loss` | n2's data dir is destroyed: its member is replaced, back to 3 voters; then (#65) n3's data dir is removed under its running etcd, which dies and restarts in place (no new pod sandbox, no init container): etcd must not start as the same member on the empty dir (before #65 it did, rejoining as a voter with an empty log); its member is replaced too |
//! | `node-replacement` | n3 is deleted (member removed), n4 joins as a learner and is promoted |
//! | `operator-crash` | the operator is killed after learner add, after revision create, during rollout and after promote: the scale-up still completes, no unstarted learner is left |
//! | `forged-member-id` | n2's manifest gets a forged member id: `etcd-verify` blocks it, the operator reports it, the next revision recovers it |
//! | `full-restart` | every node stops and starts again: same members, same data |
//! | `rollout` | a forced redeployment rolls exactly one new revision node by node, through an injected installer failure and an operator kill mid-rollout |
//! | `odd-voters` | n4 joins as a standby learner (3 voters stay: never an even count); n1 is deleted and the standby is promoted |
//! | `member-removed-externally` | n2's running member is removed with the etcd API, as `etcdctl member remove` would: n2 comes back as a new member by itself |
//! | `node-selector` | the spec's control-plane selector changes at runtime (same nodes picked by a new label, then an invalid key, then fixed): no member is touched, the invalid key is `MembershipControllerDegraded` naming it |
//! | `defrag` | four nodes (3 voters and the standby learner n4); 24 MiB written, deleted and compacted: the operator defragments the three voters one at a time, the leader last after handing its leadership away; writes through the leader never pause longer than 250 ms (the write load, attached to one member, waits while that member is held: reported) (#65: before, the standby held every voter's defragmentation back for good) |
//! | `nospace` | four nodes (3 voters and the standby learner n4); a 48 MiB quota filled until etcd raises `NOSPACE`: the standby, whose own file is at the quota, is removed under the alarm (`StandbyLearnerRenewed`); the status says an admin must delete data; after the delete and a compaction the operator defragments every voter, disarms the alarm and writes resume; 16 MiB more is written with no alarm raised again; n4's add waits, named in `EtcdMembersProgressing`, until the log moved 11,000 entries on (written by the test), then n4 joins under a new member id with a file under 90% of the quota, and 16 MiB more raise nothing (#65: before, the standby raised `NOSPACE` again within a second of every disarm and the cluster refused every write for good) |
//! | `corruption` | n2's copy of a key is changed on disk while it is stopped, and a compaction keeps etcd's own start-up check from comparing: the operator's `HashKV` check names n2 within one interval (10 s), `replaceMinority` replaces it, and a later check finds every copy equal |
//! | `upgrade` | the cluster starts on 3.4.23 and the etcd image moves to 3.5.16: rolled node by node (one at a time, the leader last), every member reports 3.5.16, etcd moves the cluster version to 3.5 and `status.etcdVersion` says so; then to 3.5.30 the same way when that optional build is installed (skipped loudly when not); 3.5.1 is then refused as a known-bad release and 3.4.23 as below the cluster version (condition reason `etcd-version`), neither making a revision nor moving a member |
//! | `static-pod-removed` | n2's etcd manifest is moved out of its manifests directory while the Node carries `etcd.static-operator.io/etcd-stopped`: `NodeInstallerDegraded` names n2, since when and the admin's reason, and n2 is left alone past the grace period (`missingPodGraceSeconds: 30`); the annotation removed, the same revision is installed again and n2's member serves with its data |
//! | `drain` | n1 is drained (cordon, evictions through `pods/eviction`) and powered off; a drain of n2 started at once is refused by the quorum guard's PodDisruptionBudget until n1 is back, uncordoned and its member healthy, then goes through; n3 drains at once afterwards; never fewer than a quorum of healthy voters |
//! | `unhealthy-member-replaced` | n2's WAL becomes unreadable, so etcd-verify keeps its etcd down: the operator is down for 20 s (past `memberRemediation.unhealthySeconds`, 15) and for 10 s after it starts the member stays (#65: time nobody observed does not count; before, it was removed 0.5 s after the restart); after `unhealthySeconds` the member is replaced and `status.remediations` counts the attempt, and no revision was published while the unhealthy member was listed (cluster-etcd-operator#1688: a dead member churned revisions there and its removal waited for a stable one); before n2's learner is added, the installer lays down on n2 a revision listing no member for it (checked on n2's disk), so a power loss in between cannot start the removed member |
//! | `operator-failover` | a second operator instance stands by; n4 and n5 join (3 → 5 voters) and the Lease holder is killed (SIGKILL) as soon as etcd lists the first new learner: the standby holds the Lease within 10 s (lease 6 s + 1 s rounding + renew period 2 s + 1 s), never before the lease expired, and completes the scale-up; each node keeps one member id throughout, each new node is added at most once and promoted exactly once (etcd's member list sampled, Events, both logs); the takeover time is in the step log |
//! | `quorum-loss` | `etcd-recover from-member` on n1 while quorum is healthy is refused (exit 1, manifest untouched, no recovery record); with the API served from the managed etcd, leadership moves to n1 (the API's etcd endpoint), then n2 and n3 are stopped and their data dirs wiped: no leader is left and the API is down; the `sh scenario` blocks of `docs/runbooks/quorum-loss.md` run literally on n1 (the survivor): its member becomes a one-member cluster, the operator adds the other two back as new members, 3 voters; `rto_s` (quorum loss to the first write acknowledged again) and `rpo_writes` (acknowledged writes lost) in the report; with `TEST_API=kas` the API is real kube-apiservers as static pods on the managed etcd: ConfigMaps created through the endpoint and a watch run across the outage, the API answers again without a kube-apiserver restarted by hand, the watcher is shown a create made afterwards and never a resourceVersion going back, no acknowledged ConfigMap is lost, and `api_rto_s` is the RTO as the API's clients see it |
//! | `restore-from-snapshot` | with the API served from the managed etcd, a snapshot is saved with `etcdctl snapshot save` under write load; `etcd-recover from-snapshot` refuses it while quorum is healthy (exit 1), refuses a copy with one flipped byte (exit 2, integrity hash) and, once every node is stopped and its data dir wiped, another cluster's snapshot (exit 1), each leaving n1's manifest byte-identical and no recovery record; then it restores the snapshot on n1 as a new one-member cluster (etcd 3.6.16's `etcdutl snapshot restore --bump-revision --mark-compacted`): n1's header revision and the first write acknowledged afterwards are above every revision acknowledged before the wipe; the operator sees the new cluster id, lists its caches anew (logged) and adds n2 and n3 back: 3 voters, every member id new; no write acknowledged at or below the snapshot's revision is lost, those above it are `rpo_writes`; `rto_s` from the wipe to the first write acknowledged again; with `TEST_API=kas`, on real kube-apiservers, the API checks of `quorum-loss` (ConfigMaps acknowledged at or below the snapshot's revision, and every one after the restore, kept; the watcher relists on the restored cluster and never sees a resourceVersion go back) and `api_rto_s` |
//! | `restore-from-backup` | as `restore-from-snapshot`, with the operator's backups: `spec.backup` set, the first backup lands in the operator's directory, verified by restore; then to an S3 bucket on a real S3 server (Garage on loopback): without the credentials Secret (`lastFailure` `Credentials`, naming it), with a wrong secret key (`Destination`, naming the bucket), then good and verified; two forced rollouts after the backup, so every node runs a revision the restored API never saw; every data dir wiped and `etcd-recover from-snapshot s3://…` restores the S3 backup (downloaded, its record checked); the bad inputs of `restore-from-snapshot` on the local backup; the same revision check and RPO/RTO figures |
//! | `backups` | the backup half of `restore-from-backup` on its own, so that it also runs against a real kube-apiserver (`TEST_API=kas`): the spec patches, the credentials Secret created and changed, `status.backup` written and read back |
//! | `ca-rotation` | under write load (a client that reloads its certificate and `ca.crt` from Secret `etcd-client` every second), an `etcd-metric-client` of the etcd CA is planted (as operators before the metrics CA issued it) and writes a key through n1's client port; the operator rotates the CA by itself (trigger `scraperRevocation`; `api-availability` rotates on `spec.certificates.caRotationRequest`) in three phases, each rolled to every node before the next: trust both CAs, re-issue every leaf and client certificate from the new one, drop the old one; at the end etcd-signer holds the new CA, every leaf and the client certificate are its, every bundle trusts it alone (the metrics bundle and leaves stay the metrics CA's), etcd-signer-next is deleted; the planted certificate writes and reads nothing, the new `etcd-metric-client` scrapes; the longest write gap is the report's |
//! | `node-address-change` | under write load n2 comes back on another address, its old one retired (held: a stale etcd can't bind it, dials to it are closed); the operator re-issues n2's certificates for the new address, moves member n2 there with `MemberUpdate` and rolls a revision with the new URL, n2 first; n2 is the same member id on its own data dir (nothing archived), no member keeps the old URL, `etcd-endpoints` and n2's certificates name the new address |
//! | `every-address-changed` | under write load every node comes back on a new address at once, the old ones retired: no etcd can start and no peer URL can move; `etcd-recover status` on each node finds quorum lost and prints the commit index its WAL holds; `etcd-recover from-member --address <new IP> --signer <etcd-signer Secret as JSON>` on the node with the highest one starts its member alone at the new address (certificates issued for it, peer URL moved with `MemberUpdate`); the operator adds the other two back: 3 voters, every peer URL at a new address, only the recovered node keeps its member id; `rto_s` from the change to the first write acknowledged after recovery started, `rpo_writes` 0 |
//! | `unreadable-spec` | the CRD is loosened (a newer CRD than the operator: `spec.clients[].commonName` not required) and a client without one is patched in with a `forceRedeploymentReason`: the operator cannot decode the spec, so it acts on nothing; `SpecDegraded` and `Degraded` True with reason `SpecUnreadable` naming `spec.clients[0]`, a warning Event, `observedGeneration` and the latest revision unchanged, `etcd-operator plan` exits non-zero naming the field; the spec fixed, the held redeployment rolls one new revision to every node and the condition clears |
//! | `scale-down` | 5 voters, then the admin annotates two Nodes `etcd.static-operator.io/remove-member` (the leader's node and one the odd-voter policy would not pick): exactly those two members are removed, one at a time, the leader last after handing its leadership off; the three others keep their member ids, and the chosen nodes get no member again |
//! | `unmanaged` | `managementState: Unmanaged`, then a forced redeployment and a fourth node: for 15 s no revision, no member, and every ConfigMap, Secret, budget and operator-made pod of the operator's and static-pod namespaces keeps everything but its status (a pod's is the kubelet's, a budget's the disruption controller's); `Managed` again, the held redeployment rolls one new revision to every node and n4 joins as the standby, the voters keeping their ids |
//! | `dangling-learner` | an admin adds a learner at an address no node has and never starts it (it would hold etcd's one learner slot): the operator removes it (`MemberOfGoneNodeRemoved`; counted in `etcd_operator_members_without_node`, alert `EtcdMemberWithoutNode`), and n4, added meanwhile, joins as the standby, the voters keeping their ids |
//! | `consumer-reload` | a consumer declared `reload: Restart` (`deadlineSeconds: 10`) selects a pod created through the API in its own namespace, with the mirror-pod annotation on the stand-in (kube-apiserver requires `spec.nodeName` with it; no node: never run; the test plays its kubelet by writing `status.containerStatuses[].state.running.startedAt` through the status subresource); a CA rotation rolls `TrustBoth` to every node and then waits for the pod: `caRotation.waitingFor`, `etcd-operator plan` and Event `CaRotationWaitingForConsumers` name the consumer and the pod, and past the deadline `CertSignerDegraded` says `ConsumerNotReloaded` while the rotation still waits; the pod "restarts" (`startedAt` now) and the rotation goes on, waits again in `ReissueLeaves` and `DropOld` until the pod restarts, and completes with the consumer current |
//! | `lone-voter-restart` | a one-node control plane: the quorum gate's rule 11 holds n1's first revision (restarting its only voter stops etcd); `NodeInstallerProgressing` and `etcd-operator plan` name the revision and `spec.loneVoterRestart.approvedRevision`; approved, n1 restarts into it (writes fail for the outage, none acknowledged lost); with the API served from n1's etcd (kubeadm#3297: a one-node stacked upgrade verified through the API the restarting etcd serves), the image moves to 3.7.3 (the next minor), the restart is held and approved, and n1 comes back on 3.7.3 with the operator resuming when the API does; n2 joins as the standby learner and a forced redeployment holds n1 again for an approval and rolls it once approved (#65: before, the standby held it for good); n3 joins and a forced redeployment rolls all three with no approval |
//! | `restart-free-learner-add` | n4 joins as the standby learner and no voter restarts (each voter's manifest byte-identical, its etcd the same process; status and `etcd-operator plan` say each runs its revision, equivalent to the latest); a voter left on the revision before the learner reboots while it runs; the whole control plane is powered off and on right after the add and comes back by itself; manifests forged to omit the live learner from `ETCD_MEMBER_IDS`: on n2 (a voter on its own data) etcd restarts and serves, on n4 (the learner) `etcd-verify` blocks it, reported; n5 joins (two promotions to 5 voters) while a voter on an older revision reboots, and another reboots after; the first three voters keep their member ids throughout |
//! | `api-availability` | (the stacked control plane only: `TEST_API=kas`) ConfigMaps created through every kube-apiserver (one loop each, 2 s per create) and a watch through the endpoint that relists on 410 Gone, while the operator bootstraps 1→3, scales to 5 and back to 3, rolls a forced redeployment, defragments on request, renews kube-apiserver's client certificate (a certificate past its renewal point planted; every kube-apiserver restarted onto the renewed one), rotates the CA, replaces n2's member (data dir lost), drains n3 and loses the etcd leader to SIGKILL; per phase in the report (`api_phases`): API writes acknowledged and failed, longest API write gap, watch reconnects, relists and events missed, objects lost; nothing acknowledged may be lost, unseen, shown twice or out of order, and no resourceVersion may go backwards |
//! | `survivor-reboot` | (#65; the API served from the managed etcd) n3's machine dies, its Node is deleted and its member removed; n1, whose revision still lists the removed member, powers off and on (quorum lost: the API and so the operator down with it), then n2: each etcd starts again on its own data (before #65 `etcd-verify` blocked n1 for good as a "stale or forged revision"); quorum and the API back by themselves, n4 joins: 3 voters |
//! | `upgrade-minors` | (#66; the API served from the managed etcd) a cluster born on etcd 3.5.36 (the newest 3.5, past the patch floor of etcd's 3.6 upgrade guide) moves to 3.6.16 node by node and the cluster version 3.6 is reported; going back to 3.5.36 is then refused as below the cluster version 3.6; right after, the image moves on to 3.7.3: the operator holds the move until every member has snapshotted past the raft index at which it saw the cluster version 3.6 (3.7 cannot replay the entries 3.5 wrote), advancing the log with entries that change nothing, then 3.7.3 rolls node by node and the cluster version 3.7 is reported (all built from etcd's Go modules; a 3.4-born cluster to 3.6 is held the same way: `docs/etcd-versions.md`) |
//! | `unmounted-data-disk` | (#65; the API served from the managed etcd) one node; at boot its data disk is not mounted (an empty `/var/lib/etcd`): `etcd-verify` blocks (`DataDirLost`, from the bootstrap mark kept in `/var/lib/etcd-verify`) and nothing appears in the empty mount point; the disk back, etcd starts on its data, every acknowledged write there; n2 and n3 join |
//! | `minority-recovery` | (#65; the API served from the managed etcd) n1 powers off, n2 and n3 acknowledge writes n1 never sees, then freeze (`SIGSTOP`: from n1 what a partition looks like); n1 powers on alone with quorum lost: `etcd-recover from-member` there is refused (exit 1, naming n2, n3 and `--confirm-down`; manifest byte-identical, no record); before #65 it forced n1's older data into a one-member cluster and the writes of n2 and n3 were lost; they resume: 3 voters, every acknowledged write read back |
//! | `not-ready-node` | (#65) five voters; n5 powers off (its Node not Ready, its member unhealthy); a forced redeployment rolls n1..n4 while n5 is never made to move and `NodeInstallerProgressing` names it (before #65 the down node ranked first, its installer pod never ran and no other node moved); n5 back, it gets the revision: five voters |

mod api_availability;
mod api_probe;
mod api_recovery;
pub mod api_report;
mod api_watch;
mod backups;
mod ca_rotation;
pub mod consistency;
mod consumer_reload;
mod consumers;
mod control_plane_pods;
mod control_plane_preflight;
mod corruption;
mod dangling_learner;
mod drain;
mod endpoints;
mod every_address;
pub mod failover;
mod failover_audit;
mod failover_instances;
pub mod harness;
mod leader_probe;
mod leader_terms;
pub mod load;
mod lone_voter;
mod maintenance;
mod metrics_port;
mod minority_recovery;
mod node_address;
mod node_selector;
mod not_ready_node;
mod quorum_loss;
mod restart_free;
mod restore;
pub mod runbook;
mod scale_down;
mod scenarios;
mod static_pod;
mod survivor_reboot;
mod unmanaged;
mod unmounted_disk;
mod unreadable_spec;
mod upgrade;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use harness::{Harness, Recovery, Step};

/// Scenario names, in the order `sandbox run all` runs them.
pub const NAMES: [&str; 38] = [
    "bootstrap",
    "data-loss",
    "node-replacement",
    "operator-crash",
    "forged-member-id",
    "full-restart",
    "rollout",
    "odd-voters",
    "member-removed-externally",
    "unhealthy-member-replaced",
    "node-selector",
    "defrag",
    "nospace",
    "corruption",
    "upgrade",
    "static-pod-removed",
    "drain",
    "operator-failover",
    "quorum-loss",
    "restore-from-snapshot",
    "restore-from-backup",
    "backups",
    "ca-rotation",
    "node-address-change",
    "every-address-changed",
    "unreadable-spec",
    "scale-down",
    "unmanaged",
    "dangling-learner",
    "consumer-reload",
    "lone-voter-restart",
    "restart-free-learner-add",
    "api-availability",
    "survivor-reboot",
    "unmounted-data-disk",
    "minority-recovery",
    "not-ready-node",
    "upgrade-minors",
];

/// The scenarios whose API is served from the managed etcd, as in a real control plane: the
/// API stand-in reaches every member, as kube-apiserver's `--etcd-servers` does (#65 item 4).
/// Stories that lose quorum take the API down with it; `lone-voter-restart` restarts and
/// upgrades the only voter, whose outage takes the API down, as on a one-node stacked control
/// plane (kubeadm#3297); the membership and maintenance stories that run once, on the stand-in
/// (`scripts/test`'s `etcd_only`), run on this shape too. Still on the API's own etcd: `nospace`
/// (a NOSPACE alarm makes the managed etcd refuse the API's writes, the operator's status
/// included: the story needs rework), `corruption` and `upgrade` (not yet run on this shape),
/// and the scenarios that run on the real kube-apiserver in `[4/4]` (there this shape is the
/// stacked control plane, several minutes more each: `api-availability` and `ca-rotation` run
/// stacked).
pub const ON_MANAGED_ETCD: [&str; 15] = [
    "data-loss",
    "forged-member-id",
    "full-restart",
    "defrag",
    "unhealthy-member-replaced",
    "member-removed-externally",
    "not-ready-node",
    "lone-voter-restart",
    "quorum-loss",
    "restore-from-snapshot",
    "restore-from-backup",
    "survivor-reboot",
    "minority-recovery",
    "unmounted-data-disk",
    "upgrade-minors",
];

/// The scenarios whose cluster starts on another etcd than the operator's default (3.6.16), with
/// that image.
pub const STARTING_ETCD: [(&str, &str); 2] = [
    ("upgrade", upgrade::FROM),
    ("upgrade-minors", upgrade::NEWEST_35),
];

/// The etcd image scenario `name` starts on, when not the operator's default.
pub fn starting_etcd_image(name: &str) -> Option<&'static str> {
    STARTING_ETCD
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, image)| *image)
}

/// The scenarios that, with `TEST_API=kas`, run on the stacked control plane: real
/// kube-apiservers as static pods on every node, on the managed etcd
/// (`controlplane::stacked`). Elsewhere they run on the API stand-in on its own etcd.
pub const STACKED_ON_KAS: [&str; 2] = ["api-availability", "ca-rotation"];

/// The scenarios that run only on the stacked control plane (`TEST_API=kas`): elsewhere they
/// refuse to start.
pub const ONLY_STACKED: [&str; 1] = ["api-availability"];

/// The report of one scenario run (`report.json`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScenarioReport {
    pub scenario: String,
    pub passed: bool,
    pub duration_s: f64,
    pub writes_acknowledged: u64,
    pub writes_failed: u64,
    pub writes_lost: u64,
    pub longest_write_gap_ms: u64,
    pub longest_gap_at_s: f64,
    /// Why the last write that failed failed (writes that fail are not lost: they were never
    /// acknowledged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_write_error: Option<String>,
    /// Every member's `HashKV` at one revision (absent when the check could not run).
    pub hash_kv: Option<consistency::HashReport>,
    /// Recovery time: seconds from quorum loss (`restore-from-snapshot`: the wipe of every data
    /// dir) to the first write acknowledged afterwards (recovery scenarios only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rto_s: Option<f64>,
    /// The recovery time as the API's clients see it: to the first create acknowledged through
    /// kube-apiserver (recovery scenarios on the stacked control plane only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_rto_s: Option<f64>,
    /// Recovery point: acknowledged writes lost across the recovery (recovery scenarios only;
    /// `restore-from-snapshot`: those acknowledged above the snapshot's revision, which
    /// `writes_lost` leaves out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpo_writes: Option<u64>,
    /// What the API's clients saw, per phase (`api-availability` only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub api_phases: Vec<api_report::ApiPhase>,
    pub failure: Option<String>,
    pub steps: Vec<Step>,
}

/// Runs scenario `name`; writes `<out_dir>/<name>/report.json` and returns its path and the report.
pub async fn run(name: &str, out_dir: &Path) -> Result<(PathBuf, ScenarioReport), String> {
    let started = Instant::now();
    // Boxed: the scenarios' futures are large in a debug build, and a test thread that holds
    // them on its stack overflows it (restore-from-snapshot did).
    let (outcome, harness) = match Box::pin(scenarios::prepare(name)).await {
        Ok(h) => Box::pin(scenarios::drive(name, h)).await,
        Err((e, h)) => (Err(e.to_string()), h),
    };
    if let Err(e) = &outcome {
        // Printed at once: the end checks that follow may take minutes where quorum is lost
        // (and a test's timeout may cut them short before the report is written).
        eprintln!("scenario {name} failed, now checking what it left: {e}");
    }
    let (load, steps, check, recovery, api_phases) = match harness {
        Some(mut h) => {
            let recovery = h.recovery;
            let api_phases = std::mem::take(&mut h.api_phases);
            let f = h.finish().await;
            (f.load, f.steps, f.check, recovery, api_phases)
        }
        None => (
            load::LoadReport::default(),
            Vec::new(),
            Err("the scenario lost its control plane: nothing was checked".into()),
            None,
            Vec::new(),
        ),
    };
    let mut failure = outcome.err();
    let hash_kv = match check {
        Ok(h) => Some(h),
        Err(e) => {
            failure.get_or_insert(e);
            None
        }
    };
    if failure.is_none() && load.writes_lost > 0 {
        failure = Some(format!(
            "{} acknowledged write(s) were lost",
            load.writes_lost
        ));
    }
    if failure.is_none() && load.writes_acknowledged == 0 {
        failure = Some("no write was acknowledged".into());
    }
    let report = ScenarioReport {
        scenario: name.to_owned(),
        passed: failure.is_none(),
        duration_s: started.elapsed().as_secs_f64(),
        writes_acknowledged: load.writes_acknowledged,
        writes_failed: load.writes_failed,
        writes_lost: load.writes_lost,
        longest_write_gap_ms: load.longest_write_gap_ms,
        longest_gap_at_s: load.longest_gap_at_s,
        last_write_error: load.last_write_error.clone(),
        hash_kv,
        rto_s: recovery.and_then(|r| r.rto_s),
        api_rto_s: recovery.and_then(|r| r.api_rto_s),
        // Known only when the writes were read back.
        rpo_writes: recovery
            .filter(|_| load.writes_acknowledged > 0)
            .map(|_| load.writes_lost + load.writes_lost_past_cutoff),
        api_phases,
        failure,
        steps,
    };
    let dir = out_dir.join(name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join("report.json");
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&path, json + "\n").map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok((path, report))
}
