//! Observes etcd: the member list from any voter, then each started member's status (learners
//! serve status) to tell health, the leader and raft indexes, and the preflight facts: every
//! started voter's own member list and the raised alarms. Every call is bounded by the client's
//! timeout; an unreachable member is unhealthy, never a hang.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use membership::{
    ClusterView, EtcdClient, Member, MemberHealth, MemberId, MemberUrl, Preflight, TlsPem,
};

/// A voter counts as caught up when it has applied the leader's commit index up to this many
/// entries (the two status calls are not taken at the same instant).
pub const CAUGHT_UP_LAG: u64 = 100;

/// What etcd looked like this pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdObservation {
    pub members: Vec<Member>,
    pub health: BTreeMap<MemberId, MemberObs>,
    pub leader: Option<MemberId>,
    /// Alarms and whether every voter reports the same member list.
    pub preflight: Preflight,
    /// Why the member list could not be read, if it couldn't.
    pub error: Option<String>,
    /// What each member's own status said, for the idle health check ([`probe`]).
    pub health_print: HealthPrint,
    /// The cluster version as the leader's `/version` reports it (`3.4.0`); `None` when it
    /// could not be read or etcd has not decided one yet.
    pub cluster_version: Option<String>,
    /// The cluster id the member list came with (`None` when it could not be read).
    pub cluster_id: Option<u64>,
    /// Why the member list is not one a quorum confirmed (`None`: it is). A voter answers the
    /// list from its own view; the list is confirmed by a linearizable read through that voter
    /// first. Without a quorum (or cut off from it) the list is still read, for status, from
    /// whichever voter answers, but nothing is rendered from it.
    pub unconfirmed_list: Option<String>,
}

/// What one status call per member says about the cluster, without the numbers that move with
/// every write (raft index): who answers, as voter or learner, which leader each sees, and the
/// errors each reports (raised alarms, no leader). Equal prints mean nothing the operator acts on
/// changed in etcd.
pub type HealthPrint = BTreeMap<MemberId, MemberPrint>;

/// One member's part of a [`HealthPrint`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MemberPrint {
    /// Not started: nothing to ask.
    #[default]
    NotStarted,
    Unreachable,
    Answered {
        is_learner: bool,
        leader: u64,
        errors: Vec<String>,
    },
}

impl MemberPrint {
    fn of(status: &Result<membership::EndpointStatus, membership::ClientError>) -> Self {
        match status {
            Ok(s) => MemberPrint::Answered {
                is_learner: s.is_learner,
                leader: s.leader,
                errors: s.errors.clone(),
            },
            Err(_) => MemberPrint::Unreachable,
        }
    }
}

/// The idle health check: one status call per started member of `last` (in parallel), as a
/// [`HealthPrint`] to compare with `last.health_print`.
pub async fn probe(client: &EtcdClient, last: &EtcdObservation) -> HealthPrint {
    let calls = last.members.iter().map(|m| async move {
        let print = match m.client_urls.first() {
            Some(url) => MemberPrint::of(&client.status_of(url).await),
            None => MemberPrint::NotStarted,
        };
        (m.id, print)
    });
    futures::future::join_all(calls).await.into_iter().collect()
}

/// One member's observed state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberObs {
    pub healthy: bool,
    pub raft_index: Option<u64>,
    pub error: Option<String>,
    /// The last entry the member applied (behind `raft_index` while its store is held).
    pub applied_index: Option<u64>,
    /// Its database file's size and the part live data uses (bytes).
    pub db: Option<DbSize>,
    /// Its store revision.
    pub revision: Option<i64>,
    /// The etcd version it runs.
    pub version: Option<String>,
    /// `notAfter` (Unix seconds) of the certificate it serves clients, as a TLS handshake
    /// showed it: what the node runs, not what the latest revision holds.
    pub serving_not_after: Option<i64>,
}

/// A member's database file: its size and the part in use (the rest is free pages a
/// defragmentation gives back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DbSize {
    pub total: i64,
    pub in_use: i64,
}

impl DbSize {
    /// Bytes a defragmentation would give back.
    pub fn free(self) -> i64 {
        (self.total - self.in_use).max(0)
    }

    /// The free share of the file, in percent (0 for an empty file).
    pub fn fragmented_percent(self) -> u32 {
        if self.total <= 0 {
            return 0;
        }
        u32::try_from(self.free().saturating_mul(100) / self.total).unwrap_or(100)
    }
}

impl EtcdObservation {
    /// The quorum gate's view of the cluster.
    pub fn cluster_view(&self) -> ClusterView {
        ClusterView {
            api_servers: Vec::new(),
            control_plane: membership::ControlPlanePods::NotListed,
            outage_approved: false,
            standby: None,
            members: self
                .members
                .iter()
                .map(|m| MemberHealth {
                    member: m.clone(),
                    healthy: self.is_healthy(m.id),
                })
                .collect(),
            rolling_node: None,
            preflight: self.preflight.clone(),
        }
    }

    /// When `member` is the leader: its client URL and the healthy voter with the highest raft
    /// index to hand leadership to before its node restarts (the restart then costs no
    /// election).
    pub fn leadership_handover(&self, member: Option<MemberId>) -> Option<(MemberUrl, MemberId)> {
        let leader = self.leader.filter(|l| Some(*l) == member)?;
        let url = self
            .members
            .iter()
            .find(|m| m.id == leader)?
            .client_urls
            .first()
            .cloned()?;
        let (_, target) = self
            .members
            .iter()
            .filter(|m| !m.is_learner && m.id != leader)
            .filter_map(|m| {
                let h = self.health.get(&m.id)?;
                h.healthy.then_some((h.raft_index.unwrap_or(0), m.id))
            })
            .max()?;
        Some((url, target))
    }

    /// Whether `id` answered this observation as healthy.
    pub fn is_healthy(&self, id: MemberId) -> bool {
        self.health.get(&id).is_some_and(|h| h.healthy)
    }

    /// The cluster version etcd reports, parsed.
    pub fn cluster_version(&self) -> Option<crate::etcd_version::Version> {
        crate::etcd_version::Version::parse(self.cluster_version.as_deref()?)
    }

    /// The etcd version each started member that answered runs, by member name.
    pub fn member_versions(&self) -> Vec<(String, crate::etcd_version::Version)> {
        self.members
            .iter()
            .filter_map(|m| {
                let v = self.health.get(&m.id)?.version.as_deref()?;
                Some((m.name.clone(), crate::etcd_version::Version::parse(v)?))
            })
            .collect()
    }

    /// Voters that have been started (have a client URL).
    pub fn started_voters(&self) -> impl Iterator<Item = &Member> {
        self.members
            .iter()
            .filter(|m| !m.is_learner && m.is_started())
    }

    /// The first started voter that has not applied what the leader committed: its name and
    /// why it counts as behind.
    pub fn lagging_voter(&self) -> Option<(&str, String)> {
        let leader = self.leader_raft_index()?;
        self.started_voters().find_map(|m| {
            let applied = self.health.get(&m.id)?.applied_index?;
            (applied + CAUGHT_UP_LAG < leader).then(|| {
                (
                    m.name.as_str(),
                    format!(
                        "{} is catching up (applied {applied}, leader committed {leader})",
                        m.name
                    ),
                )
            })
        })
    }

    /// The leader's raft index, if known.
    pub fn leader_raft_index(&self) -> Option<u64> {
        self.leader.and_then(|l| self.health.get(&l)?.raft_index)
    }

    /// The leader's raft index, or, when its status call failed this pass, the highest any
    /// member reported (at most a little behind the leader's).
    pub fn raft_index_at_least(&self) -> Option<u64> {
        self.leader_raft_index()
            .or_else(|| self.health.values().filter_map(|h| h.raft_index).max())
    }
}

#[cfg(test)]
mod raft_index_tests {
    use super::*;

    #[test]
    fn without_the_leader_s_index_the_highest_reported_stands_in() {
        let (a, b) = (MemberId::new(1).unwrap(), MemberId::new(2).unwrap());
        let obs = |leader: Option<MemberId>, a_index: Option<u64>| EtcdObservation {
            leader,
            health: BTreeMap::from([
                (
                    a,
                    MemberObs {
                        raft_index: a_index,
                        ..MemberObs::default()
                    },
                ),
                (
                    b,
                    MemberObs {
                        raft_index: Some(90),
                        ..MemberObs::default()
                    },
                ),
            ]),
            ..EtcdObservation::default()
        };
        assert_eq!(obs(Some(a), Some(100)).raft_index_at_least(), Some(100));
        assert_eq!(obs(Some(a), None).raft_index_at_least(), Some(90));
        assert_eq!(obs(None, Some(100)).raft_index_at_least(), Some(100));
        assert_eq!(EtcdObservation::default().raft_index_at_least(), None);
    }
}

/// A client whose endpoint list follows the cluster.
#[derive(Debug, Default)]
pub struct EtcdConnection {
    current: Option<(Vec<MemberUrl>, TlsPem, Arc<EtcdClient>)>,
}

impl EtcdConnection {
    /// The client of the last [`EtcdConnection::client`] call.
    pub fn current(&self) -> Option<Arc<EtcdClient>> {
        self.current.as_ref().map(|(_, _, c)| Arc::clone(c))
    }

    /// The client for `endpoints`, rebuilt when they or the TLS material change (a renewed
    /// client certificate, the CAs to trust during a CA rotation).
    pub fn client(
        &mut self,
        endpoints: Vec<MemberUrl>,
        tls: &TlsPem,
        timeout: Duration,
    ) -> Result<&EtcdClient, membership::ClientError> {
        let stale = self
            .current
            .as_ref()
            .is_none_or(|(eps, pem, _)| *eps != endpoints || pem != tls);
        if stale {
            let client = EtcdClient::with_pem(endpoints.clone(), Some(tls), timeout)?;
            self.current = Some((endpoints, tls.clone(), Arc::new(client)));
        }
        match &self.current {
            Some((_, _, c)) => Ok(c),
            None => Err(membership::ClientError::NoEndpoints),
        }
    }
}

/// Reads the member list (confirmed by a quorum where one answers) and every started member's
/// status.
pub async fn observe(client: &EtcdClient) -> EtcdObservation {
    let (listed, unconfirmed_list) = match client.member_list_linearizable().await {
        Ok(live) => (Ok(live), None),
        Err(e) => (client.member_list().await, Some(e.to_string())),
    };
    let live = match listed {
        Ok(live) => live,
        Err(e) => {
            return EtcdObservation {
                error: Some(e.to_string()),
                ..Default::default()
            };
        }
    };
    let mut obs = EtcdObservation {
        members: live.members.clone(),
        cluster_id: Some(live.cluster_id),
        unconfirmed_list,
        ..Default::default()
    };
    let checks = live.members.iter().map(|m| check_member(client, m));
    let lists = live
        .members
        .iter()
        .filter(|m| !m.is_learner)
        .filter_map(|m| Some((m.id, m.client_urls.first()?)))
        .map(|(id, url)| async move { (id, client.member_list_at(url).await) });
    let (statuses, lists, alarms) = futures::join!(
        futures::future::join_all(checks),
        futures::future::join_all(lists),
        client.alarms()
    );
    for (id, member_obs, leader, print) in statuses {
        if member_obs.healthy && obs.leader.is_none() {
            obs.leader = leader;
        }
        obs.health.insert(id, member_obs);
        obs.health_print.insert(id, print);
    }
    let per_voter: BTreeMap<MemberId, Vec<Member>> = lists
        .into_iter()
        .filter_map(|(id, list)| Some((id, list.ok()?)))
        .collect();
    obs.preflight = Preflight {
        disagreements: membership::disagreements(&obs.members, &per_voter),
        ..Default::default()
    };
    match alarms {
        Ok(a) => obs.preflight.alarms = a,
        Err(e) => obs.preflight.alarms_unreadable = Some(e.to_string()),
    }
    obs.cluster_version = cluster_version(client, &obs).await;
    obs
}

/// One member's status: its health, indexes, version, database size and served certificate,
/// the leader it knows, and its health print.
async fn check_member(
    client: &EtcdClient,
    m: &Member,
) -> (MemberId, MemberObs, Option<MemberId>, MemberPrint) {
    let Some(url) = m.client_urls.first() else {
        let obs = MemberObs {
            error: Some("not started".into()),
            ..Default::default()
        };
        return (m.id, obs, None, MemberPrint::NotStarted);
    };
    let status = client.status_of(url).await;
    let print = MemberPrint::of(&status);
    let s = match status {
        Ok(s) => s,
        Err(e) => {
            let obs = MemberObs {
                error: Some(e.to_string()),
                ..Default::default()
            };
            return (m.id, obs, None, print);
        }
    };
    // A voter is healthy when it answers and knows a leader; a learner when it answers.
    let healthy = m.is_learner || s.leader != 0;
    let obs = MemberObs {
        healthy,
        raft_index: Some(s.raft_index),
        error: (!healthy).then(|| "no leader".to_owned()),
        applied_index: Some(s.raft_applied_index),
        revision: Some(s.revision),
        version: Some(s.version.clone()),
        db: Some(DbSize {
            total: s.db_size,
            in_use: s.db_size_in_use,
        }),
        serving_not_after: served_not_after(client, m.id, url).await,
    };
    (m.id, obs, MemberId::new(s.leader), print)
}

/// `notAfter` of the client certificate member `id` serves at `url`; `None` (logged) when the
/// handshake or the certificate cannot be read: its health says more.
async fn served_not_after(
    client: &EtcdClient,
    id: MemberId,
    url: &membership::MemberUrl,
) -> Option<i64> {
    let read = match client.served_certificate(url).await {
        Ok(der) => crate::certs::not_after_of_der(&der),
        Err(e) => Err(e),
    };
    read.map_err(|e| tracing::debug!(member = %id, error = %e, "served certificate not read"))
        .ok()
}

/// The cluster version from the leader's `/version` (any healthy member when no leader is
/// known: the version is replicated, every member answers the same).
async fn cluster_version(client: &EtcdClient, obs: &EtcdObservation) -> Option<String> {
    let url = obs
        .members
        .iter()
        .filter(|m| obs.is_healthy(m.id))
        .min_by_key(|m| Some(m.id) != obs.leader)?
        .client_urls
        .first()?;
    match client.version_of(url).await {
        Ok(v) if v.cluster != "not_decided" => Some(v.cluster),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the cluster version");
            None
        }
    }
}
