//! The `every-address-changed` scenario: the whole control plane comes back on new addresses at
//! once (a power loss into new DHCP leases), under write load. No etcd can start (each manifest
//! listens on an address its node no longer has) and no peer URL can move (`MemberUpdate` needs
//! the quorum that is gone), so the operator alone cannot heal it. The admin follows the runbook
//! `docs/runbooks/quorum-loss.md` ("Every member's address changed"):
//!
//! 1. `etcd-recover status` on every node: no member answers; each prints the commit index its
//!    WAL holds, read from disk. The node with the highest one holds every acknowledged write.
//! 2. `etcd-recover from-member --address <its new IP> --signer <etcd-signer Secret>` there: the
//!    member starts alone at the new address with certificates issued for it, and its peer URL
//!    moves with `MemberUpdate`.
//! 3. The operator adds the other two nodes back as learners (their stale data archived by
//!    `etcd-verify`) and promotes them: 3 voters, every peer URL at a new address.
//!
//! Here the API stand-in runs on its own etcd, so it stays up through the outage. On a stacked
//! control plane the platform also re-addresses kube-apiserver (its serving certificate and
//! `--etcd-servers`), which is not this project's.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;

use super::harness::{Harness, Recovery, describe_members, member_of, members_of};
use super::runbook::{Ran, Untouched, etcd_recover};
use crate::controlplane::{ControlPlaneError, OPERATOR_NS, RetiredAddress};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const SETTLE: Duration = Duration::from_secs(300);
/// `from-member` bounds itself at 300 s by default.
const COMMAND_DEADLINE: Duration = Duration::from_secs(360);
/// How long every node's etcd gets to be seen down at both addresses.
const DOWN_DEADLINE: Duration = Duration::from_secs(60);

fn failed(msg: impl Into<String>) -> ControlPlaneError {
    ControlPlaneError::Failed(msg.into())
}

pub async fn every_address_changed(h: &mut Harness) -> Result<(), ControlPlaneError> {
    h.recovery = Some(Recovery::default());
    let before = h.status().await;
    let ids_before = members_of(&before, &NODES)?;
    let lost_at = Instant::now();
    let (retired, new) = change_every_address(h).await?;
    let commits = surveys(h).await?;
    let (chosen, commit) = commits
        .iter()
        .max_by_key(|(_, c)| *c)
        .cloned()
        .ok_or_else(|| failed("no node printed a WAL commit index"))?;
    h.step(format!(
        "WAL commit indexes: {}; recovering from {chosen}",
        commits
            .iter()
            .map(|(n, c)| format!("{n} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let signer = signer_file(h).await?;
    let ip = h.cp.node(&chosen)?.ip().to_string();
    bad_input_refused(h, &chosen, &ip).await?;
    // The other nodes' etcd cannot start (their manifests listen on retired addresses): the
    // admin confirms them down (#65: recovery refuses a voter that neither answers nor is named).
    let down = super::runbook::confirm_down_but(&NODES, &chosen);
    let recovering = Instant::now();
    let ran = recover(
        h,
        &chosen,
        &[
            "from-member",
            "--address",
            &ip,
            "--signer",
            &signer.display().to_string(),
            "--confirm-down",
            &down,
        ],
    )
    .await?;
    if ran.code != Some(0) || !ran.stdout.contains("(MemberUpdate)") {
        return Err(failed(format!(
            "etcd-recover from-member --address {ip} on {chosen} exited {:?} (or moved no peer URL):\n{}",
            ran.code,
            ran.said()
        )));
    }
    h.step(format!(
        "etcd-recover from-member --address {ip} --signer … on {chosen} (exit 0, {:.1}s):\n{}",
        ran.took.as_secs_f64(),
        super::runbook::excerpt(&ran.stdout)
    ));
    let s = settled_at_new_addresses(h, &chosen, &ids_before, &new).await?;
    drop(retired);
    let first = h
        .first_write_after(recovering, Duration::from_secs(60))
        .await?;
    h.recovery = Some(Recovery {
        rto_s: Some(first.duration_since(lost_at).as_secs_f64()),
        api_rto_s: None,
    });
    h.step(format!(
        "3 voters at the new addresses {:.1}s after the addresses changed: {}; {chosen} kept member {} (commit index {commit} when recovered)",
        lost_at.elapsed().as_secs_f64(),
        describe_members(&s),
        member_of(&s, &chosen).unwrap_or_default()
    ));
    Ok(())
}

/// Every node re-addressed at once; returns the retired addresses (held) and the new ones.
async fn change_every_address(
    h: &mut Harness,
) -> Result<(Vec<RetiredAddress>, Vec<String>), ControlPlaneError> {
    let ips = |h: &Harness| -> Result<Vec<String>, ControlPlaneError> {
        NODES
            .iter()
            .map(|n| h.cp.node(n).map(|n| n.ip().to_string()))
            .collect()
    };
    let old = ips(h)?;
    let retired = h.cp.change_node_addresses(&NODES).await?;
    let new = ips(h)?;
    h.step(format!(
        "every node came back on a new address at once: {}; the old ones are retired",
        NODES
            .iter()
            .zip(old.iter().zip(&new))
            .map(|(n, (o, w))| format!("{n} {o} → {w}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok((retired, new))
}

/// `etcd-recover status` on every node: each must find no member answering and print its WAL's
/// commit index; returns them by node.
async fn surveys(h: &mut Harness) -> Result<Vec<(String, u64)>, ControlPlaneError> {
    let deadline = Instant::now() + DOWN_DEADLINE;
    let mut out = Vec::new();
    for n in NODES {
        loop {
            let ran = recover(h, n, &["status"]).await?;
            let commit = ran
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix("this node's data: commit index "))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|c| c.parse::<u64>().ok());
            let lost = ran.stdout.contains("quorum: lost");
            match commit {
                Some(c) if lost && ran.code == Some(0) => {
                    h.step(format!(
                        "etcd-recover status on {n}:\n{}",
                        super::runbook::excerpt(&ran.stdout)
                    ));
                    out.push((n.to_owned(), c));
                    break;
                }
                _ if Instant::now() > deadline => {
                    return Err(failed(format!(
                        "etcd-recover status on {n} should find quorum lost and print a WAL commit index within {DOWN_DEADLINE:?}; last:\n{}",
                        ran.said()
                    )));
                }
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
    Ok(out)
}

/// `--address` without `--signer`, and with another cluster's signer: invalid input (exit 2),
/// the node's manifest byte-identical and no recovery record.
async fn bad_input_refused(h: &mut Harness, node: &str, ip: &str) -> Result<(), ControlPlaneError> {
    let n = h.cp.node(node)?;
    let untouched = Untouched::take(&n.root, &n.manifest_dir())?;
    let ran = recover(h, node, &["from-member", "--address", ip]).await?;
    let said = untouched.refused(
        "from-member --address without --signer",
        &ran,
        2,
        "pass --signer FILE",
        Vec::new(),
    )?;
    h.step(format!(
        "etcd-recover from-member --address {ip} on {node} without --signer: exit 2, nothing changed: {said}"
    ));
    let other = etcd_operator::certs::EtcdCa::generate(time::OffsetDateTime::now_utc())
        .map_err(|e| failed(format!("another CA: {e}")))?;
    let path = h.cp.path().join("another-signer.json");
    write_secret(&path, other.to_secret_data())?;
    let ran = recover(
        h,
        node,
        &[
            "from-member",
            "--address",
            ip,
            "--signer",
            &path.display().to_string(),
        ],
    )
    .await?;
    let said = untouched.refused(
        "from-member --address with another cluster's signer",
        &ran,
        2,
        "is not in the CA bundle this member trusts",
        Vec::new(),
    )?;
    h.step(format!(
        "etcd-recover from-member --address {ip} on {node} with another CA as --signer: exit 2, nothing changed: {said}"
    ));
    Ok(())
}

/// Writes Secret `etcd-signer` with `data` to `path`, as `kubectl get secret -o json` prints it.
fn write_secret(
    path: &std::path::Path,
    data: std::collections::BTreeMap<String, Vec<u8>>,
) -> Result<(), ControlPlaneError> {
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("etcd-signer".into()),
            namespace: Some(OPERATOR_NS.into()),
            ..Default::default()
        },
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, k8s_openapi::ByteString(v)))
                .collect(),
        ),
        type_: Some("kubernetes.io/tls".into()),
        ..Default::default()
    };
    let text = serde_json::to_string_pretty(&secret)
        .map_err(|e| failed(format!("etcd-signer as JSON: {e}")))?;
    std::fs::write(path, text)
        .map_err(|e| ControlPlaneError::Io(format!("writing {}", path.display()), e))
}

/// Runs `etcd-recover args` on `node`.
async fn recover(h: &Harness, node: &str, args: &[&str]) -> Result<Ran, ControlPlaneError> {
    etcd_recover(COMMAND_DEADLINE, &h.cp.node(node)?.root, args, &[]).await
}

/// Secret `etcd-signer` in a file: what the admin brings from where the platform keeps it.
async fn signer_file(h: &Harness) -> Result<PathBuf, ControlPlaneError> {
    let data = h.secret_data_of(OPERATOR_NS, "etcd-signer").await?;
    let path = h.cp.path().join("etcd-signer.json");
    write_secret(&path, data)?;
    Ok(path)
}

/// Waits for 3 voters with every peer URL at a new address, `chosen` with its member id and the
/// others with new ones.
async fn settled_at_new_addresses(
    h: &mut Harness,
    chosen: &str,
    ids_before: &[(&str, String)],
    new: &[String],
) -> Result<etcd_operator::api::EtcdClusterStatus, ControlPlaneError> {
    let s = h
        .wait_status(
            "3 settled voters, every peer URL at a new address",
            SETTLE,
            |s| {
                crate::view::settled(s, 3)
                    && s.members.iter().all(|m| {
                        new.iter()
                            .any(|ip| m.peer_url.contains(&format!("//{ip}:")))
                    })
            },
        )
        .await?;
    for (n, old_id) in ids_before {
        let now = member_of(&s, n).ok_or_else(|| failed(format!("{n} has no member")))?;
        let kept = &now == old_id;
        if kept != (*n == chosen) {
            return Err(failed(format!(
                "{n}: member {old_id} before, {now} after; only {chosen} should keep its id: {}",
                describe_members(&s)
            )));
        }
    }
    Ok(s)
}
