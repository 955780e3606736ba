//! Node address changes: what it takes for a member to follow its node to a new address.
//!
//! A started member is named for its node (`ETCD_NAME`). When a control-plane Node's
//! InternalIP changes, no node has the member's peer URL any more, but a node of the member's
//! name still exists and no member has that node's new peer URL: the member *moves* (its data and
//! id stay; nothing is copied). This module only finds such moves ([`pending_moves`]); the
//! membership controller carries one out with `MemberUpdate` behind the quorum gate, and until
//! then no revision is made ([`hold_line`]), since a revision rendered meanwhile would either
//! drop the node or name an address etcd does not know yet (and `etcd-verify` would block it).
//! Once moved, the next revision carries the new URL in `ETCD_INITIAL_CLUSTER` and the node's
//! certificates for its new address; the node restarts on it first (its etcd is down or still
//! serving on the old address, see [`serves_elsewhere`]), and its client URL, so the published
//! host endpoints, follows when etcd starts there.
//!
//! Inputs: the control-plane nodes and the live members. Pure; no writes.

use std::borrow::Borrow;

use membership::{Member, MemberId, MemberUrl};

use crate::podspec::NodeTarget;

/// A member whose node now has another address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressMove {
    pub node: String,
    pub id: MemberId,
    /// The member's peer URLs now (the node's old address).
    pub from: Vec<MemberUrl>,
    /// The node's peer URL at its new address.
    pub to: MemberUrl,
}

impl AddressMove {
    /// "member 8e9e05c52164694d of n2 (https://a:2380 → https://b:2380)".
    pub fn describe(&self) -> String {
        let from: Vec<String> = self.from.iter().map(ToString::to_string).collect();
        format!(
            "member {} of {} ({} → {})",
            self.id,
            self.node,
            from.join(","),
            self.to
        )
    }
}

/// Every started member whose node (by name) has a peer URL that is neither the member's nor
/// any other member's, sorted by node name. A member that already has its node's URL, an
/// unstarted member (it has no name yet) and a member whose node is gone are not moves.
pub fn pending_moves<'a, M: Borrow<Member>>(
    nodes: impl IntoIterator<Item = &'a NodeTarget>,
    members: &[M],
) -> Vec<AddressMove> {
    let mut moves: Vec<AddressMove> = nodes
        .into_iter()
        .filter_map(|n| {
            let to = n.peer_url().ok()?;
            if members.iter().any(|m| m.borrow().has_peer_url(&to)) {
                return None;
            }
            let m = members
                .iter()
                .map(Borrow::borrow)
                .find(|m: &&Member| m.is_started() && m.name == n.name)?;
            Some(AddressMove {
                node: n.name.clone(),
                id: m.id,
                from: m.peer_urls.clone(),
                to,
            })
        })
        .collect();
    moves.sort_by(|a, b| a.node.cmp(&b.node));
    moves
}

/// Why no revision is made while members still have to move (`None`: none has to).
pub fn hold_line(moves: &[AddressMove]) -> Option<String> {
    if moves.is_empty() {
        return None;
    }
    let list: Vec<String> = moves.iter().map(AddressMove::describe).collect();
    Some(format!(
        "holding: no new revision until {} moved to its node's new address (membership moves it first)",
        list.join("; ")
    ))
}

/// The node's member advertises client URLs, none of them at the node's address: its etcd last
/// started on another address (it is still there, or down since it left).
pub fn serves_elsewhere(node: &NodeTarget, member: &Member) -> bool {
    let Ok(own) = node.client_url() else {
        return false;
    };
    !member.client_urls.is_empty() && !member.client_urls.contains(&own)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn node(name: &str, last: u8) -> NodeTarget {
        NodeTarget::new(name, IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
    }

    fn member(id: u64, name: &str, last: u8) -> Member {
        let n = node(name, last);
        let mut m = Member::voter(
            MemberId::new(id).expect("id"),
            name,
            n.peer_url().expect("url"),
        );
        m.client_urls = vec![n.client_url().expect("url")];
        m
    }

    #[test]
    fn a_started_member_follows_its_node_by_name() {
        let nodes = [node("n1", 1), node("n2", 22), node("n3", 3)];
        let members = [member(1, "n1", 1), member(2, "n2", 2), member(3, "n3", 3)];
        let moves = pending_moves(&nodes, &members);
        assert_eq!(moves.len(), 1, "{moves:?}");
        let mv = &moves[0];
        assert_eq!((mv.node.as_str(), mv.id.get()), ("n2", 2));
        assert_eq!(mv.to.to_string(), "https://10.0.0.22:2380");
        assert_eq!(
            mv.describe(),
            "member 2 of n2 (https://10.0.0.2:2380 → https://10.0.0.22:2380)"
        );
        assert!(
            hold_line(&moves).is_some_and(|l| l.contains("until member 2 of n2")),
            "{:?}",
            hold_line(&moves)
        );
        assert!(serves_elsewhere(&nodes[1], &members[1]));
        assert!(!serves_elsewhere(&nodes[0], &members[0]));
    }

    #[test]
    fn no_move_without_a_free_address_a_name_or_a_node() {
        let members = [member(1, "n1", 1), member(2, "n2", 2)];
        // n2's new address is n1's: not a move (the gate would refuse it anyway).
        assert!(pending_moves(&[node("n1", 1), node("n2", 1)], &members).is_empty());
        // The node is gone: membership removes its member instead.
        assert!(pending_moves(&[node("n1", 1)], &members).is_empty());
        // Unchanged.
        assert!(pending_moves(&[node("n1", 1), node("n2", 2)], &members).is_empty());
        assert_eq!(hold_line(&[]), None);
        // An unstarted learner has no name to follow.
        let unstarted = [
            member(1, "n1", 1),
            Member::unstarted_learner(
                MemberId::new(2).expect("id"),
                node("n2", 2).peer_url().expect("url"),
            ),
        ];
        assert!(pending_moves(&[node("n1", 1), node("n2", 9)], &unstarted).is_empty());
        // A member that has not advertised yet does not serve anywhere.
        let mut quiet = member(2, "n2", 2);
        quiet.client_urls.clear();
        assert!(!serves_elsewhere(&node("n2", 9), &quiet));
    }
}
