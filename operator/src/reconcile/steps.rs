//! The steps of one pass, in order. Each step calls its controller's pure `decide` and does the
//! I/O for the one action it returns; a failed step sets its `<Controller>Degraded` condition,
//! counts an error and ends the pass (later steps depend on earlier ones).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Resource, ResourceExt};
use membership::{MemberId, MemberUrl, TlsPem};
use time::OffsetDateTime;

use super::endpoints::{ENDPOINTS_CONFIGMAP, endpoint_data};
use super::etcd::{self, EtcdObservation};
use super::writes::Writer;
use super::{BUSY_REQUEUE, Context, Inputs, PassReport, PassState};
use crate::api::{EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, ManagementState, NodeStatus};
use crate::certs::{self, CaOrigin, CertPolicy, ClientCertKind, EtcdCa};
use crate::controllers::membership::{self as ms, MembershipInput, MembershipStep};
use crate::controllers::remediation::{self, Assessment, Candidate};
use crate::controllers::revisions::{
    self as rev, FoundRevision, InUse, Limits, RevisionStep, RevisionView, Sources,
};
use crate::controllers::rollout::{self, NodeView, RolloutAction};
use crate::controllers::status::{Computed, ConditionType as C, merge, with_aggregates};
use crate::observe::{self, ControlPlaneNode};
use crate::podspec::paths::{ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET, POD_CONFIGMAP};
use crate::podspec::{
    NodeTarget, PodInput, STATIC_POD_NAMESPACE, render_installer, render_pod, substitute_revision,
};

const NS: &str = STATIC_POD_NAMESPACE;
const STATUS_PREFIX: &str = "revision-status-";
const SOURCE_NAMES: [&str; 3] = [POD_CONFIGMAP, ALL_BUNDLES_CONFIGMAP, ALL_CERTS_SECRET];

/// A failed step: which condition it sets, a static category and the message.
struct StepError {
    condition: C,
    category: &'static str,
    message: String,
}

fn fail(condition: C, category: &'static str, message: impl Into<String>) -> StepError {
    StepError {
        condition,
        category,
        message: message.into(),
    }
}

fn rfc3339(t: OffsetDateTime) -> String {
    certs::format_time(t)
}

fn find<'a, K: Resource>(items: &'a [K], ns: &str, name: &str) -> Option<&'a K> {
    items.iter().find(|o| {
        o.meta().name.as_deref() == Some(name) && o.meta().namespace.as_deref() == Some(ns)
    })
}

fn secret_bytes(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

fn to_strings(data: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, String> {
    data.iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect()
}

/// Publishes an event on the EtcdCluster (failures are logged, never fatal).
async fn event(ctx: &Context, cluster: &EtcdCluster, warning: bool, reason: &str, note: String) {
    if ctx.plan_only {
        return;
    }
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(note.chars().take(1000).collect()),
        action: reason.to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &cluster.object_ref(&())).await {
        tracing::warn!(reason, error = %e, "could not publish event");
    }
}

/// Everything the certificates step produced.
struct CertState {
    tls: TlsPem,
    with_certs: BTreeSet<String>,
    all_certs: BTreeMap<String, Vec<u8>>,
    bundles: BTreeMap<String, String>,
}

#[allow(clippy::too_many_arguments)]
async fn certs_step(
    ctx: &Context,
    w: &mut Writer,
    mut report_next: impl FnMut(String),
    inputs: &Inputs,
    cluster: &EtcdCluster,
    nodes: &[ControlPlaneNode],
    managed: bool,
    now: OffsetDateTime,
) -> Result<CertState, StepError> {
    let op_ns = ctx.config.operator_namespace.as_str();
    let policy = CertPolicy::default();
    let cert_err = |e: certs::CertError| fail(C::CertSignerDegraded, e.category(), e.to_string());
    let write_err =
        |e: super::writes::WriteError| fail(C::CertSignerDegraded, e.category(), e.to_string());
    let signer = find(&inputs.operator_secrets, op_ns, certs::CA_SECRET);
    let signer_data = signer.map(secret_bytes);
    let (ca, origin) =
        EtcdCa::adopt_or_generate(signer_data.as_ref(), &policy, now).map_err(cert_err)?;
    if origin == CaOrigin::Generated {
        if !managed {
            return Err(fail(
                C::CertSignerDegraded,
                "no_ca",
                "no etcd CA exists and the cluster is Unmanaged",
            ));
        }
        w.secret(op_ns, certs::CA_SECRET, None, &ca.to_secret_data(), None)
            .await
            .map_err(write_err)?;
        event(
            ctx,
            cluster,
            false,
            "CaGenerated",
            format!("generated the etcd CA ({})", ca.subject()),
        )
        .await;
    }
    let desired: certs::DesiredNodes = nodes
        .iter()
        .map(|n| (n.target.name.clone(), [n.target.ip].into_iter().collect()))
        .collect();
    let current_secret = find(&inputs.secrets, NS, ALL_CERTS_SECRET);
    let current = current_secret.map(secret_bytes).unwrap_or_default();
    let plan = certs::plan_node_certs(&ca, &policy, &current, &desired, now);
    let all_certs = if plan.is_noop() {
        current.clone()
    } else {
        certs::apply_plan(&ca, &policy, &plan, &current, now).map_err(cert_err)?
    };
    let bundles = certs::bundle_data(&ca);
    let changes = plan.describe_changes();
    report_next(if changes.is_empty() {
        "every node certificate is valid".to_owned()
    } else {
        format!("would update etcd-all-certs: {}", changes.join("; "))
    });
    if managed {
        if w.secret(NS, ALL_CERTS_SECRET, current_secret, &all_certs, None)
            .await
            .map_err(write_err)?
        {
            event(
                ctx,
                cluster,
                false,
                "CertificatesUpdated",
                plan.describe_changes().join("; "),
            )
            .await;
        }
        w.configmap(
            NS,
            ALL_BUNDLES_CONFIGMAP,
            find(&inputs.configmaps, NS, ALL_BUNDLES_CONFIGMAP),
            &bundles,
            None,
        )
        .await
        .map_err(write_err)?;
    }
    let kind = ClientCertKind::Operator;
    let client_secret = find(&inputs.operator_secrets, op_ns, kind.secret_name());
    let client_current = client_secret.map(secret_bytes);
    let reason = certs::plan_client_cert(&ca, &policy, kind, client_current.as_ref(), now);
    let client_data = if reason.action() == certs::Action::Keep {
        client_current.unwrap_or_default()
    } else {
        let data =
            certs::apply_client_cert(&ca, &policy, kind, &reason, client_current.as_ref(), now)
                .map_err(cert_err)?;
        if managed {
            w.secret(op_ns, kind.secret_name(), client_secret, &data, None)
                .await
                .map_err(write_err)?;
        }
        data
    };
    let get = |k: &str| client_data.get(k).cloned().unwrap_or_default();
    let tls = TlsPem {
        ca: ca.cert_pem().as_bytes().to_vec(),
        cert: get("tls.crt"),
        key: get("tls.key"),
    };
    let with_certs = nodes
        .iter()
        .filter(|n| {
            certs::CertKind::ALL
                .iter()
                .all(|k| all_certs.contains_key(&k.cert_key(&n.target.name)))
        })
        .map(|n| n.target.name.clone())
        .collect();
    ctx.metrics.certificate_expiry.clear();
    for info in certs::inspect_certs(&ca, &all_certs) {
        if let Some(t) = info.not_after_unix() {
            ctx.metrics
                .certificate_expiry
                .get_or_create(&crate::metrics::CertLabels {
                    secret_key: info.secret_key.clone(),
                    node: info.node.clone().unwrap_or_default(),
                })
                .set(t);
        }
    }
    ctx.metrics.ca_expiry.set(ca.info().not_after_unix());
    Ok(CertState {
        tls,
        with_certs,
        all_certs,
        bundles,
    })
}

/// Member conditions. A member whose node is being rolled (`restarting`: member id → its node
/// and the revision it moves to) and is down is a planned restart, reported as progress rather
/// than degradation.
fn member_conditions(
    obs: &EtcdObservation,
    restarting: &BTreeMap<MemberId, (String, i64)>,
    out: &mut Vec<Computed>,
) {
    if let Some(e) = &obs.error {
        out.push(Computed::new(
            C::EtcdMembersAvailable,
            false,
            "EtcdUnreachable",
            format!("no etcd member answered: {e}"),
        ));
        out.push(Computed::new(
            C::EtcdObserverDegraded,
            true,
            "EtcdUnreachable",
            e.clone(),
        ));
        return;
    }
    let view = obs.cluster_view();
    let voters = membership::voters(&obs.members);
    let healthy = view
        .members
        .iter()
        .filter(|m| !m.member.is_learner && m.healthy)
        .count();
    let summary = view.health_summary();
    out.push(Computed::new(
        C::EtcdMembersAvailable,
        membership::is_quorate(healthy, voters),
        if membership::is_quorate(healthy, voters) {
            "Quorate"
        } else {
            "NotQuorate"
        },
        summary,
    ));
    let unhealthy: Vec<String> = view
        .members
        .iter()
        .filter(|m| !m.healthy && m.member.is_started() && !restarting.contains_key(&m.member.id))
        .map(|m| {
            let why = obs
                .health
                .get(&m.member.id)
                .and_then(|h| h.error.clone())
                .unwrap_or_default();
            format!("{} ({}): {why}", m.member.name, m.member.id)
        })
        .collect();
    out.push(Computed::from_problems(
        C::EtcdMembersDegraded,
        "UnhealthyMembers",
        &unhealthy,
    ));
    let alarms: Vec<String> = obs
        .preflight
        .alarms
        .iter()
        .map(|a| format!("alarm {a} is raised; membership changes wait until it is cleared"))
        .collect();
    out.push(Computed::from_problems(
        C::EtcdMembersDegraded,
        "AlarmRaised",
        &alarms,
    ));
    out.push(Computed::new(
        C::EtcdObserverDegraded,
        false,
        "AsExpected",
        "",
    ));
    let planned: Vec<String> = view
        .members
        .iter()
        .filter(|m| !m.healthy)
        .filter_map(|m| {
            let (node, target) = restarting.get(&m.member.id)?;
            Some(if m.member.is_started() {
                format!("{node} restarting for revision {target}")
            } else {
                format!(
                    "{node} starting member {} for revision {target}",
                    m.member.id
                )
            })
        })
        .collect();
    if !planned.is_empty() {
        out.push(Computed::new(
            C::EtcdMembersProgressing,
            true,
            "PlannedRestart",
            planned.join("; "),
        ));
    }
}

/// Node name → its member id, matched by peer URL.
fn members_by_node(
    nodes: &[ControlPlaneNode],
    obs: &EtcdObservation,
) -> BTreeMap<String, MemberId> {
    nodes
        .iter()
        .filter_map(|n| {
            let url = n.target.peer_url().ok()?;
            let m = obs.members.iter().find(|m| m.has_peer_url(&url))?;
            Some((n.target.name.clone(), m.id))
        })
        .collect()
}

/// Runs the steps.
pub(super) async fn run(
    ctx: &Context,
    st: &mut PassState,
    inputs: &Inputs,
    now: OffsetDateTime,
) -> PassReport {
    let mut report = PassReport {
        requeue_after: super::IDLE_REQUEUE,
        ..Default::default()
    };
    let Some(cluster) = inputs.cluster.clone() else {
        if ctx.plan_only {
            report.next(
                "cluster",
                "would create EtcdCluster/cluster with the default spec",
            );
            return report;
        }
        let api: Api<EtcdCluster> = Api::all(ctx.client.clone());
        let cr = EtcdCluster::new(crate::api::SINGLETON, EtcdClusterSpec::default());
        match api.create(&PostParams::default(), &cr).await {
            Ok(_) => report.note("created EtcdCluster/cluster with the default spec"),
            Err(e) => report.note(format!(
                "could not create EtcdCluster/cluster: {}",
                super::writes::describe(&e)
            )),
        }
        report.requeue_after = Duration::from_secs(1);
        return report;
    };
    let spec = cluster.spec.clone();
    let managed = spec.management_state == ManagementState::Managed;
    let prev = cluster.status.clone().unwrap_or_default();
    let mut conds: Vec<Computed> = Vec::new();
    let mut w = Writer::new(ctx.client.clone(), ctx.plan_only);
    let nodes = observe::control_plane_nodes(&inputs.nodes, &spec.node_selector());
    ctx.metrics
        .control_plane_nodes
        .set(i64::try_from(nodes.len()).unwrap_or(i64::MAX));
    let mut latest = prev.latest_available_revision;
    let mut node_statuses = prev.node_statuses.clone();
    let mut remediations = prev.remediations.clone();
    let mut busy = false;

    let outcome: Result<EtcdObservation, (StepError, EtcdObservation)> = async {
        // 1. Certificates.
        let certs = {
            let _t = ctx.metrics.time("certs");
            let mut cert_lines = Vec::new();
            let r = certs_step(
                ctx,
                &mut w,
                |l| cert_lines.push(l),
                inputs,
                &cluster,
                &nodes,
                managed,
                now,
            )
            .await;
            for l in cert_lines {
                report.next("certs", l);
            }
            r.map_err(|e| (e, EtcdObservation::default()))?
        };
        conds.push(Computed::new(
            C::CertSignerDegraded,
            false,
            "AsExpected",
            "",
        ));

        // 2. etcd.
        let obs = {
            let _t = ctx.metrics.time("etcd");
            let mut endpoints: BTreeSet<String> = st.known_endpoints.clone();
            endpoints.extend(
                nodes
                    .iter()
                    .filter_map(|n| n.target.client_url().ok().map(|u| u.to_string())),
            );
            let endpoints: Vec<MemberUrl> =
                endpoints.iter().filter_map(|e| e.parse().ok()).collect();
            match st
                .etcd
                .client(endpoints, &certs.tls, ctx.config.etcd_timeout)
            {
                Ok(client) => etcd::observe(client).await,
                Err(e) => EtcdObservation {
                    error: Some(e.to_string()),
                    ..Default::default()
                },
            }
        };
        let by_node = members_by_node(&nodes, &obs);
        let restarting: BTreeMap<MemberId, (String, i64)> = by_node
            .iter()
            .filter_map(|(node, id)| {
                let status = node_statuses.iter().find(|s| s.node_name == *node)?;
                Some((*id, (node.clone(), status.target_revision?)))
            })
            .collect();
        member_conditions(&obs, &restarting, &mut conds);
        let pods = observe::etcd_pods(&inputs.pods);
        let blocked: Vec<String> = pods
            .iter()
            .filter_map(|(node, (p, _))| {
                Some(format!(
                    "{node}: etcd-verify blocks etcd: {}",
                    p.blocked.as_ref()?
                ))
            })
            .collect();
        if !blocked.is_empty() {
            conds.push(Computed::new(
                C::EtcdMembersDegraded,
                true,
                "BlockedByVerify",
                blocked.join("; "),
            ));
        }
        report.next(
            "etcd",
            match &obs.error {
                Some(e) => format!("unreachable: {e}"),
                None => obs.cluster_view().health_summary(),
            },
        );
        for b in &blocked {
            report.next("etcd", b.clone());
        }
        if obs.error.is_none() {
            st.known_endpoints = obs
                .members
                .iter()
                .flat_map(|m| m.client_urls.iter().map(ToString::to_string))
                .collect();
        }
        let learners: BTreeSet<MemberId> = obs
            .members
            .iter()
            .filter(|m| m.is_learner)
            .map(|m| m.id)
            .collect();
        st.learner_added.retain(|id, _| learners.contains(id));
        for id in &learners {
            st.learner_added.entry(*id).or_insert(now);
        }
        record_member_metrics(ctx, &obs, st, now);
        if obs.error.is_some() {
            report.note("etcd not reachable; nothing else can be decided");
            return Ok(obs);
        }

        // 3. Membership.
        let mut data_lost = BTreeMap::new();
        for (node, (_, verify)) in &pods {
            if let Some(id) = verify.as_ref().and_then(|r| r.data_lost_member()) {
                data_lost.insert(node.clone(), id);
            }
        }
        let infos = observe::node_infos(&nodes, &certs.with_certs);
        let cluster_view = obs.cluster_view();
        let planned: Vec<MemberId> = restarting.keys().copied().collect();
        let candidates = remediation::candidates(
            &spec.member_remediation,
            &crate::controllers::member_status::member_statuses(&obs, &prev.members, &rfc3339(now)),
            &by_node,
            &remediations,
            &planned,
            now,
        );
        remediation_conditions(&candidates, &mut conds, &mut report);
        let step = ms::decide(&MembershipInput {
            nodes: &infos,
            cluster: &cluster_view,
            data_lost: &data_lost,
            learner_added: &st.learner_added,
            start_deadline: Duration::from_secs(u64::from(spec.learner_start_deadline_seconds)),
            leader: obs.leader,
            remediation: &candidates,
            now,
        });
        record_policy_metrics(ctx, &obs, &infos, &step);
        if let MembershipStep::Remove { id, kind: ms::RemovalKind::Unhealthy, message } = &step
            && managed
            && !ctx.plan_only
            && let Some((node, _)) = by_node.iter().find(|(_, m)| *m == id)
        {
            // Recorded before the call: an attempt that fails still counts, so a failing
            // removal backs off like a successful one that did not help.
            remediation::record_attempt(&mut remediations, node, *id, message, &rfc3339(now));
        }
        let changed = {
            let _t = ctx.metrics.time("membership");
            membership_act(
                ctx,
                st,
                &cluster,
                &step,
                managed,
                &mut conds,
                &mut report,
                now,
            )
            .await
            .map_err(|e| (e, obs.clone()))?
        };
        if !matches!(step, MembershipStep::None | MembershipStep::Standby { .. }) {
            busy = true;
        }
        let deadline = time::Duration::seconds(i64::from(spec.learner_start_deadline_seconds));
        let promoting = match &step {
            MembershipStep::Promote { id, .. } => Some(*id),
            _ => None,
        };
        for m in obs
            .members
            .iter()
            .filter(|m| m.is_learner && m.is_started() && Some(m.id) == promoting)
        {
            let added = st.learner_added.get(&m.id).copied().unwrap_or(now);
            if now - added > deadline {
                let index = obs.health.get(&m.id).and_then(|h| h.raft_index);
                conds.push(Computed::new(
                    C::EtcdMembersDegraded,
                    true,
                    "LearnerNotCatchingUp",
                    format!(
                        "learner {} ({}) was added {}s ago and etcd still refuses to promote it (learner raft index {}, leader {})",
                        m.id,
                        m.name,
                        (now - added).whole_seconds(),
                        index.map_or("?".into(), |i| i.to_string()),
                        obs.leader_raft_index().map_or("?".into(), |i| i.to_string())
                    ),
                ));
            }
        }
        if changed {
            report.requeue_after = Duration::ZERO;
            return Ok(obs);
        }
        if !managed {
            report.note("Unmanaged: observing only");
            return Ok(obs);
        }

        // 4. Target config: a manifest for every node that has a member.
        let targets: Vec<&NodeTarget> = nodes
            .iter()
            .filter(|n| by_node.contains_key(&n.target.name))
            .map(|n| &n.target)
            .collect();
        let all_targets: Vec<NodeTarget> = nodes.iter().map(|n| n.target.clone()).collect();
        let mut pod_data = BTreeMap::new();
        {
            let _t = ctx.metrics.time("target-config");
            for t in &targets {
                let text = render_pod(&PodInput {
                    node: t,
                    nodes: &all_targets,
                    members: &obs.members,
                    revision: None,
                    bootstrap: false,
                    spec: &spec,
                    images: &ctx.config.images,
                    resource_host_dir: None,
                })
                .map_err(|e| {
                    (
                        fail(C::TargetConfigControllerDegraded, "render", e.to_string()),
                        obs.clone(),
                    )
                })?;
                pod_data.insert(format!("pod-{}.yaml", t.name), text);
            }
            if !pod_data.is_empty()
                && w.configmap(
                    NS,
                    POD_CONFIGMAP,
                    find(&inputs.configmaps, NS, POD_CONFIGMAP),
                    &pod_data,
                    None,
                )
                .await
                .map_err(|e| {
                    (
                        fail(
                            C::TargetConfigControllerDegraded,
                            e.category(),
                            e.to_string(),
                        ),
                        obs.clone(),
                    )
                })?
            {
                report.note(format!("rendered etcd-pod for {} node(s)", targets.len()));
                report.next(
                    "target-config",
                    format!("update etcd-pod for {} node(s)", targets.len()),
                );
            } else {
                report.next(
                    "target-config",
                    format!("etcd-pod is up to date for {} node(s)", targets.len()),
                );
            }
        }
        conds.push(Computed::new(
            C::TargetConfigControllerDegraded,
            false,
            "AsExpected",
            "",
        ));
        if pod_data.is_empty() {
            report.note("no node has a member yet; nothing to render");
            report.next(
                "target-config",
                "no node has a member yet; nothing to render",
            );
            return Ok(obs);
        }

        // 5. Revisions.
        let sources = Sources {
            by_name: BTreeMap::from([
                (
                    POD_CONFIGMAP.to_owned(),
                    pod_data
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                        .collect(),
                ),
                (
                    ALL_BUNDLES_CONFIGMAP.to_owned(),
                    certs
                        .bundles
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                        .collect(),
                ),
                (ALL_CERTS_SECRET.to_owned(), certs.all_certs.clone()),
            ]),
        };
        {
            let _t = ctx.metrics.time("revisions");
            let found = found_revisions(inputs);
            let in_use = InUse {
                nodes: node_statuses
                    .iter()
                    .flat_map(|s| [Some(s.current_revision), s.target_revision])
                    .flatten()
                    .collect(),
                failed: {
                    let mut f: Vec<i64> = node_statuses
                        .iter()
                        .filter_map(|s| s.last_failed_revision)
                        .collect();
                    f.sort_unstable_by(|a, b| b.cmp(a));
                    f
                },
            };
            let step = rev::decide(&RevisionView {
                sources: &sources,
                found: &found,
                published: latest,
                in_use: &in_use,
                limits: Limits {
                    succeeded: spec.revision_history.succeeded_limit as usize,
                    failed: spec.revision_history.failed_limit as usize,
                },
            });
            revision_act(
                ctx,
                &mut w,
                &cluster,
                &step,
                &sources,
                &mut latest,
                &mut report,
            )
            .await
            .map_err(|e| (e, obs.clone()))?;
            if matches!(
                step,
                RevisionStep::Create { .. } | RevisionStep::Discard { .. }
            ) {
                busy = true;
                return Ok(obs);
            }
        }
        conds.push(Computed::new(
            C::RevisionControllerDegraded,
            false,
            "AsExpected",
            "",
        ));
        ctx.metrics.latest_revision.set(latest);

        // 6. Rollout.
        {
            let _t = ctx.metrics.time("installer");
            let installers = observe::installers(&inputs.pods);
            let views: Vec<NodeView> = targets
                .iter()
                .map(|t| {
                    let member = by_node.get(&t.name).copied();
                    NodeView {
                        name: t.name.clone(),
                        member,
                        is_leader: member.is_some() && member == obs.leader,
                        pod: pods.get(&t.name).map(|(p, _)| p.clone()),
                        installer: installers.get(&t.name).cloned(),
                        status: node_statuses
                            .iter()
                            .find(|s| s.node_name == t.name)
                            .cloned()
                            .unwrap_or_default(),
                    }
                })
                .collect();
            let d = rollout::decide(&views, latest, &cluster_view, now);
            node_statuses = d.statuses;
            ctx.metrics.node_current_revision.clear();
            for s in &node_statuses {
                ctx.metrics
                    .node_current_revision
                    .get_or_create(&crate::metrics::NodeLabel {
                        node: s.node_name.clone(),
                    })
                    .set(s.current_revision);
            }
            if let RolloutAction::Install { node, .. } = &d.action
                && !ctx.plan_only
            {
                move_leadership_off(ctx, st, &cluster, &obs, by_node.get(node).copied(), &mut report).await;
            }
            rollout_act(
                ctx,
                &mut w,
                &cluster,
                &d.action,
                &mut node_statuses,
                &mut conds,
                &mut report,
            )
            .await
            .map_err(|e| (e, obs.clone()))?;
            if !matches!(d.action, RolloutAction::Done) {
                busy = true;
            }
            let current: BTreeMap<String, i64> = node_statuses
                .iter()
                .map(|s| (s.node_name.clone(), s.current_revision))
                .collect();
            let prunable = observe::prunable_installers(&inputs.pods, &current);
            if !prunable.is_empty() {
                report.next("installer-gc", format!("delete finished installer pods {}", prunable.join(", ")));
            }
            for name in prunable {
                w.delete::<Pod>(NS, &name)
                    .await
                    .map_err(|e| (fail(C::InstallerControllerDegraded, e.category(), e.to_string()), obs.clone()))?;
            }
        }
        conds.push(Computed::new(
            C::InstallerControllerDegraded,
            false,
            "AsExpected",
            "",
        ));

        // 7. Host endpoints.
        {
            let _t = ctx.metrics.time("endpoints");
            let data = endpoint_data(&obs.members);
            let ep_err = |m: String| (fail(C::EndpointsControllerDegraded, "api", m), obs.clone());
            report.next(
                "endpoints",
                format!("publish {} voter endpoint(s)", data.len()),
            );
            if !data.is_empty() && !ctx.plan_only {
                w.configmap(
                    NS,
                    ENDPOINTS_CONFIGMAP,
                    find(&inputs.configmaps, NS, ENDPOINTS_CONFIGMAP),
                    &data,
                    None,
                )
                .await
                .map_err(|e| ep_err(e.to_string()))?;
            }
        }
        conds.push(Computed::new(
            C::EndpointsControllerDegraded,
            false,
            "AsExpected",
            "",
        ));
        Ok(obs)
    }
    .await;

    let obs = match outcome {
        Ok(obs) => obs,
        Err((e, obs)) => {
            ctx.metrics.error(e.condition.as_str(), e.category);
            report.note(format!("{}: {}", e.condition.as_str(), e.message));
            conds.push(Computed::new(e.condition, true, e.category, e.message));
            busy = true;
            obs
        }
    };
    if ctx.plan_only {
        return report;
    }
    st.awaited.append(&mut w.awaited);
    let members = if obs.error.is_none() {
        crate::controllers::member_status::member_statuses(&obs, &prev.members, &rfc3339(now))
    } else {
        prev.members.clone()
    };
    let status = EtcdClusterStatus {
        observed_generation: cluster.metadata.generation,
        conditions: merge(
            &prev.conditions,
            &with_aggregates(fill_defaults(conds), &prev.conditions, now),
            &rfc3339(now),
        ),
        latest_available_revision: latest,
        node_statuses,
        members: members.clone(),
        remediations: remediation::settle_records(
            &spec.member_remediation,
            &remediations,
            &members,
            &members_by_node(&nodes, &obs),
            &nodes
                .iter()
                .map(|n| n.target.name.clone())
                .collect::<Vec<_>>(),
            now,
        ),
    };
    for c in &status.conditions {
        ctx.metrics.condition(&c.type_, &c.status);
    }
    if status != prev {
        let api: Api<EtcdCluster> = Api::all(ctx.client.clone());
        let patch = serde_json::json!({ "status": status });
        if let Err(e) = api
            .patch_status(
                &cluster.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            report.note(format!(
                "could not write status: {}",
                super::writes::describe(&e)
            ));
            ctx.metrics.error("status", "api");
        }
    }
    if busy && report.requeue_after > BUSY_REQUEUE {
        report.requeue_after = BUSY_REQUEUE;
    }
    report
}

/// Every controller condition is present (False when the step didn't report).
fn fill_defaults(mut conds: Vec<Computed>) -> Vec<Computed> {
    for t in C::CONTROLLERS.into_iter().chain([
        C::EtcdMembersProgressing,
        C::NodeInstallerProgressing,
        C::NodeInstallerDegraded,
        C::EtcdMembersDegraded,
    ]) {
        if !conds.iter().any(|c| c.type_ == t) {
            conds.push(Computed::new(t, false, "AsExpected", ""));
        }
    }
    conds
}

/// Remediation as status shows it: an exhausted node is Degraded (an admin must look); a member
/// waiting for its time or backing off is a line in the plan.
fn remediation_conditions(
    candidates: &[Candidate],
    conds: &mut Vec<Computed>,
    report: &mut PassReport,
) {
    let mut exhausted = Vec::new();
    for c in candidates {
        let line = match &c.assessment {
            Assessment::Waiting { due } => format!(
                "member {} of {} unhealthy since {}; replaced at {} unless it recovers",
                c.member,
                c.node,
                rfc3339(c.since),
                rfc3339(*due)
            ),
            Assessment::BackingOff { until, attempts } => format!(
                "member {} of {} still unhealthy after {attempts} replacement(s); next attempt not before {}",
                c.member,
                c.node,
                rfc3339(*until)
            ),
            Assessment::Exhausted { attempts } => {
                let line = format!(
                    "member {} of {} is still unhealthy after {attempts} replacement(s) (spec.memberRemediation.maxRetries); the operator stops replacing it: look at the node (disk, etcd logs, etcd-verify's report)",
                    c.member, c.node
                );
                exhausted.push(line.clone());
                line
            }
            Assessment::Due { .. } => continue,
            Assessment::Disabled => format!(
                "member {} of {} is unhealthy; remediation is off (spec.memberRemediation.unhealthySeconds: 0)",
                c.member, c.node
            ),
        };
        report.next("remediation", line);
    }
    conds.push(Computed::from_problems(
        C::EtcdMembersDegraded,
        "RemediationExhausted",
        &exhausted,
    ));
}

/// The odd-voter policy as metrics: the voters it moves to and which learner is a standby.
fn record_policy_metrics(
    ctx: &Context,
    obs: &EtcdObservation,
    infos: &[ms::NodeInfo],
    step: &MembershipStep,
) {
    let eligible = infos.iter().filter(|n| n.eligible).count();
    let remaining = infos.iter().filter(|n| !n.deleting).count();
    let desired = ms::desired_voters(membership::voters(&obs.members), eligible, remaining);
    ctx.metrics
        .desired_voters
        .set(i64::try_from(desired).unwrap_or(i64::MAX));
    ctx.metrics.learner_standby.clear();
    for m in obs.members.iter().filter(|m| m.is_learner) {
        let standby = matches!(step, MembershipStep::Standby { id, .. } if *id == m.id);
        ctx.metrics
            .learner_standby
            .get_or_create(&crate::metrics::MemberLabel {
                member: m.id.to_string(),
            })
            .set(i64::from(standby));
    }
}

fn record_member_metrics(
    ctx: &Context,
    obs: &EtcdObservation,
    st: &PassState,
    now: OffsetDateTime,
) {
    ctx.metrics.members.clear();
    for m in &obs.members {
        let healthy = obs.health.get(&m.id).is_some_and(|h| h.healthy);
        ctx.metrics
            .members
            .get_or_create(&crate::metrics::MemberRoleLabels {
                role: if m.is_learner { "learner" } else { "voter" }.to_owned(),
                healthy: healthy.to_string(),
            })
            .inc();
    }
    ctx.metrics.learner_age_seconds.clear();
    ctx.metrics.learner_raft_index.clear();
    for (id, added) in &st.learner_added {
        let label = crate::metrics::MemberLabel {
            member: id.to_string(),
        };
        ctx.metrics
            .learner_age_seconds
            .get_or_create(&label)
            .set((now - *added).whole_seconds());
        if let Some(idx) = obs.health.get(id).and_then(|h| h.raft_index) {
            ctx.metrics
                .learner_raft_index
                .get_or_create(&label)
                .set(i64::try_from(idx).unwrap_or(i64::MAX));
        }
    }
    if let Some(idx) = obs.leader_raft_index() {
        ctx.metrics
            .leader_raft_index
            .set(i64::try_from(idx).unwrap_or(i64::MAX));
    }
}

#[allow(clippy::too_many_arguments)]
async fn membership_act(
    ctx: &Context,
    st: &mut PassState,
    cluster: &EtcdCluster,
    step: &MembershipStep,
    managed: bool,
    conds: &mut Vec<Computed>,
    report: &mut PassReport,
    now: OffsetDateTime,
) -> Result<bool, StepError> {
    let progressing = |conds: &mut Vec<Computed>, reason: &str, msg: String| {
        conds.push(Computed::new(C::EtcdMembersProgressing, true, reason, msg));
    };
    let degraded =
        |e: membership::ClientError| fail(C::MembershipControllerDegraded, "etcd", e.to_string());
    match step {
        MembershipStep::None => report.next(
            "membership",
            "nothing to do: every eligible node has a member",
        ),
        MembershipStep::Waiting { message } => {
            report.next("membership", format!("waiting: {message}"))
        }
        MembershipStep::Standby { message, .. } => {
            report.next("membership", format!("nothing to do: {message}"))
        }
        MembershipStep::Denied { denial, .. } => report.next(
            "membership",
            format!(
                "blocked by the quorum gate: {denial} [{}]",
                denial.rule.category()
            ),
        ),
        MembershipStep::AddLearner { node, peer_url } => {
            report.next("membership", format!("add learner for {node} ({peer_url})"))
        }
        MembershipStep::Promote { id, node } => {
            report.next("membership", format!("promote learner {id} ({node})"))
        }
        MembershipStep::Remove { id, message, .. } => {
            report.next("membership", format!("remove member {id}: {message}"))
        }
    }
    if ctx.plan_only
        && matches!(
            step,
            MembershipStep::AddLearner { .. }
                | MembershipStep::Promote { .. }
                | MembershipStep::Remove { .. }
        )
    {
        progressing_plan(conds);
        return Ok(false);
    }
    let Some((_, client)) = st.etcd.current() else {
        return Ok(false);
    };
    match step {
        MembershipStep::None | MembershipStep::Standby { .. } => {
            let message = match step {
                MembershipStep::Standby { message, .. } => {
                    format!("membership is as desired; {message}")
                }
                _ => "membership is as desired".to_owned(),
            };
            conds.push(Computed::new(
                C::EtcdMembersProgressing,
                false,
                "AsExpected",
                message,
            ));
            conds.push(Computed::new(
                C::MembershipControllerDegraded,
                false,
                "AsExpected",
                "",
            ));
            Ok(false)
        }
        MembershipStep::Waiting { message } => {
            progressing(conds, "LearnerPending", message.clone());
            report.note(message.clone());
            Ok(false)
        }
        MembershipStep::Denied { step, denial } => {
            ctx.metrics
                .gate_denials
                .get_or_create(&crate::metrics::RuleLabel {
                    rule: denial.rule.category().to_owned(),
                })
                .inc();
            progressing(
                conds,
                "WaitingForQuorumGate",
                format!("{step} is waiting: {denial}"),
            );
            report.note(format!("gate: {denial}"));
            Ok(false)
        }
        _ if !managed => {
            progressing(
                conds,
                "Unmanaged",
                format!("would {step:?} but the cluster is Unmanaged"),
            );
            Ok(false)
        }
        MembershipStep::AddLearner { node, peer_url } => match client.add_learner(peer_url).await {
            Ok(m) => {
                st.learner_added.insert(m.id, now);
                count(ctx, "add_learner");
                report.note(format!("added learner {} for {node}", m.id));
                event(
                    ctx,
                    cluster,
                    false,
                    "MemberAddedAsLearner",
                    format!("added {node} ({peer_url}) as learner {}", m.id),
                )
                .await;
                progressing(
                    conds,
                    "LearnerAdded",
                    format!("learner {} added for {node}", m.id),
                );
                Ok(true)
            }
            Err(e) if e.mentions("unhealthy cluster") => {
                progressing(
                    conds,
                    "EtcdNotReady",
                    format!("etcd refused adding {node} (unhealthy cluster); retrying"),
                );
                Ok(false)
            }
            Err(e) => Err(degraded(e)),
        },
        MembershipStep::Promote { id, node } => match client.promote(*id).await {
            Ok(()) => {
                count(ctx, "promote");
                report.note(format!("promoted {node} ({id})"));
                event(
                    ctx,
                    cluster,
                    false,
                    "MemberPromoted",
                    format!("promoted learner {id} ({node}) to voter"),
                )
                .await;
                progressing(conds, "LearnerPromoted", format!("promoted {node}"));
                Ok(true)
            }
            Err(e) if e.mentions("in sync") || e.mentions("not ready") => {
                progressing(
                    conds,
                    "LearnerCatchingUp",
                    format!("learner {id} ({node}) is catching up with the leader"),
                );
                Ok(false)
            }
            Err(e) => Err(degraded(e)),
        },
        MembershipStep::Remove { id, kind, message } => match client.remove(*id).await {
            Ok(()) => {
                count(ctx, kind.reason());
                report.note(message.clone());
                event(ctx, cluster, true, kind.reason(), message.clone()).await;
                progressing(conds, kind.reason(), message.clone());
                Ok(true)
            }
            Err(e) => Err(degraded(e)),
        },
    }
}

/// Before the leader's node is restarted, hands leadership to the healthy voter with the highest
/// raft index, so the restart costs no election. A failure is logged and the restart goes on:
/// etcd also transfers leadership when it is stopped gracefully.
async fn move_leadership_off(
    ctx: &Context,
    st: &PassState,
    cluster: &EtcdCluster,
    obs: &EtcdObservation,
    member: Option<MemberId>,
    report: &mut PassReport,
) {
    let (Some(leader), Some(member)) = (obs.leader, member) else {
        return;
    };
    if leader != member {
        return;
    }
    let Some(leader_url) = obs
        .members
        .iter()
        .find(|m| m.id == leader)
        .and_then(|m| m.client_urls.first().cloned())
    else {
        return;
    };
    let target = obs
        .members
        .iter()
        .filter(|m| !m.is_learner && m.id != leader)
        .filter_map(|m| {
            let h = obs.health.get(&m.id)?;
            h.healthy.then_some((h.raft_index.unwrap_or(0), m.id))
        })
        .max();
    let Some((_, target)) = target else { return };
    let Some((_, client)) = st.etcd.current() else {
        return;
    };
    match client.move_leader(&leader_url, target).await {
        Ok(()) => {
            report.note(format!(
                "moved etcd leadership from {leader} to {target} before restarting its node"
            ));
            event(
                ctx,
                cluster,
                false,
                "LeaderMoved",
                format!(
                    "moved leadership from {leader} to {target} before restarting the leader's node"
                ),
            )
            .await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not move leadership before restarting the leader")
        }
    }
}

fn progressing_plan(conds: &mut Vec<Computed>) {
    conds.push(Computed::new(
        C::EtcdMembersProgressing,
        true,
        "Planned",
        "a membership change is due",
    ));
}

fn count(ctx: &Context, action: &str) {
    ctx.metrics
        .membership_changes
        .get_or_create(&crate::metrics::ActionLabel {
            action: action.to_owned(),
        })
        .inc();
}

/// The revisions found in the caches.
fn found_revisions(inputs: &Inputs) -> Vec<FoundRevision> {
    let mut found: BTreeMap<i64, FoundRevision> = BTreeMap::new();
    let number = |name: &str, prefix: &str| -> Option<i64> {
        name.strip_prefix(prefix)?.strip_prefix('-')?.parse().ok()
    };
    fn entry(found: &mut BTreeMap<i64, FoundRevision>, n: i64) -> &mut FoundRevision {
        found.entry(n).or_insert_with(|| FoundRevision {
            number: n,
            ..Default::default()
        })
    }
    let ours = |ns: Option<&str>| ns == Some(NS);
    for cm in inputs
        .configmaps
        .iter()
        .filter(|c| ours(c.metadata.namespace.as_deref()))
    {
        let name = cm.name_any();
        if let Some(n) = name
            .strip_prefix(STATUS_PREFIX)
            .and_then(|n| n.parse().ok())
        {
            let fingerprints: BTreeMap<String, String> = cm
                .data
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| SOURCE_NAMES.contains(&k.as_str()))
                .collect();
            entry(&mut found, n).status = Some(fingerprints);
        }
        for source in [POD_CONFIGMAP, ALL_BUNDLES_CONFIGMAP] {
            if let Some(n) = number(&name, source) {
                entry(&mut found, n).copies.insert(source.to_owned());
            }
        }
    }
    for secret in inputs
        .secrets
        .iter()
        .filter(|c| ours(c.metadata.namespace.as_deref()))
    {
        if let Some(n) = number(&secret.name_any(), ALL_CERTS_SECRET) {
            entry(&mut found, n)
                .copies
                .insert(ALL_CERTS_SECRET.to_owned());
        }
    }
    found.into_values().collect()
}

async fn revision_act(
    ctx: &Context,
    w: &mut Writer,
    cluster: &EtcdCluster,
    step: &RevisionStep,
    sources: &Sources,
    latest: &mut i64,
    report: &mut PassReport,
) -> Result<(), StepError> {
    let err = |e: super::writes::WriteError| {
        fail(C::RevisionControllerDegraded, e.category(), e.to_string())
    };
    report.next(
        "revisions",
        match step {
            RevisionStep::None => {
                format!("revision {latest} is the latest and matches the sources")
            }
            RevisionStep::Publish { number } => format!("publish revision {number} as the latest"),
            RevisionStep::Create { number, reason } => {
                format!("create revision {number}: {reason}")
            }
            RevisionStep::Discard { number, reason } => {
                format!("discard revision {number}: {reason}")
            }
            RevisionStep::Prune { numbers } => format!("prune revisions {numbers:?}"),
        },
    );
    match step {
        RevisionStep::None => Ok(()),
        RevisionStep::Publish { number } => {
            *latest = *number;
            report.note(format!("revision {number} is available"));
            event(
                ctx,
                cluster,
                false,
                "RevisionAvailable",
                format!("revision {number} is available to roll out"),
            )
            .await;
            Ok(())
        }
        RevisionStep::Create { number, reason } => {
            let status_name = format!("{STATUS_PREFIX}{number}");
            let mut fp = sources.fingerprints();
            fp.insert("revision".to_owned(), number.to_string());
            fp.insert("reason".to_owned(), reason.clone());
            w.configmap(NS, &status_name, None, &fp, None)
                .await
                .map_err(err)?;
            let owner_cm: ConfigMap = Api::namespaced(ctx.client.clone(), NS)
                .get(&status_name)
                .await
                .map_err(|e| {
                    fail(
                        C::RevisionControllerDegraded,
                        "api",
                        format!("reading {status_name}: {}", super::writes::describe(&e)),
                    )
                })?;
            let owner = OwnerReference {
                api_version: "v1".to_owned(),
                kind: "ConfigMap".to_owned(),
                name: status_name.clone(),
                uid: owner_cm.metadata.uid.clone().unwrap_or_default(),
                ..Default::default()
            };
            for source in [POD_CONFIGMAP, ALL_BUNDLES_CONFIGMAP] {
                let data = sources
                    .by_name
                    .get(source)
                    .map(to_strings)
                    .unwrap_or_default();
                let data = if source == POD_CONFIGMAP {
                    data.into_iter()
                        .map(|(k, v)| (k, substitute_revision(&v, *number)))
                        .collect()
                } else {
                    data
                };
                w.configmap(NS, &format!("{source}-{number}"), None, &data, Some(&owner))
                    .await
                    .map_err(err)?;
            }
            let certs = sources
                .by_name
                .get(ALL_CERTS_SECRET)
                .cloned()
                .unwrap_or_default();
            w.secret(
                NS,
                &format!("{ALL_CERTS_SECRET}-{number}"),
                None,
                &certs,
                Some(&owner),
            )
            .await
            .map_err(err)?;
            report.note(format!("created revision {number}: {reason}"));
            event(
                ctx,
                cluster,
                false,
                "RevisionCreated",
                format!("revision {number}: {reason}"),
            )
            .await;
            Ok(())
        }
        RevisionStep::Discard { number, reason } => {
            delete_revision(w, *number).await.map_err(err)?;
            report.note(format!("discarded revision {number}: {reason}"));
            event(
                ctx,
                cluster,
                true,
                "RevisionDiscarded",
                format!("revision {number}: {reason}"),
            )
            .await;
            Ok(())
        }
        RevisionStep::Prune { numbers } => {
            for n in numbers {
                delete_revision(w, *n).await.map_err(err)?;
            }
            report.note(format!("pruned revisions {numbers:?}"));
            Ok(())
        }
    }
}

/// Deletes a revision's copies, then its status (nothing relies on owner-reference cascade).
async fn delete_revision(w: &mut Writer, n: i64) -> Result<(), super::writes::WriteError> {
    w.delete::<ConfigMap>(NS, &format!("{POD_CONFIGMAP}-{n}"))
        .await?;
    w.delete::<ConfigMap>(NS, &format!("{ALL_BUNDLES_CONFIGMAP}-{n}"))
        .await?;
    w.delete::<Secret>(NS, &format!("{ALL_CERTS_SECRET}-{n}"))
        .await?;
    w.delete::<ConfigMap>(NS, &format!("{STATUS_PREFIX}{n}"))
        .await
}

async fn rollout_act(
    ctx: &Context,
    w: &mut Writer,
    cluster: &EtcdCluster,
    action: &RolloutAction,
    statuses: &mut Vec<NodeStatus>,
    conds: &mut Vec<Computed>,
    report: &mut PassReport,
) -> Result<(), StepError> {
    let failed: Vec<String> = statuses
        .iter()
        .filter(|s| {
            s.last_failed_revision.is_some() && s.last_failed_revision > Some(s.current_revision)
        })
        .map(|s| {
            format!(
                "{} failed revision {} {} time(s): {}",
                s.node_name,
                s.last_failed_revision.unwrap_or_default(),
                s.last_failed_count,
                s.last_failed_reason
            )
        })
        .collect();
    conds.push(Computed::from_problems(
        C::NodeInstallerDegraded,
        "InstallerFailed",
        &failed,
    ));
    let progressing = |conds: &mut Vec<Computed>, reason: &str, msg: String| {
        conds.push(Computed::new(
            C::NodeInstallerProgressing,
            true,
            reason,
            msg,
        ));
    };
    report.next(
        "rollout",
        match action {
            RolloutAction::Done => "every node runs the latest revision".to_owned(),
            RolloutAction::Install {
                node,
                revision,
                attempt,
            } => {
                format!("install revision {revision} on {node} (attempt {attempt})")
            }
            RolloutAction::Wait { node, reason } => format!("waiting: {node}: {reason}"),
            RolloutAction::BackOff {
                node,
                reason,
                until,
                ..
            } => {
                format!(
                    "backing off: {node}: {reason}; next try after {}",
                    rfc3339(*until)
                )
            }
            RolloutAction::Denied { denial, .. } => format!(
                "blocked by the quorum gate: {denial} [{}]",
                denial.rule.category()
            ),
        },
    );
    match action {
        RolloutAction::Done => {
            conds.push(Computed::new(
                C::NodeInstallerProgressing,
                false,
                "AllNodesAtLatestRevision",
                "every node runs the latest revision",
            ));
        }
        RolloutAction::Install {
            node,
            revision,
            attempt,
        } => {
            let pod: Pod = render_installer(node, *revision, *attempt, &ctx.config.images)
                .map_err(|e| fail(C::InstallerControllerDegraded, "render", e.to_string()))?;
            w.create(NS, &pod)
                .await
                .map_err(|e| fail(C::InstallerControllerDegraded, e.category(), e.to_string()))?;
            *statuses = rollout::with_target(std::mem::take(statuses), node, *revision);
            report.note(format!(
                "installing revision {revision} on {node} (attempt {attempt})"
            ));
            event(
                ctx,
                cluster,
                false,
                "InstallerPodCreated",
                format!("installing revision {revision} on {node} (attempt {attempt})"),
            )
            .await;
            progressing(
                conds,
                "Installing",
                format!("installing revision {revision} on {node}"),
            );
        }
        RolloutAction::Wait { node, reason } => {
            progressing(conds, "Waiting", format!("{node}: {reason}"));
            report.note(format!("{node}: {reason}"));
        }
        RolloutAction::BackOff {
            node,
            until,
            reason,
            ..
        } => {
            progressing(
                conds,
                "BackingOff",
                format!("{node}: {reason}; retrying after {}", rfc3339(*until)),
            );
            report.note(format!("{node}: backing off: {reason}"));
        }
        RolloutAction::Denied { node, denial } => {
            ctx.metrics
                .gate_denials
                .get_or_create(&crate::metrics::RuleLabel {
                    rule: denial.rule.category().to_owned(),
                })
                .inc();
            progressing(conds, "WaitingForQuorumGate", format!("{node}: {denial}"));
            report.note(format!("{node}: gate: {denial}"));
        }
    }
    Ok(())
}
