//! Preflight: what must hold before any disruptive action, beyond quorum (the checks Cluster API's
//! control-plane provider runs before it touches etcd).
//!
//! * **No alarm.** A raised `NOSPACE` alarm makes etcd refuse writes, a `CORRUPT` alarm means a
//!   member's data diverged: changing membership (or taking a healthy voter down) then can only
//!   make it worse. An alarm list that could not be read counts as unknown, never as empty.
//! * **One member list.** Every voter that answers must report the same members (ids and
//!   learner flags) as the list the operator acts on: a voter with another view is behind on a
//!   configuration change, or the cluster is split.
//!
//! [`Preflight`] is pure data, filled by the observation; [`crate::gate()`] reads it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::{Member, MemberId};

/// An etcd alarm type (etcd's `AlarmType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AlarmKind {
    NoSpace,
    Corrupt,
    /// A type this build does not know, by its number.
    Other(i32),
}

impl AlarmKind {
    /// From etcd's `AlarmType` number (0 is "none" and never raised).
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => None,
            1 => Some(AlarmKind::NoSpace),
            2 => Some(AlarmKind::Corrupt),
            other => Some(AlarmKind::Other(other)),
        }
    }
}

impl fmt::Display for AlarmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlarmKind::NoSpace => f.write_str("NOSPACE"),
            AlarmKind::Corrupt => f.write_str("CORRUPT"),
            AlarmKind::Other(n) => write!(f, "alarm type {n}"),
        }
    }
}

/// One raised alarm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RaisedAlarm {
    pub member: MemberId,
    pub kind: AlarmKind,
}

impl fmt::Display for RaisedAlarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on member {}", self.kind, self.member)
    }
}

/// The preflight facts of one observation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preflight {
    /// Raised alarms, sorted.
    pub alarms: Vec<RaisedAlarm>,
    /// Why the alarm list could not be read; while set, alarms are unknown.
    pub alarms_unreadable: Option<String>,
    /// One line per voter whose own member list differs from the one acted on, sorted.
    pub disagreements: Vec<String>,
}

impl Preflight {
    /// Problems that stop membership changes: every alarm, an unreadable alarm list and every
    /// disagreement. Empty when the preflight passes.
    pub fn membership_problems(&self) -> Vec<String> {
        self.change_problems(|_| true)
    }

    /// Problems that stop removing a learner: as [`Self::membership_problems`] but `NOSPACE`
    /// (a learner's own full file keeps raising it, and removing the learner is its remedy).
    pub fn learner_removal_problems(&self) -> Vec<String> {
        self.change_problems(|kind| kind != AlarmKind::NoSpace)
    }

    fn change_problems(&self, holds: impl Fn(AlarmKind) -> bool) -> Vec<String> {
        let mut out: Vec<String> = self
            .alarms
            .iter()
            .filter(|a| holds(a.kind))
            .map(|a| format!("alarm {a} is raised"))
            .collect();
        if let Some(e) = &self.alarms_unreadable {
            out.push(format!("the alarm list could not be read ({e})"));
        }
        out.extend(self.disagreements.iter().cloned());
        out
    }

    /// Problems that stop taking a healthy voter down: a `CORRUPT` alarm or a disagreement.
    /// (`NOSPACE` does not: a restart with a larger quota may be its fix, and an unreadable alarm
    /// list most often means no quorum, where the quorum rules already decide.)
    pub fn restart_problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .alarms
            .iter()
            .filter(|a| a.kind == AlarmKind::Corrupt)
            .map(|a| format!("alarm {a} is raised"))
            .collect();
        out.extend(self.disagreements.iter().cloned());
        out
    }
}

fn shape(members: &[Member]) -> BTreeSet<(MemberId, bool)> {
    members.iter().map(|m| (m.id, m.is_learner)).collect()
}

fn describe(set: &BTreeSet<(MemberId, bool)>) -> String {
    let items: Vec<String> = set
        .iter()
        .map(|(id, learner)| {
            if *learner {
                format!("{id} (learner)")
            } else {
                id.to_string()
            }
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// Compares each voter's own member list with the list acted on (`acted_on`). Voters missing from
/// `per_voter` (they did not answer) are not compared: an unanswering voter is unhealthy and the
/// quorum rules already count it.
pub fn disagreements(
    acted_on: &[Member],
    per_voter: &BTreeMap<MemberId, Vec<Member>>,
) -> Vec<String> {
    let expected = shape(acted_on);
    per_voter
        .iter()
        .filter_map(|(voter, list)| {
            let seen = shape(list);
            (seen != expected).then(|| {
                format!(
                    "voter {voter} reports members {} but the cluster acted on reports {}",
                    describe(&seen),
                    describe(&expected)
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemberUrl;

    fn id(n: u64) -> MemberId {
        MemberId::new(n).unwrap()
    }
    fn url(n: u8) -> MemberUrl {
        format!("https://10.0.0.{n}:2380").parse().unwrap()
    }

    #[test]
    fn equal_lists_pass_and_any_difference_is_named() {
        let list = vec![
            Member::voter(id(1), "a", url(1)),
            Member::voter(id(2), "b", url(2)),
            Member::unstarted_learner(id(3), url(3)),
        ];
        let mut per_voter = BTreeMap::new();
        per_voter.insert(id(1), list.clone());
        // Order does not matter.
        per_voter.insert(id(2), list.iter().rev().cloned().collect());
        assert!(disagreements(&list, &per_voter).is_empty());

        // Voter 2 has not seen the learner yet.
        per_voter.insert(id(2), list[..2].to_vec());
        let d = disagreements(&list, &per_voter);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("voter 2 reports members [1, 2]"), "{}", d[0]);
        assert!(d[0].contains("3 (learner)"), "{}", d[0]);

        // Voter 1 still sees 3 as a learner after it was promoted elsewhere.
        let promoted: Vec<Member> = list
            .iter()
            .cloned()
            .map(|mut m| {
                m.is_learner = false;
                m
            })
            .collect();
        per_voter.insert(id(2), promoted.clone());
        let d = disagreements(&promoted, &per_voter);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("voter 1 "), "{}", d[0]);
    }

    #[test]
    fn alarms_stop_membership_and_only_corrupt_stops_restarts() {
        let nospace = Preflight {
            alarms: vec![RaisedAlarm {
                member: id(1),
                kind: AlarmKind::NoSpace,
            }],
            ..Default::default()
        };
        assert_eq!(
            nospace.membership_problems(),
            vec!["alarm NOSPACE on member 1 is raised".to_owned()]
        );
        assert!(nospace.restart_problems().is_empty());
        let corrupt = Preflight {
            alarms: vec![RaisedAlarm {
                member: id(2),
                kind: AlarmKind::Corrupt,
            }],
            ..Default::default()
        };
        assert_eq!(corrupt.restart_problems().len(), 1);
        let unknown = Preflight {
            alarms_unreadable: Some("no quorum".into()),
            ..Default::default()
        };
        assert_eq!(unknown.membership_problems().len(), 1);
        assert!(unknown.restart_problems().is_empty());
        assert!(Preflight::default().membership_problems().is_empty());
        assert_eq!(AlarmKind::from_code(0), None);
        assert_eq!(AlarmKind::from_code(2), Some(AlarmKind::Corrupt));
        assert_eq!(AlarmKind::from_code(9).unwrap().to_string(), "alarm type 9");
    }
}
