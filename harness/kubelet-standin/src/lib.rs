//! # kubelet-standin: a kubelet stand-in for simulated control-plane nodes
//!
//! No kubelet can run on the machines this project is developed and tested on, so this crate
//! **stands in for the kubelet**. One [`NodeAgent`] simulates one control-plane node: it has its
//! own loopback address (`127.0.0.x`) and its own root directory, and it runs that node's pods
//! with one of two container runtimes:
//! - **runc** ([`runc`], [`NodeConfig::with_runc`]): every container runs under `runc`, a real
//!   OCI runtime, from the images `scripts/build-images` built ([`image_store`]), with a
//!   read-only root filesystem, the image's user, entrypoint and environment. This is what a
//!   platform runs; the scenarios use it (`CONTAINER_RUNTIME=runc`, set by `scripts/test`).
//! - **host binaries** (the default, a stand-in for a container runtime): an image name maps to
//!   local binaries through [`images`], run in a private mount and PID namespace on the host's
//!   filesystem. The stacked control plane's kube-apiservers (no image of theirs exists here)
//!   and the unit tests use it.
//!
//! Everything else here is a stand-in; names and docs say so.
//!
//! ```text
//!   <root>/etc/kubernetes/manifests/*.yaml ──poll──► static_pods ──┐
//!   API: pods with spec.nodeName = node ──watch──► api_pods ───────┤
//!                                                                  ▼
//!                      worker (per pod: init containers, app containers, restarts, probes)
//!                        │ runner: `kubelet-standin exec-container` (helper) → own process group,
//!                        │         private mount + PID namespace (mounts), program as PID 1
//!                        ▼
//!                      PodObservation ──status::pod_status (pure)──► publish: mirror pod / pod status
//!   node: Node object (control-plane label, InternalIP, Ready heartbeat)
//! ```
//!
//! ## What stands in for what
//! | Kubernetes piece | stand-in here |
//! |---|---|
//! | kubelet static pod source | [`static_pods`]: polls the manifest dir (250 ms), content hash per file |
//! | kubelet API pod source | [`api_pods`]: watch with field selector `spec.nodeName` |
//! | kubelet pod workers | [`worker`]: init containers in order, restart policies, back-off ([`backoff`]); one container run (env, image, mounts, probes, termination message) in `container.rs` |
//! | kubelet prober | [`probes`]: httpGet (http/https, no verification), tcpSocket, exec |
//! | kubelet status/mirror manager | [`status`] (pure) + [`publish`] |
//! | kubelet node status | [`node`]: Node registration, `Ready` heartbeat, node Lease |
//! | kubelet events | [`events`] (pure, from observations), recorded by [`publish`] |
//! | container runtime | runc: [`runc`] (one OCI bundle and one `runc run` per container run, `runc exec` for exec probes) + [`oci_config`] (the bundle's `config.json`, pure); host binaries: [`helper`] (mount and PID namespaces, exec) + [`mounts`] (bind mounts); both started by [`runner`] (process groups) through [`helper`] |
//! | container images | runc: [`image_store`] (OCI layouts by reference or digest, unpacked once per digest with umoci; an image not in the store is `ErrImagePull`); host binaries: [`images`], a table mapping image names to local binaries |
//! | pod network | none: every pod shares the host network; pod IP = node IP |
//! | kubelet volume manager | [`volumes`] (hostPath, emptyDir) + [`api_volumes`] + [`api_volume_io`] (projected ServiceAccount token, configMap, secret, downwardAPI), built before the first container |
//! | container image filesystem | runc: the image's, read-only, with the pod's mounts; host binaries: the host's, with the pod's mounts; `HOME` is an empty per-pod directory (nothing of the host's home, such as a `~/.kube/config`, reaches a pod) |
//! | `kubernetes` Service (kube-proxy) | `KUBERNETES_SERVICE_HOST`/`_PORT` name the API server itself ([`NodeConfig::with_api_service`]) |
//!
//! ## Invariants
//! - **Every container is a process group and a PID namespace** started by this agent: the
//!   program runs as PID 1 of its own PID namespace below a small shim (the helper), so when
//!   it exits the kernel kills the rest of the container. Stopping is SIGTERM to the group,
//!   then SIGKILL (container PID 1, then the group) after the pod's grace period.
//!   [`NodeAgentHandle::shutdown`] returns only when every container is gone. Both helper
//!   stages set `PR_SET_PDEATHSIG`, so even an agent killed with SIGKILL leaves no running
//!   process behind.
//! - **No mount reaches the host.** Each container runs in its own mount namespace (made
//!   `rprivate` first); hostPath volumes are bind-mounted at their `mountPath` inside it, so
//!   node A's `/var/lib/etcd` is `<rootA>/var/lib/etcd` and node B never sees it. Missing mount
//!   targets are created inside an overlay (upper layer on a private tmpfs) of their deepest
//!   existing ancestor, so the host's `/etc` and `/dev` are never written to. When the
//!   process exits its namespace, and every mount in it, is gone.
//! - **No `unsafe`**: the namespace work happens in `kubelet-standin exec-container`, a
//!   single-threaded subcommand of this crate's binary that calls nix's safe `unshare`,
//!   `mount`, `prctl` and `execv` (no `pre_exec`); see [`helper`].
//! - **Status is a pure function** of observations ([`status::pod_status`]): the same
//!   observation gives the same status, `now` is an input, condition transition times are kept.
//! - hostPath `path`s are read relative to the node root and may not contain `..`.
//!
//! ## Use
//! ```no_run
//! # async fn f(client: kube::Client) -> Result<(), kubelet_standin::AgentError> {
//! use kubelet_standin::{NodeAgent, NodeConfig};
//! let cfg = NodeConfig::new("n1", "127.0.0.2".parse().unwrap(), "/tmp/n1".as_ref(), "target/debug".as_ref())
//!     .with_client(client);
//! let agent = NodeAgent::start(cfg).await?;
//! // ... write manifests to /tmp/n1/etc/kubernetes/manifests, create pods bound to n1 ...
//! agent.shutdown().await;
//! # Ok(()) }
//! ```
//! The helper binary defaults to `<bin_dir>/kubelet-standin` (build it with
//! `cargo build -p kubelet-standin`); set [`NodeConfig::helper`] to use another path.
//!
//! ## Not supported (refused with a clear container error)
//! `envFrom`, `secretKeyRef`/`configMapKeyRef`, clusterTrustBundle/podCertificate projections,
//! grpc probes, sidecar (restartable init) containers, resource limits, images not in the
//! table (host binaries) or the store (runc); ConfigMap/Secret volume contents and tokens are
//! not refreshed while a pod runs. Under runc: seccomp, AppArmor, `capabilities` add/drop and
//! cgroup limits are not applied.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

pub mod agent;
pub mod api_pods;
pub mod api_volume_io;
pub mod api_volumes;
pub mod backoff;
mod container;
pub mod context;
pub mod env;
pub mod events;
pub mod expand;
pub mod helper;
pub mod image_store;
pub mod images;
pub mod manifest_watch;
pub mod mounts;
pub mod node;
pub mod oci_config;
pub mod probes;
pub mod publish;
pub mod qos;
pub mod runc;
pub mod runner;
pub mod static_pods;
pub mod status;
pub mod volumes;
pub mod worker;

pub use agent::{AgentError, NodeAgent, NodeAgentHandle, NodeConfig, PodSource};
pub use static_pods::PodKey;
