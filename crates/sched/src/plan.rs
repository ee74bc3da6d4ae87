//! One scheduling pass: order the pending workloads, start those that fit (gangs all-or-nothing), keep
//! reserved starts for blocked ones that later workloads may not delay (backfill), honour GPU bookings,
//! choose preemption victims, and explain everything left waiting.

mod backfill;
pub(crate) mod order;
pub(crate) mod quiet;

use crate::config::{Backfill, Config};
use crate::explain::{Explanation, Reason};
use crate::fasthash::{FastMap, FastSet};
use crate::model::{Cluster, Decisions, Pending, Running, Start};
use crate::policy::Placer;
use crate::queue::{QueueSpec, QueueState, Queues, Quota};
use crate::state::{Hold, Shape, State};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A blocked workload's reserved start: when, and the cluster as it will be then with it placed.
#[derive(Debug, Clone)]
pub(crate) struct Reserved {
    pub id: String,
    pub at_ms: i64,
    pub future: State,
    pub holds: Vec<Hold>,
}

/// A running workload as the pass sees it.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    /// What it holds (shared with the [`crate::held::HoldCache`] that kept it since an earlier pass).
    pub holds: Arc<[Hold]>,
    /// When its resources are expected back; none: unknown.
    pub end_ms: Option<i64>,
    pub quota: Quota,
}

/// Most wholly free GPUs on one node, wholly free GPUs in all, most free milli on one GPU.
pub(crate) type Summary = (u32, u32, u32);

/// How far a pass has got: starts, reserved starts, victims.
pub(crate) type Progress = (u64, usize, usize);

/// Expected releases in time order, for (workloads started, victims chosen).
pub(crate) type Releases = ((usize, usize), Vec<(i64, crate::plan::backfill::Source)>);

/// A shape without expression masks, and a gang size.
pub(crate) type NeverKey = (u64, u64, u32, u32, u64, Option<Vec<bool>>, u32);

/// What a failed preemption attempt depended on: the shape and gang size, the queue, the priority and
/// the request's quota of the workload, and the pass's progress (starts, reserved starts, victims).
pub(crate) type PreemptKey = (NeverKey, usize, i32, [u64; 3], u64, usize, usize);

/// The working state of one pass.
#[derive(Debug)]
pub(crate) struct Pass<'a> {
    pub cluster: &'a Cluster,
    pub running: &'a [Running],
    pub config: &'a Config,
    pub now: i64,
    pub st: State,
    pub placer: Placer,
    pub live: Vec<Live>,
    pub queues: Queues,
    /// The number of each running workload's queue in `queues`.
    pub run_queue: Vec<usize>,
    pub capacity: Quota,
    pub reserved: Vec<Reserved>,
    /// Workloads started in this pass: their holds and expected end.
    pub started: Vec<(Vec<Hold>, Option<i64>)>,
    /// Running workloads chosen as victims in this pass.
    pub victims: Vec<bool>,
    pub bookings: crate::book::Bookings,
    /// Total GPU memory per flat GPU.
    pub gpu_mem_total: Vec<u64>,
    /// `never_fits` answers per shape (without expression masks) and gang size.
    never: FastMap<NeverKey, Option<String>>,
    /// Most wholly free GPUs on one node, wholly free GPUs in all, most free milli on one GPU; `None`
    /// when the state changed since they were counted.
    summary: Option<(u32, u32, u32)>,
    /// Running workloads in the order victims are considered (lowest priority, latest start first).
    pub victim_order: Option<Vec<usize>>,
    /// Running workloads per node (by their holds).
    pub on_node: Option<Vec<Vec<usize>>>,
    /// Bumped on every start: failed placements are remembered per generation.
    pub(crate) generation: u64,
    /// Shapes that did not fit, with the reserved starts they had to respect, in this generation.
    failed: FastMap<(NeverKey, Vec<usize>, u64), (Reason, String)>,
    /// Only starts and preemptions are wanted ([`decide`]): no explanations, and workloads that provably
    /// can neither start, preempt nor take a reserved start are skipped.
    pub quiet: bool,
    /// Whether the skips that rest on earlier answers of this pass are on (off only in tests, to compare).
    pub skips: bool,
    /// The lowest priority among running workloads (`i32::MAX` when none runs).
    pub min_running_priority: i32,
    /// Whether a running workload is already stopping.
    pub any_stopping: bool,
    /// Victims chosen in this pass.
    pub victim_count: usize,
    /// Preemption attempts that found no room, by what they depended on (see [`PreemptKey`]).
    pub no_preempt: FastSet<PreemptKey>,
    /// Expected releases in time order, for (workloads started, victims chosen) so far.
    pub(crate) releases: Option<Releases>,
    /// The free summary of the cluster once stopping workloads and victims are gone and reserved starts
    /// placed, for (starts, reserved starts, victims) so far.
    pub(crate) soon_summary: Option<(Progress, Summary)>,
    /// The cluster once stopping workloads and victims are gone and reserved starts placed, with how
    /// many workloads are going, for (starts, reserved starts, victims) so far.
    pub(crate) soon_state: Option<(Progress, usize, State)>,
    /// The cluster with the reserved starts placed: for the generation, and how many reserved starts.
    pub(crate) reserved_base: Option<(u64, usize, State)>,
}

/// Schedules one tick: see the crate documentation.
pub fn schedule(
    cluster: &Cluster,
    running: &[Running],
    pending: &[Pending],
    config: &Config,
    now_ms: i64,
) -> Decisions {
    pass(cluster, running, pending, config, now_ms, false, true)
}

/// The same starts and preemptions as [`schedule`], for callers that act on nothing else (the
/// simulator): `pending` explanations are left out, and the pass skips workloads that provably can
/// neither start, preempt nor take a reserved start (see [`crate::plan::quiet`]), which makes a pass over
/// thousands of waiting workloads on a full cluster cheap.
pub fn decide(cluster: &Cluster, running: &[Running], pending: &[Pending], config: &Config, now_ms: i64) -> Decisions {
    pass(cluster, running, pending, config, now_ms, true, true)
}

/// [`schedule`] (`quiet` false) or [`decide`] (`quiet` true), optionally without the skips that rest on
/// earlier answers of the pass (for tests that compare the two).
#[doc(hidden)]
pub fn pass(
    cluster: &Cluster,
    running: &[Running],
    pending: &[Pending],
    config: &Config,
    now_ms: i64,
    quiet: bool,
    skips: bool,
) -> Decisions {
    let mut pass = Pass::new(cluster, running, config, now_ms);
    pass.quiet = quiet;
    pass.skips = skips;
    // the task-size distribution
    let shapes: Vec<(Shape, u64)> =
        pending.iter().map(|p| (pass.st.shape(&p.request), u64::from(p.members.min(64)))).collect();
    pass.observe(shapes.into_iter().chain(pass.running_shapes()));
    let wants: Vec<(usize, u32)> = pending
        .iter()
        .filter_map(|p| match p.request.gpu {
            crate::model::GpuRequest::Whole { count } => Some((pass.queues.index(&p.queue)?, count)),
            _ => None,
        })
        .collect();
    pass.keep_whole_for(wants);
    pass.run(pending)
}

impl<'a> Pass<'a> {
    pub(crate) fn new(cluster: &'a Cluster, running: &'a [Running], config: &'a Config, now: i64) -> Self {
        Self::with_cache(cluster, running, config, now, None)
    }

    /// [`Pass::new`], taking the running workloads' holds from `cache` where it has them (and keeping
    /// there those it compiles).
    pub(crate) fn with_cache(
        cluster: &'a Cluster,
        running: &'a [Running],
        config: &'a Config,
        now: i64,
        cache: Option<&mut crate::held::HoldCache>,
    ) -> Self {
        let (st, held) = crate::held::compile(cluster, running, cache);
        let mut queues = Queues::with_capacity(config.queues.len() + 1);
        let mut run_queue = Vec::with_capacity(running.len());
        for q in &config.queues {
            queues.insert(q.name.clone(), queue_state(q.clone(), config));
        }
        let mut live = Vec::with_capacity(running.len());
        for (r, (holds, quota)) in running.iter().zip(held) {
            let end_ms = if r.stopping {
                Some(now + config.preemption.grace_ms)
            } else {
                r.runtime_limit_ms.map(|l| (r.started_ms + l).max(now))
            };
            let q = match queues.index(&r.queue) {
                Some(q) => q,
                None => queues.insert(r.queue.clone(), queue_state(QueueSpec::open(&r.queue), config)),
            };
            queues.at_mut(q).take(&r.user, quota);
            run_queue.push(q);
            live.push(Live { holds, end_ms, quota });
        }
        let capacity = Quota {
            gpu_milli: st.gpu_milli_total,
            cpu_milli: st.nodes.iter().map(|n| n.cpu_total).sum(),
            memory: st.nodes.iter().map(|n| n.mem_total).sum(),
        };
        let bookings = crate::book::Bookings::new(&config.reservations, cluster, &st, running, now);
        Pass {
            cluster,
            running,
            config,
            now,
            placer: Placer::new(config.policy, config.seed),
            st,
            live,
            queues,
            run_queue,
            capacity,
            reserved: Vec::new(),
            started: Vec::new(),
            victims: vec![false; running.len()],
            bookings,
            gpu_mem_total: total_gpu_mem(cluster),
            never: FastMap::default(),
            summary: None,
            victim_order: None,
            on_node: None,
            generation: 0,
            failed: FastMap::default(),
            quiet: false,
            skips: true,
            min_running_priority: running.iter().map(|r| r.priority).min().unwrap_or(i32::MAX),
            any_stopping: running.iter().any(|r| r.stopping),
            victim_count: 0,
            no_preempt: FastSet::default(),
            releases: None,
            soon_summary: None,
            soon_state: None,
            reserved_base: None,
        }
    }

    /// Notes tasks in the placer's size distribution, runs of equal shapes at once.
    pub(crate) fn observe(&mut self, shapes: impl IntoIterator<Item = (Shape, u64)>) {
        let mut runs: Vec<(Shape, u64)> = Vec::new();
        for (s, n) in shapes {
            match runs.last_mut() {
                Some((last, k)) if *last == s => *k += n,
                _ => runs.push((s, n)),
            }
        }
        self.placer.observe_all(&runs);
    }

    /// The running placements as tasks of the size distribution (one each), in order; placements of
    /// uneven GPU shares are left out.
    pub(crate) fn running_shapes(&self) -> Vec<(Shape, u64)> {
        self.running
            .iter()
            .flat_map(|r| r.placements.iter())
            .filter_map(|pl| Some((self.shape_of_placement(pl)?, 1)))
            .collect()
    }

    /// The shape of a running placement (for the size distribution); none for uneven GPU shares.
    fn shape_of_placement(&self, p: &crate::model::Placement) -> Option<Shape> {
        let need = p.gpus.first().map_or(0, |g| g.milli);
        if p.gpus.iter().any(|g| g.milli != need) {
            return None;
        }
        Some(Shape {
            cpu: p.cpu_milli,
            mem: p.memory,
            need,
            count: p.gpus.len() as u32,
            gpu_mem: p.gpus.first().map_or(0, |g| g.memory),
            models: None,
            gpu_ok: None,
            node_ok: None,
            user: 0,
        })
    }

    /// Tells the placer to keep whole nodes free ([`Placer::set_keep_whole`]) when some queue below its
    /// GPU guarantee waits with a whole-GPU member larger than any node's wholly free GPUs: `wants` gives,
    /// per waiting workload or per queue, the queue's number and the GPUs of its largest such member.
    pub(crate) fn keep_whole_for(&mut self, wants: impl IntoIterator<Item = (usize, u32)>) {
        if self.config.policy != crate::policy::Policy::Auto {
            return;
        }
        let (most_whole, _, _) = self.free_summary();
        let on = wants.into_iter().any(|(q, count)| {
            let q = self.queues.at(q);
            count > most_whole && q.used.gpu_milli < q.spec.guarantee.gpu_milli
        });
        self.placer.set_keep_whole(on);
    }

    /// The number of queue `name`, added (open) if the pass has none of that name.
    pub(crate) fn queue(&mut self, name: &str) -> usize {
        match self.queues.index(name) {
            Some(i) => i,
            None => self.queues.insert(name.to_owned(), queue_state(QueueSpec::open(name), self.config)),
        }
    }

    pub(crate) fn run(mut self, pending: &'a [Pending]) -> Decisions {
        // group by queue; a run of one queue (a single queue, most often) skips the map
        let mut groups: Vec<(&'a str, usize, Vec<u32>)> = Vec::new();
        let mut index: BTreeMap<&'a str, usize> = BTreeMap::new();
        let mut last: Option<(&'a str, usize)> = None;
        for (i, p) in pending.iter().enumerate() {
            let q = p.queue.as_str();
            let g = match last {
                Some((name, g)) if std::ptr::eq(name, q) || name == q => g,
                _ => match index.get(q) {
                    Some(&g) => g,
                    None => {
                        let qix = self.queue(q);
                        groups.push((q, qix, Vec::new()));
                        index.insert(q, groups.len() - 1);
                        groups.len() - 1
                    }
                },
            };
            last = Some((q, g));
            groups[g].2.push(i as u32);
        }
        groups.sort_by(|a, b| a.0.cmp(b.0));
        for (_, _, list) in &mut groups {
            crate::plan::order::lane_order(pending, list);
        }
        let lanes: Vec<crate::plan::order::Lane<'a, '_>> = groups
            .iter()
            .map(|(_, q, list)| {
                let bounds = crate::plan::quiet::Bounds::of(list.iter().map(|&i| &pending[i as usize]));
                crate::plan::order::Lane::new(*q, pending, list, bounds)
            })
            .collect();
        self.run_lanes(lanes)
    }

    /// The pass over the lanes (one per queue with pending workloads, in queue-name order).
    pub(crate) fn run_lanes(mut self, mut lanes: Vec<crate::plan::order::Lane<'a, '_>>) -> Decisions {
        let mut out = Decisions::default();
        let mut position = 0u32;
        let mut fifo_blocked: Option<String> = None;
        while let Some((p, q)) = self.next(&mut lanes) {
            if self.quiet {
                if fifo_blocked.is_some() {
                    // strict FIFO: everything after the blocked head waits behind it
                    break;
                }
                if self.hopeless(p, q) {
                    continue;
                }
            }
            match self.consider(p, q, &mut out, fifo_blocked.as_deref()) {
                Ok(start) => out.starts.push(start),
                Err((reason, message, estimate)) => {
                    position += 1;
                    let blocks = matches!(
                        reason,
                        Reason::Resources | Reason::Backfill | Reason::Preempting | Reason::Reservation
                    );
                    if self.config.backfill == Backfill::Off && blocks && fifo_blocked.is_none() {
                        fifo_blocked = Some(p.id.clone());
                    }
                    if self.quiet {
                        continue;
                    }
                    out.pending.push(Explanation {
                        id: p.id.clone(),
                        reason,
                        message,
                        position,
                        estimated_start_ms: estimate,
                    });
                }
            }
        }
        out
    }

    /// Compiles the shape of `p`'s members, with its model list and resource expression.
    fn compile(&self, p: &Pending) -> Result<Shape, String> {
        let mut s = self.st.shape(&p.request);
        if self.st.any_single_user && s.need < crate::model::WHOLE && s.count > 0 {
            s.user = crate::state::user_key(&p.user);
        }
        if let Some(src) = &p.request.constraint {
            crate::expr::constrain(src, self.cluster, &self.st, &mut s).map_err(|e| e.to_string())?;
        }
        Ok(s)
    }

    /// Decides about one workload (of queue number `queue`): a start, or why it waits (reason, message,
    /// estimated start).
    #[allow(clippy::type_complexity)]
    fn consider(
        &mut self,
        p: &'a Pending,
        queue: usize,
        out: &mut Decisions,
        fifo_blocked: Option<&str>,
    ) -> Result<Start, (Reason, String, Option<i64>)> {
        let shape = self.compile(p).map_err(|e| (Reason::InvalidConstraint, e, None))?;
        let members = p.members.max(1);
        if let Some(why) = self.never_fits(&shape, members) {
            return Err((Reason::Unschedulable, why, None));
        }
        let want = Quota::of_request(&p.request, members);
        if let Some(why) = self.queues.at(queue).limit_reason(&p.user, want) {
            return Err((Reason::QueueLimit, why, None));
        }
        if let Some(head) = fifo_blocked {
            return Err((Reason::HeadOfLine, format!("strict FIFO: waiting behind {head}"), None));
        }
        let end = p.runtime_limit_ms.map(|l| self.now + l);
        match self.try_place(p, &shape, members, end) {
            Ok(holds) => {
                for r in &mut self.reserved {
                    if end.is_none_or(|e| e > r.at_ms) {
                        for h in &holds {
                            r.future.hold(h);
                        }
                    }
                }
                for h in &holds {
                    self.st.hold(h);
                }
                self.generation += 1;
                self.summary = None;
                self.bookings.used(&p.queue, &holds, &self.st, self.now, end);
                self.queues.at_mut(queue).take(&p.user, want);
                let placements = holds.iter().map(|h| self.placement(h)).collect();
                self.started.push((holds, end));
                Ok(Start { id: p.id.clone(), placements })
            }
            Err((reason, message)) => {
                let grace = self.config.preemption.grace_ms;
                if reason == Reason::Resources && self.may_preempt(p, queue, want) {
                    if let Some(msg) = self.preempt_for(p, queue, &shape, members, want, out) {
                        return Err((Reason::Preempting, msg, Some(self.now + grace)));
                    }
                }
                let estimate = if reason == Reason::Resources || reason == Reason::Backfill {
                    self.reserve(p, &shape, members, true)
                } else {
                    None
                };
                Err((reason, message, estimate))
            }
        }
    }

    fn placement(&self, h: &Hold) -> crate::model::Placement {
        let node = &self.cluster.nodes[h.node as usize];
        let start = self.st.nodes[h.node as usize].gpu_start;
        crate::model::Placement {
            node: node.name.clone(),
            gpus: h
                .gpus
                .iter()
                .map(|&(g, milli, memory)| crate::model::GpuShare {
                    uuid: node.gpus[(g - start) as usize].uuid.clone(),
                    milli,
                    memory,
                })
                .collect(),
            cpu_milli: h.cpu,
            memory: h.mem,
        }
    }

    /// Why no node could ever hold one member (or the gang), if so.
    fn never_fits(&mut self, s: &Shape, members: u32) -> Option<String> {
        let key = (s.gpu_ok.is_none() && s.node_ok.is_none())
            .then(|| (s.cpu, s.mem, s.need, s.count, s.gpu_mem, s.models.clone(), members));
        if let Some(hit) = key.as_ref().and_then(|k| self.never.get(k)) {
            return hit.clone();
        }
        let why = self.never_fits_now(s, members);
        if let Some(k) = key {
            self.never.insert(k, why.clone());
        }
        why
    }

    fn never_fits_now(&self, s: &Shape, members: u32) -> Option<String> {
        let hosts = (0..self.st.nodes.len()).filter(|&n| self.st.fits_empty(n, s, &self.gpu_mem_total)).count();
        if hosts == 0 {
            return Some(format!("no node can hold {} even when empty", describe(s)));
        }
        if hosts >= members as usize {
            return None;
        }
        // a gang with fewer hosts than members needs several members per node: place it on the empty cluster
        let mut empty = self.st.clone();
        for h in self.live.iter().flat_map(|l| l.holds.iter()) {
            empty.unhold(h);
        }
        if place_gang(&mut Placer::new(crate::policy::Policy::BestFit, 0), &empty, s, members).is_none() {
            return Some(format!("the cluster cannot hold {members} members of {} even when empty", describe(s)));
        }
        None
    }

    /// Places all members on the state as later workloads see it (reserved starts and bookings held),
    /// checking that no reserved start is delayed.
    fn try_place(
        &mut self,
        p: &Pending,
        s: &Shape,
        members: u32,
        end: Option<i64>,
    ) -> Result<Vec<Hold>, (Reason, String)> {
        if let Some(why) = self.quick_no(s, members) {
            return Err(why);
        }
        let mut relevant: Vec<usize> = Vec::with_capacity(self.reserved.len());
        relevant.extend((0..self.reserved.len()).filter(|&i| end.is_none_or(|e| e > self.reserved[i].at_ms)));
        let booked = self.bookings.holds_for(&self.st, &p.queue, self.now, end);
        // the same shape failed already against the same state and reserved starts
        let key = (booked.is_empty() && s.gpu_ok.is_none() && s.node_ok.is_none() && s.user == 0).then(|| {
            let shape = (s.cpu, s.mem, s.need, s.count, s.gpu_mem, s.models.clone(), members);
            (shape, relevant.clone(), self.generation)
        });
        if let Some((reason, message)) = key.as_ref().and_then(|k| self.failed.get(k)) {
            return Err((*reason, if self.quiet { String::new() } else { message.clone() }));
        }
        let r = self.place_now(s, members, &relevant, &booked);
        if let (Err(e), Some(k)) = (&r, key) {
            self.failed.insert(k, e.clone());
        }
        r
    }

    /// [`Pass::try_place`] once the reserved starts (`relevant`) and `booked` GPUs are known.
    fn place_now(
        &mut self,
        s: &Shape,
        members: u32,
        relevant: &[usize],
        booked: &[Hold],
    ) -> Result<Vec<Hold>, (Reason, String)> {
        if relevant.is_empty() && booked.is_empty() {
            return place_gang(&mut self.placer, &self.st, s, members).ok_or_else(|| self.why_not(s, members));
        }
        // hold the booked GPUs and the reserved starts on the state itself, place, and give them back
        let mut taken = Vec::new();
        for h in booked {
            taken.push(self.st.take(h));
        }
        let bookings_only = taken.len();
        for &i in relevant {
            for h in &self.reserved[i].holds {
                taken.push(self.st.take(h));
            }
        }
        let cached = self.placer.set_cache(false);
        let first = place_gang(&mut self.placer, &self.st, s, members);
        let mut second = None;
        let mut third = None;
        if first.is_none() {
            for t in taken.drain(bookings_only..).rev() {
                self.st.restore(&t);
            }
            second = place_gang(&mut self.placer, &self.st, s, members);
            if second.is_none() && !booked.is_empty() {
                for t in taken.drain(..).rev() {
                    self.st.restore(&t);
                }
                third = place_gang(&mut self.placer, &self.st, s, members);
            }
        }
        for t in taken.drain(..).rev() {
            self.st.restore(&t);
        }
        self.placer.set_cache(cached);
        if let Some(holds) = first {
            return match self.delays(relevant, &holds) {
                None => Ok(holds),
                Some(i) => Err(self.delay_reason(i)),
            };
        }
        if let Some(holds) = second {
            // it fits now only on what a reserved start will use: it may still start if, whenever it
            // would run at a reserved time, the reserved workload fits beside it then (what the reserved
            // start waits for is short, not everything it will hold: a job without GPUs behind a GPU
            // reservation takes CPUs and memory that are free then too)
            return match self.delays(relevant, &holds) {
                None => Ok(holds),
                Some(i) => Err(self.delay_reason(i)),
            };
        }
        if third.is_some() {
            return Err((Reason::Reservation, "the free GPUs it could use are booked by a reservation".into()));
        }
        Err(self.why_not(s, members))
    }

    /// The first of the `relevant` reserved starts that `holds`, held from now on, would delay: whose
    /// cluster at its reserved time could not hold them beside it.
    fn delays(&mut self, relevant: &[usize], holds: &[Hold]) -> Option<usize> {
        for &i in relevant {
            let f = &mut self.reserved[i].future;
            let mut took = Vec::with_capacity(holds.len());
            let mut ok = true;
            for h in holds {
                ok &= f.can_hold(h);
                took.push(f.take(h));
            }
            for t in took.iter().rev() {
                f.restore(t);
            }
            if !ok {
                return Some(i);
            }
        }
        None
    }

    /// Why a workload waits for reserved start `i` (named by its workload id; the controller names it
    /// by owner and name).
    fn delay_reason(&self, i: usize) -> (Reason, String) {
        let id = &self.reserved[i].id;
        (Reason::Backfill, format!("starting now would delay the reserved start of {id}"))
    }

    /// Most wholly free GPUs on one node, wholly free GPUs in all, most free milli on one GPU.
    pub(crate) fn free_summary(&mut self) -> (u32, u32, u32) {
        *self.summary.get_or_insert_with(|| summary_of(&self.st))
    }

    /// A cheap early answer for a workload that cannot fit now (the common case in a full cluster).
    fn quick_no(&mut self, s: &Shape, members: u32) -> Option<(Reason, String)> {
        if s.count == 0 {
            return None;
        }
        let (most_whole, whole, most_milli) = self.free_summary();
        if !quick_fail(s.need, s.count, members, self.free_summary()) {
            return None;
        }
        if self.quiet {
            // only the reason is used
            return Some((Reason::Resources, String::new()));
        }
        let gang = if members > 1 { format!(" for each of {members} members") } else { String::new() };
        if s.need >= crate::model::WHOLE && (s.count > most_whole || s.count.saturating_mul(members) > whole) {
            let what = format!("{} free GPU(s){gang}", s.count);
            return Some((Reason::Resources, format!("waiting for {what}; the best node has {most_whole} that fit")));
        }
        if s.need > most_milli {
            let what = format!("a GPU with {} free milli-GPU{gang}", s.need);
            return Some((Reason::Resources, format!("waiting for {what}; the best node has 0 that fit")));
        }
        None
    }

    /// What to add to a share's message when single-user (MPS) GPUs would fit it but hold another user's
    /// shares: empty otherwise.
    fn other_users(&self, s: &Shape) -> String {
        if s.user == 0 {
            return String::new();
        }
        let blocked = (0..self.st.gpu_free.len())
            .filter(|&g| {
                let st = &self.st;
                st.gpu_user[g] != 0
                    && !s.same_user(st, g)
                    && st.gpu_free[g] >= s.need
                    && st.gpu_mem_free[g] >= s.gpu_mem
                    && s.gpu_allowed(st, g)
            })
            .count();
        if blocked == 0 {
            return String::new();
        }
        format!("; {blocked} MPS GPU(s) with room hold another user's shares (an MPS GPU serves one user at a time)")
    }

    /// A message for a workload that does not fit now.
    fn why_not(&self, s: &Shape, members: u32) -> (Reason, String) {
        if self.quiet {
            // only the reason is used
            return (Reason::Resources, String::new());
        }
        let mut best_gpus = 0u32;
        let mut cpu_short = false;
        let mut mem_short = false;
        for n in 0..self.st.nodes.len() {
            let node = &self.st.nodes[n];
            let k = node.gpu_range().filter(|&g| s.gpu_fits(&self.st, g)).count() as u32;
            best_gpus = best_gpus.max(k);
            if k >= s.count {
                cpu_short |= node.cpu_free < s.cpu;
                mem_short |= node.mem_free < s.mem;
            }
        }
        let gang = if members > 1 { format!(" for each of {members} members") } else { String::new() };
        let msg = if s.count > 0 && best_gpus < s.count {
            let what = if s.need >= crate::model::WHOLE {
                format!("{} free GPU(s)", s.count)
            } else {
                format!("a GPU with {} free milli-GPU", s.need)
            };
            format!("waiting for {what}{gang}; the best node has {best_gpus} that fit")
        } else if cpu_short {
            format!("waiting for {} milli-CPU{gang} on a node with the GPUs", s.cpu)
        } else if mem_short {
            format!("waiting for {} MiB of memory{gang} on a node with the GPUs", s.mem >> 20)
        } else {
            format!("waiting for room for all {members} members at once")
        };
        (Reason::Resources, msg + &self.other_users(s))
    }
}

fn queue_state(spec: QueueSpec, config: &Config) -> QueueState {
    let decayed = config.usage.queues.get(&spec.name).copied().unwrap_or_default();
    QueueState { spec, used: Quota::default(), users: BTreeMap::new(), decayed }
}

/// Most wholly free GPUs on one node, wholly free GPUs in all, most free milli on one GPU, of `st`.
pub(crate) fn summary_of(st: &State) -> (u32, u32, u32) {
    let (mut a, mut b, mut c) = (0u32, 0u32, 0u32);
    for node in &st.nodes {
        let k = node.gpu_range().filter(|&g| st.gpu_free[g] == crate::model::WHOLE).count() as u32;
        a = a.max(k);
        b += k;
        c = node.gpu_range().map(|g| st.gpu_free[g]).fold(c, u32::max);
    }
    (a, b, c)
}

/// Whether `members` members of `count` GPUs with `need` milli each cannot fit now, by the free summary
/// ([`Pass::free_summary`]); `count` > 0.
pub(crate) fn quick_fail(
    need: u32,
    count: u32,
    members: u32,
    (most_whole, whole, most_milli): (u32, u32, u32),
) -> bool {
    (need >= crate::model::WHOLE && (count > most_whole || count.saturating_mul(members) > whole)) || need > most_milli
}

/// Places `members` copies of `s` on a copy of `st`, all or none.
pub(crate) fn place_gang(placer: &mut Placer, st: &State, s: &Shape, members: u32) -> Option<Vec<Hold>> {
    if members <= 1 {
        let c = placer.choose(st, s)?;
        return Some(vec![Hold::of(&c, s)]);
    }
    // the copy's node versions diverge from the placer's caches: score it uncached
    let cached = placer.set_cache(false);
    let mut tmp = st.clone();
    let mut holds = Vec::with_capacity(members as usize);
    for _ in 0..members {
        let Some(c) = placer.choose(&tmp, s) else { break };
        let h = Hold::of(&c, s);
        tmp.hold(&h);
        holds.push(h);
    }
    placer.set_cache(cached);
    (holds.len() == members as usize).then_some(holds)
}

/// Total GPU memory per flat GPU of the cluster.
pub(crate) fn total_gpu_mem(c: &Cluster) -> Vec<u64> {
    c.nodes.iter().flat_map(|n| n.gpus.iter().map(|g| g.memory)).collect()
}

/// `2 GPUs, 4000 milli-CPU, 16 GiB` style description of a shape.
pub(crate) fn describe(s: &Shape) -> String {
    let gpu = match (s.need, s.count) {
        (_, 0) => "no GPU".to_string(),
        (n, c) if n >= crate::model::WHOLE => format!("{c} GPU(s)"),
        (n, _) => format!("{n} milli-GPU"),
    };
    format!("{gpu}, {} milli-CPU, {} MiB", s.cpu, s.mem >> 20)
}
