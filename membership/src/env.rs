//! The two membership env vars of the static-pod contract, parsed strictly and formatted
//! canonically:
//!
//! * `ETCD_INITIAL_CLUSTER` = `<name>=<peer-url>` joined by `,`, sorted by name (etcd's format);
//! * `ETCD_MEMBER_IDS` = `<member-id>=<peer-url>` joined by `,`, sorted by id (numerically), the id
//!   in lowercase hex without `0x`.
//!
//! Every member has exactly one peer URL here: a repeated name (etcd's way of giving a member
//! several peer URLs) is rejected as a duplicate, as is a repeated id or URL. Parsing reports the
//! first offending entry by position and text; formatting then parsing gives back the same value.

use std::collections::BTreeMap;
use std::fmt;

use crate::{IdError, Member, MemberId, MemberUrl, UrlError};

/// Name of the env var holding etcd's initial cluster.
pub const INITIAL_CLUSTER_VAR: &str = "ETCD_INITIAL_CLUSTER";
/// Name of the env var holding the expected member ids.
pub const MEMBER_IDS_VAR: &str = "ETCD_MEMBER_IDS";

/// A malformed entry in one of the membership env vars.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}: entry {position} ({entry:?}): {problem}")]
pub struct EnvFormatError {
    /// The env var that was being parsed.
    pub var: &'static str,
    /// 1-based position of the entry in the comma-separated list.
    pub position: usize,
    /// The entry's text as given.
    pub entry: String,
    pub problem: EntryProblem,
}

/// What is wrong with one entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    #[error("empty entry (stray comma?)")]
    Empty,
    #[error("contains whitespace")]
    Whitespace,
    #[error("expected <key>=<peer-url>")]
    NoEquals,
    #[error("empty member name")]
    EmptyName,
    #[error(transparent)]
    BadId(#[from] IdError),
    #[error(transparent)]
    BadUrl(#[from] UrlError),
    #[error("duplicate key {0:?}")]
    DuplicateKey(String),
    #[error("peer URL {0} appears twice")]
    DuplicateUrl(String),
}

/// `ETCD_INITIAL_CLUSTER`: member name → peer URL, sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitialCluster(BTreeMap<String, MemberUrl>);

/// `ETCD_MEMBER_IDS`: member id → peer URL, sorted by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberIds(BTreeMap<MemberId, MemberUrl>);

/// Splits `key=url,key=url` strictly; `parse_key` validates each key.
fn parse_pairs<K: Ord + Clone + fmt::Display>(
    var: &'static str,
    text: &str,
    parse_key: impl Fn(&str) -> Result<K, EntryProblem>,
) -> Result<BTreeMap<K, MemberUrl>, EnvFormatError> {
    let mut out = BTreeMap::new();
    if text.is_empty() {
        return Ok(out);
    }
    let mut seen_urls = std::collections::BTreeSet::new();
    for (index, entry) in text.split(',').enumerate() {
        let fail = |problem| EnvFormatError {
            var,
            position: index + 1,
            entry: entry.to_owned(),
            problem,
        };
        if entry.is_empty() {
            return Err(fail(EntryProblem::Empty));
        }
        if entry.chars().any(char::is_whitespace) {
            return Err(fail(EntryProblem::Whitespace));
        }
        let (key, url) = entry
            .split_once('=')
            .ok_or_else(|| fail(EntryProblem::NoEquals))?;
        let key = parse_key(key).map_err(fail)?;
        let url: MemberUrl = url.parse().map_err(|e: UrlError| fail(e.into()))?;
        if out.contains_key(&key) {
            return Err(fail(EntryProblem::DuplicateKey(key.to_string())));
        }
        if !seen_urls.insert(url.clone()) {
            return Err(fail(EntryProblem::DuplicateUrl(url.to_string())));
        }
        out.insert(key, url);
    }
    Ok(out)
}

fn format_pairs<K: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    pairs: &BTreeMap<K, MemberUrl>,
) -> fmt::Result {
    for (i, (key, url)) in pairs.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{key}={url}")?;
    }
    Ok(())
}

impl InitialCluster {
    /// Parses the env var's value. An empty value is an error: the pod's own member is always in it.
    pub fn parse(text: &str) -> Result<Self, EnvFormatError> {
        let map = parse_pairs(INITIAL_CLUSTER_VAR, text, |name| {
            if name.is_empty() {
                Err(EntryProblem::EmptyName)
            } else {
                Ok(name.to_owned())
            }
        })?;
        if map.is_empty() {
            return Err(EnvFormatError {
                var: INITIAL_CLUSTER_VAR,
                position: 1,
                entry: String::new(),
                problem: EntryProblem::Empty,
            });
        }
        Ok(Self(map))
    }

    /// Adds (or replaces) one member.
    pub fn insert(&mut self, name: &str, url: MemberUrl) {
        self.0.insert(name.to_owned(), url);
    }

    /// The peer URL of `name`.
    pub fn get(&self, name: &str) -> Option<&MemberUrl> {
        self.0.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &MemberUrl)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for InitialCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        format_pairs(f, &self.0)
    }
}

impl MemberIds {
    /// Parses the env var's value; an empty value parses as no members (the bootstrap render of a
    /// new cluster has no ids yet; callers decide whether that is acceptable).
    pub fn parse(text: &str) -> Result<Self, EnvFormatError> {
        parse_pairs(MEMBER_IDS_VAR, text, |id| Ok(id.parse::<MemberId>()?)).map(Self)
    }

    /// The ids and peer URLs of a live member list (learners included). Members without a peer
    /// URL are skipped (etcd never reports one).
    pub fn from_members<'a>(members: impl IntoIterator<Item = &'a Member>) -> Self {
        Self(
            members
                .into_iter()
                .filter_map(|m| m.peer_url().map(|u| (m.id, u.clone())))
                .collect(),
        )
    }

    /// Adds (or replaces) one member.
    pub fn insert(&mut self, id: MemberId, url: MemberUrl) {
        self.0.insert(id, url);
    }

    pub fn get(&self, id: MemberId) -> Option<&MemberUrl> {
        self.0.get(&id)
    }

    /// The id listed for `url`, if any.
    pub fn id_for_url(&self, url: &MemberUrl) -> Option<MemberId> {
        self.0.iter().find(|(_, u)| *u == url).map(|(id, _)| *id)
    }

    /// The member this list names for `url` when etcd no longer has it (`live`: the ids etcd
    /// has now): one removed since the list was made. A revision listing it for its own node's
    /// URL is one on which `etcd-verify`, with no endpoint answering, starts that removed member
    /// on its old data; the operator adds no learner for that URL until the node has moved off
    /// it (#36).
    pub fn removed_at(&self, url: &MemberUrl, live: &[MemberId]) -> Option<MemberId> {
        self.id_for_url(url).filter(|id| !live.contains(id))
    }

    pub fn iter(&self) -> impl Iterator<Item = (MemberId, &MemberUrl)> {
        self.0.iter().map(|(k, v)| (*k, v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Differences against another set, for messages: (only in self, only in other, same id with a
    /// different URL).
    pub fn diff(&self, other: &MemberIds) -> MemberIdsDiff {
        let mut diff = MemberIdsDiff::default();
        for (id, url) in &self.0 {
            match other.0.get(id) {
                None => diff.only_left.push((*id, url.clone())),
                Some(theirs) if theirs != url => {
                    diff.url_changed.push((*id, url.clone(), theirs.clone()))
                }
                Some(_) => {}
            }
        }
        for (id, url) in &other.0 {
            if !self.0.contains_key(id) {
                diff.only_right.push((*id, url.clone()));
            }
        }
        diff
    }
}

impl fmt::Display for MemberIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        format_pairs(f, &self.0)
    }
}

/// How two [`MemberIds`] sets differ.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberIdsDiff {
    pub only_left: Vec<(MemberId, MemberUrl)>,
    pub only_right: Vec<(MemberId, MemberUrl)>,
    pub url_changed: Vec<(MemberId, MemberUrl, MemberUrl)>,
}

impl MemberIdsDiff {
    pub fn is_empty(&self) -> bool {
        self.only_left.is_empty() && self.only_right.is_empty() && self.url_changed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn url(s: &str) -> MemberUrl {
        s.parse().unwrap()
    }

    #[test]
    fn removed_at_names_only_a_listed_member_etcd_no_longer_has() {
        let ids = MemberIds::parse("a=https://10.0.0.1:2380,b=https://10.0.0.2:2380").unwrap();
        let a: MemberId = "a".parse().unwrap();
        let b: MemberId = "b".parse().unwrap();
        let n1 = url("https://10.0.0.1:2380");
        assert_eq!(ids.removed_at(&n1, &[a, b]), None);
        assert_eq!(ids.removed_at(&n1, &[b]), Some(a));
        assert_eq!(ids.removed_at(&url("https://10.0.0.3:2380"), &[b]), None);
    }

    #[test]
    fn initial_cluster_formats_sorted_by_name() {
        let ic =
            InitialCluster::parse("n2=https://10.0.0.2:2380,n1=https://10.0.0.1:2380").unwrap();
        assert_eq!(
            ic.to_string(),
            "n1=https://10.0.0.1:2380,n2=https://10.0.0.2:2380"
        );
        assert_eq!(ic.get("n2"), Some(&url("https://10.0.0.2:2380")));
    }

    #[test]
    fn member_ids_format_sorted_numerically() {
        let ids = MemberIds::parse("f=https://10.0.0.2:2380,10=https://10.0.0.1:2380").unwrap();
        assert_eq!(
            ids.to_string(),
            "f=https://10.0.0.2:2380,10=https://10.0.0.1:2380"
        );
        assert_eq!(
            ids.id_for_url(&url("https://10.0.0.1:2380")),
            MemberId::new(0x10)
        );
    }

    fn err(var_parse: Result<(), EnvFormatError>) -> String {
        var_parse.unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_offending_entry() {
        let ic = |s: &str| err(InitialCluster::parse(s).map(|_| ()));
        let ids = |s: &str| err(MemberIds::parse(s).map(|_| ()));
        assert_eq!(
            ic("n1=https://10.0.0.1:2380,,n2=https://10.0.0.2:2380"),
            "ETCD_INITIAL_CLUSTER: entry 2 (\"\"): empty entry (stray comma?)"
        );
        assert_eq!(
            ic("n1=https://10.0.0.1:2380, n2=https://10.0.0.2:2380"),
            "ETCD_INITIAL_CLUSTER: entry 2 (\" n2=https://10.0.0.2:2380\"): contains whitespace"
        );
        assert_eq!(
            ic(""),
            "ETCD_INITIAL_CLUSTER: entry 1 (\"\"): empty entry (stray comma?)"
        );
        assert_eq!(
            ic("n1=https://10.0.0.1:2380,n1=https://10.0.0.2:2380"),
            "ETCD_INITIAL_CLUSTER: entry 2 (\"n1=https://10.0.0.2:2380\"): duplicate key \"n1\""
        );
        assert_eq!(
            ic("n1=https://10.0.0.1:2380,n2=https://10.0.0.1:2380"),
            "ETCD_INITIAL_CLUSTER: entry 2 (\"n2=https://10.0.0.1:2380\"): peer URL https://10.0.0.1:2380 appears twice"
        );
        assert_eq!(
            ic("n1"),
            "ETCD_INITIAL_CLUSTER: entry 1 (\"n1\"): expected <key>=<peer-url>"
        );
        assert_eq!(
            ic("=https://10.0.0.1:2380"),
            "ETCD_INITIAL_CLUSTER: entry 1 (\"=https://10.0.0.1:2380\"): empty member name"
        );
        assert_eq!(
            ic("n1=10.0.0.1:2380"),
            "ETCD_INITIAL_CLUSTER: entry 1 (\"n1=10.0.0.1:2380\"): URL \"10.0.0.1:2380\" is not an absolute URL: relative URL without a base"
        );
        assert_eq!(
            ic("n1=ftp://10.0.0.1:2380"),
            "ETCD_INITIAL_CLUSTER: entry 1 (\"n1=ftp://10.0.0.1:2380\"): URL \"ftp://10.0.0.1:2380\" must use scheme http or https"
        );
        assert_eq!(
            ids("abc=https://10.0.0.1:2380,xyz=https://10.0.0.2:2380"),
            "ETCD_MEMBER_IDS: entry 2 (\"xyz=https://10.0.0.2:2380\"): member id \"xyz\" is not lowercase hex (no 0x prefix, digits 0-9a-f only)"
        );
        assert_eq!(
            ids("abc=https://10.0.0.1:2380,abc=https://10.0.0.2:2380"),
            "ETCD_MEMBER_IDS: entry 2 (\"abc=https://10.0.0.2:2380\"): duplicate key \"abc\""
        );
        assert_eq!(
            ids("abc=relative/path"),
            "ETCD_MEMBER_IDS: entry 1 (\"abc=relative/path\"): URL \"relative/path\" is not an absolute URL: relative URL without a base"
        );
        assert_eq!(
            ids("abc=https://10.0.0.1:2380,"),
            "ETCD_MEMBER_IDS: entry 2 (\"\"): empty entry (stray comma?)"
        );
        assert!(MemberIds::parse("").unwrap().is_empty());
    }

    #[test]
    fn diff_reports_each_kind_of_mismatch() {
        let a = MemberIds::parse(
            "1=https://10.0.0.1:2380,2=https://10.0.0.2:2380,3=https://10.0.0.3:2380",
        )
        .unwrap();
        let b = MemberIds::parse(
            "1=https://10.0.0.1:2380,2=https://10.0.0.9:2380,4=https://10.0.0.4:2380",
        )
        .unwrap();
        let d = a.diff(&b);
        assert_eq!(
            d.only_left,
            vec![(MemberId::new(3).unwrap(), url("https://10.0.0.3:2380"))]
        );
        assert_eq!(
            d.only_right,
            vec![(MemberId::new(4).unwrap(), url("https://10.0.0.4:2380"))]
        );
        assert_eq!(d.url_changed.len(), 1);
        assert!(a.diff(&a).is_empty());
    }

    fn arb_ids() -> impl Strategy<Value = MemberIds> {
        proptest::collection::btree_map(1u64.., 1u8..=254, 0..7).prop_map(|m| {
            let mut ids = MemberIds::default();
            for (i, (raw, last)) in m.into_iter().enumerate() {
                ids.insert(
                    MemberId::new(raw).unwrap(),
                    url(&format!("https://10.{i}.0.{last}:2380")),
                );
            }
            ids
        })
    }

    proptest! {
        #[test]
        fn member_ids_round_trip(ids in arb_ids()) {
            let text = ids.to_string();
            let back = MemberIds::parse(&text).unwrap();
            prop_assert_eq!(&back, &ids);
            prop_assert_eq!(back.to_string(), text);
        }

        #[test]
        fn initial_cluster_round_trips(names in proptest::collection::btree_set("[a-z][a-z0-9.-]{0,20}", 1..7)) {
            let mut ic = InitialCluster::default();
            for (i, n) in names.iter().enumerate() {
                ic.insert(n, url(&format!("https://10.0.{i}.1:2380")));
            }
            let text = ic.to_string();
            let back = InitialCluster::parse(&text).unwrap();
            prop_assert_eq!(back.to_string(), text);
            prop_assert_eq!(back, ic);
        }
    }
}
