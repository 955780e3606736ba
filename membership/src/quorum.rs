//! Quorum math. Learners never vote, so they never count towards quorum or its tolerance.

use crate::Member;

/// Votes needed for a raft majority among `voters` voting members (`floor(voters/2)+1`).
/// With no voters there is no quorum to reach; this returns 1 so that "0 healthy >= quorum" is false.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// How many voters may fail while the rest still form a quorum.
pub fn fault_tolerance(voters: usize) -> usize {
    voters.saturating_sub(quorum(voters)).min(voters)
}

/// Number of voting members (learners excluded).
pub fn voters<'a>(members: impl IntoIterator<Item = &'a Member>) -> usize {
    members.into_iter().filter(|m| !m.is_learner).count()
}

/// True when `healthy_voters` out of `voters` still form a quorum.
pub fn is_quorate(healthy_voters: usize, voters: usize) -> bool {
    voters > 0 && healthy_voters >= quorum(voters)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemberId, MemberUrl};

    #[test]
    fn table() {
        // (voters, quorum, tolerance)
        for (n, q, t) in [
            (0, 1, 0),
            (1, 1, 0),
            (2, 2, 0),
            (3, 2, 1),
            (4, 3, 1),
            (5, 3, 2),
            (7, 4, 3),
        ] {
            assert_eq!(quorum(n), q, "quorum({n})");
            assert_eq!(fault_tolerance(n), t, "fault_tolerance({n})");
        }
        assert!(!is_quorate(0, 0));
        assert!(is_quorate(2, 3));
        assert!(!is_quorate(1, 3));
    }

    #[test]
    fn learners_do_not_count() {
        let url = |i: u8| -> MemberUrl { format!("https://10.0.0.{i}:2380").parse().unwrap() };
        let id = |i: u64| MemberId::new(i).unwrap();
        let members = [
            Member::voter(id(1), "a", url(1)),
            Member::voter(id(2), "b", url(2)),
            Member::unstarted_learner(id(3), url(3)),
        ];
        assert_eq!(voters(&members), 2);
        assert_eq!(quorum(voters(&members)), 2);
    }
}
