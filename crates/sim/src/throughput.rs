//! Throughput: how fast the placement policies decide on a large synthetic cluster with a deep queue.
//!
//! The cluster has `--nodes` nodes of `--gpus-per-node` GPUs (16 CPUs and 128 GiB per GPU). The queue
//! holds `--pending` workloads drawn (seeded) from a mix like the Alibaba trace's: whole GPUs (1, 2, 4,
//! 8), fractions, and CPU-only work. Two measurements per policy:
//! - decisions: the queue is placed one workload at a time on the cluster (as the simulator does); each
//!   decision is timed, giving placements per second and the p99 time of one decision;
//! - one pass: the whole queue through `schedule()` (ordering, quotas, backfill checks, explanations), as
//!   the server's tick would run it.

use crate::SimError;
use gpuhub_sched::{Cluster, Config, Gpu, GpuRequest, Node, Pending, Placer, Policy, Request, Shape, State, schedule};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::Instant;

/// Arguments of `sim throughput`.
#[derive(Debug, Clone, clap::Args)]
pub struct ThroughputArgs {
    /// Nodes.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Pending workloads.
    #[arg(long, default_value_t = 10_000)]
    pub pending: usize,
    /// A policy name, a comma-separated list, or `all`.
    #[arg(long, default_value = "all")]
    pub policy: String,
    /// Seed of the workload mix.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Print a JSON array, one object per policy.
    #[arg(long)]
    pub json: bool,
}

/// One policy's figures, as `--json` prints them.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputReport {
    /// Policy name.
    pub policy: String,
    /// Whether the server uses it out of the box.
    pub default: bool,
    /// Placements per second, one decision at a time.
    pub placements_per_sec: f64,
    /// 99th percentile of one decision, milliseconds.
    pub p99_decision_ms: f64,
    /// Mean of one decision, milliseconds.
    pub mean_decision_ms: f64,
    /// Workloads placed (of those pending).
    pub placed: usize,
    /// Seconds of one `schedule()` pass over the whole queue.
    pub schedule_pass_s: f64,
    /// Workloads that pass started.
    pub pass_starts: usize,
}

/// The synthetic cluster.
pub fn cluster(nodes: usize, g: u32) -> Cluster {
    Cluster {
        nodes: (0..nodes)
            .map(|i| Node {
                name: format!("node-{i:05}"),
                cpu_milli: u64::from(g.max(1)) * 16_000,
                memory: u64::from(g.max(1)) * (128 << 30),
                labels: Default::default(),
                gpus: (0..g)
                    .map(|k| Gpu {
                        uuid: format!("node-{i:05}/{k}"),
                        index: k,
                        model: "H100".into(),
                        memory: 80 << 30,
                        single_user: false,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// `n` workload requests drawn from a mix like the Alibaba trace's.
pub fn mix(n: usize, seed: u64) -> Vec<Request> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let r: f64 = rng.gen_range(0.0..1.0);
            let gpu = if r < 0.12 {
                GpuRequest::None
            } else if r < 0.55 {
                GpuRequest::Whole { count: 1 }
            } else if r < 0.60 {
                GpuRequest::Whole { count: 2 }
            } else if r < 0.63 {
                GpuRequest::Whole { count: 4 }
            } else if r < 0.66 {
                GpuRequest::Whole { count: 8 }
            } else {
                let milli = [100, 250, 300, 460, 500, 650, 810][rng.gen_range(0..7)];
                GpuRequest::Fraction { milli, memory: None }
            };
            let cores = [1u64, 2, 4, 8, 12][rng.gen_range(0..5)];
            let per = u64::from(gpu.shape().1.max(1));
            Request { cpu_milli: cores * per * 1000, memory: cores * per * (4 << 30), gpu, ..Default::default() }
        })
        .collect()
}

/// Runs `sim throughput` and renders the report.
pub fn report(a: &ThroughputArgs) -> Result<String, SimError> {
    if a.nodes == 0 {
        return Err(SimError::Arg { arg: "--nodes".into(), reason: "must be at least 1".into() });
    }
    let policies = crate::parse_policies(&a.policy)?;
    let c = cluster(a.nodes, a.gpus_per_node);
    let requests = mix(a.pending, a.seed);
    let mut reports = Vec::new();
    for &p in &policies {
        reports.push(measure(&c, &requests, p, a.seed));
    }
    if a.json {
        return Ok(serde_json::to_string_pretty(&reports)? + "\n");
    }
    let mut s = format!(
        "throughput: {} nodes x {} GPUs, {} pending\n\n{:<10} {:>14} {:>14} {:>15} {:>8} {:>14} {:>12}\n",
        a.nodes,
        a.gpus_per_node,
        a.pending,
        "policy",
        "placements/s",
        "p99 decision",
        "mean decision",
        "placed",
        "schedule() s",
        "pass starts"
    );
    for r in &reports {
        let mark = if r.default { " (default)" } else { "" };
        s += &format!(
            "{:<10} {:>14.0} {:>11.3} ms {:>12.3} ms {:>8} {:>14.3} {:>12}{mark}\n",
            r.policy,
            r.placements_per_sec,
            r.p99_decision_ms,
            r.mean_decision_ms,
            r.placed,
            r.schedule_pass_s,
            r.pass_starts
        );
    }
    Ok(s)
}

/// Measures one policy.
pub fn measure(c: &Cluster, requests: &[gpuhub_sched::Request], policy: Policy, seed: u64) -> ThroughputReport {
    let mut st = State::new(c);
    let shapes: Vec<Shape> = requests.iter().map(|r| st.shape(r)).collect();
    let mut placer = Placer::new(policy, seed);
    let mut times = Vec::with_capacity(shapes.len());
    let mut placed = 0;
    let all = Instant::now();
    for s in &shapes {
        let t = Instant::now();
        placer.observe(s);
        if let Some(ch) = placer.choose(&st, s) {
            st.apply(&ch, s);
            placed += 1;
        }
        times.push(t.elapsed().as_secs_f64());
    }
    let total = all.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    let p99 = times.get(((times.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
    let pending: Vec<Pending> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| Pending {
            id: format!("w{i}"),
            queue: String::new(),
            user: format!("u{}", i % 50),
            priority: 0,
            submit_ms: i as i64,
            request: r.clone(),
            members: 1,
            runtime_limit_ms: Some(3_600_000),
        })
        .collect();
    let cfg = Config { policy, seed, ..Config::default() };
    let t = Instant::now();
    let d = schedule(c, &[], &pending, &cfg, 0);
    let pass = t.elapsed().as_secs_f64();
    ThroughputReport {
        policy: policy.to_string(),
        default: policy == Policy::default(),
        placements_per_sec: placed as f64 / total.max(1e-9),
        p99_decision_ms: p99 * 1000.0,
        mean_decision_ms: total / shapes.len().max(1) as f64 * 1000.0,
        placed,
        schedule_pass_s: pass,
        pass_starts: d.starts.len(),
    }
}
