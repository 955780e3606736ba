//! The member model: what etcd's member list says about one member.

use crate::{MemberId, MemberUrl};

/// One etcd member as the live member list reports it.
///
/// A member added (as a learner) but never started has an empty `name` and no client URLs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    pub id: MemberId,
    /// Empty until the member's etcd has started and published its name.
    pub name: String,
    pub peer_urls: Vec<MemberUrl>,
    pub client_urls: Vec<MemberUrl>,
    pub is_learner: bool,
}

impl Member {
    /// A voting member that has started (builder for tests and fixtures).
    pub fn voter(id: MemberId, name: &str, peer_url: MemberUrl) -> Self {
        Self {
            id,
            name: name.to_owned(),
            peer_urls: vec![peer_url],
            client_urls: Vec::new(),
            is_learner: false,
        }
    }

    /// A learner that was added but has not started yet.
    pub fn unstarted_learner(id: MemberId, peer_url: MemberUrl) -> Self {
        Self {
            id,
            name: String::new(),
            peer_urls: vec![peer_url],
            client_urls: Vec::new(),
            is_learner: true,
        }
    }

    /// Sets the client URLs (builder).
    pub fn with_client_url(mut self, url: MemberUrl) -> Self {
        self.client_urls.push(url);
        self
    }

    /// Marks the member started under `name` (builder).
    pub fn started_as(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// A member has started once its etcd published a name.
    pub fn is_started(&self) -> bool {
        !self.name.is_empty()
    }

    /// True when one of the member's peer URLs is `url`.
    pub fn has_peer_url(&self, url: &MemberUrl) -> bool {
        self.peer_urls.iter().any(|u| u == url)
    }

    /// The first peer URL (members made by this project have exactly one).
    pub fn peer_url(&self) -> Option<&MemberUrl> {
        self.peer_urls.first()
    }
}
