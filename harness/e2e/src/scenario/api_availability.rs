//! The `api-availability` scenario, the story of issue 33 as a platform's users see it. It runs
//! only on the stacked control plane (`TEST_API=kas`: real kube-apiservers as static pods on
//! every node, on the etcd the operator manages). Throughout, a load goes **through
//! kube-apiserver**: ConfigMaps created by one loop per kube-apiserver (each straight to its
//! server, 2 s per create; [`super::api_probe`]) and a watch through the control-plane
//! endpoint that must be shown every create once and in order across reconnects
//! ([`super::api_watch`]). Meanwhile the operator does, one after another:
//!
//! 1. the bootstrap from n1 to 3 voters;
//! 2. a scale-up to 5 (n4 and n5 join as control-plane nodes, with their kube-apiservers) and
//!    back to 3 (n5 and n4 deleted);
//! 3. a forced rollout, held by the quorum gate's control-plane preflight while n2's
//!    kube-scheduler manifest is away ([`super::control_plane_preflight`]), then finished; a
//!    requested defragmentation;
//! 4. a renewal of kube-apiserver's etcd client certificate (its Secret is given a certificate
//!    of the CA that is past its renewal point, as it will be near the end of its life: the
//!    operator renews it, the kube-apiserver operator stand-in restarts the kube-apiservers);
//! 5. a full CA rotation ([`super::ca_rotation::rotate`]);
//! 6. a member replacement (n2's data dir lost while it is off);
//! 7. a drain of n3 (its quorum guard evicted, the node powered off and on, uncordoned);
//! 8. a SIGKILL of the etcd leader's process.
//!
//! Each phase starts once every control-plane pod is Ready: a kube-controller-manager or
//! kube-scheduler that exited while its node's kube-apiserver restarted may sit in the kubelet's
//! back-off, which the quorum gate waits out, so bounds allow one full back-off
//! ([`super::control_plane_pods`]).
//!
//! The report (`api_phases`, and a table in the step log) gives per phase the API writes
//! acknowledged and failed, the longest API write gap, watch reconnects and relists, watch
//! events missed, objects lost, the wait for the control plane at its start and the
//! control-plane container restarts during it. Gaps are figures, not assertions (issue 33's goal table); no
//! acknowledged object may be lost or unseen by the watcher, shown twice or out of order, no
//! resourceVersion may go backwards, and the kube-apiserver operator stand-in must never have
//! restarted two kube-apiservers at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::ListParams;

use super::api_probe::{ApiProbe, NAMESPACE, Server};
use super::api_report::{self, ApiPhase, Mark};
use super::api_watch::ApiWatch;
use super::control_plane_pods::{self, KUBELET_MAX_BACKOFF, Restarts};
use super::harness::{Harness, member_of};
use crate::controlplane::apiserver_operator::Roll;
use crate::controlplane::{ControlPlaneError, STATIC_NS, retry_transport, wait_for};

mod renewal;
use renewal::renewal;

/// Bound on each phase's operation: 300 s, plus one full kubelet back-off of a
/// kube-controller-manager or kube-scheduler that the quorum gate's control-plane preflight
/// waits out ([`control_plane_pods`]).
const SETTLE: Duration = Duration::from_secs(300 + KUBELET_MAX_BACKOFF.as_secs());
/// Bound on the watcher being shown the last creates once they stop.
const CATCH_UP: Duration = Duration::from_secs(30);
/// The lifetime left to the certificate the renewal phase plants.
const PLANTED_LIFETIME: Duration = Duration::from_secs(240);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

/// The load, the phases marked so far and, per phase, how long its start waited for the
/// control plane and the control-plane container restarts seen then.
struct Run {
    probe: ApiProbe,
    watch: ApiWatch,
    marks: Vec<Mark>,
    control_plane: Vec<(Duration, Restarts)>,
}

impl Run {
    /// Starts a phase once every control-plane pod is Ready: a kube-controller-manager or
    /// kube-scheduler that exited in the phase before may be in the kubelet's back-off, and the
    /// quorum gate waits for it ([`control_plane_pods`]).
    async fn mark(&mut self, h: &mut Harness, phase: &str) -> Result<(), ControlPlaneError> {
        let started = Instant::now();
        let (waited, restarts) = control_plane_pods::wait_ready(&h.cp.client()).await?;
        self.marks.push(Mark {
            phase: phase.to_owned(),
            started,
        });
        self.control_plane.push((waited, restarts));
        h.step(format!(
            "phase: {phase} (after {:.1}s waiting for the control-plane pods)",
            waited.as_secs_f64()
        ));
        Ok(())
    }
}

/// Fills in each phase's control-plane figures from the looks at its start (`seen`, one per
/// phase) and `last`, the restarts seen at the end.
fn control_plane_figures(phases: &mut [ApiPhase], seen: &[(Duration, Restarts)], last: &Restarts) {
    let nexts = seen
        .iter()
        .skip(1)
        .map(|(_, r)| r)
        .chain(std::iter::once(last));
    for ((p, (waited, before)), after) in phases.iter_mut().zip(seen).zip(nexts) {
        p.control_plane_wait_ds = (waited.as_millis() / 100) as u64;
        p.control_plane_restarts = control_plane_pods::restarts_between(before, after);
    }
}

pub async fn api_availability(h: &mut Harness) -> Result<(), ControlPlaneError> {
    if h.cp.stacked().is_none() {
        return Err(failed(
            "api-availability needs real kube-apiservers on the managed etcd: run it with TEST_API=kas",
        ));
    }
    let probe = ApiProbe::start_over(h.cp.client(), Vec::new()).await?;
    let watch = ApiWatch::start(h.cp.client(), NAMESPACE);
    let mut run = Run {
        probe,
        watch,
        marks: Vec::new(),
        control_plane: Vec::new(),
    };
    // Every kube-apiserver was laid down at the start, on n1's member.
    serve(h, &mut run, &["n1", "n2", "n3"]).await?;
    let result = Box::pin(phases(h, &mut run)).await;
    let end = Instant::now();
    let last_restarts = control_plane_pods::observe(&h.cp.client())
        .await
        .map(|c| c.restarts)
        .unwrap_or_default();
    let Run {
        probe,
        watch,
        marks,
        control_plane,
    } = run;
    let (_, creates, present) = probe.finish().await?;
    let acked: Vec<&str> = creates
        .iter()
        .filter(|c| c.ok)
        .map(|c| c.name.as_str())
        .collect();
    // The last creates' events may still be on their way.
    let caught_up = wait_for(
        CATCH_UP,
        "the watcher shown every acknowledged create",
        || async {
            match watch.unseen(&acked).await {
                unseen if unseen.is_empty() => Ok(()),
                unseen => Err(format!(
                    "{} not yet, e.g. {:?}",
                    unseen.len(),
                    unseen.first()
                )),
            }
        },
    )
    .await;
    let log = watch.finish().await;
    h.api_phases = api_report::phases(&marks, end, &creates, &log, &present);
    control_plane_figures(&mut h.api_phases, &control_plane, &last_restarts);
    h.step(format!(
        "the API per phase:\n{}",
        api_report::table(&h.api_phases)
    ));
    result?;
    caught_up?;
    held(&h.api_phases, log.last_error.as_deref())?;
    one_at_a_time(h)
}

/// The kube-apiservers were restarted one at a time, each after the one before was Ready.
fn one_at_a_time(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let rolls =
        h.cp.stacked()
            .map(|s| s.apiservers.rolls())
            .unwrap_or_default();
    let overlapping = overlapping_rolls(&rolls);
    if !overlapping.is_empty() {
        let t0 = rolls.first().map(|r| r.started);
        let at = |t: std::time::Instant| t0.map_or(0.0, |t0| t.duration_since(t0).as_secs_f64());
        let all: Vec<String> = rolls
            .iter()
            .map(|r| {
                let ready = r
                    .ready
                    .map_or("never".to_owned(), |t| format!("{:.1}s", at(t)));
                format!(
                    "{} {} at {:.1}s, Ready {ready}",
                    r.node,
                    r.digest,
                    at(r.started)
                )
            })
            .collect();
        return Err(failed(format!(
            "kube-apiservers restarted together: {overlapping:?}; every roll: {}",
            all.join("; ")
        )));
    }
    h.step(format!(
        "{} kube-apiserver restarts, never two at once",
        rolls.len()
    ));
    Ok(())
}

/// Pairs of successive restarts of two kube-apiservers where the later started before the
/// earlier was Ready again (each node's first lay-down is no restart: nothing served there
/// before; a server given newer inputs while it restarts is still one server down).
fn overlapping_rolls(rolls: &[Roll]) -> Vec<(String, String)> {
    let mut laid = std::collections::BTreeSet::new();
    let restarts: Vec<&Roll> = rolls
        .iter()
        .filter(|r| !laid.insert(r.node.as_str()))
        .collect();
    restarts
        .windows(2)
        .filter(|w| w[1].started != w[0].started && w[1].node != w[0].node)
        .filter(|w| w[0].ready.is_none_or(|ready| w[1].started < ready))
        .map(|w| (w[0].node.clone(), w[1].node.clone()))
        .collect()
}

/// Nothing acknowledged was lost, unseen, shown twice or out of order; time never went back.
fn held(phases: &[ApiPhase], last_watch_error: Option<&str>) -> Result<(), ControlPlaneError> {
    let broken: Vec<String> = phases
        .iter()
        .filter(|p| {
            p.objects_lost
                + p.objects_unseen
                + p.watch_duplicates
                + p.watch_out_of_order
                + p.resource_version_backwards
                > 0
        })
        .map(|p| format!("{p:?}"))
        .collect();
    if broken.is_empty() {
        Ok(())
    } else {
        Err(failed(format!(
            "the API lost, hid, repeated or reordered what it acknowledged: {}; the watch's last error: {last_watch_error:?}",
            broken.join("; ")
        )))
    }
}

async fn phases(h: &mut Harness, run: &mut Run) -> Result<(), ControlPlaneError> {
    run.mark(h, "bootstrap 1→3").await?;
    h.wait_settled(3, SETTLE).await?;
    serve(h, run, &["n1", "n2", "n3"]).await?;
    run.mark(h, "scale-up 3→5").await?;
    for n in ["n4", "n5"] {
        h.cp.add_node(n).await?;
    }
    h.wait_settled(5, SETTLE).await?;
    serve(h, run, &["n1", "n2", "n3", "n4", "n5"]).await?;
    run.mark(h, "scale-down 5→3").await?;
    serve(h, run, &["n1", "n2", "n3"]).await?;
    for n in ["n5", "n4"] {
        h.cp.delete_node(n).await?;
    }
    h.wait_settled(3, SETTLE).await?;
    run.mark(h, "forced rollout").await?;
    super::control_plane_preflight::held_while_a_scheduler_is_missing(h).await?;
    h.wait_settled(3, SETTLE).await?;
    run.mark(h, "defrag").await?;
    defrag(h).await?;
    run.mark(h, "consumer certificate renewal").await?;
    renewal(h).await?;
    run.mark(h, "CA rotation").await?;
    super::ca_rotation::rotate(h).await?;
    run.mark(h, "member replacement").await?;
    replacement(h, run).await?;
    run.mark(h, "drain").await?;
    drain(h, run).await?;
    run.mark(h, "leader SIGKILL").await?;
    leader_kill(h).await
}

/// Clients of each node's own kube-apiserver.
async fn servers(h: &Harness, nodes: &[&str]) -> Result<Vec<Server>, ControlPlaneError> {
    let mut out = Vec::new();
    for n in nodes {
        out.push(Server {
            name: (*n).to_owned(),
            client: h.cp.apiserver_client(n).await?,
        });
    }
    Ok(out)
}

/// The probe creates through exactly `nodes`' kube-apiservers, each waited for first.
async fn serve(h: &Harness, run: &mut Run, nodes: &[&str]) -> Result<(), ControlPlaneError> {
    let servers = servers(h, nodes).await?;
    for s in &servers {
        let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), NAMESPACE);
        wait_for(
            SETTLE,
            &format!("{}'s kube-apiserver answering", s.name),
            || {
                let api = api.clone();
                async move {
                    api.list(&ListParams::default().limit(1))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await?;
    }
    run.probe.set_servers(servers);
    Ok(())
}

async fn defrag(h: &mut Harness) -> Result<(), ControlPlaneError> {
    const REQUEST: &str = "api-availability";
    h.patch_spec(serde_json::json!({"defragmentation": {"request": REQUEST}}))
        .await?;
    let s = h
        .wait_status("every voter defragmented on request", SETTLE, |s| {
            s.defragmentation
                .as_ref()
                .is_some_and(|d| d.handled_request == REQUEST)
        })
        .await?;
    let done: Vec<String> = s
        .defragmentation
        .map(|d| {
            d.members
                .iter()
                .filter(|m| m.request == REQUEST)
                .map(|m| format!("{} {}", m.member_name, m.result))
                .collect()
        })
        .unwrap_or_default();
    h.step(format!("defragmented: {}", done.join(", ")));
    Ok(())
}

/// n2 loses its data dir while off: its member is replaced.
async fn replacement(h: &mut Harness, run: &mut Run) -> Result<(), ControlPlaneError> {
    let old = member_of(&h.status().await, "n2").ok_or_else(|| failed("n2 has no member"))?;
    serve(h, run, &["n1", "n3"]).await?;
    h.cp.stop_node("n2").await?;
    let data = h.cp.node("n2")?.data_dir();
    std::fs::remove_dir_all(&data)
        .map_err(|e| failed(format!("wiping {}: {e}", data.display())))?;
    h.cp.restart_node("n2").await?;
    h.step(format!(
        "n2 off, its data dir wiped, on again (member {old})"
    ));
    let s = h
        .wait_status("n2 a new member, 3 healthy voters", SETTLE, |s| {
            member_of(s, "n2").is_some_and(|id| id != old) && crate::view::settled(s, 3)
        })
        .await?;
    h.step(format!(
        "n2's member replaced: {old} → {}",
        member_of(&s, "n2").unwrap_or_default()
    ));
    serve(h, run, &["n1", "n2", "n3"]).await
}

/// n3 drained, powered off and on, uncordoned.
async fn drain(h: &mut Harness, run: &mut Run) -> Result<(), ControlPlaneError> {
    let options = crate::drain::DrainOptions {
        retry_every: Duration::from_secs(1),
        timeout: SETTLE,
        force: false,
    };
    h.wait_status("3 quorum guards Ready", SETTLE, |s| {
        s.quorum_guard
            .as_ref()
            .is_some_and(|q| (q.expected_guards, q.ready_guards) == (3, 3))
    })
    .await?;
    // The budget's status must have caught up (kube-controller-manager's disruption controller,
    // itself restarted with the kube-apiservers): before that an eviction is refused with "still
    // being processed", which is not the gate's refusal this drain checks is absent.
    super::drain::wait_budget(h, 1).await?;
    serve(h, run, &["n1", "n2"]).await?;
    super::drain::maintain(h, "n3", &options).await?;
    h.wait_settled(3, SETTLE).await?;
    serve(h, run, &["n1", "n2", "n3"]).await
}

/// SIGKILL to the leader's etcd process (the containerID its node agent reports).
async fn leader_kill(h: &mut Harness) -> Result<(), ControlPlaneError> {
    let etcd = h.etcd().await?;
    let (leader, id, term) = super::quorum_loss::find_leader(h, &etcd, &["n1", "n2", "n3"]).await?;
    let pods: Api<Pod> = Api::namespaced(h.cp.client(), STATIC_NS);
    let name = format!("etcd-{leader}");
    let pod = retry_transport(&name, || pods.get(&name)).await?;
    let container = pod
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().find(|c| c.name == "etcd"))
        .and_then(|c| c.container_id)
        .ok_or_else(|| failed(format!("etcd-{leader} reports no etcd containerID")))?;
    let killed = super::failover_instances::sigkill_container(&container)?;
    h.step(format!(
        "SIGKILL to the leader {leader} ({id:x}, term {term}): {killed}"
    ));
    let name = format!("etcd-{leader}");
    wait_for(
        SETTLE,
        &format!("{name}'s etcd container started again and Ready"),
        || {
            let (pods, name, old) = (pods.clone(), name.clone(), container.clone());
            async move {
                let pod = pods.get(&name).await.map_err(|e| e.to_string())?;
                let etcd = pod
                    .status
                    .and_then(|s| s.container_statuses)
                    .and_then(|cs| cs.into_iter().find(|c| c.name == "etcd"));
                match etcd {
                    Some(c) if c.ready && c.container_id.as_ref() != Some(&old) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await?;
    let s = h.wait_settled(3, SETTLE).await?;
    let (now, _, new_term) = super::quorum_loss::find_leader(h, &etcd, &["n1", "n2", "n3"]).await?;
    h.step(format!(
        "{now} leads (term {new_term}); members: {}",
        super::harness::describe_members(&s)
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roll(node: &str, t0: Instant, start_s: u64, ready_s: Option<u64>) -> Roll {
        Roll {
            node: node.into(),
            digest: String::new(),
            started: t0 + Duration::from_secs(start_s),
            ready: ready_s.map(|s| t0 + Duration::from_secs(s)),
        }
    }

    #[test]
    fn only_restarts_that_overlap_are_reported_and_first_lay_downs_are_no_restart() {
        let t0 = Instant::now();
        let rolls = [
            // The first lay-down, all at once; n4 and n5 laid while joining.
            roll("n1", t0, 0, Some(5)),
            roll("n2", t0, 0, Some(6)),
            roll("n4", t0, 10, None),
            roll("n5", t0, 11, Some(20)),
            // Restarts one at a time...
            roll("n1", t0, 30, Some(40)),
            roll("n2", t0, 41, Some(50)),
            // ...and one that started before n2 was Ready again.
            roll("n4", t0, 45, Some(60)),
        ];
        assert_eq!(
            overlapping_rolls(&rolls),
            vec![("n2".to_owned(), "n4".to_owned())]
        );
        assert!(overlapping_rolls(&rolls[..6]).is_empty());
    }
}
