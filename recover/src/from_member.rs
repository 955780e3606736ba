//! `etcd-recover from-member`, as the binary runs it: the move `--address` asks for checked,
//! the survey and the plan printed, then the steps of [`crate::act`].

use std::path::{Path, PathBuf};
use tokio::time::Instant;

use crate::act::{self, Layout};
use crate::command::{Exit, Options, Target, ended, invalid, read, refused, stamp, surveyed};
use crate::plan;
use crate::pod::{self, EtcdPod};
use crate::readdress::{self, Move};

/// `from-member --address IP [--signer FILE]`.
#[derive(Clone, Debug)]
pub struct AddressArgs {
    pub ip: std::net::IpAddr,
    pub signer: Option<PathBuf>,
}

/// The move `--address` asks for, checked (`None`: no `--address`, or the manifest is already
/// there).
fn move_of(
    args: Option<&AddressArgs>,
    pod: &EtcdPod,
    out: &mut dyn FnMut(String),
) -> Result<Option<Move>, Exit> {
    let Some(args) = args else { return Ok(None) };
    if readdress::already_at(pod, args.ip) {
        out(format!(
            "--address {}: the manifest already uses it; the member stays there",
            args.ip
        ));
        return Ok(None);
    }
    let Some(path) = &args.signer else {
        return Err(invalid(
            out,
            format!(
                "--address {}: the member moves from {}, so its certificates must be issued for the new address: pass --signer FILE (Secret etcd-signer, as kubectl get -o yaml prints it)",
                args.ip,
                pod.peer_url.host()
            ),
        ));
    };
    let signer = readdress::load_signer(path).map_err(|e| invalid(out, e))?;
    readdress::check_signer(pod, &signer)
        .map_err(|e| invalid(out, format!("--signer {}: {e}", path.display())))?;
    Ok(Some(Move {
        ip: args.ip,
        signer,
    }))
}

/// `from-member`.
pub async fn from_member(
    target: &Target,
    opts: Options,
    address: Option<&AddressArgs>,
    out: &mut dyn FnMut(String),
) -> Exit {
    let deadline = Instant::now() + opts.timeout;
    async {
        let (layout, pod) = read(target, out)?;
        out(format!(
            "etcd-recover from-member on {} (manifest {}, revision {}, data dir {})",
            pod.name,
            layout.manifest.display(),
            pod.revision.as_deref().unwrap_or("?"),
            pod.data_dir.display()
        ));
        let mv = move_of(address, &pod, out)?;
        let stamp = stamp();
        let moving = match &mv {
            None => None,
            Some(mv) => {
                let resources = Path::new("/var/lib/etcd-recovery").join(&stamp).join("resources");
                let moved = readdress::moved(&pod, mv.ip, &target.root, &resources)
                    .map_err(|e| invalid(out, format!("--address {}: {e}", mv.ip)))?;
                Some(act::Moving { moved, mv })
            }
        };
        let survey = surveyed(target, &pod, out).await?;
        let plan = plan::decide_from_member(&survey, &opts.accept).map_err(|r| refused(out, &r))?;
        out(plan_text(&plan, &pod, &layout, &stamp, moving.as_ref()));
        for lost in &plan.losing {
            out(format!(
                "WARNING (--accept-losing-newer-writes): writes only {lost} holds will be lost"
            ));
        }
        if opts.dry_run {
            out("dry run: nothing was changed.".into());
            return Ok(Exit::Ok);
        }
        let subject = act::Subject {
            current: &pod,
            moving,
            call_timeout: target.call_timeout,
        };
        let result = act::from_member(&subject, &plan, &layout, &stamp, deadline, out).await;
        Ok(ended(out, result, |done| {
            format!(
                "recovered: {} is a one-member cluster at raft index {}. Kept: the old manifest in {}, the data as it was in {}.",
                pod.name,
                done.raft_index,
                done.record_dir.display(),
                done.data_copy.display()
            )
        }))
    }
    .await
    .unwrap_or_else(|e| e)
}

/// The plan `from-member` prints before acting.
fn plan_text(
    plan: &plan::Plan,
    pod: &EtcdPod,
    layout: &Layout,
    stamp: &str,
    moving: Option<&act::Moving<'_>>,
) -> String {
    let index = plan.raft_index.map_or_else(
        || "unknown: etcd does not answer and its WAL holds none".to_owned(),
        |i| i.to_string(),
    );
    let mut steps = vec![
        format!(
            "stop etcd (its manifest moves to {})",
            layout.record_dir(stamp).display()
        ),
        format!(
            "copy {}/member to member-before-recovery-{stamp}",
            pod.data_dir.display()
        ),
    ];
    if let Some(m) = moving {
        steps.push(format!(
            "move from {} to {}: copy the TLS files to {} and issue {}'s certificates there for {}; every URL of the manifest follows",
            pod.peer_url.host(),
            m.mv.ip,
            m.moved.tls_to.display(),
            pod.name,
            m.mv.ip
        ));
    }
    steps.push(format!(
        "start once with {}{}",
        pod::FORCE_NEW_CLUSTER,
        if moving.is_some() {
            ", then move the member's peer URL to the new address (MemberUpdate)"
        } else {
            ""
        }
    ));
    steps.push("restart without it".into());
    let listed: String = steps
        .iter()
        .enumerate()
        .map(|(i, s)| format!("\n  {}. {s}", i + 1))
        .collect();
    format!(
        "plan: member {} of cluster {:x} (raft index {index}) becomes a one-member cluster:{listed}\nthen the operator adds the other nodes back as learners once the API is back.",
        plan.member_id, plan.cluster_id,
    )
}
