//! The gpuhub simulator: runs the real scheduler (`gpuhub-sched`) against public traces.
//!
//! - `fgd`: the FGD protocol on Alibaba GPU-sharing traces (allocation ratio against arrived demand).
//! - `replay`: a time-stamped job trace (Philly) with arrivals and departures, through the full
//!   scheduling pass (queues, fair share, backfill, gang, preemption).
//! - `throughput`: placements per second and the p99 time of one decision on a large cluster.
//!
//! [`run`] writes its report to stdout; `--json` prints one object per policy.
//!
//! ```text
//! T=../shared/traces
//! gpuhub sim fgd --nodes $T/alibaba-gpu-v2023/openb_node_list_gpu_node.csv \
//!     --pods $T/alibaba-gpu-v2023/openb_pod_list_default.csv [--seeds 42-51] [--policy all] [--plot fgd.svg]
//! gpuhub sim replay --trace $T/philly/philly.csv [--nodes 310 --gpus-per-node 8] [--rate 1] [--sample 1]
//! gpuhub sim throughput --nodes 5000 --gpus-per-node 8 --pending 10000
//! ```
//!
//! Until the `gpuhub` binary wires it in: `cargo run --release -p gpuhub-sim --example sim -- fgd …`.

mod csv;
mod error;
pub mod fgd;
mod plot;
pub mod replay;
mod starve;
pub mod throughput;
pub mod trace;

pub use error::SimError;
pub use starve::{Stretch, WhyStarved};

use gpuhub_sched::Policy;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

/// `gpuhub sim …` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SimCommand {
    /// The FGD protocol on an Alibaba GPU-sharing node list and pod list.
    Fgd(FgdArgs),
    /// Replay a time-stamped job trace (Philly format) with arrivals and departures.
    Replay(replay::ReplayArgs),
    /// Placements per second and p99 decision time on a large synthetic cluster.
    Throughput(throughput::ThroughputArgs),
}

/// Arguments of `sim fgd`.
#[derive(Debug, Clone, clap::Args)]
pub struct FgdArgs {
    /// Node list CSV (`sn,cpu_milli,memory_mib,gpu,model`).
    #[arg(long)]
    pub nodes: PathBuf,
    /// Pod list CSV (`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec…]`).
    #[arg(long)]
    pub pods: PathBuf,
    /// Workload size as a multiple of the cluster's milli-GPU.
    #[arg(long, default_value_t = 1.3)]
    pub tune: f64,
    /// Seeds: `42-51`, `42` or `1,2,3`.
    #[arg(long, default_value = "42-51")]
    pub seeds: String,
    /// A policy name, a comma-separated list, or `all`.
    #[arg(long, default_value = "all")]
    pub policy: String,
    /// Print a JSON array, one object per policy.
    #[arg(long)]
    pub json: bool,
    /// Draw allocation ratio against arrived demand to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Runs a simulator command, writing the report to stdout.
pub fn run(cmd: SimCommand) -> Result<(), SimError> {
    let mut out = std::io::stdout().lock();
    let text = match cmd {
        SimCommand::Fgd(a) => fgd_report(&a)?,
        SimCommand::Replay(a) => replay::report(&a)?,
        SimCommand::Throughput(a) => throughput::report(&a)?,
    };
    out.write_all(text.as_bytes()).map_err(|e| SimError::Io { path: "<stdout>".into(), source: e })
}

/// Parses `--policy`: a name, a comma-separated list, or `all`.
pub fn parse_policies(s: &str) -> Result<Vec<Policy>, SimError> {
    if s.trim() == "all" {
        return Ok(Policy::ALL.to_vec());
    }
    s.split(',')
        .map(|p| p.parse::<Policy>().map_err(|e| SimError::Arg { arg: "--policy".into(), reason: e.to_string() }))
        .collect()
}

/// Parses `--seeds`: `42-51`, `42` or `1,2,3`.
pub fn parse_seeds(s: &str) -> Result<Vec<u64>, SimError> {
    let bad = |why: &str| SimError::Arg { arg: "--seeds".into(), reason: format!("{s:?}: {why}") };
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if let Some((a, b)) = part.split_once('-') {
            let a: u64 = a.trim().parse().map_err(|_| bad("expected a number before '-'"))?;
            let b: u64 = b.trim().parse().map_err(|_| bad("expected a number after '-'"))?;
            if b < a || b - a > 10_000 {
                return Err(bad("expected a range like 42-51"));
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().map_err(|_| bad("expected seeds like 42-51, 42 or 1,2,3"))?);
        }
    }
    Ok(out)
}

/// One policy's result of `sim fgd`, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct FgdReport {
    /// Policy name.
    pub policy: String,
    /// Whether the server uses this policy out of the box.
    pub default: bool,
    /// The pod list's workload name (`default`, `multigpu30`…).
    pub workload: String,
    /// The seeds run.
    pub seeds: Vec<u64>,
    /// Mean allocation ratio (%) at 100% arrived demand.
    pub alloc_at_100: f64,
    /// `[arrived %, mean allocation %]`.
    pub curve: Vec<[f64; 2]>,
    /// Mean seconds per seed.
    pub seconds: f64,
    /// Mean number of tasks that failed.
    pub failed: f64,
}

/// The workload name of a pod list file (`openb_pod_list_default.csv` → `default`).
fn workload_name(p: &std::path::Path) -> String {
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("pods");
    stem.strip_prefix("openb_pod_list_").unwrap_or(stem).to_owned()
}

/// Runs `sim fgd` and renders the report.
pub fn fgd_report(a: &FgdArgs) -> Result<String, SimError> {
    if !(a.tune.is_finite() && a.tune > 0.0 && a.tune <= 100.0) {
        return Err(SimError::Arg { arg: "--tune".into(), reason: format!("{} (expected a factor like 1.3)", a.tune) });
    }
    let policies = parse_policies(&a.policy)?;
    let seeds = parse_seeds(&a.seeds)?;
    let cluster = trace::read_nodes(&a.nodes)?;
    let tasks = trace::read_pods(&a.pods)?;
    let workload = workload_name(&a.pods);
    let mut reports = Vec::new();
    for &p in &policies {
        let runs: Vec<fgd::SeedRun> = seeds.iter().map(|&s| fgd::run_seed(&cluster, &tasks, a.tune, s, p)).collect();
        let n = runs.len() as f64;
        let points = runs.iter().map(|r| r.curve.len()).min().unwrap_or(0);
        let curve =
            (0..points).map(|i| [i as f64, runs.iter().map(|r| r.curve[i]).sum::<f64>() / n]).collect::<Vec<_>>();
        reports.push(FgdReport {
            policy: p.to_string(),
            default: p == Policy::default(),
            workload: workload.clone(),
            seeds: seeds.clone(),
            alloc_at_100: runs.iter().map(|r| r.alloc_at_100).sum::<f64>() / n,
            curve,
            seconds: runs.iter().map(|r| r.seconds).sum::<f64>() / n,
            failed: runs.iter().map(|r| r.failed as f64).sum::<f64>() / n,
        });
    }
    if let Some(path) = &a.plot {
        let lines: Vec<(String, Vec<[f64; 2]>)> = reports.iter().map(|r| (r.policy.clone(), r.curve.clone())).collect();
        plot::draw(path, &format!("FGD protocol, workload {workload}"), &lines)?;
    }
    if a.json {
        return Ok(serde_json::to_string_pretty(&reports)? + "\n");
    }
    let mut s = format!(
        "FGD protocol: workload {workload}, {} nodes, tune {}, seeds {}\n\n",
        cluster.nodes.len(),
        a.tune,
        a.seeds
    );
    s += &format!("{:<10} {:>13} {:>10} {:>10}\n", "policy", "alloc@100 %", "failed", "s/seed");
    for r in &reports {
        let mark = if r.default { " (default)" } else { "" };
        s += &format!("{:<10} {:>13.2} {:>10.1} {:>10.3}{mark}\n", r.policy, r.alloc_at_100, r.failed, r.seconds);
    }
    s += "\nallocation ratio % by arrived demand %\narrived";
    for r in &reports {
        s += &format!(" {:>9}", r.policy);
    }
    s.push('\n');
    let points = reports.iter().map(|r| r.curve.len()).min().unwrap_or(0);
    for i in (0..points).filter(|i| i % 5 == 0 || *i == points - 1) {
        s += &format!("{i:>7}");
        for r in &reports {
            s += &format!(" {:>9.2}", r.curve[i][1]);
        }
        s.push('\n');
    }
    Ok(s)
}
