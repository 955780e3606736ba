//! The model's state: nodes, members, revisions; and the bridges from it to what the shipped
//! functions take (a [`ClusterView`] for the gate, a rendered env read as a [`VerifyConfig`], a
//! live member list and a data dir for `etcd-verify`).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};

use etcd_verify::config::VerifyConfig;
use etcd_verify::decide::{DataDir, LiveError, Observed};
use etcd_verify::wal::WalIdentity;
use membership::{ClusterView, LiveMembers, Member, MemberHealth, MemberId, MemberUrl, quorum};

use crate::controllers::installer::equivalence;
use crate::podspec::paths::CertPaths;
use crate::podspec::{EnvInput, NodeTarget, contract_env};

/// The cluster id every member's WAL carries (one cluster; a second would be a violation).
pub const CLUSTER: u64 = 0xc1;
/// The cluster token `render` gave the bootstrap manifest.
pub const TOKEN: &str = "model-cluster";
/// The id a forged revision gives a node's member.
pub const FORGED_ID: u64 = 0xbad;

/// How the installer chooses the nodes it moves to the latest revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Installer {
    /// Today's: every node below the latest revision, one at a time, as the gate allows.
    Current,
    /// The unsafe shortcut of `docs/benchmarks.md`: a node whose started member's revision
    /// differs from the latest only by learners added since is left where it is.
    NaiveLearnerAdd,
    /// What ships (#36): a node whose started member is on its own data, on a rendered
    /// revision that lists it and lists no member the latest revision does not, is
    /// *equivalent* and left where it is (what `etcd-verify` lets restart); the
    /// member lists are compared by the installer controller's own function.
    Equivalent,
}

/// One member as the cluster's member list has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelMember {
    pub id: u64,
    pub node: u8,
    pub learner: bool,
    pub started: bool,
}

/// What a revision was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RevKind {
    /// `etcd-operator render`'s first manifest: a new cluster of one.
    Bootstrap,
    /// Rendered by the operator from the live member list.
    Rendered,
    /// Laid down by someone else, with a member list the cluster never had.
    Forged,
}

/// A revision: the member list (id, node) it was rendered from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rev {
    pub kind: RevKind,
    pub members: Vec<(u64, u8)>,
    /// The generation of everything else a revision carries (an etcd version, a certificate):
    /// a revision of another setting restarts every node, equivalent or not.
    pub setting: u8,
}

/// What a data disk holds: the member its WAL names, and whether a mark inside the data dir
/// (the bootstrap mark, a `member-archived-*`) shows a member ran there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Disk {
    pub data: Option<u64>,
    pub earlier: bool,
}

/// One node: the revision its static pod runs, whether etcd runs, its data dir.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub rev: Option<u8>,
    pub running: bool,
    /// The member id the data dir's WAL names (`None`: no `member` dir).
    pub data: Option<u64>,
    /// A bootstrap mark or an archived member dir, inside the data dir, shows a member ran here.
    pub earlier: bool,
    /// The bootstrap mark `etcd-verify` keeps in its state dir, outside the data dir
    /// (`--state-dir`, #65): an unmounted data disk does not take it along.
    pub outside_mark: bool,
    /// The data disk failed to mount: `data` and `earlier` are the empty mount point's, this is
    /// what the disk holds and shows again once mounted.
    pub unmounted: Option<Disk>,
}

impl Node {
    /// A node that never ran etcd.
    pub const EMPTY: Node = Node {
        rev: None,
        running: false,
        data: None,
        earlier: false,
        outside_mark: false,
        unmounted: None,
    };
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    pub nodes: Vec<Node>,
    /// Sorted by id.
    pub members: Vec<ModelMember>,
    pub revs: Vec<Rev>,
    /// The operator's latest revision.
    pub latest: Option<u8>,
    /// The node the installer moved and whose etcd has not served since.
    pub rolling: Option<u8>,
    /// An installer pod the operator created with the gate's verdict: the node it restarts and
    /// the revision it lays down, once it runs (the check and the restart as two steps).
    pub pending: Option<(u8, u8)>,
    /// The node whose member the operator cannot reach while its peers can: the gate sees it
    /// unhealthy while it runs and votes.
    pub cut_off: Option<u8>,
    /// The node whose voter is being defragmented (its store held: it applies nothing).
    pub defragmenting: Option<u8>,
    pub next_id: u64,
    pub changes_left: u8,
    pub faults_left: u8,
    /// Revisions of a new setting the operator may still render (each restarts every node).
    pub upgrades_left: u8,
}

type ConfigKey = (u8, u8, Rev);

thread_local! {
    static CONFIGS: RefCell<HashMap<ConfigKey, Result<VerifyConfig, String>>> =
        RefCell::new(HashMap::new());
}

pub fn node_name(n: u8) -> String {
    format!("n{}", n + 1)
}

fn target(n: u8) -> NodeTarget {
    NodeTarget::new(&node_name(n), IpAddr::V4(Ipv4Addr::new(10, 0, 0, n + 1)))
}

pub fn peer_url(n: u8) -> MemberUrl {
    target(n).peer_url().expect("a node's peer URL renders")
}

fn member(id: u64, n: u8, learner: bool, started: bool) -> Member {
    let id = MemberId::new(id).expect("model ids are not zero");
    let mut m = Member::unstarted_learner(id, peer_url(n));
    m.is_learner = learner;
    if started {
        m = m
            .started_as(&node_name(n))
            .with_client_url(target(n).client_url().expect("client URL renders"));
    }
    m
}

impl World {
    /// The member of node `n`.
    pub fn member_of(&self, n: u8) -> Option<ModelMember> {
        self.members.iter().copied().find(|m| m.node == n)
    }

    pub fn voters(&self) -> usize {
        self.members.iter().filter(|m| !m.learner).count()
    }

    /// Voters whose etcd runs (and is not held by a defragmentation).
    pub fn running_voters(&self) -> usize {
        self.members
            .iter()
            .filter(|m| !m.learner && self.serves(m))
            .count()
    }

    /// Member `m` has started and its etcd runs, not held by a defragmentation.
    pub fn serves(&self, m: &ModelMember) -> bool {
        m.started && self.nodes[usize::from(m.node)].running && self.defragmenting != Some(m.node)
    }

    pub fn has_quorum(&self) -> bool {
        self.voters() > 0 && self.running_voters() >= quorum(self.voters())
    }

    /// The member list as a revision records it.
    pub fn member_list(&self) -> Vec<(u64, u8)> {
        self.members.iter().map(|m| (m.id, m.node)).collect()
    }

    /// What the gate sees: a member is healthy while its etcd runs, unless the operator is cut
    /// off from it.
    pub fn view(&self) -> ClusterView {
        ClusterView {
            members: self
                .members
                .iter()
                .map(|m| MemberHealth {
                    member: member(m.id, m.node, m.learner, m.started),
                    healthy: self.serves(m) && self.cut_off != Some(m.node),
                })
                .collect(),
            rolling_node: self.rolling.map(node_name),
            ..ClusterView::default()
        }
    }

    /// The live member list a running voter answers with.
    pub fn live(&self) -> LiveMembers {
        LiveMembers {
            cluster_id: CLUSTER,
            members: self
                .members
                .iter()
                .map(|m| member(m.id, m.node, m.learner, m.started))
                .collect(),
            answered_by: "https://10.0.0.1:2379".parse().expect("a URL"),
        }
    }

    /// Node `n`'s revision `rev` as rendered and read back by `etcd-verify` (remembered: a
    /// revision never changes).
    pub fn config(&self, n: u8, rev: &Rev) -> Result<VerifyConfig, String> {
        let key = (self.node_count(), n, rev.clone());
        if let Some(hit) = CONFIGS.with_borrow(|c| c.get(&key).cloned()) {
            return hit;
        }
        let made = self.render(n, rev);
        CONFIGS.with_borrow_mut(|c| c.insert(key, made.clone()));
        made
    }

    fn render(&self, n: u8, rev: &Rev) -> Result<VerifyConfig, String> {
        let nodes: Vec<NodeTarget> = (0..self.node_count()).map(target).collect();
        let members: Vec<Member> = rev
            .members
            .iter()
            .map(|&(id, node)| member(id, node, false, true))
            .collect();
        let name = node_name(n);
        let env = contract_env(&EnvInput {
            node: &nodes[usize::from(n)],
            nodes: &nodes,
            members: &members,
            revision: "model",
            bootstrap: rev.kind == RevKind::Bootstrap,
            cluster_token: Some(TOKEN),
            certs: &CertPaths::for_node(&name),
        })
        .map_err(|e| format!("rendering {name}: {e}"))?;
        let env: BTreeMap<String, String> = env.into_iter().collect();
        VerifyConfig::from_env(&env).map_err(|e| format!("{name}'s env: {e}"))
    }

    /// What `etcd-verify` on node `n` observes; `answers`: whether the member list is read;
    /// `state_dir`: whether it is given a state dir outside the data dir, whose mark it reads.
    pub fn observed<'a>(
        &self,
        n: u8,
        config: &'a VerifyConfig,
        answers: bool,
        state_dir: bool,
    ) -> Observed<'a> {
        let node = self.nodes[usize::from(n)];
        let marked = (state_dir && node.outside_mark).then_some("model: the state dir's mark");
        Observed {
            config,
            data_dir: node.data.map_or(DataDir::Absent, |id| {
                DataDir::Present(WalIdentity {
                    member_id: id,
                    cluster_id: CLUSTER,
                })
            }),
            live: if answers {
                Ok(self.live())
            } else {
                Err(LiveError::NoAnswer("model: no voter answered".to_owned()))
            },
            earlier: marked
                .or(node.earlier.then_some("model: a mark in the data dir"))
                .map(str::to_owned),
        }
    }

    pub fn node_count(&self) -> u8 {
        u8::try_from(self.nodes.len()).unwrap_or(u8::MAX)
    }

    /// Membership's hold on a learner add for node `n`
    /// ([`membership::MemberIds::removed_at`], the operator's rule): the revision laid down on
    /// `n` lists, for `n`'s peer URL, a member etcd no longer has.
    pub fn removed_listed(&self, n: u8) -> bool {
        let Some(rev) = self.nodes[usize::from(n)].rev else {
            return false;
        };
        let Ok(config) = self.config(n, &self.revs[usize::from(rev)]) else {
            return false;
        };
        let live: Vec<MemberId> = self
            .members
            .iter()
            .filter_map(|m| MemberId::new(m.id))
            .collect();
        config
            .member_ids
            .removed_at(&config.peer_url, &live)
            .is_some()
    }

    /// Whether the installer, with `policy`, would still move node `n`: never a node with
    /// neither a member nor a revision laid down (the real installer moves a node without a
    /// member only while it still runs an etcd pod, `Observed::rolled_nodes`).
    pub fn needs_roll(&self, n: u8, policy: Installer) -> bool {
        let Some(latest) = self.latest else {
            return false;
        };
        let node = self.nodes[usize::from(n)];
        if node.rev == Some(latest) {
            return false;
        }
        match (policy, node.rev, self.member_of(n)) {
            (Installer::NaiveLearnerAdd, Some(rev), Some(own)) if own.started => {
                !self.differs_by_learners_only(&self.revs[usize::from(rev)], latest)
            }
            (Installer::Equivalent, Some(rev), Some(own))
                if own.started && node.data == Some(own.id) =>
            {
                !self.lists_only_latest(&self.revs[usize::from(rev)], latest, (own.id, n))
            }
            (_, None, None) => false,
            _ => true,
        }
    }

    /// The installer controller's equivalence on node `n`'s rendered env: `rev` lists `own` and
    /// no member the latest revision does not ([`equivalence::members_allow`]); the rest of a
    /// rendered revision is the same as the latest's (the model changes only members), a
    /// bootstrap or forged one is not.
    fn lists_only_latest(&self, rev: &Rev, latest: u8, own: (u64, u8)) -> bool {
        let latest = &self.revs[usize::from(latest)];
        let (Ok(ours), Ok(last)) = (self.config(own.1, rev), self.config(own.1, latest)) else {
            return false;
        };
        let Some(id) = MemberId::new(own.0) else {
            return false;
        };
        rev.kind == RevKind::Rendered
            && latest.kind == RevKind::Rendered
            && rev.setting == latest.setting
            && equivalence::members_allow(id, &peer_url(own.1), &ours.member_ids, &last.member_ids)
                .is_ok()
    }

    /// `rev` lists a subset of the latest revision's members and every extra one is a learner.
    fn differs_by_learners_only(&self, rev: &Rev, latest_index: u8) -> bool {
        let latest = &self.revs[usize::from(latest_index)].members;
        rev.kind == RevKind::Rendered
            && rev.setting == self.revs[usize::from(latest_index)].setting
            && rev.members.iter().all(|m| latest.contains(m))
            && latest
                .iter()
                .filter(|m| !rev.members.contains(m))
                .all(|(id, _)| self.members.iter().any(|m| m.id == *id && m.learner))
    }

    /// Nothing left for the operator or the installer to do with `policy`.
    pub fn settled(&self, policy: Installer) -> bool {
        self.rolling.is_none()
            && self.pending.is_none()
            && self
                .latest
                .is_some_and(|l| self.revs[usize::from(l)].members == self.member_list())
            && (0..self.node_count()).all(|n| !self.needs_roll(n, policy))
    }

    /// Voters whose node still holds their data on a revision that is not forged.
    pub fn voters_with_data(&self) -> usize {
        self.members
            .iter()
            .filter(|m| !m.learner && m.started)
            .filter(|m| {
                let node = self.nodes[usize::from(m.node)];
                node.data == Some(m.id)
                    && node
                        .rev
                        .is_some_and(|r| self.revs[usize::from(r)].kind != RevKind::Forged)
            })
            .count()
    }
}
