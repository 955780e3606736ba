//! Carries out a due membership step: maps it to its etcd change ([`intent`]), makes it through
//! the pass's etcd writer, and reports what etcd answered (the change made, or a refusal that
//! is progress: a learner still catching up, the health window before an add).

use membership::{ClientError, EtcdRefusal};

use super::{MembershipStep, NAME, State, learner_promotion, remediation};
use crate::category::Category;
use crate::certs::format_time;
use crate::controller::ControllerError;
use crate::controllers::installer::rollout_hold::AddRefused;
use crate::events::EventReason;
use crate::pass::Pass;
use crate::retry::ErrorKind;
use crate::status::{ConditionType as C, Reason, RemovalKind};
use crate::writer::etcd::{EtcdIntent, Made, Outcome};

/// The etcd change a step makes (`None`: it makes none).
pub fn intent(step: &MembershipStep) -> Option<EtcdIntent> {
    match step {
        MembershipStep::AddLearner { peer_url, .. } => Some(EtcdIntent::AddLearner {
            peer_url: peer_url.clone(),
        }),
        MembershipStep::Promote { id, .. } => Some(EtcdIntent::Promote { id: *id }),
        MembershipStep::Remove { id, .. } => Some(EtcdIntent::Remove { id: *id }),
        MembershipStep::Move(mv) => Some(EtcdIntent::MovePeerUrl {
            id: mv.id,
            to: mv.to.clone(),
        }),
        MembershipStep::None
        | MembershipStep::Waiting { .. }
        | MembershipStep::AddHeld { .. }
        | MembershipStep::Standby { .. }
        | MembershipStep::Denied { .. } => None,
    }
}

/// Makes the etcd change of `step` (one that is due) through the pass's etcd writer, and
/// reports what etcd answered.
pub(super) async fn change(
    p: &mut Pass<'_>,
    st: &mut State,
    step: &MembershipStep,
) -> Result<bool, ControllerError> {
    let Some(intent) = intent(step) else {
        return Ok(false);
    };
    if let MembershipStep::Remove { id, .. } = step
        && p.o.etcd.leader == Some(*id)
    {
        p.move_leadership_off(Some(*id), &format!("removing member {id}"))
            .await;
    }
    let answer = p.change_etcd(&intent).await;
    if matches!(answer, Ok(Outcome::Made(_)) | Err(_)) {
        record_remediation(p, step);
    }
    match answer {
        Ok(Outcome::Made(made)) => {
            made_by(p, st, step, made).await;
            Ok(true)
        }
        Ok(Outcome::Planned) => {
            let progressing = C::EtcdMembersProgressing;
            p.cond(
                progressing,
                true,
                Reason::Planned,
                "a membership change is due",
            );
            Ok(false)
        }
        Ok(Outcome::NoClient) => Ok(false),
        Err(e) => refused(p, st, step, e),
    }
}

/// Records the renewed standby (`status.defragmentation.standbyRenewal`): its node joins again
/// once the leader's log moved on from here. Without the leader's index this pass (its status
/// call failed), the highest index a member reported stands in: a little behind the leader's,
/// never 0, which would let the node rejoin before the log moved at all.
fn record_renewal(p: &mut Pass<'_>, id: membership::MemberId) {
    let node = p.o.etcd.members.iter().find(|m| m.id == id);
    let leader_index = p.o.etcd.raft_index_at_least();
    p.status.defrag.standby_renewal = Some(crate::api::StandbyRenewal {
        node: node.map(|m| m.name.clone()).unwrap_or_default(),
        member_id: id.to_string(),
        raft_index: leader_index.unwrap_or(0),
        time: format_time(p.o.now),
    });
}

/// A remediation's removal counts as an attempt once etcd was asked, whatever it answered: a
/// failing removal backs off like a successful one that did not help.
fn record_remediation(p: &mut Pass<'_>, step: &MembershipStep) {
    if let MembershipStep::Remove {
        id,
        kind: RemovalKind::Unhealthy,
        message,
    } = step
        && let Some((node, _)) = p.o.by_node.iter().find(|(_, m)| *m == id)
    {
        let now = format_time(p.o.now);
        remediation::record_attempt(&mut p.status.remediations, node, *id, message, &now);
    }
}

/// Reports the change etcd made for `step`.
async fn made_by(p: &mut Pass<'_>, st: &mut State, step: &MembershipStep, made: Made) {
    let progressing = C::EtcdMembersProgressing;
    match (step, made) {
        (MembershipStep::AddLearner { node, peer_url }, Made::Added(m)) => {
            st.add_refused = None;
            st.learner_added.insert(m.id, p.o.now);
            p.count_change("add_learner");
            p.note(format!("added learner {} for {node}", m.id));
            let note = format!("added {node} ({peer_url}) as learner {}", m.id);
            p.event(EventReason::MemberAddedAsLearner, note).await;
            let message = format!("learner {} added for {node}", m.id);
            p.cond(progressing, true, Reason::LearnerAdded, message);
        }
        (MembershipStep::Promote { id, node }, _) => {
            learner_promotion::promoted(p, *id, node).await;
        }
        (MembershipStep::Remove { id, kind, message }, _) => {
            if *kind == RemovalKind::StandbyRenewal {
                record_renewal(p, *id);
            }
            p.count_change(kind.event().as_str());
            p.note(message.clone());
            p.event(kind.event(), message.clone()).await;
            p.cond(
                progressing,
                true,
                Reason::MemberRemoved(*kind),
                message.clone(),
            );
        }
        (MembershipStep::Move(mv), _) => {
            let message = format!(
                "moved {}: the node's address changed; the next revision carries the new address",
                mv.describe()
            );
            p.count_change("move_peer_url");
            p.note(message.clone());
            p.event(EventReason::MemberPeerURLMoved, message.clone())
                .await;
            p.cond(progressing, true, Reason::MemberMoved, message);
        }
        _ => {}
    }
}

/// etcd refused the change of `step`: a refusal that is progress (a learner still catching up,
/// the health window before an add) is reported as such; any other is the controller's error.
fn refused(
    p: &mut Pass<'_>,
    st: &mut State,
    step: &MembershipStep,
    e: ClientError,
) -> Result<bool, ControllerError> {
    match step {
        MembershipStep::Promote { id, node } => learner_promotion::not_promoted(p, *id, node, e),
        MembershipStep::AddLearner { node, .. } if e.refused(EtcdRefusal::UnhealthyCluster) => {
            add_refused(p, st, node);
            Ok(false)
        }
        _ => Err(etcd_err(e)),
    }
}

/// etcd's strict reconfiguration check refused adding `node`: every voter connected to the
/// leader for 5 s. Asked again soon; serving nodes' restarts wait meanwhile (rollout_hold).
fn add_refused(p: &mut Pass<'_>, st: &mut State, node: &str) {
    let refused = AddRefused::again(st.add_refused.as_ref(), node, p.o.now);
    let message = format!(
        "etcd refused adding {node} (unhealthy cluster: it adds a member only once every voter has been connected to the leader for 5 s); retrying since {}",
        format_time(refused.since)
    );
    if refused.since == p.o.now {
        p.note(message.clone());
    }
    st.add_refused = Some(refused);
    p.cond(
        C::EtcdMembersProgressing,
        true,
        Reason::EtcdNotReady,
        message,
    );
    p.report.requeue_after = p.report.requeue_after.min(ADD_RETRY);
}

/// How soon a learner add etcd refused for its health window is asked again.
const ADD_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

fn etcd_err(e: membership::ClientError) -> ControllerError {
    ControllerError::new(NAME, ErrorKind::Transient, Category::Etcd, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::address_move::AddressMove;
    use membership::{MemberId, MemberUrl};

    #[test]
    fn each_change_step_is_one_intent_and_the_rest_none() {
        let id = MemberId::new(0xa).unwrap();
        let url = |s: &str| -> MemberUrl { s.parse().unwrap() };
        let cases = [
            (
                MembershipStep::AddLearner {
                    node: "n4".into(),
                    peer_url: url("https://10.0.0.4:2380"),
                },
                Some("add learner https://10.0.0.4:2380"),
            ),
            (
                MembershipStep::Promote {
                    id,
                    node: "n4".into(),
                },
                Some("promote learner a"),
            ),
            (
                MembershipStep::Remove {
                    id,
                    kind: RemovalKind::Unhealthy,
                    message: "m".into(),
                },
                Some("remove member a"),
            ),
            (
                MembershipStep::Move(AddressMove {
                    node: "n2".into(),
                    id,
                    from: vec![url("https://10.0.0.2:2380")],
                    to: url("https://10.0.0.9:2380"),
                }),
                Some("move member a's peer URL to https://10.0.0.9:2380"),
            ),
            (MembershipStep::None, None),
            (
                MembershipStep::Waiting {
                    message: "w".into(),
                },
                None,
            ),
        ];
        for (step, want) in cases {
            let got = intent(&step).map(|i| i.to_string());
            assert_eq!(got.as_deref(), want, "{step:?}");
        }
    }
}
