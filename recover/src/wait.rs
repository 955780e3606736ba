//! Waiting on what the node and etcd show, each wait bounded by the command's deadline and
//! naming what it last saw when it runs out.

use std::collections::BTreeSet;
use std::time::Duration;

use membership::{EtcdClient, MemberId, MemberUrl};
use tokio::time::Instant;

use crate::act::ActError;

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(100);

fn ids(list: &[membership::Member]) -> String {
    list.iter()
        .map(|m| m.id.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until nothing accepts connections at `url`'s address.
pub async fn down(url: &MemberUrl, deadline: Instant) -> Result<(), ActError> {
    poll(format!("etcd at {url} to stop"), deadline, || async {
        let connect = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect(url.authority()),
        )
        .await;
        match connect {
            Ok(Err(_)) => Ok(()),
            _ => Err("it still accepts connections".to_owned()),
        }
    })
    .await
}

/// Looks with `check` every [`POLL`] until it answers `Ok`, or until `deadline`, naming `what`
/// and the last answer.
async fn poll<T, F, Fut>(what: String, deadline: Instant, mut check: F) -> Result<T, ActError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(ActError::Timeout {
                what,
                waited: started.elapsed(),
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the member at `url` is `id` and its own leader, and its member list names none of
/// `gone` (the members a forced or restored start drops). Members added since (the operator
/// adopts a recovered member as soon as the API answers) do not matter. Returns its raft index.
pub async fn leading(
    client: &EtcdClient,
    url: &MemberUrl,
    id: MemberId,
    gone: &BTreeSet<MemberId>,
    deadline: Instant,
) -> Result<u64, ActError> {
    let what = format!("etcd at {url} to answer as member {id}, leading alone");
    poll(what, deadline, || async {
        let st = client.status_of(url).await.map_err(|e| e.to_string())?;
        if st.member_id != id.get() || st.leader != id.get() {
            return Err(other(&st));
        }
        let list = client
            .member_list_at(url)
            .await
            .map_err(|e| format!("member list: {e}"))?;
        if list.iter().any(|m| gone.contains(&m.id)) {
            return Err(format!("leads, but still lists {}", ids(&list)));
        }
        Ok(st.raft_index)
    })
    .await
}

/// Waits until the member at `url` is `id`, names a leader (any: the operator may have added and
/// promoted a member that now leads) and is a voter in the member list it serves; returns the
/// leader, how many members it lists and its raft index.
pub async fn serving(
    client: &EtcdClient,
    url: &MemberUrl,
    id: MemberId,
    deadline: Instant,
) -> Result<(u64, usize, u64), ActError> {
    let what = format!("etcd at {url} to answer as member {id} with a leader");
    poll(what, deadline, || async {
        let st = client.status_of(url).await.map_err(|e| e.to_string())?;
        if st.member_id != id.get() || st.leader == 0 {
            return Err(other(&st));
        }
        let list = client
            .member_list_at(url)
            .await
            .map_err(|e| format!("member list: {e}"))?;
        if !list.iter().any(|m| m.id == id && !m.is_learner) {
            return Err(format!("member {id} is not a voter in {}", ids(&list)));
        }
        Ok((st.leader, list.len(), st.raft_index))
    })
    .await
}

fn other(st: &membership::EndpointStatus) -> String {
    format!(
        "member {:x} answers with leader {:x}",
        st.member_id, st.leader
    )
}
