//! Whether members hold the same data: their `HashKV` answers at one revision compared. Members
//! that applied the same revision and the same compaction hash the same key-value history, so a
//! hash that differs is a diverged member. When most members agree, the others are the
//! divergent minority (the majority's hash wins, as a quorum of replicas outvotes one bad copy);
//! when no hash has a majority nobody can tell which copy is right.

use std::collections::BTreeMap;

/// One member's answer at the compared revision.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemberHash {
    pub name: String,
    pub endpoint: String,
    pub hash: u32,
    pub compact_revision: i64,
}

/// Members whose hashes differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The members outside the majority, by name; empty when no hash has a majority.
    pub minority: Vec<String>,
    /// Every member's hash, for a status message.
    pub message: String,
}

/// What a set of answers at one revision says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashVerdict {
    Equal,
    /// Compact revisions differ: a compaction is still being applied; ask again.
    NotComparable,
    Diverged(Divergence),
}

/// Compares the members' hashes at one revision.
pub fn compare_hashes(members: &[MemberHash]) -> HashVerdict {
    let Some(first) = members.first() else {
        return HashVerdict::Diverged(Divergence {
            minority: Vec::new(),
            message: "no member answered HashKV".into(),
        });
    };
    if members
        .iter()
        .any(|m| m.compact_revision != first.compact_revision)
    {
        return HashVerdict::NotComparable;
    }
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for m in members {
        *counts.entry(m.hash).or_default() += 1;
    }
    if counts.len() == 1 {
        return HashVerdict::Equal;
    }
    let majority = counts
        .iter()
        .find(|(_, n)| **n * 2 > members.len())
        .map(|(h, _)| *h);
    let each: Vec<String> = members
        .iter()
        .map(|m| format!("{} {:08x}", m.name, m.hash))
        .collect();
    let (minority, verdict) = match majority {
        Some(h) => {
            let minority: Vec<String> = members
                .iter()
                .filter(|m| m.hash != h)
                .map(|m| m.name.clone())
                .collect();
            let verdict = format!(
                "{} diverged from the majority ({h:08x})",
                minority.join(", ")
            );
            (minority, verdict)
        }
        None => (
            Vec::new(),
            "no hash has a majority: which copy is right cannot be told".to_owned(),
        ),
    };
    HashVerdict::Diverged(Divergence {
        minority,
        message: format!(
            "members hold different data at one revision (compact revision {}): {}; {verdict}",
            first.compact_revision,
            each.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, hash: u32, compact: i64) -> MemberHash {
        MemberHash {
            name: name.into(),
            endpoint: format!("https://{name}:2379"),
            hash,
            compact_revision: compact,
        }
    }

    #[test]
    fn equal_hashes_at_one_compact_revision_agree() {
        assert_eq!(
            compare_hashes(&[m("n1", 7, 0), m("n2", 7, 0)]),
            HashVerdict::Equal
        );
    }

    #[test]
    fn the_majority_names_the_divergent_member() {
        let HashVerdict::Diverged(d) =
            compare_hashes(&[m("n1", 7, 3), m("n2", 8, 3), m("n3", 7, 3)])
        else {
            panic!("not diverged");
        };
        assert_eq!(d.minority, vec!["n2".to_owned()]);
        assert!(
            d.message.contains("n1 00000007") && d.message.contains("n2 00000008"),
            "{}",
            d.message
        );
        assert!(
            d.message
                .contains("n2 diverged from the majority (00000007)")
        );
    }

    #[test]
    fn without_a_majority_nobody_is_named() {
        for answers in [
            vec![m("n1", 7, 3), m("n2", 8, 3)],
            vec![m("n1", 7, 3), m("n2", 8, 3), m("n3", 9, 3)],
        ] {
            let HashVerdict::Diverged(d) = compare_hashes(&answers) else {
                panic!("not diverged");
            };
            assert!(d.minority.is_empty(), "{d:?}");
            assert!(
                d.message.contains("no hash has a majority"),
                "{}",
                d.message
            );
        }
    }

    #[test]
    fn different_compact_revisions_are_asked_again() {
        assert_eq!(
            compare_hashes(&[m("n1", 7, 3), m("n2", 8, 5)]),
            HashVerdict::NotComparable
        );
    }

    #[test]
    fn no_answer_is_a_failure() {
        assert!(matches!(compare_hashes(&[]), HashVerdict::Diverged(_)));
    }
}
