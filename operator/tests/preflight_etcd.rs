//! The preflight against real etcd 3.4: the operator's observation reads the raised alarms and
//! every voter's own member list, and the quorum gate refuses membership changes while an alarm
//! is raised (NOSPACE and CORRUPT raised through etcd's own Alarm API, as etcd raises them),
//! lets a restart through under NOSPACE but not under CORRUPT, and treats an alarm list that
//! cannot be read (no quorum) as unknown, never as empty. The idle health check (one status call
//! per member) notices a raised alarm.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
use etcd_fixture::{ClusterSpec, EtcdCluster};
use etcd_operator::etcd::{observe, probe};
use membership::{Action, AlarmKind, DenyRule, MemberUrl, Verdict, gate};

async fn raw(cluster: &EtcdCluster) -> etcd_client::Client {
    let urls: Vec<String> = cluster
        .client_urls()
        .iter()
        .map(ToString::to_string)
        .collect();
    etcd_client::Client::connect(urls, None).await.unwrap()
}

fn on(member: membership::MemberId) -> AlarmOptions {
    let mut o = AlarmOptions::new();
    o.with_member(member.get());
    o
}

fn denied_by_preflight(v: Verdict, text: &str) {
    match v {
        Verdict::Deny(d) => {
            assert_eq!(d.rule, DenyRule::Preflight, "{d}");
            assert!(d.message.contains(text), "{:?} lacks {text:?}", d.message);
        }
        Verdict::Allow => panic!("expected a preflight denial ({text})"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarms_and_member_lists_gate_every_change() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    cluster.wait_writable().await.unwrap();
    let client = cluster.client().unwrap();
    let n1 = cluster.member_id("n1").unwrap();
    let n2 = cluster.member_id("n2").unwrap();
    let new_peer: MemberUrl = "http://127.0.0.250:2380".parse().unwrap();
    let add = Action::AddLearner {
        node: "n4".into(),
        peer_url: new_peer,
    };
    let roll = Action::RollNode {
        node: "n1".into(),
        member: Some(n1),
    };

    // A clean cluster: every voter agrees, no alarm.
    let obs = observe(&client).await;
    assert_eq!(obs.error, None);
    assert_eq!(obs.preflight.alarms, vec![], "{:?}", obs.preflight);
    assert_eq!(obs.preflight.alarms_unreadable, None);
    assert_eq!(obs.preflight.disagreements, Vec::<String>::new());
    assert!(gate(&obs.cluster_view(), &add).is_allowed());
    // The idle health check sees the same cluster as the pass did.
    assert_eq!(probe(&client, &obs).await, obs.health_print);
    let clean = obs;

    // NOSPACE on n2, raised through etcd's Alarm API.
    let mut etcd = raw(&cluster).await;
    etcd.alarm(AlarmAction::Activate, AlarmType::Nospace, Some(on(n2)))
        .await
        .unwrap();
    // One status call per member is enough to notice: etcd 3.4 lists raised alarms in each
    // member's status errors.
    let print = probe(&client, &clean).await;
    assert_ne!(
        print, clean.health_print,
        "the idle check must notice the alarm"
    );
    assert!(format!("{print:?}").contains("alarm:NOSPACE"), "{print:?}");
    let obs = observe(&client).await;
    assert_eq!(obs.preflight.alarms.len(), 1, "{:?}", obs.preflight);
    assert_eq!(obs.preflight.alarms[0].kind, AlarmKind::NoSpace);
    assert_eq!(obs.preflight.alarms[0].member, n2);
    let view = obs.cluster_view();
    denied_by_preflight(gate(&view, &add), &format!("alarm NOSPACE on member {n2}"));
    assert!(
        gate(&view, &roll).is_allowed(),
        "NOSPACE does not stop a restart"
    );

    // CORRUPT too: now a healthy voter is not restarted either.
    etcd.alarm(AlarmAction::Activate, AlarmType::Corrupt, Some(on(n1)))
        .await
        .unwrap();
    let obs = observe(&client).await;
    assert_eq!(obs.preflight.alarms.len(), 2, "{:?}", obs.preflight);
    denied_by_preflight(
        gate(&obs.cluster_view(), &roll),
        &format!("CORRUPT on member {n1}"),
    );

    // Disarmed: the gate opens again.
    for (kind, member) in [(AlarmType::Nospace, n2), (AlarmType::Corrupt, n1)] {
        etcd.alarm(AlarmAction::Deactivate, kind, Some(on(member)))
            .await
            .unwrap();
    }
    let obs = observe(&client).await;
    assert_eq!(obs.preflight.alarms, vec![], "{:?}", obs.preflight);
    assert!(gate(&obs.cluster_view(), &add).is_allowed());

    // Two of three members down: the alarm list cannot be read, and that is not "no alarm".
    cluster.kill("n2").unwrap();
    cluster.kill("n3").unwrap();
    let obs = observe(&client).await;
    assert!(
        obs.preflight.alarms_unreadable.is_some(),
        "an unreadable alarm list must be reported: {:?}",
        obs.preflight
    );
    assert!(!gate(&obs.cluster_view(), &add).is_allowed());
}

/// #65: the member list the operator renders from is one a quorum confirmed. A voter left
/// without a quorum still answers its own view of the list: the observation keeps it (status
/// shows the members) but marks it unconfirmed, so target-config renders nothing from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_list_without_a_quorum_is_observed_but_unconfirmed() {
    let mut cluster = EtcdCluster::start(ClusterSpec::plain(3)).await.unwrap();
    let client = cluster.client().unwrap();
    let obs = observe(&client).await;
    assert_eq!(obs.unconfirmed_list, None, "{obs:?}");
    assert_eq!(obs.members.len(), 3);
    cluster.stop("n2").unwrap();
    cluster.stop("n3").unwrap();
    let obs = observe(&client).await;
    assert_eq!(obs.error, None, "n1 still answers the list: {obs:?}");
    assert_eq!(obs.members.len(), 3, "{obs:?}");
    let why = obs.unconfirmed_list.expect("a list no quorum confirms");
    assert!(why.contains("linearizable member list"), "{why}");
    cluster.restart("n2").unwrap();
    cluster.wait_writable().await.unwrap();
    let obs = observe(&client).await;
    assert_eq!(obs.unconfirmed_list, None, "a quorum again: {obs:?}");
}
