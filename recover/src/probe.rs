//! Looking before acting: the [`Survey`] of this node's data dir and of every member reachable,
//! each call bounded, nothing changed.

use std::collections::BTreeSet;
use std::time::Duration;

use membership::{ClientConfig, ClientError, EtcdClient, MemberUrl, QUORUM_READ_KEY};

use crate::plan::{Reached, Survey, Voters, VotersFrom};
use crate::pod::EtcdPod;

/// Why the survey could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("the etcd client TLS files of the manifest: {0}")]
    Tls(ClientError),
    #[error("{0}")]
    DataDir(#[from] etcd_verify::datadir::DataDirError),
}

/// A client for `endpoints` with the pod's TLS files.
pub fn client(
    pod: &EtcdPod,
    endpoints: Vec<MemberUrl>,
    call_timeout: Duration,
) -> Result<EtcdClient, ProbeError> {
    EtcdClient::new(ClientConfig {
        endpoints,
        tls: pod.tls.clone(),
        call_timeout,
    })
    .map_err(ProbeError::Tls)
}

/// Surveys this node and every member it can name (its revision's endpoints and the client URLs
/// its etcd lists).
pub async fn survey(pod: &EtcdPod, call_timeout: Duration) -> Result<Survey, ProbeError> {
    let data_dir = etcd_verify::datadir::inspect(&pod.data_dir)?;
    let mut all: Vec<MemberUrl> = vec![pod.client_url.clone()];
    all.extend(pod.endpoints.iter().cloned());
    let c = client(pod, all, call_timeout)?;
    let own = Reached {
        url: pod.client_url.clone(),
        status: c
            .status_of(&pod.client_url)
            .await
            .map_err(|e| e.to_string()),
    };
    let mut members = Vec::new();
    let mut urls: BTreeSet<MemberUrl> = pod.endpoints.iter().cloned().collect();
    if own.status.is_ok()
        && let Ok(list) = c.member_list_at(&pod.client_url).await
    {
        urls.extend(list.iter().flat_map(|m| m.client_urls.iter().cloned()));
        members = list;
    }
    let own_listed = !members.is_empty();
    urls.remove(&pod.client_url);
    let mut others = Vec::new();
    for url in urls {
        let status = c.status_of(&url).await.map_err(|e| e.to_string());
        others.push(Reached { url, status });
    }
    if members.is_empty() {
        for r in others.iter().filter(|r| r.status.is_ok()) {
            if let Ok(list) = c.member_list_at(&r.url).await {
                members = list;
                break;
            }
        }
    }
    let voters = if own_listed {
        Voters::listed(VotersFrom::ThisNode, &members)
    } else {
        Voters::from_revision(&pod.member_ids, &pod.initial_cluster, &members)
    };
    let quorum_read = quorum_read(pod, &own, &others, call_timeout).await;
    let wal_commit = match &data_dir {
        etcd_verify::decide::DataDir::Present(_) => {
            etcd_verify::wal::read_commit(&pod.data_dir.join("member").join("wal"))
                .map_err(|e| e.to_string())
        }
        _ => Err("no data dir".to_owned()),
    };
    Ok(Survey {
        name: pod.name.clone(),
        data_dir,
        own,
        wal_commit,
        others,
        members,
        quorum_read,
        voters,
    })
}

/// A linearizable read through each member that answered its status, until one succeeds.
async fn quorum_read(
    pod: &EtcdPod,
    own: &Reached,
    others: &[Reached],
    call_timeout: Duration,
) -> Result<MemberUrl, String> {
    let mut failures = Vec::new();
    for r in std::iter::once(own).chain(others) {
        if r.status.is_err() {
            continue;
        }
        let read = match client(pod, vec![r.url.clone()], call_timeout) {
            Ok(c) => c.get(QUORUM_READ_KEY).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match read {
            Ok(_) => return Ok(r.url.clone()),
            Err(e) => failures.push(format!("{}: {e}", r.url)),
        }
    }
    if failures.is_empty() {
        Err("no member answers".into())
    } else {
        Err(failures.join("; "))
    }
}
