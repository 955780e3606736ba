//! `status.members`: every etcd member as an admin sees it (name, id, peer URL, role, started,
//! healthy, leader, the etcd version it runs and the expiry of the certificate it serves (the
//! last ones seen while it is down), a learner's catch-up), with a `lastTransitionTime` that moves only when the
//! member's role, start or health changes. Pure: built from one etcd observation, the previous
//! status and `now`.

use crate::api::MemberStatus;
use crate::etcd::EtcdObservation;

/// The members as status shows them. `lastTransitionTime` is kept from `previous` while the
/// member's role, start and health stay the same, and is `now` otherwise.
pub fn member_statuses(
    obs: &EtcdObservation,
    previous: &[MemberStatus],
    now: &str,
) -> Vec<MemberStatus> {
    let leader_index = obs.leader_raft_index();
    let mut out: Vec<MemberStatus> = obs
        .members
        .iter()
        .map(|m| {
            let h = obs.health.get(&m.id).cloned().unwrap_or_default();
            let id = m.id.to_string();
            let role = if m.is_learner { "Learner" } else { "Voter" }.to_owned();
            let (started, healthy) = (m.is_started(), h.healthy);
            let last_transition_time = previous
                .iter()
                .find(|p| {
                    p.id == id && p.role == role && p.started == started && p.healthy == healthy
                })
                .map(|p| p.last_transition_time.clone())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| now.to_owned());
            let before = previous.iter().find(|p| p.id == id);
            let version = h
                .version
                .clone()
                .or_else(|| Some(before?.version.clone()))
                .unwrap_or_default();
            let serving_certificate_expiry = h
                .serving_not_after
                .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
                .map(crate::certs::format_time)
                .or_else(|| Some(before?.serving_certificate_expiry.clone()))
                .unwrap_or_default();
            MemberStatus {
                name: m.name.clone(),
                id,
                peer_url: m.peer_url().map(ToString::to_string).unwrap_or_default(),
                role,
                started,
                healthy,
                leader: obs.leader == Some(m.id),
                last_transition_time,
                version,
                serving_certificate_expiry,
                learner_raft_index: if m.is_learner { h.raft_index } else { None },
                leader_raft_index: if m.is_learner { leader_index } else { None },
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::MemberObs;
    use membership::{Member, MemberId, MemberUrl};
    use std::collections::BTreeMap;

    fn url(n: u8, port: u16) -> MemberUrl {
        format!("https://10.0.0.{n}:{port}").parse().unwrap()
    }

    fn observed(healthy2: bool, leader: u64) -> EtcdObservation {
        let id = |n| MemberId::new(n).unwrap();
        EtcdObservation {
            members: vec![
                Member::voter(id(1), "n1", url(1, 2380)).with_client_url(url(1, 2379)),
                Member::voter(id(2), "n2", url(2, 2380)).with_client_url(url(2, 2379)),
                Member::unstarted_learner(id(3), url(3, 2380)),
            ],
            health: BTreeMap::from([
                (
                    id(1),
                    MemberObs {
                        healthy: true,
                        raft_index: Some(9),
                        error: None,
                        ..Default::default()
                    },
                ),
                (
                    id(2),
                    MemberObs {
                        healthy: healthy2,
                        raft_index: Some(9),
                        error: None,
                        ..Default::default()
                    },
                ),
            ]),
            leader: Some(id(leader)),
            ..Default::default()
        }
    }

    #[test]
    fn leader_and_transition_times() {
        let first = member_statuses(&observed(true, 1), &[], "t1");
        assert_eq!(
            first.iter().map(|m| m.leader).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert!(first.iter().all(|m| m.last_transition_time == "t1"));
        // Nothing changed but the leader: times stay.
        let second = member_statuses(&observed(true, 2), &first, "t2");
        assert!(second.iter().all(|m| m.last_transition_time == "t1"));
        assert!(second.iter().find(|m| m.name == "n2").unwrap().leader);
        // n2 turns unhealthy: only its time moves.
        let third = member_statuses(&observed(false, 1), &second, "t3");
        let times: BTreeMap<&str, &str> = third
            .iter()
            .map(|m| (m.id.as_str(), m.last_transition_time.as_str()))
            .collect();
        assert_eq!(
            times,
            BTreeMap::from([("1", "t1"), ("2", "t3"), ("3", "t1")])
        );
    }

    #[test]
    fn the_served_certificate_expiry_is_shown_and_kept_while_unread() {
        let mut obs = observed(true, 1);
        let n1 = MemberId::new(1).unwrap();
        obs.health.get_mut(&n1).unwrap().serving_not_after = Some(1_900_000_000);
        let first = member_statuses(&obs, &[], "t1");
        let shown = |s: &[MemberStatus]| {
            s.iter()
                .find(|m| m.name == "n1")
                .unwrap()
                .serving_certificate_expiry
                .clone()
        };
        assert_eq!(shown(&first), "2030-03-17T17:46:40Z");
        // The next handshake failed: the last expiry seen stays.
        let second = member_statuses(&observed(true, 1), &first, "t2");
        assert_eq!(shown(&second), "2030-03-17T17:46:40Z");
    }
}
