//! Holding a serving node's restart back while etcd refuses a learner add only for its own
//! health window; a pure helper of the installer controller.
//!
//! etcd 3.4 checks every member add against its strict reconfiguration rule (on by default): it
//! answers "unhealthy cluster" until the leader has been connected to every voter for 5 s (its
//! `HealthInterval`). In a join of several nodes, the next learner add comes right after the
//! previous learner started and was promoted, so etcd refuses it for a few seconds. If the
//! rollout restarted a serving voter in those seconds, the window would start over with each
//! restart, the add would wait for the whole rollout, and every node would restart once for
//! this revision and again for the one the add brings. So while membership's add is refused
//! this way, an install that would restart a node that serves is held; the add goes through
//! within etcd's window, and one revision then carries both changes.
//!
//! Inputs: the rollout's next action, the nodes' views, when membership's add was first
//! refused. Decision: the action, or a wait naming why. It never holds a node that does not
//! serve (a new node, a node `etcd-verify` blocks): those are what the rollout is for. The hold
//! ends after [`HOLD_LIMIT`] whatever etcd says: a cluster that stays "unhealthy" needs its
//! rollout more than the add.

use time::OffsetDateTime;

use super::RolloutAction;
use crate::observed::node_view::NodeView;

/// The longest a restart is held for a refused add (three of etcd's 5 s health windows).
pub const HOLD_LIMIT: time::Duration = time::Duration::seconds(15);

/// Membership's learner add that etcd refused as "unhealthy cluster".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddRefused {
    pub node: String,
    /// The first refusal for this node in a row of refusals.
    pub since: OffsetDateTime,
}

impl AddRefused {
    /// The refusal record after one more refusal for `node` (the first one starts the clock).
    pub fn again(last: Option<&AddRefused>, node: &str, now: OffsetDateTime) -> AddRefused {
        let since = last.filter(|l| l.node == node).map_or(now, |l| l.since);
        AddRefused {
            node: node.to_owned(),
            since,
        }
    }
}

/// `action`, or a wait when it would restart a serving node while `refused` is recent.
pub fn hold(
    action: RolloutAction,
    views: &[NodeView],
    refused: Option<&AddRefused>,
    now: OffsetDateTime,
) -> RolloutAction {
    let Some(refused) = refused else {
        return action;
    };
    let (RolloutAction::Install { node, revision, .. }
    | RolloutAction::Approve { node, revision, .. }) = &action
    else {
        return action;
    };
    let serves = views
        .iter()
        .any(|v| &v.name == node && v.serving_revision().is_some());
    let held_for = now - refused.since;
    if !serves || held_for >= HOLD_LIMIT {
        return action;
    }
    RolloutAction::Wait {
        node: node.clone(),
        reason: format!(
            "revision {revision} waits: etcd refuses adding {} until every voter has been connected for 5 s (its strict reconfiguration check; refused for {} ms so far, held at most {} s); restarting {node} now would start that wait over, and the revision after the add covers both",
            refused.node,
            held_for.whole_milliseconds(),
            HOLD_LIMIT.whole_seconds()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeStatus;
    use crate::controllers::installer::PodState;

    fn t(s: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(s)
    }

    fn view(name: &str, serving: bool) -> NodeView {
        NodeView {
            name: name.into(),
            member: None,
            is_leader: false,
            pod: serving.then(|| PodState {
                revision: 5,
                ready: true,
                running: true,
                ..PodState::default()
            }),
            installer: None,
            node_ready: true,
            serves_elsewhere: false,
            equivalent_to_latest: false,
            etcd_stopped: None,
            status: NodeStatus {
                node_name: name.into(),
                ..NodeStatus::default()
            },
            member_healthy: serving,
        }
    }

    fn install(node: &str) -> RolloutAction {
        RolloutAction::Install {
            node: node.into(),
            revision: 6,
            attempt: 1,
        }
    }

    fn refused(since: i64) -> AddRefused {
        AddRefused {
            node: "g5".into(),
            since: t(since),
        }
    }

    #[test]
    fn a_serving_node_waits_while_the_add_is_refused() {
        let views = [view("n2", true)];
        let held = hold(install("n2"), &views, Some(&refused(100)), t(102));
        let RolloutAction::Wait { node, reason } = held else {
            panic!("not held: {held:?}");
        };
        assert_eq!(node, "n2");
        assert!(
            reason.contains("adding g5") && reason.contains("2000 ms"),
            "{reason}"
        );
    }

    #[test]
    fn a_node_that_does_not_serve_is_installed_at_once() {
        let views = [view("g5", false)];
        assert_eq!(
            hold(install("g5"), &views, Some(&refused(100)), t(101)),
            install("g5")
        );
    }

    #[test]
    fn the_hold_ends_after_its_limit() {
        let views = [view("n2", true)];
        let now = t(100) + HOLD_LIMIT;
        assert_eq!(
            hold(install("n2"), &views, Some(&refused(100)), now),
            install("n2")
        );
    }

    #[test]
    fn nothing_is_held_without_a_refusal() {
        let views = [view("n2", true)];
        assert_eq!(hold(install("n2"), &views, None, t(1)), install("n2"));
    }

    #[test]
    fn the_clock_starts_at_the_first_refusal_for_the_same_node() {
        let first = AddRefused::again(None, "g5", t(10));
        let again = AddRefused::again(Some(&first), "g5", t(12));
        assert_eq!(again.since, t(10));
        let other = AddRefused::again(Some(&first), "g6", t(13));
        assert_eq!(other.since, t(13));
    }
}
