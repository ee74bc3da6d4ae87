//! Replays a time-stamped job trace (Philly format) through the real scheduling pass: jobs arrive at their
//! submit time, run for their duration once started, and leave; the scheduler runs every tick.
//!
//! Each job asks for whole GPUs (with 4 CPUs and 32 GiB per GPU); a job larger than a node is a gang of
//! equal members. The run-time limit a user gives is the job's real duration. Preempted jobs go back to
//! the queue with their remaining work (checkpoint and resume). Teams are the trace's `cluster` column.
//!
//! Policies: `fifo` (strict FIFO, one queue, no backfill, no preemption), `fifo-backfill` (FIFO order with
//! backfill) and every placement policy name, which runs the full scheduler: team queues with guarantees
//! proportional to each team's GPU-time in the trace, fair share on decayed usage, backfill, preemption
//! to reclaim guarantees, and that placement policy.

use crate::SimError;
use crate::starve::{node_of, placeable_without_guaranteed};
use crate::trace::{Job, read_philly};
use gpuhub_sched::{
    Backfill, Backlog, Cluster, Config, Gpu, GpuRequest, Node, Pending, Policy, Preemption, QueueSpec, Quota, Request,
    Running, decide_backlog,
};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// Arguments of `sim replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Philly-format trace CSV (`timestamp,duration,num_gpus,gpu_time,cluster`).
    #[arg(long)]
    pub trace: PathBuf,
    /// Nodes in the simulated cluster.
    #[arg(long, default_value_t = 310)]
    pub nodes: usize,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// `fifo`, `fifo-backfill`, a placement policy (full scheduler), a comma-separated list, or `all`.
    #[arg(long, default_value = "all")]
    pub policy: String,
    /// Arrival-rate multiplier: submit times are compressed by this factor (2 = twice the load).
    #[arg(long, default_value_t = 1.0)]
    pub rate: f64,
    /// Keep this fraction of the jobs (seeded sample), to pair with a smaller cluster.
    #[arg(long, default_value_t = 1.0)]
    pub sample: f64,
    /// Scheduler tick in seconds.
    #[arg(long, default_value_t = 10)]
    pub tick_s: i64,
    /// Seed of the sample.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Seed of the `random` placement policy's draws.
    #[arg(long, default_value_t = 0)]
    pub placement_seed: u64,
    /// Print a JSON array, one object per policy.
    #[arg(long)]
    pub json: bool,
    /// Disciplines replayed at once, on threads of their own (default: the CPUs available). Each
    /// replay is single-threaded and deterministic; the report keeps the order of `--policy`.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Draw GPU allocation over time to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Account for this team's starvation beyond grace outside the brackets (full scheduler): each
    /// stretch, by what the scheduler said of its smallest waiting job then (a diagnostic: it runs passes
    /// with explanations while the team starves, which slows the replay down).
    #[arg(long)]
    pub why_starved: Option<String>,
}

/// A replay discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    /// Strict FIFO.
    Fifo,
    /// FIFO with backfill.
    FifoBackfill,
    /// The full scheduler with this placement policy.
    Full(Policy),
}

impl Discipline {
    /// The name on the command line and in reports.
    pub fn name(self) -> String {
        match self {
            Discipline::Fifo => "fifo".into(),
            Discipline::FifoBackfill => "fifo-backfill".into(),
            Discipline::Full(p) => p.to_string(),
        }
    }

    fn parse_list(s: &str) -> Result<Vec<Discipline>, SimError> {
        if s.trim() == "all" {
            let mut v = vec![Discipline::Fifo, Discipline::FifoBackfill];
            v.extend(Policy::ALL.iter().map(|&p| Discipline::Full(p)));
            return Ok(v);
        }
        s.split(',')
            .map(|x| match x.trim() {
                "fifo" => Ok(Discipline::Fifo),
                "fifo-backfill" | "backfill" => Ok(Discipline::FifoBackfill),
                other => other.parse::<Policy>().map(Discipline::Full).map_err(|e| SimError::Arg {
                    arg: "--policy".into(),
                    reason: format!("{e}, fifo or fifo-backfill"),
                }),
            })
            .collect()
    }
}

/// One team's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct TeamReport {
    /// Team (the trace's `cluster`).
    pub team: String,
    /// Jobs.
    pub jobs: usize,
    /// Guaranteed GPUs (full scheduler; 0 for FIFO runs, where the figure is still reported for comparison).
    pub guarantee_gpus: f64,
    /// Time-averaged GPUs held.
    pub mean_gpus: f64,
    /// Mean queueing delay of its jobs, seconds.
    pub mean_queue_s: f64,
    /// Hours in which it had a waiting job that fit within its guarantee while it held less than that.
    pub starved_hours: f64,
    /// The same, less the first grace period plus one tick of each starved episode: the time the design
    /// deliberately grants the borrowers it preempts (they run out their grace, then the next pass
    /// starts the reclaiming job). What is left is starvation the scheduler could have avoided.
    pub starved_beyond_grace_hours: f64,
    /// Of the starved hours beyond grace, those in which its smallest waiting job could not have been
    /// placed even with every borrowing team's work stopped: every node it could use held work of teams
    /// within their guarantees (which preemption never takes), so no preemption could restore it.
    pub blocked_by_guaranteed_hours: f64,
}

/// The outcome of the jobs of one size class.
#[derive(Debug, Clone, Serialize)]
pub struct SizeReport {
    /// GPUs asked for: `1`, `2-4`, `5-8`, `9+`.
    pub gpus: String,
    /// Jobs.
    pub jobs: usize,
    /// Mean job completion time, seconds.
    pub mean_jct_s: f64,
    /// Mean queueing delay, seconds.
    pub mean_queue_s: f64,
}

/// One discipline's outcome, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// Policy name.
    pub policy: String,
    /// Whether this is what the server does out of the box.
    pub default: bool,
    /// Jobs replayed.
    pub jobs: usize,
    /// Mean job completion time (finish − submit), seconds.
    pub mean_jct_s: f64,
    /// 95th percentile of job completion time, seconds.
    pub p95_jct_s: f64,
    /// Mean queueing delay (first start − submit), seconds.
    pub mean_queue_s: f64,
    /// Last finish − first submit, seconds.
    pub makespan_s: f64,
    /// Time-averaged GPU allocation, percent.
    pub mean_alloc_pct: f64,
    /// Time-averaged share of the free GPUs that lie on nodes partly in use (none of them can take a
    /// whole-node member), percent of free GPUs.
    pub partial_free_pct: f64,
    /// Preemptions.
    pub preemptions: usize,
    /// Jobs that can never fit the cluster (left out).
    pub unschedulable: usize,
    /// Wall-clock seconds of the replay.
    pub seconds: f64,
    /// Per-team figures.
    pub teams: Vec<TeamReport>,
    /// Figures by the GPUs a job asks for.
    pub sizes: Vec<SizeReport>,
    /// `[days since first submit, allocation %]`, averaged per bucket.
    pub alloc_curve: Vec<[f64; 2]>,
    /// With `--why-starved TEAM` (full scheduler): that team's starvation beyond grace outside the
    /// brackets, by cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_starved: Option<crate::starve::WhyStarved>,
}

/// A job during the replay.
#[derive(Debug, Clone)]
struct Live {
    job: usize,
    submit_ms: i64,
    /// Remaining run time, ms.
    remaining_ms: i64,
    first_start_ms: Option<i64>,
    members: u32,
    per_member: u32,
}

/// Members and GPUs per member for `gpus` on nodes of `g` GPUs: the fewest equal members that fit.
fn gang(gpus: u32, g: u32) -> (u32, u32) {
    let mut m = gpus.div_ceil(g.max(1)).max(1);
    while gpus % m != 0 {
        m += 1;
    }
    (m, gpus / m)
}

fn cluster(nodes: usize, g: u32) -> Cluster {
    Cluster {
        nodes: (0..nodes)
            .map(|i| Node {
                name: format!("n{i:04}"),
                cpu_milli: u64::from(g) * 8000,
                memory: u64::from(g) * (64 << 30),
                labels: Default::default(),
                gpus: (0..g)
                    .map(|k| Gpu {
                        uuid: format!("n{i:04}-{k}"),
                        index: k,
                        model: "P100".into(),
                        memory: 16 << 30,
                        single_user: false,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Runs `sim replay` and renders the report.
pub fn report(a: &ReplayArgs) -> Result<String, SimError> {
    if a.nodes == 0 || a.gpus_per_node == 0 {
        return Err(SimError::Arg { arg: "--nodes/--gpus-per-node".into(), reason: "must be at least 1".into() });
    }
    if !(a.rate.is_finite() && a.rate > 0.0) {
        return Err(SimError::Arg { arg: "--rate".into(), reason: format!("{} (expected a positive factor)", a.rate) });
    }
    if !(a.sample > 0.0 && a.sample <= 1.0) {
        return Err(SimError::Arg { arg: "--sample".into(), reason: format!("{} (expected 0 < f <= 1)", a.sample) });
    }
    if a.tick_s <= 0 {
        return Err(SimError::Arg { arg: "--tick-s".into(), reason: "must be at least 1".into() });
    }
    let disciplines = Discipline::parse_list(&a.policy)?;
    let mut jobs = read_philly(&a.trace)?;
    if a.sample < 1.0 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
        jobs.retain(|_| rng.gen_bool(a.sample));
    }
    let t0 = jobs.first().map_or(0, |j| j.submit_s);
    for j in &mut jobs {
        j.submit_s = t0 + ((j.submit_s - t0) as f64 / a.rate).round() as i64;
    }
    let reports = replay_each(&jobs, a, &disciplines);
    if let Some(path) = &a.plot {
        let lines: Vec<(String, Vec<[f64; 2]>)> =
            reports.iter().map(|r| (r.policy.clone(), r.alloc_curve.clone())).collect();
        crate::plot::draw_xy(path, "Philly replay: GPU allocation", "days since the first submit", &lines)?;
    }
    if a.json {
        return Ok(serde_json::to_string_pretty(&reports)? + "\n");
    }
    Ok(render(a, jobs.len(), &reports))
}

fn render(a: &ReplayArgs, jobs: usize, reports: &[ReplayReport]) -> String {
    let gpus = a.nodes as u64 * u64::from(a.gpus_per_node);
    let mut s = format!(
        "replay: {jobs} jobs from {}, {} nodes x {} GPUs = {gpus} GPUs, arrival rate x{}, tick {} s\n\n",
        a.trace.display(),
        a.nodes,
        a.gpus_per_node,
        a.rate,
        a.tick_s
    );
    s += &format!(
        "{:<14} {:>11} {:>11} {:>12} {:>11} {:>8} {:>8} {:>8} {:>8}\n",
        "policy", "mean JCT h", "p95 JCT h", "mean queue h", "makespan d", "alloc %", "frag %", "preempt", "s"
    );
    for r in reports {
        let mark = if r.default { " (default)" } else { "" };
        s += &format!(
            "{:<14} {:>11.2} {:>11.2} {:>12.3} {:>11.2} {:>8.1} {:>8.1} {:>8} {:>8.1}{mark}\n",
            r.policy,
            r.mean_jct_s / 3600.0,
            r.p95_jct_s / 3600.0,
            r.mean_queue_s / 3600.0,
            r.makespan_s / 86400.0,
            r.mean_alloc_pct,
            r.partial_free_pct,
            r.preemptions,
            r.seconds
        );
    }
    if let Some(u) = reports.first().map(|r| r.unschedulable).filter(|&u| u > 0) {
        s += &format!("\n{u} job(s) can never fit this cluster and were left out\n");
    }
    s += "\nstarved h beyond grace: all teams, the worst team (of which no preemption could help)\n";
    for r in reports {
        let all: f64 = r.teams.iter().map(|t| t.starved_beyond_grace_hours).sum();
        let worst = r.teams.iter().max_by(|x, y| x.starved_beyond_grace_hours.total_cmp(&y.starved_beyond_grace_hours));
        s += &format!("{:<14} {:>9.2}", r.policy, all);
        if let Some(t) = worst {
            s += &format!("   {} {:.2} ({:.2})", t.team, t.starved_beyond_grace_hours, t.blocked_by_guaranteed_hours);
        }
        s.push('\n');
    }
    s += "\nmean JCT h (mean queue h) by GPUs asked for\npolicy        ";
    for (name, _, _) in SIZES {
        s += &format!(" {:>18}", format!("{name} GPU"));
    }
    s.push('\n');
    for r in reports {
        s += &format!("{:<14}", r.policy);
        for z in &r.sizes {
            s += &format!(" {:>18}", format!("{:.2} ({:.2})", z.mean_jct_s / 3600.0, z.mean_queue_s / 3600.0));
        }
        s.push('\n');
    }
    for r in reports {
        s += &format!(
            "\nper team, {}: guarantee GPUs, mean GPUs held, mean queue h, starved h, starved h beyond grace, \
             of which no preemption could help\n",
            r.policy
        );
        for t in &r.teams {
            s += &format!(
                "  {:<8} {:>6} jobs {:>8.1} {:>8.1} {:>9.3} {:>9.2} {:>9.2} {:>9.2}\n",
                t.team,
                t.jobs,
                t.guarantee_gpus,
                t.mean_gpus,
                t.mean_queue_s / 3600.0,
                t.starved_hours,
                t.starved_beyond_grace_hours,
                t.blocked_by_guaranteed_hours
            );
        }
    }
    for (r, w) in reports.iter().filter_map(|r| r.why_starved.as_ref().map(|w| (r, w))) {
        s += &w.render(&r.policy);
    }
    s
}

/// Replays each discipline, up to `--threads` at once, and returns the reports in the order given.
fn replay_each(jobs: &[Job], a: &ReplayArgs, disciplines: &[Discipline]) -> Vec<ReplayReport> {
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
        .clamp(1, disciplines.len().max(1));
    // the longest first (the full scheduler, then FIFO with backfill, then FIFO), so that the threads
    // end close together; the reports keep the order given
    let mut order: Vec<usize> = (0..disciplines.len()).collect();
    order.sort_by_key(|&i| match disciplines[i] {
        Discipline::Full(_) => 0,
        Discipline::FifoBackfill => 1,
        Discipline::Fifo => 2,
    });
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: std::sync::Mutex<Vec<Option<ReplayReport>>> =
        std::sync::Mutex::new(disciplines.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = order.get(k) else { break };
                    let d = disciplines[i];
                    let report = replay(jobs, a, d);
                    done.lock().expect("no replay panics while holding the lock")[i] = Some(report);
                }
            });
        }
    });
    done.into_inner().expect("replays ended").into_iter().flatten().collect()
}

/// Replays `jobs` under one discipline.
pub fn replay(jobs: &[Job], a: &ReplayArgs, d: Discipline) -> ReplayReport {
    let started = std::time::Instant::now();
    let g = a.gpus_per_node;
    let c = cluster(a.nodes, g);
    let total_gpus = (a.nodes as u64 * u64::from(g)) as f64;
    // guarantees proportional to each team's GPU-time
    let mut gpu_time: BTreeMap<&str, f64> = BTreeMap::new();
    for j in jobs {
        *gpu_time.entry(j.team.as_str()).or_default() += j.duration_s * f64::from(j.gpus);
    }
    let all_time: f64 = gpu_time.values().sum::<f64>().max(1.0);
    let guarantee: BTreeMap<&str, u64> =
        gpu_time.iter().map(|(t, v)| (*t, (v / all_time * total_gpus).floor() as u64)).collect();
    let full = matches!(d, Discipline::Full(_));
    let mut cfg = Config {
        policy: if let Discipline::Full(p) = d { p } else { Policy::FgdPlus },
        backfill: if d == Discipline::Fifo { Backfill::Off } else { Backfill::On },
        preemption: Preemption { enabled: full, grace_ms: 30_000 },
        seed: a.placement_seed,
        ..Config::default()
    };
    if full {
        cfg.queues = guarantee
            .iter()
            .map(|(t, gpus)| QueueSpec {
                name: (*t).to_owned(),
                guarantee: Quota { gpu_milli: gpus * 1000, cpu_milli: u64::MAX / 4, memory: u64::MAX / 4 },
                borrow_limit: None,
                weight: 1.0,
                user_limit: None,
            })
            .collect();
    }
    let half_life_ms = 24 * 3600 * 1000;
    let mut live: Vec<Live> = Vec::new();
    let mut unschedulable = 0;
    for (i, j) in jobs.iter().enumerate() {
        let (members, per_member) = gang(j.gpus, g);
        if per_member > g || members as usize > a.nodes {
            unschedulable += 1;
            continue;
        }
        live.push(Live {
            job: i,
            submit_ms: j.submit_s * 1000,
            remaining_ms: (j.duration_s * 1000.0).round() as i64,
            first_start_ms: None,
            members,
            per_member,
        });
    }
    let n = live.len();
    let ids: Vec<String> = (0..n).map(|k| format!("j{k}")).collect();
    let teams_of: Vec<&str> = live.iter().map(|l| if full { jobs[l.job].team.as_str() } else { FIFO_QUEUE }).collect();
    let team_of = |k: usize| teams_of[k];
    let index = |id: &str| id[1..].parse::<usize>().unwrap_or(usize::MAX);
    let tick = a.tick_s * 1000;
    let mut next_arrival = 0usize;
    // the last pass started and preempted nothing while jobs waited
    let mut quiet_last = false;
    // what the scheduler is given for the waiting jobs, each under its live index (live is in submit
    // order, so that is (submit, index) order)
    let mut backlog = Backlog::new();
    // what the scheduler is given for the running jobs, in live-index order like `running`
    let mut run_list: Vec<Running> = Vec::new();
    let team_names: Vec<&str> = gpu_time.keys().copied().collect();
    let team_ix: Vec<usize> =
        live.iter().map(|l| team_names.iter().position(|t| *t == jobs[l.job].team).unwrap_or(0)).collect();
    // per team: the GPUs its waiting jobs ask for (a multiset: GPUs -> jobs)
    let mut waiting: Vec<BTreeMap<u64, usize>> = vec![BTreeMap::new(); team_names.len()];
    let want_of = |l: &Live| u64::from(l.members * l.per_member);
    // running: live index -> (start ms, end ms, stop-at ms if preempted, placements)
    let mut running: RunningJobs = BTreeMap::new();
    let mut finish: Vec<Option<i64>> = vec![None; n];
    let mut preemptions = 0;
    let mut now = live.first().map_or(0, |l| l.submit_ms);
    let first_submit = now;
    let mut alloc_area = 0.0; // GPU-ms
    let mut last_t = now;
    let mut held_gpus = 0u64;
    // GPUs held per node, and the free GPUs on nodes partly in use (time-averaged as fragmentation)
    let mut node_held: Vec<u32> = vec![0; a.nodes];
    let mut partial_free = 0u64;
    let mut partial_area = 0.0;
    let mut free_area = 0.0;
    let mut blocked_ms: HashMap<&str, i64> = HashMap::new();
    let mut team_area: HashMap<&str, f64> = HashMap::new();
    let mut team_held: HashMap<&str, u64> = HashMap::new();
    let mut starved_ms: HashMap<&str, i64> = HashMap::new();
    // per team: length of the starved episode under way, and starvation beyond each episode's grace
    let mut episode_ms: HashMap<&str, i64> = HashMap::new();
    let mut beyond_ms: HashMap<&str, i64> = HashMap::new();
    let granted = cfg.preemption.grace_ms + tick;
    let mut why = a.why_starved.as_deref().filter(|_| full).map(|t| crate::starve::Account::new(t, first_submit));
    let mut before: Option<crate::starve::Before> = None;
    let mut disagreements = 0usize;
    let mut curve: Vec<(f64, f64)> = Vec::new();
    loop {
        // time passes: accumulate allocation
        let dt = (now - last_t) as f64;
        alloc_area += dt * held_gpus as f64;
        partial_area += dt * partial_free as f64;
        free_area += dt * (total_gpus - held_gpus as f64);
        for (t, h) in &team_held {
            *team_area.entry(t).or_default() += dt * *h as f64;
        }
        curve.push(((now - first_submit) as f64 / 86_400_000.0, held_gpus as f64 * 100.0 / total_gpus));
        // starvation since the last tick: a team waiting with a job that fits its guarantee while below it
        let min_wait: Vec<u64> = waiting.iter().map(|w| w.keys().next().copied().unwrap_or(u64::MAX)).collect();
        for (t, &want) in team_names.iter().zip(&min_wait).filter(|(_, w)| **w != u64::MAX) {
            let held = team_held.get(t).copied().unwrap_or(0);
            let gua = guarantee.get(t).copied().unwrap_or(0);
            if held + want <= gua {
                *starved_ms.entry(t).or_default() += now - last_t;
                let ep = episode_ms.entry(t).or_default();
                let over = (*ep + now - last_t - granted).max(0) - (*ep - granted).max(0);
                *ep += now - last_t;
                *beyond_ms.entry(t).or_default() += over;
                let blocked = full
                    && over > 0
                    && !placeable_without_guaranteed(
                        gang(u32::try_from(want).unwrap_or(u32::MAX), g),
                        g,
                        &run_list,
                        &node_held,
                        |q| team_held.get(q).copied().unwrap_or(0) <= guarantee.get(q).copied().unwrap_or(0),
                    );
                if blocked {
                    *blocked_ms.entry(t).or_default() += over;
                } else if over > 0
                    && let Some(w) = why.as_mut().filter(|w| w.team == *t)
                {
                    let room = |gpus: u64| {
                        crate::starve::placeable_within_excess(
                            gang(u32::try_from(gpus).unwrap_or(u32::MAX), g),
                            g,
                            &run_list,
                            a.nodes,
                            |q| guarantee.get(q).copied().unwrap_or(0),
                        )
                    };
                    let (cause, msg) =
                        crate::starve::cause(before.as_ref(), &c, &run_list, &backlog, &cfg, last_t, t, want, room);
                    w.note(now - over, now, cause, format!("{msg} (holds {held} of {gua})"));
                }
            } else {
                episode_ms.remove(t);
            }
        }
        episode_ms.retain(|t, _| team_names.iter().zip(&min_wait).any(|(n, w)| n == t && *w != u64::MAX));
        last_t = now;
        // completions and stops up to now
        let arrivals_from = next_arrival;
        let done: Vec<usize> = running
            .iter()
            .filter(|(_, (_, end, stop, _))| *end <= now || stop.is_some_and(|s| s <= now))
            .map(|(&k, _)| k)
            .collect();
        let done_empty = done.is_empty();
        for k in done {
            let (_, end, stop, stop_placements) = running.remove(&k).unwrap_or_default();
            if let Ok(i) = run_list.binary_search_by_key(&k, |r| index(&r.id)) {
                run_list.remove(i);
            }
            let gpus = u64::from(live[k].members * live[k].per_member);
            held_gpus -= gpus;
            for p in &stop_placements {
                partial_free = node_change(&mut node_held, partial_free, g, p, false);
            }
            let t = jobs[live[k].job].team.as_str();
            *team_held.entry(t).or_default() -= gpus;
            match stop {
                Some(s) if s < end => {
                    live[k].remaining_ms = end - s;
                    backlog.insert(k, pending_of(&live[k], &ids[k], team_of(k)));
                    *waiting[team_ix[k]].entry(want_of(&live[k])).or_default() += 1;
                }
                _ => finish[k] = Some(end),
            }
        }
        while next_arrival < n && live[next_arrival].submit_ms <= now {
            let k = next_arrival;
            backlog.insert(k, pending_of(&live[k], &ids[k], team_of(k)));
            *waiting[team_ix[k]].entry(want_of(&live[k])).or_default() += 1;
            next_arrival += 1;
        }
        if backlog.is_empty() && running.is_empty() && next_arrival >= n {
            break;
        }
        // one scheduling pass, unless it provably changes nothing (FIFO orders only)
        let released = !done_empty;
        let skip = !full
            && quiet_last
            && !released
            && !fifo_may_start(d, &live[arrivals_from..next_arrival], &running, a.nodes, g);
        if !skip {
            if full {
                cfg.usage.advance(&run_list, now, half_life_ms);
            }
            // the watched team starved (its smallest waiting job fits its guarantee): explain the pass
            before = why
                .as_ref()
                .and_then(|w| team_names.iter().position(|t| *t == w.team))
                .filter(|&ti| {
                    let held = team_held.get(team_names[ti]).copied().unwrap_or(0);
                    waiting[ti].keys().next().is_some_and(|&m| held + m <= guarantee[team_names[ti]])
                })
                .map(|_| crate::starve::Before::new(&c, &run_list, &backlog, &cfg, now));
            let dec = decide_backlog(&c, &run_list, &mut backlog, &cfg, now);
            if before.as_ref().is_some_and(|b| !b.agrees(&dec)) {
                disagreements += 1;
            }
            quiet_last = dec.starts.is_empty() && dec.preemptions.is_empty() && !backlog.is_empty();
            for s in dec.starts {
                let k = index(&s.id);
                backlog.remove(k);
                let w = &mut waiting[team_ix[k]];
                if let Some(c) = w.get_mut(&want_of(&live[k])) {
                    *c -= 1;
                    if *c == 0 {
                        w.remove(&want_of(&live[k]));
                    }
                }
                live[k].first_start_ms.get_or_insert(now);
                let i = run_list.partition_point(|r| index(&r.id) < k);
                run_list.insert(
                    i,
                    Running {
                        id: ids[k].clone(),
                        queue: team_of(k).to_owned(),
                        user: TRACE_USER.to_owned(),
                        priority: 0,
                        started_ms: now,
                        runtime_limit_ms: Some(live[k].remaining_ms),
                        placements: s.placements.clone(),
                        preemptible: true,
                        long_running: false,
                        stopping: false,
                    },
                );
                for p in &s.placements {
                    partial_free = node_change(&mut node_held, partial_free, g, p, true);
                }
                running.insert(k, (now, now + live[k].remaining_ms, None, s.placements));
                let gpus = u64::from(live[k].members * live[k].per_member);
                held_gpus += gpus;
                *team_held.entry(jobs[live[k].job].team.as_str()).or_default() += gpus;
            }
            for p in dec.preemptions {
                let k = index(&p.id);
                if let Some(r) = running.get_mut(&k) {
                    r.2 = Some(now + p.grace_ms);
                    preemptions += 1;
                    if let Ok(i) = run_list.binary_search_by_key(&k, |r| index(&r.id)) {
                        run_list[i].stopping = true;
                    }
                }
            }
        }
        // next tick with something to do
        let next_event = running
            .values()
            .map(|(_, end, stop, _)| stop.map_or(*end, |s| s.min(*end)))
            .chain((next_arrival < n).then(|| live[next_arrival].submit_ms))
            .min();
        let Some(next) = next_event else { break };
        let next = next.max(now + 1);
        now = (next + tick - 1) / tick * tick;
    }
    let total_ms = (last_t - first_submit).max(1) as f64;
    let done: Vec<usize> = (0..n).filter(|&k| finish[k].is_some()).collect();
    let mut jct: Vec<f64> =
        done.iter().map(|&k| (finish[k].unwrap_or(0) - live[k].submit_ms) as f64 / 1000.0).collect();
    jct.sort_by(f64::total_cmp);
    let queue_s = |k: usize| (live[k].first_start_ms.unwrap_or(live[k].submit_ms) - live[k].submit_ms) as f64 / 1000.0;
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    let p95 = jct.get(((jct.len() as f64 * 0.95).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
    let makespan = done.iter().map(|&k| finish[k].unwrap_or(0)).max().unwrap_or(first_submit) - first_submit;
    let mut teams: Vec<TeamReport> = gpu_time
        .keys()
        .map(|t| {
            let mine: Vec<usize> = done.iter().copied().filter(|&k| jobs[live[k].job].team == *t).collect();
            TeamReport {
                team: (*t).to_owned(),
                jobs: mine.len(),
                guarantee_gpus: guarantee[t] as f64,
                mean_gpus: team_area.get(t).copied().unwrap_or(0.0) / total_ms,
                mean_queue_s: mean(&mine.iter().map(|&k| queue_s(k)).collect::<Vec<_>>()),
                starved_hours: starved_ms.get(t).copied().unwrap_or(0) as f64 / 3_600_000.0,
                starved_beyond_grace_hours: beyond_ms.get(t).copied().unwrap_or(0) as f64 / 3_600_000.0,
                blocked_by_guaranteed_hours: blocked_ms.get(t).copied().unwrap_or(0) as f64 / 3_600_000.0,
            }
        })
        .collect();
    teams.sort_by(|a, b| b.guarantee_gpus.total_cmp(&a.guarantee_gpus).then(a.team.cmp(&b.team)));
    let sizes = SIZES
        .iter()
        .map(|&(name, lo, hi)| {
            let mine: Vec<usize> = done.iter().copied().filter(|&k| (lo..=hi).contains(&want_of(&live[k]))).collect();
            let jct_of = |k: usize| (finish[k].unwrap_or(0) - live[k].submit_ms) as f64 / 1000.0;
            SizeReport {
                gpus: name.to_owned(),
                jobs: mine.len(),
                mean_jct_s: mean(&mine.iter().map(|&k| jct_of(k)).collect::<Vec<_>>()),
                mean_queue_s: mean(&mine.iter().map(|&k| queue_s(k)).collect::<Vec<_>>()),
            }
        })
        .collect();
    ReplayReport {
        policy: d.name(),
        default: d == Discipline::Full(Policy::default()),
        jobs: done.len(),
        mean_jct_s: mean(&jct),
        p95_jct_s: p95,
        mean_queue_s: mean(&done.iter().map(|&k| queue_s(k)).collect::<Vec<_>>()),
        makespan_s: makespan as f64 / 1000.0,
        mean_alloc_pct: alloc_area / total_ms / total_gpus * 100.0,
        partial_free_pct: if free_area > 0.0 { partial_area / free_area * 100.0 } else { 0.0 },
        preemptions,
        unschedulable,
        seconds: started.elapsed().as_secs_f64(),
        teams,
        sizes,
        alloc_curve: crate::plot::bucket(&curve, 400),
        why_starved: why.map(|w| w.finish(disagreements)),
    }
}

/// Notes placement `p` starting (`start`) or ending on its node; returns the free GPUs on nodes partly
/// in use after it, from `partial` before it.
fn node_change(held: &mut [u32], partial: u64, g: u32, p: &gpuhub_sched::Placement, start: bool) -> u64 {
    let n = node_of(p);
    let part = |h: u32| if h > 0 && h < g { u64::from(g - h) } else { 0 };
    let before = part(held[n]);
    let k = p.gpus.len() as u32;
    held[n] = if start { held[n] + k } else { held[n].saturating_sub(k) };
    partial - before + part(held[n])
}

/// The one user every job of a replay is submitted as (teams are queues; no per-user limit applies).
/// Not empty: comparing two empty strings reads through a dangling pointer, which costs a fault-suppressed
/// masked load (a microcode assist) on AVX-512 hosts on every lookup by user.
const TRACE_USER: &str = "trace";

/// The one queue of the FIFO disciplines (not empty, for the same reason).
const FIFO_QUEUE: &str = "fifo";

/// The size classes of [`SizeReport`]: name, least and most GPUs.
const SIZES: [(&str, u64, u64); 4] = [("1", 1, 1), ("2-4", 2, 4), ("5-8", 5, 8), ("9+", 9, u64::MAX)];

/// Running jobs: live index -> (start ms, end ms, stop-at ms if preempted, placements).
type RunningJobs = BTreeMap<usize, (i64, i64, Option<i64>, Vec<gpuhub_sched::Placement>)>;

/// Whether a pass of a FIFO discipline could start anything after the last one started nothing while
/// jobs waited and nothing was released since, so that only `arrived` jobs are new. Strict FIFO: no
/// (the same head is still blocked, and the new jobs come after it). FIFO with backfill: the jobs that
/// waited fail as before (same cluster, same order, same reserved starts, and a later run-time end only
/// meets more of them), so only a new job that fits the free GPUs could start.
fn fifo_may_start(d: Discipline, arrived: &[Live], running: &RunningJobs, nodes: usize, g: u32) -> bool {
    if d == Discipline::Fifo || arrived.is_empty() {
        return false;
    }
    let mut held: HashMap<&str, u32> = HashMap::new();
    for (_, _, _, pl) in running.values() {
        for p in pl {
            *held.entry(p.node.as_str()).or_default() += p.gpus.len() as u32;
        }
    }
    // nodes nothing runs on are wholly free
    let most_free = if held.len() < nodes { g } else { held.values().map(|&h| g.saturating_sub(h)).max().unwrap_or(g) };
    let total_free = (nodes as u64 * u64::from(g)).saturating_sub(held.values().map(|&h| u64::from(h)).sum());
    arrived.iter().any(|l| l.per_member <= most_free && u64::from(l.members * l.per_member) <= total_free)
}

/// What the scheduler is given for a waiting job: whole GPUs, with 4 CPUs and 32 GiB per GPU, and its
/// remaining run time as the run-time limit.
fn pending_of(l: &Live, id: &str, queue: &str) -> Pending {
    Pending {
        id: id.to_owned(),
        queue: queue.to_owned(),
        user: TRACE_USER.to_owned(),
        priority: 0,
        submit_ms: l.submit_ms,
        request: Request {
            cpu_milli: u64::from(l.per_member) * 4000,
            memory: u64::from(l.per_member) * (32 << 30),
            gpu: GpuRequest::Whole { count: l.per_member },
            ..Default::default()
        },
        members: l.members,
        runtime_limit_ms: Some(l.remaining_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::gang;

    #[test]
    fn gangs() {
        assert_eq!(gang(1, 8), (1, 1));
        assert_eq!(gang(8, 8), (1, 8));
        assert_eq!(gang(12, 8), (2, 6));
        assert_eq!(gang(128, 8), (16, 8));
        assert_eq!(gang(7, 4), (7, 1));
    }
}
