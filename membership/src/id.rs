//! etcd member ids: 64-bit numbers printed as lowercase hex without `0x` (as `etcdctl member list`
//! prints them).

use std::fmt;
use std::str::FromStr;

/// An etcd member id. Never zero (raft reserves 0 for "no node").
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct MemberId(u64);

/// Why a string is not a canonical member id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("member id is empty")]
    Empty,
    #[error("member id {0:?} has more than 16 hex digits")]
    TooLong(String),
    #[error("member id {0:?} is not lowercase hex (no 0x prefix, digits 0-9a-f only)")]
    NotLowercaseHex(String),
    #[error("member id {0:?} has a leading zero (ids are printed without padding)")]
    LeadingZero(String),
    #[error("member id 0 is reserved and never names a member")]
    Zero,
}

impl MemberId {
    /// Wraps a raw id; `None` for 0.
    pub fn new(raw: u64) -> Option<Self> {
        (raw != 0).then_some(Self(raw))
    }

    /// The raw 64-bit id.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

impl FromStr for MemberId {
    type Err = IdError;

    /// Strict: accepts exactly what `Display` prints.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(IdError::Empty);
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(IdError::NotLowercaseHex(s.to_owned()));
        }
        if s.len() > 16 {
            return Err(IdError::TooLong(s.to_owned()));
        }
        if s == "0" {
            return Err(IdError::Zero);
        }
        if s.starts_with('0') {
            return Err(IdError::LeadingZero(s.to_owned()));
        }
        u64::from_str_radix(s, 16)
            .map(Self)
            .map_err(|_| IdError::NotLowercaseHex(s.to_owned()))
    }
}

impl TryFrom<String> for MemberId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<MemberId> for String {
    fn from(id: MemberId) -> String {
        id.to_string()
    }
}

/// The member id etcd gives member `peer_urls` when it makes a new cluster with `token`
/// (`--initial-cluster-token`, etcd's default `etcd-cluster`): SHA-1 of the sorted peer URLs
/// and the token, its first 8 bytes big-endian. A bootstrap and a snapshot restore both make
/// ids this way, so the id a new cluster's member will have is known before etcd starts.
pub fn new_cluster_member_id(peer_urls: &[&str], token: &str) -> Option<MemberId> {
    use sha1::{Digest, Sha1};
    let mut urls = peer_urls.to_vec();
    urls.sort_unstable();
    let mut hasher = Sha1::new();
    for u in urls {
        hasher.update(u.as_bytes());
    }
    hasher.update(token.as_bytes());
    let digest = hasher.finalize();
    let first: [u8; 8] = digest.get(..8)?.try_into().ok()?;
    MemberId::new(u64::from_be_bytes(first))
}

/// The cluster id etcd gives a new cluster of `members` (etcd's `RaftCluster.genID`: SHA-1 of
/// the sorted member ids, each 8 bytes big-endian, its first 8 bytes big-endian). A cluster keeps
/// it for good (later members do not change it), so with [`new_cluster_member_id`] it tells
/// whether a token and peer URL made a live cluster: a one-member bootstrap or restore with
/// token `t` at peer URL `u` has id `new_cluster_id(&[new_cluster_member_id(&[u], t)])`.
pub fn new_cluster_id(members: &[MemberId]) -> Option<u64> {
    use sha1::{Digest, Sha1};
    let mut ids: Vec<u64> = members.iter().map(|m| m.get()).collect();
    ids.sort_unstable();
    let mut hasher = Sha1::new();
    for id in ids {
        hasher.update(id.to_be_bytes());
    }
    let digest = hasher.finalize();
    let first: [u8; 8] = digest.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_cluster_ids_are_etcds() {
        // etcd started with its defaults (peer URL http://localhost:2380, token etcd-cluster)
        // reports member 8e9e05c52164694d of cluster cdf818194e3a8c32.
        let member = new_cluster_member_id(&["http://localhost:2380"], "etcd-cluster").unwrap();
        assert_eq!(member.to_string(), "8e9e05c52164694d");
        assert_eq!(new_cluster_id(&[member]), Some(0xcdf818194e3a8c32));
    }

    #[test]
    fn prints_and_parses_lowercase_hex() {
        let id = MemberId::new(0x8e9e05c52164694d).unwrap();
        assert_eq!(id.to_string(), "8e9e05c52164694d");
        assert_eq!("8e9e05c52164694d".parse::<MemberId>().unwrap(), id);
    }

    #[test]
    fn rejects_non_canonical_forms() {
        assert_eq!("".parse::<MemberId>(), Err(IdError::Empty));
        assert!(matches!(
            "0x1f".parse::<MemberId>(),
            Err(IdError::NotLowercaseHex(_))
        ));
        assert!(matches!(
            "1F".parse::<MemberId>(),
            Err(IdError::NotLowercaseHex(_))
        ));
        assert!(matches!(
            "01f".parse::<MemberId>(),
            Err(IdError::LeadingZero(_))
        ));
        assert!(matches!(
            "1234567890abcdef0".parse::<MemberId>(),
            Err(IdError::TooLong(_))
        ));
        assert_eq!("0".parse::<MemberId>(), Err(IdError::Zero));
        assert_eq!(MemberId::new(0), None);
    }

    proptest::proptest! {
        #[test]
        fn round_trips(raw in 1u64..) {
            let id = MemberId::new(raw).unwrap();
            proptest::prop_assert_eq!(id.to_string().parse::<MemberId>().unwrap(), id);
        }
    }
}
