//! The etcd writer against real etcd 3.4 over TLS: each typed intent makes exactly its change
//! (a learner added, its peer URL moved, removed), etcd's refusal comes back as the error the
//! controllers read as a typed refusal (promoting an unstarted learner), a dry run changes
//! nothing and records every intent, and without a connection nothing is asked.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use etcd_fixture::{ClusterSpec, EtcdCluster};
use etcd_operator::etcd::EtcdConnection;
use etcd_operator::writer::etcd::{EtcdIntent, EtcdWriter, Made, Outcome, Task};
use membership::{EtcdRefusal, Member, MemberUrl, TlsPem};

async fn members(conn: &EtcdConnection) -> Vec<Member> {
    let client = conn.current().unwrap();
    let mut m = client.member_list().await.unwrap().members;
    m.sort_by_key(|m| m.id);
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_intent_makes_its_change_and_a_dry_run_none() {
    let mut cluster = EtcdCluster::start(ClusterSpec::tls(1)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    let files = cluster.client_tls().unwrap();
    let pem = TlsPem {
        ca: std::fs::read(&files.ca).unwrap(),
        cert: std::fs::read(&files.cert).unwrap(),
        key: std::fs::read(&files.key).unwrap(),
    };
    let mut conn = EtcdConnection::default();
    conn.client(cluster.client_urls(), &pem, Duration::from_secs(3))
        .unwrap();
    let before = members(&conn).await;
    assert_eq!(before.len(), 1, "{before:?}");
    let peer: MemberUrl = "https://127.0.0.251:2380".parse().unwrap();
    let add = EtcdIntent::AddLearner {
        peer_url: peer.clone(),
    };

    // A dry run asks etcd nothing and records what it would have asked.
    let mut plan = EtcdWriter::new(true);
    assert!(matches!(
        plan.apply(&conn, &add).await,
        Ok(Outcome::Planned)
    ));
    assert!(matches!(
        plan.start(&conn, Task::Snapshot, "b1"),
        Outcome::Planned
    ));
    assert_eq!(members(&conn).await, before, "a dry run changed etcd");
    assert_eq!(
        plan.planned,
        [
            "would add learner https://127.0.0.251:2380",
            "would start: snapshot b1"
        ]
    );

    // Without a connection nothing is asked, in a real run too.
    let mut w = EtcdWriter::new(false);
    let none = EtcdConnection::default();
    assert!(matches!(w.apply(&none, &add).await, Ok(Outcome::NoClient)));

    // The add makes a learner at that address.
    let learner = match w.apply(&conn, &add).await {
        Ok(Outcome::Made(Made::Added(m))) => m,
        other => panic!("add learner: {other:?}"),
    };
    let now = members(&conn).await;
    let seen = now.iter().find(|m| m.id == learner.id);
    assert!(
        seen.is_some_and(|m| m.is_learner && m.peer_urls == [peer.clone()]),
        "{now:?}"
    );

    // etcd refuses to promote a learner that never started: the typed refusal, not a message.
    let refused = w
        .apply(&conn, &EtcdIntent::Promote { id: learner.id })
        .await
        .expect_err("an unstarted learner was promoted");
    assert!(refused.refused(EtcdRefusal::LearnerNotInSync), "{refused}");

    // Its peer URL moves, then it goes.
    let to: MemberUrl = "https://127.0.0.252:2380".parse().unwrap();
    let mv = EtcdIntent::MovePeerUrl {
        id: learner.id,
        to: to.clone(),
    };
    assert!(matches!(
        w.apply(&conn, &mv).await,
        Ok(Outcome::Made(Made::Done))
    ));
    let now = members(&conn).await;
    let seen = now.iter().find(|m| m.id == learner.id);
    assert!(seen.is_some_and(|m| m.peer_urls == [to.clone()]), "{now:?}");
    let remove = EtcdIntent::Remove { id: learner.id };
    assert!(matches!(
        w.apply(&conn, &remove).await,
        Ok(Outcome::Made(Made::Done))
    ));
    assert_eq!(members(&conn).await, before);
    assert!(w.planned.is_empty(), "{:?}", w.planned);

    // A task is handed the connection's client.
    assert!(matches!(
        w.start(&conn, Task::Defragment, "n1"),
        Outcome::Made(_)
    ));
}
