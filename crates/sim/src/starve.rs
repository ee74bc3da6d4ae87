//! Starvation accounting of `sim replay`: whether a team's waiting job could be placed at all by
//! preemption (the brackets of the report), and, with `--why-starved TEAM`, an account of each stretch in
//! which that team starved beyond its grace period outside the brackets, by what the scheduler says of
//! its smallest waiting job then.
//!
//! The account runs a pass with explanations ([`gpuhub_sched::schedule`]) over the replay's state just
//! before each of the replay's own passes while the team starves (and counts passes whose starts or
//! preemptions differ from the replay's, none expected), and, for each starved tick beyond grace outside
//! the brackets, sorts what that pass said of the job into a cause: victims in their grace period;
//! borrowers' work beyond their guarantees cannot make room (preemption takes a borrowing team's work
//! only down to its guarantee, where the brackets stop all of it); the job waits behind a reserved start
//! of a gang (its own team's or another's) and whether that gang could get room; borrowers started after
//! it in the same pass (a pass over the state it left would preempt); or room taken by work ahead of it
//! in the pass (alone it would preempt).

use gpuhub_sched::{Backlog, Cluster, Config, Decisions, GpuRequest, Pending, Placement, Reason, Running, schedule};
use serde::Serialize;
use std::collections::BTreeMap;

/// The node number of a placement (`n0007` → 7).
pub(crate) fn node_of(p: &Placement) -> usize {
    p.node[1..].parse().unwrap_or(0)
}

/// Whether a job that is a gang of `members` equal members of `per_member` GPUs (on nodes of `g`)
/// could be placed if every running job of a team that borrows were stopped: `guaranteed(team)` says a
/// team holds no more than its guarantee (its work is never preempted to reclaim another's).
pub(crate) fn placeable_without_guaranteed(
    (members, per_member): (u32, u32),
    g: u32,
    running: &[Running],
    node_held: &[u32],
    guaranteed: impl Fn(&str) -> bool,
) -> bool {
    let mut kept = vec![0u32; node_held.len()];
    for r in running.iter().filter(|r| !r.stopping && guaranteed(&r.queue)) {
        for p in &r.placements {
            kept[node_of(p)] += p.gpus.len() as u32;
        }
    }
    let hosts: u32 = kept.iter().map(|&k| (g - k.min(g)) / per_member.max(1)).sum();
    hosts >= members
}

/// Whether a job that is a gang of `members` equal members of `per` GPUs (on nodes of `g`) could be
/// placed by stopping only what the scheduler may take: work of
/// teams above their guarantee, each only while what is taken from it stays under its excess
/// (the GPUs its running work, less what is stopping, holds beyond `guarantee(team)`), so that the last
/// victim may take a team below its guarantee, but no more. Nodes are freed in order of the GPUs they
/// need, each by its borrowers' largest jobs first (a heuristic, as the scheduler's own search is).
pub(crate) fn placeable_within_excess(
    (members, per): (u32, u32),
    g: u32,
    running: &[Running],
    nodes: usize,
    guarantee: impl Fn(&str) -> u64,
) -> bool {
    let mut used = vec![0u32; nodes];
    let mut jobs: Vec<Vec<(u32, &str)>> = vec![Vec::new(); nodes];
    for r in running.iter().filter(|r| !r.stopping) {
        for p in &r.placements {
            let n = node_of(p);
            used[n] += p.gpus.len() as u32;
            jobs[n].push((p.gpus.len() as u32, r.queue.as_str()));
        }
    }
    let mut held: BTreeMap<&str, i64> = BTreeMap::new();
    for r in running.iter().filter(|r| !r.stopping) {
        *held.entry(r.queue.as_str()).or_default() += r.placements.iter().map(|p| p.gpus.len() as i64).sum::<i64>();
    }
    let excess = |q: &str| held.get(q).copied().unwrap_or(0) - i64::try_from(guarantee(q)).unwrap_or(i64::MAX);
    let mut hosts: u32 = used.iter().map(|&u| g.saturating_sub(u) / per.max(1)).sum();
    let mut order: Vec<usize> = (0..nodes).filter(|&n| g.saturating_sub(used[n]) < per).collect();
    order.sort_by_key(|&n| per - g.saturating_sub(used[n]));
    let mut taken: BTreeMap<&str, i64> = BTreeMap::new();
    for n in order {
        if hosts >= members {
            break;
        }
        let mut v = jobs[n].clone();
        v.sort_by_key(|x| std::cmp::Reverse(x.0));
        let mut free = g.saturating_sub(used[n]);
        let mut trial = taken.clone();
        for (k, q) in v {
            if free >= per {
                break;
            }
            let t = trial.entry(q).or_default();
            if *t < excess(q) {
                *t += i64::from(k);
                free += k;
            }
        }
        if free >= per {
            taken = trial;
            hosts += 1;
        }
    }
    hosts >= members
}

/// One stretch of the account: from when (hours since the first submit), how long, why, and the
/// scheduler's message for the job at its start.
#[derive(Debug, Clone, Serialize)]
pub struct Stretch {
    /// Start, hours since the first submit.
    pub from_h: f64,
    /// Length, hours.
    pub hours: f64,
    /// The cause (see [`cause`]).
    pub cause: String,
    /// What the scheduler said of the job, and the team's figures, at the stretch's start.
    pub detail: String,
}

/// `--why-starved TEAM`: the team's starvation beyond grace outside the brackets, by cause.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WhyStarved {
    /// The team.
    pub team: String,
    /// Hours per cause, most first.
    pub causes: Vec<(String, f64)>,
    /// The stretches, in time order (consecutive intervals of one cause merged).
    pub stretches: Vec<Stretch>,
    /// Passes whose starts or preemptions differed from those of a pass with explanations over the same
    /// state (none expected: `decide_backlog` makes exactly the decisions of `schedule`).
    pub disagreements: usize,
}

impl WhyStarved {
    /// The account as text, for the replay of `policy`.
    pub fn render(&self, policy: &str) -> String {
        let mut s =
            format!("\nwhy {} starved beyond grace outside the brackets, {policy}: hours by cause\n", self.team);
        for (cause, h) in &self.causes {
            s += &format!("  {h:>8.2}  {cause}\n");
        }
        s += &format!("passes that disagreed with a pass with explanations: {}\n", self.disagreements);
        s += "stretches: from h, hours, cause, what the scheduler said at the start\n";
        for x in &self.stretches {
            s += &format!("  {:>9.2} {:>7.3}  {}: {}\n", x.from_h, x.hours, x.cause, x.detail);
        }
        s
    }
}

/// The account while the replay runs.
#[derive(Debug)]
pub(crate) struct Account {
    pub(crate) team: String,
    first_ms: i64,
    by_cause: BTreeMap<String, i64>,
    stretches: Vec<(i64, i64, String, String)>,
}

impl Account {
    pub(crate) fn new(team: &str, first_ms: i64) -> Self {
        Self { team: team.to_owned(), first_ms, by_cause: BTreeMap::new(), stretches: Vec::new() }
    }

    /// Notes `[from, to)` under `cause`.
    pub(crate) fn note(&mut self, from: i64, to: i64, cause: String, detail: String) {
        *self.by_cause.entry(cause.clone()).or_default() += to - from;
        match self.stretches.last_mut() {
            Some(s) if s.1 == from && s.2 == cause => s.1 = to,
            _ => self.stretches.push((from, to, cause, detail)),
        }
    }

    pub(crate) fn finish(self, disagreements: usize) -> WhyStarved {
        let h = |ms: i64| ms as f64 / 3_600_000.0;
        let mut causes: Vec<(String, f64)> = self.by_cause.into_iter().map(|(c, ms)| (c, h(ms))).collect();
        causes.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let stretches = self
            .stretches
            .into_iter()
            .map(|(from, to, cause, detail)| Stretch {
                from_h: h(from - self.first_ms),
                hours: h(to - from),
                cause,
                detail,
            })
            .collect();
        WhyStarved { team: self.team, causes, stretches, disagreements }
    }
}

/// GPUs a waiting job asks for in all.
fn gpus_of(p: &Pending) -> u64 {
    match p.request.gpu {
        GpuRequest::Whole { count } => u64::from(count) * u64::from(p.members.max(1)),
        _ => 0,
    }
}

/// What a pass said of `team`'s oldest waiting job of `want` GPUs.
#[derive(Debug, Clone, PartialEq)]
enum Said {
    /// None waits (it arrived after the pass) or the pass started it.
    Started,
    /// Victims chosen for it now.
    Preempts,
    /// Waiting for workloads already stopping.
    Stopping,
    /// Its own team's (true) or another team's reserved gang of so many GPUs would be delayed.
    Behind(bool, u64),
    /// No room now and no eligible victims.
    NoVictims,
    /// Anything else.
    Other(String),
}

/// What pass `d` (with explanations, over `pending`) said of `team`'s oldest waiting job of `want` GPUs,
/// and its message.
fn said(d: &Decisions, pending: &[Pending], team: &str, want: u64) -> (Said, String) {
    let Some(job) = pending.iter().find(|p| p.queue == team && gpus_of(p) == want) else {
        return (Said::Started, String::new());
    };
    if d.starts.iter().any(|s| s.id == job.id) {
        return (Said::Started, String::new());
    }
    let Some(e) = d.pending.iter().find(|e| e.id == job.id) else {
        return (Said::Other("no explanation".into()), String::new());
    };
    let mut msg = format!("{want} GPUs: {}", e.message);
    let said = match e.reason {
        Reason::Preempting if e.message.starts_with("waiting for") => Said::Stopping,
        Reason::Preempting => Said::Preempts,
        Reason::Backfill => {
            let id = e.message.rsplit(' ').next().unwrap_or("");
            let why = d.pending.iter().find(|x| x.id == id).map_or("", |x| x.message.as_str());
            msg += &format!("; {id}: {why}");
            match pending.iter().find(|p| p.id == id) {
                Some(r) => Said::Behind(r.queue == team, gpus_of(r)),
                None => Said::Other("behind a reserved start".into()),
            }
        }
        Reason::Resources => Said::NoVictims,
        r => Said::Other(r.as_str().to_owned()),
    };
    (said, msg)
}

/// A pass with explanations over the replay's state just before its own pass at `at`.
pub(crate) struct Before {
    pending: Vec<Pending>,
    d: Decisions,
}

impl Before {
    pub(crate) fn new(c: &Cluster, running: &[Running], backlog: &Backlog, cfg: &Config, at: i64) -> Self {
        let pending = backlog.to_vec();
        let d = schedule(c, running, &pending, cfg, at);
        Self { pending, d }
    }

    /// Whether the replay's own pass decided the same starts and preemptions.
    pub(crate) fn agrees(&self, d: &Decisions) -> bool {
        let ids = |x: &Decisions| {
            (
                x.starts.iter().map(|s| (s.id.clone(), s.placements.clone())).collect::<Vec<_>>(),
                x.preemptions.iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
            )
        };
        ids(&self.d) == ids(d)
    }
}

/// Why `team`'s oldest waiting job of `want` GPUs did not start during the interval after a pass, on
/// the state that pass left (`running`, `backlog`, at `at`): what that pass said of it (`before`), what a
/// pass over the state it left would do, and whether the borrowers' excess could make room for it (or
/// for the gang it waits behind): `room(gpus)`. Returns the cause (a fixed phrase, to add up) and the
/// scheduler's message at the last pass.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cause(
    before: Option<&Before>,
    c: &Cluster,
    running: &[Running],
    backlog: &Backlog,
    cfg: &Config,
    at: i64,
    team: &str,
    want: u64,
    room: impl Fn(u64) -> bool,
) -> (String, String) {
    let (pre, msg) = match before {
        Some(b) => said(&b.d, &b.pending, team, want),
        None => (Said::Other("no pass".into()), String::new()),
    };
    let post = || {
        let pending = backlog.to_vec();
        said(&schedule(c, running, &pending, cfg, at), &pending, team, want).0
    };
    let cause = match pre {
        Said::Preempts | Said::Stopping => "victims in their grace period (a later reclaim of the episode)".into(),
        Said::NoVictims if !room(want) => "borrowers' excess cannot make room (guaranteed work in the way)".into(),
        Said::NoVictims if post() == Said::Preempts => {
            "borrowers started after it in the same pass (reclaimed by the next)".into()
        }
        Said::NoVictims => {
            // alone, would it preempt or wait for what is stopping? then work ahead of it took the room
            let pending = backlog.to_vec();
            let job = pending.iter().find(|p| p.queue == team && gpus_of(p) == want);
            let alone =
                job.map(|j| said(&schedule(c, running, std::slice::from_ref(j), cfg, at), &pending, team, want).0);
            if matches!(alone, Some(Said::Preempts | Said::Stopping)) {
                "room taken by work ahead of it in the pass (reserved starts of other teams)".into()
            } else {
                "no victims found though the borrowers' excess could make room".into()
            }
        }
        Said::Behind(own, gpus) => format!(
            "behind {} team's reserved {gpus}-GPU gang, for which {}",
            if own { "its own" } else { "another" },
            if room(gpus) { "borrowers' excess could make room" } else { "borrowers' excess cannot make room" }
        ),
        Said::Started => "started by the pass (another of its size waits)".into(),
        Said::Other(o) => o,
    };
    (cause, msg)
}
