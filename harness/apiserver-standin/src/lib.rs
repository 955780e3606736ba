//! # apiserver-standin: a Kubernetes API stand-in backed by a real etcd
//!
//! No kube-apiserver, kubelet, kind or Docker can be installed on the machines this project
//! builds on, yet the operator, the installer and the end-to-end sandbox all talk to a
//! Kubernetes API. This crate is the **Kubernetes API stand-in**: an HTTP server that speaks the
//! Kubernetes REST API (JSON) for the resources the project uses and stores every object in a
//! **real etcd**, the way kube-apiserver does. kube-rs clients, `kube::runtime::watcher` and
//! `kube::runtime::Controller` work against it unchanged.
//!
//! ```text
//!   kube::Client ──HTTP/JSON──▶ http.rs (routing, query, responses)
//!                                  │
//!                                  ├─▶ verbs.rs (get/create/update/patch), list.rs, delete.rs,
//!                                  │   watch.rs, discovery.rs, openapi.rs, eviction.rs
//!                                  │     uses: admission.rs, strategy.rs, validation.rs,
//!                                  │           custom.rs, schema.rs, schema_prune.rs,
//!                                  │           field_validation.rs, write_checks.rs,
//!                                  │           patch.rs, strategic.rs, apply.rs, selectors.rs,
//!                                  │           pdb.rs, pdb_validation.rs, eviction_rules.rs
//!                                  ▼
//!                               store.rs ──gRPC──▶ etcd (its own process, loopback)
//!                                  ▲
//!   gc.rs (garbage collector, namespace controller) ─┤
//!   disruption.rs (PodDisruptionBudget status) ──────┘
//! ```
//!
//! ## What is real
//! - **etcd** is a real etcd process; the stand-in only takes its endpoints
//!   ([`StandInConfig::etcd_endpoints`]). One key per object, laid out like kube-apiserver's:
//!   `/registry/<resource>/<namespace>/<name>` for core kinds (`/registry/minions/<name>` for
//!   nodes), `/registry/<group>/<resource>/[<namespace>/]<name>` for the others and for custom
//!   resources.
//! - **resourceVersion** is the etcd mod revision of the object's key; a list's
//!   resourceVersion is the etcd revision it was read at. Writes are etcd transactions guarded
//!   on the mod revision, so a PUT with a stale resourceVersion gets **409 Conflict**, exactly as
//!   on the real server; an unchanged object is not rewritten (its resourceVersion stays).
//! - **Watches** are etcd watches from `resourceVersion + 1`, with `prev_kv` so selector
//!   transitions and deletions are reported correctly; a compacted start revision gives an
//!   `ERROR` event carrying a 410 `Expired` Status; bookmarks come from etcd progress
//!   notifications. See [`watch`].
//! - **Compaction**: like kube-apiserver, the stand-in compacts etcd every
//!   [`StandInConfig::compaction_interval`] (default 5 minutes) up to the revision seen one
//!   interval earlier; [`ApiServerStandIn::compact`] compacts at once (tests of 410 handling).
//! - **HTTP** is real HTTP/1.1 on a loopback address of the caller's choosing.
//!
//! ## What it serves
//! core/v1 `namespaces`, `nodes`, `pods` (+`/status`, +`/eviction`), `configmaps`, `secrets`,
//! `events`, `serviceaccounts`, `endpoints`; `events.k8s.io/v1` `events` (same storage as core
//! events, converted field by field like the real server); `coordination.k8s.io/v1` `leases`;
//! `policy/v1` `poddisruptionbudgets` (+`/status`);
//! `apiextensions.k8s.io/v1` `customresourcedefinitions` (+`/status`) and, once a CRD exists,
//! its custom resources (namespaced or cluster-scoped, `/status` when the version declares the
//! subresource). Verbs: get, list, watch, create, update, patch, delete, deletecollection.
//! Discovery: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<g>`, `/apis/<g>/<v>` (with
//! `pods/eviction` as kind `policy/v1 Eviction`, which `kubectl drain` looks for); OpenAPI v3
//! ([`openapi`]: `/openapi/v3` and one document per group-version, enough for kubectl to
//! leave validation to the server); health: `/healthz`, `/readyz`, `/livez`.
//!
//! **Custom resources** are handled as kube-apiserver's apiextensions strategy handles them
//! ([`custom`], [`schema`], [`schema_prune`]): on every write and read, fields the CRD's
//! structural schema does not declare are pruned (unless `x-kubernetes-preserve-unknown-fields`)
//! and not-nullable `null`s dropped, schema `default`s are filled in, and writes are validated
//! against the schema (types, integer vs number, int-or-string, `required`, `enum`,
//! `minimum`/`maximum` (exclusive too), `multipleOf`, `minLength`/`maxLength`, `pattern`,
//! `minItems`/`maxItems`, `maxProperties`, `additionalProperties`, `nullable`) with the real
//! causes and wording (`spec.clients[0].commonName: Required value`); main writes are checked
//! without `status`, status writes against `status` only.
//!
//! **Field validation** ([`field_validation`]): `fieldValidation=Strict|Warn|Ignore` (Warn by
//! default) for unknown fields (dropped by decoding a built-in kind, pruned from a custom
//! resource) and duplicate keys of a create/update body: Warn answers `Warning: 299` headers,
//! Strict refuses with kube-apiserver's 400 (`strict decoding error: unknown field "x"`), or a
//! 422 on `patch` for a patch.
//!
//! **Eviction** ([`eviction`], `POST .../pods/<name>/eviction` with a policy/v1 `Eviction`) as
//! kube-apiserver v1.36 does it: pods being deleted, finished or Pending are deleted without a
//! budget check; otherwise the one PodDisruptionBudget selecting the pod decides (none: delete;
//! more than one: 500; spec not yet observed: 429; no disruption left: 429 with a
//! `DisruptionBudget` cause; an unready pod goes without using a disruption under
//! `AlwaysAllow`, or under `IfHealthyBudget` while the budget is met); a granted eviction
//! decrements `disruptionsAllowed` and records the pod in `disruptedPods`, marks the pod
//! `DisruptionTarget` and deletes it with the eviction's `deleteOptions` (preconditions kept,
//! graceful for bound pods); success is a 201 `Status`; `dryRun=All` changes nothing.
//!
//! Behaviour kept from kube-apiserver:
//! - server-set metadata: uid, creationTimestamp, `generation` (1 on create, bumped when the
//!   spec changes, for pods, CRDs, PodDisruptionBudgets and custom resources), `generateName`
//!   (five characters from the real alphabet);
//! - decoding: a built-in kind's body must decode as its type (k8s-openapi types; a wrongly
//!   typed field is a 400) and unknown fields are dropped; 500 on a create that carries a
//!   `resourceVersion`;
//! - errors with `Status` bodies: 404 NotFound (also for a create into a missing namespace),
//!   409 AlreadyExists, 409 Conflict (stale `resourceVersion`, failed DeleteOptions
//!   preconditions), 403 on a create into a terminating namespace or of a pod whose service
//!   account is missing (mirror pods exempt), 400 on a body/URL name or namespace mismatch,
//!   422 Invalid for names, labels, annotations, finalizers, owner references, ConfigMap/Secret
//!   keys, immutable ConfigMap/Secret data, data over 1 MiB, pod spec changes other than
//!   images/activeDeadlineSeconds/added tolerations, `metadata.uid` changes, new finalizers
//!   on an object being deleted, malformed CRDs, PodDisruptionBudget specs (both or negative
//!   `minAvailable`/`maxUnavailable`, bad percentages or selectors, unknown
//!   `unhealthyPodEvictionPolicy`) and negative PodDisruptionBudget status counters; 405 for
//!   verbs a path does not take; 410
//!   Expired; 415 for unknown patch types;
//! - status isolation for resources with a status subresource (main writes keep the stored
//!   `.status`; status writes keep the spec, and for custom resources everything but `.status`);
//! - finalizers: delete sets `deletionTimestamp` and keeps the object until
//!   `metadata.finalizers` is empty; the update that empties it removes the object;
//! - selectors: labels (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`/`<`), fields
//!   (`metadata.name`, `metadata.namespace`, pods' `spec.nodeName`, `status.phase`,
//!   `spec.serviceAccountName`, a few event fields, CRD `selectableFields`);
//! - lists: `limit`/`continue` paging pinned to one etcd revision (410 when it is compacted),
//!   `resourceVersionMatch=Exact`; `dryRun=All`; create-on-update (a PUT creates a missing
//!   object) for Endpoints and Events only;
//! - CRD status (`NamesAccepted`, `Established`, `acceptedNames`, `storedVersions`,
//!   `Terminating` while deleted) and CRD deletion through the cleanup finalizer.
//!
//! ## What stands in for other components
//! The stand-in also plays, in-process, the parts of kube-controller-manager the project's code
//! relies on ([`gc`]): the **garbage collector** (owner-reference cascade with Background,
//! Foreground and Orphan propagation; dependents whose owners are all gone are deleted), the
//! **namespace controller** (a deleted namespace is `Terminating` until its contents are gone),
//! the apiextensions **CRD finalizer** (a deleted CRD's custom resources are deleted first)
//! and the **service-account controller** (each new namespace gets a `default` ServiceAccount;
//! [`StandInConfig::default_service_accounts`]), and ([`disruption`]) the **disruption
//! controller**: every PodDisruptionBudget's `status` (`expectedPods`, `desiredHealthy`,
//! `currentHealthy` = selected pods Ready, not being deleted and not in `disruptedPods`,
//! `disruptionsAllowed`, `observedGeneration`, the `DisruptionAllowed` condition), recomputed
//! after every pod or budget write and every [`StandInConfig::disruption_interval`], written
//! only when it changes; `disruptedPods` entries go with their pod's deletion or after two
//! minutes. A real bare kube-apiserver does none of this.
//!
//! ## How it differs from kube-apiserver (exactly)
//! - **No authentication, authorization or TLS on the HTTP side** (etcd may be reached over
//!   mTLS, [`StandInConfig::etcd_tls`]); RBAC Roles and RoleBindings are stored, never
//!   enforced; no TokenRequest. No admission webhooks; admission is limited to
//!   NamespaceLifecycle and the ServiceAccount existence check ([`admission`]): pods get no
//!   `kube-api-access-*` token volume, so the node agent gives their containers its own
//!   kubeconfig instead.
//! - **CEL rules** (`x-kubernetes-validations`) of custom resources are evaluated only as far
//!   as [`cel`] goes (literals, `self`, fields, `has`, arithmetic, comparisons, `in`, `&& || ?:`,
//!   `size`, `matches`, `startsWith`, `endsWith`, `contains`, `all`, `exists`, `filter`,
//!   `map`; every rule of the project's CRD): a CRD with a rule beyond that, a transition rule
//!   (`oldSelf`), or a rule's `messageExpression`, `reason` or `fieldPath` is refused, never
//!   stored with a rule left unchecked or answered differently. No cost limits.
//!   `harness/testapi/tests/differential.rs` holds the causes to the real server's; as there, a write
//!   whose schema validation found a blocking error (wrong type, required, enum, too long, too
//!   many) in a schema with rules gets the `<nil>: ... some validation rules were not checked`
//!   cause instead, so those answers are the real server's word for word. Not evaluated either: `anyOf`/`allOf`/`oneOf`/`not`, string
//!   `format`s, list-type/map-type invariants, embedded-resource metadata, validation
//!   ratcheting (an unchanged invalid field fails an update here). A non-integer number for an
//!   integer field lacks the real server's extra `Checked value must be of type integer` cause.
//! - **JSON only**: no protobuf, no table output; discovery is served in the legacy format and,
//!   when `Accept` asks for it, as aggregated discovery (`apidiscovery.k8s.io/v2`), without
//!   categories. OpenAPI: `/openapi/v2` is 404; the v3 documents describe operations and their
//!   query parameters but give schemas only for custom resources, and no `strategic-merge-patch`
//!   content type (kubectl then computes its strategic merge patches from its compiled-in
//!   types; `kubectl explain` of a built-in kind finds nothing).
//! - **Storage encoding** is JSON, not protobuf; no encryption at rest; no watch cache (every
//!   list and watch reads etcd). `resourceVersion=0` lists read the latest state.
//! - **Strategic merge patch** ([`strategic`]) knows the patch strategies of the lists of the
//!   kinds served here (containers/env/ports/volumeMounts/volumes, pod and node conditions,
//!   node addresses, finalizers as a set, ownerReferences by uid, ...) and the `$patch`,
//!   `$retainKeys` and `$deleteFromPrimitiveList` directives; `$setElementOrder` is ignored
//!   (merged items keep the live order, new ones are appended) and lists missing from its table
//!   are replaced whole. On custom resources it is a 415, as on the real server.
//! - **Server-side apply** (`application/apply-patch+yaml`) is "apply-lite" ([`apply`]): the
//!   applied configuration is merged into the live object (maps merge, `null` removes); each
//!   applying `fieldManager` owns the leaf fields of its configuration (recorded in
//!   `metadata.managedFields`, `operation: Apply`, `FieldsV1`); setting a field another
//!   applier owns to a different value is a 409 Conflict unless `force=true`, which moves the
//!   field to the new manager; a manager that stops applying a field has it removed unless
//!   another applier owns it; a no-op apply writes nothing. Unlike the real thing: **lists are
//!   owned and replaced whole** (no associative lists keyed by e.g. container `name`, so two
//!   appliers cannot share a list), and **non-apply writes record no ownership** (no
//!   `operation: Update` entries: an apply never conflicts with a PUT/PATCH writer, and their
//!   fields are never removed by an apply). `fieldManager` is required (422 without it).
//!   Applying to a missing object creates it (201).
//! - **Validation** covers the checks listed above plus decoding every built-in body into its
//!   k8s-openapi type and encoding it back (wrong field types and bad base64 in Secret data are
//!   a 400; unknown fields are dropped or refused as `fieldValidation` says), not every field
//!   rule of every type; a Strict refusal of a patch names the patched object in a form that is
//!   not byte for byte the real server's, and server-side apply with an unknown field follows
//!   `fieldValidation` (the real server fails it with a 500 for built-in kinds); **defaulting**
//!   is limited to `status.phase: Pending` for new pods, `status.phase: Active` and the
//!   `kubernetes` spec finalizer for namespaces, and `spec.serviceAccountName` for pods
//!   (no container defaults, no DNS policy, no token volume).
//! - **Status writes** replace `.status` and keep everything else of the stored object (the
//!   real pod status strategy lets some metadata through).
//! - **Custom resources**: CEL as far as [`cel`] goes (see above); no conversion
//!   webhooks (versions are converted by rewriting `apiVersion`); no `scale` subresource; no
//!   429 window after a CRD becomes Established. Deleting a CRD works as on the real
//!   server: the first delete adds the `customresourcecleanup.apiextensions.k8s.io` finalizer
//!   and the `Terminating` condition; the CRD then refuses new custom resources (405), has
//!   its custom resources deleted (their finalizers respected) by the in-process collector,
//!   and goes when none remain.
//! - **Pods**: a pod bound to a node (`spec.nodeName`) that is not finished is deleted
//!   gracefully (`deletionTimestamp` = now + grace period) and stays until deleted again with
//!   `gracePeriodSeconds=0` (the kubelet's job; [`StandInConfig::graceful_pod_deletion`]);
//!   there is no scheduler, no `binding`, `log`, `exec` or `ephemeralContainers` subresource.
//! - **PodDisruptionBudgets**: the stand-in serves no workload controllers, so for
//!   `maxUnavailable` and percentages it knows no scale: pods without a controller count for
//!   nothing (as on the real cluster: `expectedPods` 0, no disruption allowed) and a pod *with*
//!   a controller fails the budget's sync (`DisruptionAllowed` False, `SyncFailed`, as the real
//!   controller does for kinds without a scale subresource; a real Deployment, ReplicaSet or
//!   StatefulSet would give a scale there). The disruption controller records no Events
//!   (`NoPods`, `UnmanagedPods`, ...) and does not reset a stale `DisruptionTarget` condition
//!   of a pod that was evicted but not deleted; it reacts at once where the real one may lag.
//! - **Watches** of `resourceVersion=0` behave like unset (current state first); there is no
//!   "resource version too large" wait; bookmarks come every
//!   [`StandInConfig::bookmark_interval`] (the real server: about a minute).
//! - Note for clients: kube's default client retries 429 answers (an eviction refused by a
//!   budget) with backoff; set `kube::Config::default_retry = false` to see them.
//! - The garbage collector runs in-process and promptly (woken by every deletion, and every
//!   [`StandInConfig::gc_interval`]); on a real cluster it is the controller-manager's and may
//!   lag.
//! - Delete answers 200 with the object while it is kept (finalizers, graceful termination;
//!   the real server answers 202 only for the deprecated `orphanDependents: false`); once it
//!   is gone, with the object for pods, service accounts and custom resources and with a
//!   `Status` of `Success` for the other kinds (kube-apiserver's `ReturnDeletedObject`);
//!   deletecollection answers with the list of affected objects.
//!
//! ## Use
//! In tests, start a real etcd with `etcd-fixture`, take a unique loopback address, and start
//! the stand-in on it; `client()` gives a kube client, `write_kubeconfig` a file for binaries
//! (`KUBECONFIG=...`). The stand-in stops when dropped.
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::net::SocketAddr;
//! use apiserver_standin::{ApiServerStandIn, StandInConfig};
//! use etcd_fixture::{ClusterSpec, EtcdCluster, LoopbackAddr};
//!
//! let etcd = EtcdCluster::start(ClusterSpec::plain(1)).await?;
//! let addr = LoopbackAddr::acquire()?;
//! let config = StandInConfig::new(
//!     etcd.client_urls().iter().map(|u| u.to_string()),
//!     SocketAddr::new(addr.ip().into(), 0),
//! );
//! let standin = ApiServerStandIn::start(config).await?;
//! let client: kube::Client = standin.client()?;
//! standin.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! println!("stand-in serving at {}", standin.url());
//! # Ok(()) }
//! ```
//! The `apiserver-standin` binary does the same from the command line (`--etcd URLS`, or a
//! private etcd when omitted; `--listen`, `--kubeconfig`); it prints the URL on stdout.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod admission;
pub mod apply;
pub mod builtins;
pub mod cel;
pub mod crd;
pub mod custom;
pub mod delete;
pub mod discovery;
pub mod disruption;
pub mod error;
pub mod events;
pub mod eviction;
pub mod eviction_rules;
pub mod field_validation;
pub mod gc;
pub mod http;
pub mod kubeconfig;
pub mod list;
pub mod objects;
pub mod openapi;
pub mod patch;
pub mod pdb;
pub mod pdb_validation;
pub mod resources;
pub mod rules;
pub mod schema;
pub mod schema_prune;
pub mod selectors;
pub mod state;
pub mod store;
pub mod strategic;
pub mod strategy;
pub mod validation;
pub mod verbs;
pub mod watch;
pub mod write_checks;

mod server;

pub use error::{ApiError, StandInError};
pub use server::{ApiServerStandIn, EtcdTls, StandInConfig};
