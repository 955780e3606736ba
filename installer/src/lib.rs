//! # etcd-installer
//!
//! The per-node installer of the etcd static pod. The operator runs it once per node and
//! revision, as a pod pinned to the node with the node's `/etc/kubernetes` mounted. It copies
//! the revision's ConfigMaps and Secrets into a revision directory and then installs this node's
//! manifest where the kubelet picks it up:
//!
//! ```text
//!   API: ConfigMap etcd-pod-N (pod-<node>.yaml per node), other ConfigMaps/Secrets <name>-N
//!          │ fetch (bounded retries)          │
//!          ▼                                  ▼
//!   plan (pure): files, modes, manifest; refuses hostile keys and foreign manifests
//!          │
//!          ▼  under flock(<resource-dir>/.etcd-pod-installer.lock)
//!   <resource-dir>/.etcd-pod-N.staging ──rename──▶ <resource-dir>/etcd-pod-N/
//!                                                    configmaps/<name>/<key>   0644
//!                                                    secrets/<name>/<key>      0600
//!                                                    etcd-pod.yaml             0644
//!   <pod-manifest-dir>/.etcd-pod.yaml.tmp-<pid> ──rename──▶ <pod-manifest-dir>/etcd-pod.yaml
//! ```
//!
//! Invariants:
//! * **Whole or nothing.** A revision directory appears by one rename of a fully written and
//!   fsynced staging directory; a differing directory of the same revision is swapped with
//!   `renameat2(RENAME_EXCHANGE)` (or moved aside then replaced where that is unsupported).
//!   Every file is written as a dot-prefixed temp file, fsynced, renamed, and its directory
//!   fsynced. Dot-prefixed names are never revisions; leftovers of a crashed run are removed by
//!   the next run.
//! * **Manifest last.** The manifest is written only after the revision directory is in place,
//!   and never rewritten when identical (the kubelet restarts the pod when the file changes).
//! * **Never backwards.** The installed revision is the higher of the highest complete
//!   `etcd-pod-<N>` directory and the revision the current manifest declares (label or
//!   annotation `revision`, or env `ETCD_STATIC_POD_REVISION`); a lower one is refused.
//! * **Nothing is touched before a refusal that depends only on the input** (flags, fetched
//!   content, installed revision): the lock file and directories are created after planning.
//!   The installed revision is checked again under the lock (a newer install that raced in).
//!
//! ## For the operator: how to run it
//!
//! ```text
//! etcd-installer --revision N --namespace NS --pod etcd-pod --node-name NODE \
//!   --resource-dir /etc/kubernetes/static-pod-resources --pod-manifest-dir /etc/kubernetes/manifests \
//!   --configmaps etcd-pod,etcd-all-bundles --secrets etcd-all-certs \
//!   [--optional-configmaps a,b] [--optional-secrets c] [--own-key-prefixes p,q] [--timeout 120s] \
//!   [--approval-window 30s] [--kubeconfig PATH] [--termination-log PATH]
//! ```
//!
//! * Lists are comma-separated (or the flag repeated); names are without the `-N` suffix. The
//!   pod ConfigMap (`--pod`, default `etcd-pod`) is required whether listed or not; its key
//!   `pod-<NODE>.yaml` is the manifest. `--node-name` defaults to `$NODE_NAME`.
//! * `--own-key-prefixes etcd-peer,etcd-serving,etcd-serving-metrics` (the operator passes it): a
//!   node gets only its own private keys; a Secret entry `*.key` is laid down only when it is
//!   `<prefix>-<node>.key`, and a manifest naming a withheld key is refused (`ForeignKey`, see
//!   [`keys`]).
//! * Client: `--kubeconfig`, else in-cluster config, else `$KUBECONFIG` (kube's inference).
//! * `--timeout` (default 120s; `ms`/`s`/`m`/`h`, combinable as `1m30s`) bounds client setup and
//!   every fetch retry (back-off 0.2 s doubling to 5 s). Once writing has begun it finishes
//!   (local disk). A final event is still attempted for at most 5 s after.
//! * `--approval-window` (the operator passes it; needs `POD_NAME` and `POD_NAMESPACE`): a new
//!   or changed manifest restarts etcd, so it is written only once the operator has annotated
//!   this pod `etcd.static-operator.io/restart-approved` after asking the quorum gate again, and
//!   only within the window of the installer's start ([`approval`]); else `RestartNotApproved`
//!   (exit 1), the revision directory laid down, the manifest untouched.
//! * Events (when `POD_NAME` and `POD_NAMESPACE` are set): `StaticPodInstallerCompleted`
//!   (Normal) or `StaticPodInstallerFailed` (Warning), involvedObject = the installer pod.
//!
//! Exit codes and `outcome`:
//!
//! | exit | outcome | meaning | operator action |
//! |---|---|---|---|
//! | 0 | `installed` / `unchanged` | revision in place (`unchanged`: nothing was written) | done |
//! | 1 | `failed` | API error or unreachable, required object missing within the timeout, I/O error | retry with back-off |
//! | 2 | `invalid` | bad flags (clap usage errors also exit 2, without a JSON line) | fix the pod spec |
//! | 3 | `refused` | see below; the same revision will be refused again | new revision needed |
//! | 4 | `busy` | another installer holds the lock on this node | retry later |
//!
//! Refused (exit 3, node untouched): a ConfigMap/Secret key that is empty, contains `/`, `\`,
//! NUL or `..`, or starts with `.` (reason `HostileKey`); a revision lower than the installed
//! one (`Downgrade`); no `pod-<NODE>.yaml` key (`NoManifestForNode`); a manifest whose
//! `spec.nodeName` or `ETCD_NAME` env names another node (`ManifestForAnotherNode`); a manifest
//! that does not parse as a Pod or declares another revision (`InvalidManifest`); a key in both
//! `data` and `binaryData` (`InvalidResource`); a lock file that is a symlink or not a regular
//! file (`UnsafeLockFile`: never written through). A missing optional object is skipped (logged).
//!
//! Termination message (also the only line on stdout), one line of JSON written to
//! `--termination-log` or to `/dev/termination-log` when that exists (control characters of the
//! message become spaces; it is cut to 1800 bytes so the line stays under the kubelet's 4 KiB):
//!
//! ```text
//! {"outcome":"installed","revision":4,"node":"n1","reason":"Installed","message":"revision 4 installed on node n1: ..."}
//! {"outcome":"refused","revision":3,"node":"n1","reason":"Downgrade","message":"refusing revision 3: revision 4 is already installed (...)"}
//! ```
//!
//! `reason` is one of `Installed`, `AlreadyInstalled`, `InvalidArgs`, `ClientConfig`,
//! `MissingResource`, `ApiUnavailable`, `ApiError`, `InvalidResource`, `HostileKey`,
//! `NoManifestForNode`, `ManifestForAnotherNode`, `InvalidManifest`, `Duplicate`, `Downgrade`,
//! `Busy`, `IoError`, `Timeout`, `RestartNotApproved` (and `TestHook` under the test hook).
//!
//! Concurrency: the lock is taken without blocking, so a second installer on the node exits 4
//! at once, without writing anything; the kernel releases the lock when the holder exits or
//! dies. The holder writes its PID into the lock file (the only thing a repeated, otherwise
//! no-op run rewrites).
//!
//! Test-only: `ETCD_INSTALLER_TEST_HOOK` ([`hook`]) injects a pause or failure while writing.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod approval;
pub mod args;
pub mod atomic;
pub mod events;
pub mod fetch;
pub mod hook;
pub mod install;
pub mod keys;
pub mod lock;
pub mod manifest;
pub mod plan;
pub mod report;
