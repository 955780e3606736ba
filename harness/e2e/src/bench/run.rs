//! The bench run: one local control plane driven through bootstrap, rollout, member replacement,
//! an idle minute and one scale-up per database size, with the etcd floor measured just before
//! each scale-up.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use membership::EtcdClient;

use super::availability::{self, Availability};
use super::fill::{self, Size};
use super::floor::FloorReport;
use super::idle::{self, IdleReport};
use super::opproc::CountedOperator;
use super::scaleup::ScaleUpReport;
use super::{procstat, report, scale, steps, svg};
use crate::controlplane::{OPERATOR_NS, STATIC_NS};
use crate::scenario::Harness;
use crate::scenario::harness::{member_ids, member_of};
use crate::scenario::load::{operator_tls, published_endpoints};

mod sizes;
use sizes::scale_ups;

const SETTLE: Duration = Duration::from_secs(600);
/// The worker Nodes' status period: the kubelet's default `nodeStatusUpdateFrequency`.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// What `sandbox bench` was asked to do.
#[derive(Clone, Debug)]
pub struct BenchArgs {
    pub sizes: Vec<Size>,
    pub out: PathBuf,
    pub svg: PathBuf,
    pub idle_window: Duration,
    /// Worker Nodes for the idle-at-scale window (0: no such window).
    pub workers: usize,
    /// Also grow 3 → 5 and, on a fresh control plane, 1 → 5.
    pub growth: bool,
    /// A size is skipped when the run would likely overrun this.
    pub budget: Duration,
    pub command: String,
}

/// One database size: the floor, the operator's scale-up, their ratio.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SizeResult {
    pub size: String,
    pub operator_db_bytes: u64,
    pub operator_fill: fill::FillReport,
    pub floor: FloorReport,
    pub operator: ScaleUpReport,
    /// Operator time (Ready → all on final revision) / floor time (add → promoted).
    pub ratio: f64,
    /// Operator time Ready → promoted / floor time.
    pub ratio_to_promoted: Option<f64>,
    /// Each node's step of the scale-up's rollout.
    pub rollout_steps: Vec<steps::RolloutStep>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Machine {
    pub cores: usize,
    pub loadavg_start: String,
    pub loadavg_end: String,
    pub kernel: String,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BenchReport {
    pub command: String,
    pub started_at: String,
    pub duration_s: f64,
    pub machine: Machine,
    pub scaleup: Vec<SizeResult>,
    pub availability: Vec<Availability>,
    pub idle: Option<IdleReport>,
    pub idle_at_scale: Option<scale::IdleAtScale>,
    /// Each node's step of the forced rollout.
    pub rollout_steps: Vec<steps::RolloutStep>,
    pub growth: Vec<scale::Growth>,
    /// RSS (KiB) of the control plane's own operator after the bootstrap.
    pub operator_rss_after_bootstrap_kib: Option<u64>,
    pub skipped: Vec<String>,
    pub errors: Vec<String>,
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Runs the bench; writes the JSON, markdown and SVG, and returns the report.
pub async fn run(args: &BenchArgs) -> Result<BenchReport, String> {
    let started = Instant::now();
    let mut rep = BenchReport {
        command: args.command.clone(),
        started_at: now_rfc3339(),
        machine: Machine {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg_start: procstat::loadavg(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            ..Default::default()
        },
        ..Default::default()
    };
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    println!("bench: bootstrapping 3 nodes under the write load ...");
    let mut h = Harness::bootstrapped(3)
        .await
        .map_err(|e| format!("control plane: {e}"))?;
    let outcome = drive(args, &mut h, &mut rep, started).await;
    h.shutdown().await;
    let outcome = match outcome {
        Ok(()) if args.growth => grow_from_one(args, &mut rep, started).await,
        other => other,
    };
    if let Err(e) = outcome {
        println!("bench: FAILED: {e}");
        rep.errors.push(e);
    }
    rep.duration_s = started.elapsed().as_secs_f64();
    rep.machine.loadavg_end = procstat::loadavg();
    write_outputs(args, &rep)?;
    Ok(rep)
}

fn write_outputs(args: &BenchArgs, rep: &BenchReport) -> Result<(), String> {
    let json = serde_json::to_string_pretty(rep).map_err(|e| e.to_string())?;
    let path = args.out.join("bench.json");
    std::fs::write(&path, json + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    let summary =
        serde_json::to_string_pretty(&super::summary::summarize(rep)).map_err(|e| e.to_string())?;
    let summary_path = args.out.join("summary.json");
    std::fs::write(&summary_path, summary + "\n")
        .map_err(|e| format!("{}: {e}", summary_path.display()))?;
    let md = report::markdown(rep);
    std::fs::write(args.out.join("bench.md"), &md).map_err(|e| e.to_string())?;
    println!("\n{md}");
    // Plot the largest size that was measured.
    if let Some(r) = rep
        .scaleup
        .iter()
        .rev()
        .find(|r| !r.operator.samples.is_empty())
    {
        let title = format!(
            "Scale-up 3 → 4, {} database ({:.0} MB): {:.1} s from Node Ready to settled",
            r.size,
            r.operator_db_bytes as f64 / 1e6,
            r.operator.phases.done_s
        );
        let text = svg::render(&r.operator, &title);
        std::fs::write(args.out.join("benchmarks-scaleup.svg"), &text)
            .map_err(|e| e.to_string())?;
        if let Some(dir) = args.svg.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(&args.svg, &text).map_err(|e| format!("{}: {e}", args.svg.display()))?;
        println!("timeline: {}", args.svg.display());
    }
    println!("report: {}", path.display());
    Ok(())
}

async fn operator_client(h: &Harness) -> Result<Arc<EtcdClient>, String> {
    let client = h.cp.client();
    let tls = operator_tls(&client, OPERATOR_NS).await?;
    let endpoints = published_endpoints(&client, STATIC_NS).await;
    EtcdClient::with_pem(endpoints, Some(&tls), Duration::from_secs(10))
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// The member name of the current etcd leader, from the members' own status.
async fn leader(h: &Harness) -> String {
    let Ok(client) = operator_client(h).await else {
        return "?".into();
    };
    let status = h.status().await;
    for e in client.endpoints() {
        if let Ok(s) = client.status_of(e).await
            && s.leader != 0
        {
            let id = format!("{:x}", s.leader);
            return status
                .members
                .iter()
                .find(|m| m.id == id)
                .map_or(id, |m| m.name.clone());
        }
    }
    "?".into()
}

/// A control-plane error as the bench reports it.
fn err(e: crate::controlplane::ControlPlaneError) -> String {
    e.to_string()
}

async fn drive(
    args: &BenchArgs,
    h: &mut Harness,
    rep: &mut BenchReport,
    started: Instant,
) -> Result<(), String> {
    // 1. Bootstrap 1 → 3 under the load.
    bootstrap(h, rep).await?;
    // 2. A forced revision rollout across the 3 nodes.
    rollout(h, rep).await?;
    // 3. Member replacement: n2 loses its data dir.
    replace_member(h, rep).await?;
    // 4. The operator again, behind the counting proxy; an idle window.
    let op = idle_window(args, h, rep).await?;
    // 4b. Two nodes at once: 3 → 5 voters, then back to 3.
    if args.growth {
        grow_three_to_five(h, &op, rep).await?;
    }
    // 5. One scale-up per size, the floor just before it.
    scale_ups(args, h, &op, rep, started).await?;
    // The operator's log, for reading the timeline (the control plane's directory goes away).
    let _ = std::fs::copy(&op.log, args.out.join("bench-operator.log"));
    drop(op);
    Ok(())
}

/// Bootstrap 1 → 3 under the load.
async fn bootstrap(h: &mut Harness, rep: &mut BenchReport) -> Result<(), String> {
    let mark = h.steps.len();
    let (load, t) = availability::start_load(h).await?;
    h.wait_settled(3, SETTLE).await.map_err(err)?;
    let a = availability::finish_load(h, "bootstrap 1 → 3", load, t, mark).await?;
    println!(
        "bench: bootstrap: longest write gap {} ms",
        a.longest_write_gap_ms
    );
    rep.availability.push(a);
    rep.operator_rss_after_bootstrap_kib =
        h.cp.operator_pid()
            .and_then(procstat::sample)
            .map(|s| s.rss_kib);
    Ok(())
}

/// A forced revision rollout across the 3 nodes, under the load.
async fn rollout(h: &mut Harness, rep: &mut BenchReport) -> Result<(), String> {
    let mark = h.steps.len();
    let (load, t) = availability::start_load(h).await?;
    let before = h.status().await.latest_available_revision;
    let since = steps::now_ms();
    let lead = leader(h).await;
    h.step(format!("bench: etcd leader before the rollout: {lead}"));
    h.patch_spec(serde_json::json!({"forceRedeploymentReason": "bench rollout"}))
        .await
        .map_err(err)?;
    h.wait_settled_after(3, before, SETTLE).await.map_err(err)?;
    let lead = leader(h).await;
    h.step(format!("bench: etcd leader after the rollout: {lead}"));
    rep.rollout_steps = steps::rollout_steps(&h.cp.operator_log(), since, |n| {
        h.cp.node(n).ok().map(|x| x.root.clone())
    });
    let a = availability::finish_load(h, "revision rollout (3 nodes)", load, t, mark).await?;
    println!(
        "bench: rollout: longest write gap {} ms",
        a.longest_write_gap_ms
    );
    rep.availability.push(a);
    Ok(())
}

/// Member replacement under the load: n2 loses its data dir.
async fn replace_member(h: &mut Harness, rep: &mut BenchReport) -> Result<(), String> {
    let mark = h.steps.len();
    let (load, t) = availability::start_load(h).await?;
    let old = member_of(&h.status().await, "n2").ok_or("n2 has no member")?;
    h.cp.stop_node("n2").await.map_err(err)?;
    let data = h.cp.node("n2").map_err(err)?.data_dir();
    std::fs::remove_dir_all(&data).map_err(|e| format!("wiping {}: {e}", data.display()))?;
    h.step("bench: n2 stopped, its data dir wiped");
    h.cp.restart_node("n2").await.map_err(err)?;
    h.step("bench: n2 restarted with no data");
    h.wait_status("n2's old member removed", SETTLE, |s| {
        !member_ids(s).contains(&old)
    })
    .await
    .map_err(err)?;
    h.wait_settled(3, SETTLE).await.map_err(err)?;
    let a =
        availability::finish_load(h, "member replacement (data loss on n2)", load, t, mark).await?;
    println!(
        "bench: member replacement: longest write gap {} ms",
        a.longest_write_gap_ms
    );
    rep.availability.push(a);
    Ok(())
}

/// The operator again, behind the counting proxy; an idle window (and one at scale).
async fn idle_window(
    args: &BenchArgs,
    h: &mut Harness,
    rep: &mut BenchReport,
) -> Result<CountedOperator, String> {
    h.cp.stop_operator(Duration::from_secs(5)).map_err(err)?;
    let op = CountedOperator::start(&h.cp).await?;
    h.step("bench: operator restarted behind the counting proxy");
    op.wait_leader(Duration::from_secs(60)).await?;
    h.wait_settled(3, SETTLE).await.map_err(err)?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "bench: idle window of {:.0} s ...",
        args.idle_window.as_secs_f64()
    );
    let idle = idle::measure(&h.cp, &op, args.idle_window).await?;
    println!(
        "bench: idle: RSS {} KiB (anon {}, file {}), CPU {:.2}%, API {:.1}/min, etcd {:.1}/min",
        idle.rss_kib,
        idle.rss_anon_kib,
        idle.rss_file_kib,
        idle.cpu_percent,
        idle.api_requests_per_min,
        idle.etcd_requests_per_min
    );
    if args.workers > 0 {
        println!(
            "bench: idle window with {} heartbeating worker Nodes ...",
            args.workers
        );
        let at_scale =
            scale::idle_at_scale(h, &op, &idle, args.workers, HEARTBEAT, args.idle_window).await?;
        println!(
            "bench: at scale: RSS {} KiB ({:.2}x), CPU {:.2}% ({:.2}x), passes {:.1}/min, {:.0} Node status writes/s",
            at_scale.idle.rss_kib,
            at_scale.rss_ratio,
            at_scale.idle.cpu_percent,
            at_scale.cpu_ratio,
            at_scale.idle.reconcile_passes_per_min,
            at_scale.heartbeat.status_writes_per_s
        );
        rep.idle_at_scale = Some(at_scale);
    }
    rep.idle = Some(idle);
    Ok(op)
}

/// Two nodes at once: 3 → 5 voters, then back to 3.
async fn grow_three_to_five(
    h: &mut Harness,
    op: &CountedOperator,
    rep: &mut BenchReport,
) -> Result<(), String> {
    let floor_ms = scale::empty_floor_ms().await?;
    let names = ["g4".to_owned(), "g5".to_owned()];
    println!("bench: growing 3 → 5 (floor {floor_ms:.0} ms per member) ...");
    let g = scale::grow(h, 3, &names, floor_ms, Some(op), SETTLE).await?;
    println!(
        "bench: 3 → 5: {:.2} s, ratio {:.0}x",
        g.operator.phases.done_s, g.ratio
    );
    rep.growth.push(g);
    for name in &names {
        h.cp.delete_node(name).await.map_err(err)?;
    }
    h.wait_settled(3, SETTLE).await.map_err(err)?;
    Ok(())
}

/// 1 → 5 on a fresh control plane (no load, empty database), if the budget allows.
async fn grow_from_one(
    args: &BenchArgs,
    rep: &mut BenchReport,
    started: Instant,
) -> Result<(), String> {
    let left = args.budget.as_secs_f64() - started.elapsed().as_secs_f64();
    if left < 120.0 {
        let why = format!("1 → 5: skipped: {:.0} s of the budget left", left.max(0.0));
        println!("bench: {why}");
        rep.skipped.push(why);
        return Ok(());
    }
    let floor_ms = match rep.growth.first() {
        Some(g) => g.floor_ms_per_member,
        None => scale::empty_floor_ms().await?,
    };
    println!("bench: growing 1 → 5 on a fresh control plane ...");
    let mut h = Harness::bootstrapped(1)
        .await
        .map_err(|e| format!("control plane: {e}"))?;
    let result = async {
        // A lone voter is never restarted (the quorum gate: that would stop etcd), so n1 keeps
        // its bootstrap manifest until members join; the start is its member serving.
        h.wait_status("n1's member a healthy voter", SETTLE, |s| {
            s.members.len() == 1 && s.members.iter().all(|m| m.role == "Voter" && m.healthy)
        })
        .await
        .map_err(|e| e.to_string())?;
        let names: Vec<String> = (2..=5).map(|i| format!("n{i}")).collect();
        scale::grow(&mut h, 1, &names, floor_ms, None, SETTLE).await
    }
    .await;
    h.shutdown().await;
    let g = result?;
    println!(
        "bench: 1 → 5: {:.2} s, ratio {:.0}x",
        g.operator.phases.done_s, g.ratio
    );
    rep.growth.push(g);
    Ok(())
}
