//! Pending workloads kept across passes, for a caller that runs many passes over a backlog that changes a
//! little between them (the simulator): [`decide_backlog`] makes exactly the decisions of
//! [`crate::decide`] over [`Backlog::to_vec`], without visiting every waiting workload on every pass.
//!
//! What a pass needs of the whole backlog is kept up to date as workloads come and go:
//!
//! - each queue's workloads in the order the pass takes them (`order::lane_order`), and the least
//!   they need (`quiet::Bounds`, from counted multisets);
//! - the task-size distribution the placer scores against. A pass notes every pending workload (in
//!   slice order, `members` tasks each, at most 64) and then every running placement, and the
//!   distribution is rebuilt at fixed counts of tasks seen (1, 2, 4 … 4096, then every 4096,
//!   `frag::Dist::observe_n`): what it scores against is the first R tasks noted, R the last such count
//!   reached. Tasks are counted per request kind in Fenwick trees over the ordinals (the slice order), so
//!   that the counts of the first R tasks cost a few tree walks.

use crate::config::Config;
use crate::model::{Cluster, Decisions, Pending, Request, Running, WHOLE};
use crate::plan::Pass;
use crate::plan::quiet::Bounds;
use crate::queue::Quota;
use std::collections::BTreeMap;

/// Pending workloads, each under an ordinal that gives its place in the slice [`crate::decide`] would
/// be given ([`Backlog::to_vec`]). Ordinals are small integers (memory grows with the largest).
#[derive(Debug, Clone, Default)]
pub struct Backlog {
    /// The workloads, densely.
    items: Vec<Pending>,
    /// Ordinal of each item.
    ords: Vec<usize>,
    /// Request kind of each item.
    kind_of: Vec<u32>,
    /// Item of each ordinal (`u32::MAX`: none).
    slot: Vec<u32>,
    /// Per queue, its workloads.
    lanes: BTreeMap<String, LaneBook>,
    /// Request kinds seen (requests without their expression, which the size distribution ignores).
    kinds: Vec<Request>,
    /// Per kind, a Fenwick tree over ordinals of the tasks each workload counts.
    trees: Vec<Vec<u64>>,
    /// The same over all kinds.
    total: Vec<u64>,
    /// The running workloads' holds, compiled in earlier passes.
    holds: crate::held::HoldCache,
}

/// One queue's workloads in the backlog.
#[derive(Debug, Clone, Default)]
struct LaneBook {
    /// Items in the order a pass takes them.
    order: Vec<u32>,
    /// Workloads with a model list or an expression, or without GPUs.
    not_simple: usize,
    /// Whole-GPU workloads: GPUs per member, and GPUs in all.
    whole_count: Bag,
    whole_total: Bag,
    /// Fractions asked.
    fraction: Bag,
    /// Milli-GPU, milli-CPU and bytes asked in all.
    want: [Bag; 3],
}

/// A multiset of numbers that knows its least.
#[derive(Debug, Clone, Default)]
struct Bag(BTreeMap<u64, usize>);

impl Bag {
    fn add(&mut self, v: u64) {
        *self.0.entry(v).or_default() += 1;
    }

    fn remove(&mut self, v: u64) {
        if let Some(n) = self.0.get_mut(&v) {
            *n -= 1;
            if *n == 0 {
                self.0.remove(&v);
            }
        }
    }

    fn least(&self) -> Option<u64> {
        self.0.keys().next().copied()
    }
}

/// The tasks a workload counts in the size distribution.
fn weight(p: &Pending) -> u64 {
    u64::from(p.members.min(64))
}

/// The numbers [`Bounds::of`] takes from a workload: whether it is simple, the whole-GPU count and total
/// or the fraction, and the quota asked.
fn bound_parts(p: &Pending) -> (bool, Result<(u64, u64), u64>, Quota) {
    let (need, count) = p.request.gpu.shape();
    let members = p.members.max(1);
    let simple = count > 0 && p.request.gpu_models.is_empty() && p.request.constraint.is_none();
    let gpu = if need >= WHOLE {
        Ok((u64::from(count), u64::from(count.saturating_mul(members))))
    } else {
        Err(u64::from(need))
    };
    (simple, gpu, Quota::of_request(&p.request, members))
}

impl LaneBook {
    fn count(&mut self, p: &Pending, add: bool) {
        let (simple, gpu, want) = bound_parts(p);
        let op = |b: &mut Bag, v: u64| if add { b.add(v) } else { b.remove(v) };
        if !simple {
            if add {
                self.not_simple += 1;
            } else {
                self.not_simple -= 1;
            }
        }
        match gpu {
            Ok((count, total)) => {
                op(&mut self.whole_count, count);
                op(&mut self.whole_total, total);
            }
            Err(need) => op(&mut self.fraction, need),
        }
        for (b, v) in self.want.iter_mut().zip([want.gpu_milli, want.cpu_milli, want.memory]) {
            op(b, v);
        }
    }

    /// The same as [`Bounds::of`] over the lane's workloads.
    fn bounds(&self, items: &[Pending]) -> Bounds {
        let least = |b: &Bag| b.least().unwrap_or(u64::MAX);
        let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        Bounds {
            simple: self.not_simple == 0,
            max_priority: self.order.first().map_or(i32::MIN, |&i| items[i as usize].priority),
            whole: self.whole_count.least().map(|c| (narrow(c), narrow(least(&self.whole_total)))),
            fraction: self.fraction.least().map(narrow),
            want: Quota {
                gpu_milli: least(&self.want[0]),
                cpu_milli: least(&self.want[1]),
                memory: least(&self.want[2]),
            },
        }
    }
}

/// Where item `s` goes in a lane's `order` (or is).
fn position(items: &[Pending], ords: &[usize], order: &[u32], s: u32) -> usize {
    order.partition_point(|&i| crate::plan::order::taken_before(items, ords, i, s))
}

/// Adds `d` at position `i` of a Fenwick tree.
fn tree_add(t: &mut [u64], i: usize, d: u64, add: bool) {
    let mut j = i + 1;
    while j <= t.len() {
        if add {
            t[j - 1] += d;
        } else {
            t[j - 1] -= d;
        }
        j += j & j.wrapping_neg();
    }
}

/// The sum of positions `0..n` of a Fenwick tree.
fn tree_prefix(t: &[u64], n: usize) -> u64 {
    let (mut j, mut s) = (n, 0);
    while j > 0 {
        s += t[j - 1];
        j &= j - 1;
    }
    s
}

/// The first position whose running sum reaches `r` (> 0, at most the total), and the sum before it.
fn tree_reach(t: &[u64], r: u64) -> (usize, u64) {
    let (mut pos, mut before) = (0, 0);
    let mut step = t.len().checked_ilog2().map_or(0, |b| 1usize << b);
    while step > 0 {
        if pos + step <= t.len() && before + t[pos + step - 1] < r {
            pos += step;
            before += t[pos - 1];
        }
        step >>= 1;
    }
    (pos, before)
}

/// The last count of tasks seen at which the size distribution is rebuilt, at most `n`
/// (`frag::Dist::observe_n`): 1, 2, 4 … 4096, then every 4096; 0 for none.
fn last_rebuild(n: u64) -> u64 {
    if n >= 4096 { n / 4096 * 4096 } else { n.checked_ilog2().map_or(0, |b| 1 << b) }
}

impl Backlog {
    /// An empty backlog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Workloads waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The workload under `ordinal`.
    pub fn get(&self, ordinal: usize) -> Option<&Pending> {
        let &s = self.slot.get(ordinal)?;
        self.items.get(s as usize)
    }

    /// The workloads in ordinal order: what [`crate::decide`] would be given.
    pub fn to_vec(&self) -> Vec<Pending> {
        self.slot.iter().filter(|&&s| s != u32::MAX).map(|&s| self.items[s as usize].clone()).collect()
    }

    /// Adds `p` under `ordinal`; returns the workload it replaces there.
    pub fn insert(&mut self, ordinal: usize, p: Pending) -> Option<Pending> {
        let old = self.remove(ordinal);
        if ordinal >= self.slot.len() {
            self.grow(ordinal + 1);
        }
        let kind = self.kind(&p.request);
        let s = self.items.len() as u32;
        tree_add(&mut self.trees[kind as usize], ordinal, weight(&p), true);
        tree_add(&mut self.total, ordinal, weight(&p), true);
        let lane = self.lanes.entry(p.queue.clone()).or_default();
        lane.count(&p, true);
        self.slot[ordinal] = s;
        self.items.push(p);
        self.ords.push(ordinal);
        self.kind_of.push(kind);
        let at = position(&self.items, &self.ords, &lane.order, s);
        lane.order.insert(at, s);
        old
    }

    /// Takes out the workload under `ordinal`.
    pub fn remove(&mut self, ordinal: usize) -> Option<Pending> {
        let s = *self.slot.get(ordinal).filter(|&&s| s != u32::MAX)?;
        let p = &self.items[s as usize];
        let (kind, w) = (self.kind_of[s as usize], weight(p));
        tree_add(&mut self.trees[kind as usize], ordinal, w, false);
        tree_add(&mut self.total, ordinal, w, false);
        let lane = self.lanes.get_mut(&p.queue).expect("every item is in its lane");
        lane.count(p, false);
        let at = position(&self.items, &self.ords, &lane.order, s);
        lane.order.remove(at);
        if lane.order.is_empty() {
            let q = p.queue.clone();
            self.lanes.remove(&q);
        }
        self.slot[ordinal] = u32::MAX;
        // the last item moves into the freed slot
        let last = (self.items.len() - 1) as u32;
        if last != s {
            let lane = self.lanes.get_mut(&self.items[last as usize].queue).expect("every item is in its lane");
            let at = position(&self.items, &self.ords, &lane.order, last);
            lane.order[at] = s;
            self.slot[self.ords[last as usize]] = s;
        }
        self.ords.swap_remove(s as usize);
        self.kind_of.swap_remove(s as usize);
        Some(self.items.swap_remove(s as usize))
    }

    /// The kind of a request, added if new.
    fn kind(&mut self, r: &Request) -> u32 {
        let same = |k: &Request| {
            k.cpu_milli == r.cpu_milli && k.memory == r.memory && k.gpu == r.gpu && k.gpu_models == r.gpu_models
        };
        if let Some(i) = self.kinds.iter().position(same) {
            return i as u32;
        }
        self.kinds.push(Request { constraint: None, ..r.clone() });
        self.trees.push(vec![0; self.slot.len()]);
        (self.kinds.len() - 1) as u32
    }

    /// Makes room for ordinals below `n`, rebuilding the trees.
    fn grow(&mut self, n: usize) {
        let len = n.max(self.slot.len() * 2).max(64);
        self.slot.resize(len, u32::MAX);
        self.total = vec![0; len];
        for t in &mut self.trees {
            *t = vec![0; len];
        }
        for (s, p) in self.items.iter().enumerate() {
            tree_add(&mut self.trees[self.kind_of[s] as usize], self.ords[s], weight(p), true);
            tree_add(&mut self.total, self.ords[s], weight(p), true);
        }
    }

    /// Notes in `pass`'s size distribution what [`crate::decide`] over [`Backlog::to_vec`] notes (see
    /// the module documentation): the first R tasks of the pending workloads, then of the running
    /// placements.
    fn observe(&self, pass: &mut Pass<'_>) {
        let running = pass.running_shapes();
        let pending = tree_prefix(&self.total, self.total.len());
        let r = last_rebuild(pending + running.len() as u64);
        let mut counts: Vec<u64> = vec![0; self.kinds.len()];
        if r > pending {
            for (k, t) in self.trees.iter().enumerate() {
                counts[k] = tree_prefix(t, t.len());
            }
        } else if r > 0 {
            let (pos, before) = tree_reach(&self.total, r);
            for (k, t) in self.trees.iter().enumerate() {
                counts[k] = tree_prefix(t, pos);
            }
            // the workload where the count is reached is noted in part
            let s = self.slot[pos] as usize;
            counts[self.kind_of[s] as usize] += r - before;
        }
        let shapes: Vec<_> = self
            .kinds
            .iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (pass.st.shape(k), n))
            .chain(running.into_iter().take(r.saturating_sub(pending) as usize))
            .collect();
        pass.observe(shapes);
    }
}

/// [`crate::decide`] over the workloads of `backlog` in ordinal order ([`Backlog::to_vec`]): the same
/// starts and preemptions, at a cost that grows with what the pass considers rather than with the whole
/// backlog. The backlog also keeps the running workloads' holds between passes (by id and start time),
/// so a backlog serves one cluster.
pub fn decide_backlog(
    cluster: &Cluster,
    running: &[Running],
    backlog: &mut Backlog,
    config: &Config,
    now_ms: i64,
) -> Decisions {
    let mut pass = Pass::with_cache(cluster, running, config, now_ms, Some(&mut backlog.holds));
    pass.quiet = true;
    backlog.observe(&mut pass);
    let wants: Vec<(usize, u32)> = backlog
        .lanes
        .iter()
        .filter_map(|(q, lane)| {
            Some((pass.queues.index(q)?, u32::try_from(*lane.whole_count.0.keys().next_back()?).ok()?))
        })
        .collect();
    pass.keep_whole_for(wants);
    let mut lanes = Vec::with_capacity(backlog.lanes.len());
    for (q, lane) in &backlog.lanes {
        let q = pass.queue(q);
        lanes.push(crate::plan::order::Lane::new(q, &backlog.items, &lane.order, lane.bounds(&backlog.items)));
    }
    pass.run_lanes(lanes)
}

#[cfg(test)]
mod tests;
