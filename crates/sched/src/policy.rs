//! Placement policies: where one member of a workload goes.
//!
//! - `bestfit`: the node (and GPU) left with the least free resources after the placement (packing).
//! - `spread`: the node left with the most free resources (load spreading).
//! - `random`: any node that fits, drawn with the seeded generator (a baseline).
//! - `fgd`: the paper's fragmentation gradient descent: the node and GPU whose placement makes the
//!   node's expected fragmentation, against the task-size distribution, grow least (see [`crate::frag`]).
//! - `fgd+`: the same descent on a fragmentation that also counts GPU capacity the node's
//!   CPUs and memory cannot feed at the workload's ratios, plus a model-contention term: taking capacity
//!   of a GPU model that restricted tasks (`gpu_models`) depend on costs that capacity times the
//!   restricted demand's pressure on it. Ties go to the node left fullest (best fit).
//! - `auto` (the default): `fgd+` while fragmentation can strand capacity, `spread` while it cannot. It
//!   reads the task-size distribution it is given (the waiting and running work): when GPU shares
//!   carry at least [`crate::frag::SHARE_FLOOR`] of the GPU demand, or some task is restricted to GPU
//!   models, it descends fragmentation as `fgd+` does; when the work asks for whole GPUs of any model,
//!   it spreads. With whole GPUs only, fragmentation-awareness buys nothing (a whole free GPU is never
//!   stranded) and packing costs time: on the Philly trace `fgd+` and `bestfit` keep whole nodes free,
//!   so big gangs start sooner and hold them while the many small jobs wait (mean JCT 14% worse than
//!   `spread`, averaged over perturbed replays; see the README's scheduling table).
//!
//! A [`Placer`] keeps per-node caches between calls; use one placer with one [`State`] (node versions
//! tell it what changed).

use crate::fasthash::FastMap;
use crate::frag::{Dist, Measure, NodeView};
use crate::state::{Choice, Shape, State};
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A placement policy, chosen by configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Pack: least free resources left on the node.
    BestFit,
    /// Spread: most free resources left on the node.
    Spread,
    /// Any fitting node, at random (seeded).
    Random,
    /// Fragmentation gradient descent as published.
    Fgd,
    /// Fragmentation gradient descent, CPU/memory- and model-contention-aware (the FGD benchmark winner).
    #[serde(rename = "fgd+")]
    FgdPlus,
    /// `fgd+` while the work holds GPU shares (or model-restricted tasks), `spread` while it asks for
    /// whole GPUs only: the best of both on every trace.
    #[default]
    Auto,
}

impl Policy {
    /// Every policy, in the order reports list them.
    pub const ALL: [Policy; 6] =
        [Policy::Random, Policy::Spread, Policy::BestFit, Policy::Fgd, Policy::FgdPlus, Policy::Auto];

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BestFit => "bestfit",
            Self::Spread => "spread",
            Self::Random => "random",
            Self::Fgd => "fgd",
            Self::FgdPlus => "fgd+",
            Self::Auto => "auto",
        }
    }
}

impl Policy {
    /// Whether it keeps a task-size distribution (the fragmentation-aware policies and `auto`).
    pub fn fragmentation_aware(self) -> bool {
        matches!(self, Policy::Fgd | Policy::FgdPlus | Policy::Auto)
    }

    /// Whether its fragmentation counts what CPUs and memory cannot feed, and model contention.
    fn mixture(self) -> bool {
        matches!(self, Policy::FgdPlus | Policy::Auto)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown placement policy {0:?} (expected one of auto, bestfit, spread, random, fgd, fgd+)")]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, UnknownPolicy> {
        let l = s.trim().to_ascii_lowercase();
        if l == "fgdplus" {
            return Ok(Policy::FgdPlus);
        }
        Policy::ALL.into_iter().find(|p| p.as_str() == l).ok_or_else(|| UnknownPolicy(s.to_owned()))
    }
}

/// A cached score of one task type on one node.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    version: u32,
    epoch: u32,
    delta: f64,
    gpu: u32,
    feasible: bool,
}

/// Chooses placements under one policy, with the caches that make it fast.
#[derive(Debug, Clone)]
pub struct Placer {
    policy: Policy,
    rng: ChaCha8Rng,
    /// The task-size distribution the fragmentation is measured against.
    pub dist: Dist,
    node_frag: Vec<(u32, u32, f64)>,
    types: FastMap<TypeKey, usize>,
    cache: Vec<Vec<Entry>>,
    cache_on: bool,
    /// A node view to score in without allocating one each time.
    view: NodeView,
    /// Weight of the model-contention term (0: off).
    pressure: f64,
    /// `auto` on whole GPUs packs (best fit) instead of spreading: a queue below its guarantee waits with
    /// a member larger than any node's free GPUs ([`Placer::set_keep_whole`]).
    keep_whole: bool,
}

const EPS: f64 = 1e-7;

/// A task type for the score cache: CPU, memory, per-GPU milli, GPU count, allowed models.
type TypeKey = (u64, u64, u32, u32, Option<Vec<bool>>);

impl Placer {
    /// A placer for `policy`; `seed` feeds the random policy and nothing else.
    pub fn new(policy: Policy, seed: u64) -> Self {
        Placer {
            policy,
            rng: ChaCha8Rng::seed_from_u64(seed),
            dist: Dist::new(if policy.mixture() { Measure::Mixture } else { Measure::Paper }),
            node_frag: Vec::new(),
            types: FastMap::default(),
            cache: Vec::new(),
            cache_on: true,
            view: NodeView::default(),
            pressure: if policy.mixture() { 1.0 } else { 0.0 },
            keep_whole: false,
        }
    }

    /// Turns the per-node score caches on or off (off for states that are copies of the one the caches
    /// follow); returns the previous setting.
    pub fn set_cache(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.cache_on, on)
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The policy that places now: for `auto`, `fgd+` or `spread` by the size distribution seen so far
    /// (it changes only when the distribution's classes are rebuilt, so cached scores stay valid; before
    /// any GPU task is seen, `fgd+`, which packs then); otherwise the policy itself.
    pub fn acting(&self) -> Policy {
        match self.policy {
            Policy::Auto if self.dist.is_empty() || self.dist.fragmenting() => Policy::FgdPlus,
            Policy::Auto if self.keep_whole => Policy::BestFit,
            Policy::Auto => Policy::Spread,
            p => p,
        }
    }

    /// For `auto` on whole GPUs: pack (best fit, keeping whole nodes free) instead of spreading while a
    /// queue below its guarantee waits with a member larger than any node's free GPUs, so that spread
    /// small work of queues within their guarantees (which preemption never takes) does not hold a piece
    /// of every node it needs. The pass sets it ([`crate::plan::Pass::keep_whole_for`]).
    pub fn set_keep_whole(&mut self, on: bool) {
        self.keep_whole = on;
    }

    /// Counts a task in the size distribution (fragmentation-aware policies).
    pub fn observe(&mut self, s: &Shape) {
        self.observe_n(s, 1);
    }

    /// Notes `n` tasks of shape `s` at once (the same as `n` calls of [`Placer::observe`]).
    pub fn observe_n(&mut self, s: &Shape, n: u64) {
        if self.policy.fragmentation_aware() {
            self.dist.observe_n(s, n);
        }
    }

    /// The same as [`Placer::observe_n`] for each of `tasks` in turn ([`Dist::observe_all`]).
    pub fn observe_all(&mut self, tasks: &[(Shape, u64)]) {
        if self.policy.fragmentation_aware() {
            self.dist.observe_all(tasks);
        }
    }

    /// Chooses where one member of shape `s` goes, or none if it fits nowhere now.
    pub fn choose(&mut self, st: &State, s: &Shape) -> Option<Choice> {
        match self.acting() {
            Policy::Random => self.choose_random(st, s),
            Policy::BestFit => self.choose_fit(st, s, false),
            Policy::Spread => self.choose_fit(st, s, true),
            Policy::Fgd | Policy::FgdPlus | Policy::Auto if self.dist.is_empty() => self.choose_fit(st, s, false),
            Policy::Fgd | Policy::FgdPlus | Policy::Auto => self.choose_fgd(st, s),
        }
    }

    fn choose_random(&mut self, st: &State, s: &Shape) -> Option<Choice> {
        let mut pick = None;
        let mut seen = 0u32;
        for n in 0..st.nodes.len() {
            if st.fits(n, s) {
                seen += 1;
                if self.rng.gen_range(0..seen) == 0 {
                    pick = Some(n);
                }
            }
        }
        let n = pick?;
        let fitting: Vec<u32> = st.nodes[n].gpu_range().filter(|&g| s.gpu_fits(st, g)).map(|g| g as u32).collect();
        let gpus = if s.count == 1 && s.need < crate::model::WHOLE {
            vec![fitting[self.rng.gen_range(0..fitting.len())]]
        } else {
            fitting[..s.count as usize].to_vec()
        };
        Some(Choice { node: n as u32, gpus })
    }

    fn choose_fit(&self, st: &State, s: &Shape, spread: bool) -> Option<Choice> {
        let sign = if spread { -1.0 } else { 1.0 };
        let mut best: Option<(f64, usize)> = None;
        for n in 0..st.nodes.len() {
            if !st.fits(n, s) {
                continue;
            }
            let score = sign * leftover(st, n, s);
            if best.is_none_or(|(b, _)| score < b - EPS) {
                best = Some((score, n));
            }
        }
        let (_, n) = best?;
        Some(Choice { node: n as u32, gpus: pick_gpus(st, n, s, spread) })
    }

    fn node_frag(&mut self, st: &State, n: usize) -> f64 {
        if self.node_frag.len() != st.nodes.len() {
            self.node_frag = vec![(0, 0, 0.0); st.nodes.len()];
        }
        if !self.cache_on {
            return self.frag_now(st, n);
        }
        let (v, e, f) = self.node_frag[n];
        if e == self.dist.epoch && v == st.nodes[n].version {
            return f;
        }
        let f = self.frag_now(st, n);
        self.node_frag[n] = (st.nodes[n].version, self.dist.epoch, f);
        f
    }

    /// The expected fragmentation of node `n` now (in the placer's scratch view).
    fn frag_now(&mut self, st: &State, n: usize) -> f64 {
        self.view.fill(st, n);
        self.dist.frag(&self.view)
    }

    /// The increase of node `n`'s expected fragmentation when `s` goes there, and the GPU for a fraction.
    fn fgd_delta(&mut self, st: &State, n: usize, s: &Shape) -> Option<(f64, u32)> {
        if !st.fits(n, s) {
            return None;
        }
        let before = self.node_frag(st, n);
        let mut v = std::mem::take(&mut self.view);
        v.fill(st, n);
        let r = self.delta_in(st, n, s, before, &mut v);
        self.view = v;
        r
    }

    /// [`Placer::fgd_delta`] on `v`, the view of node `n`, whose fragmentation is `before`.
    fn delta_in(&self, st: &State, n: usize, s: &Shape, before: f64, v: &mut NodeView) -> Option<(f64, u32)> {
        v.cpu -= s.cpu;
        v.mem -= s.mem;
        let start = st.nodes[n].gpu_start as usize;
        if s.count == 0 {
            return Some((self.dist.frag(v) - before, u32::MAX));
        }
        if s.need >= crate::model::WHOLE || s.count > 1 {
            let mut k = 0;
            for g in st.nodes[n].gpu_range() {
                if k < s.count && s.gpu_fits(st, g) {
                    v.gpus[g - start].0 -= s.need;
                    k += 1;
                }
            }
            return Some((self.dist.frag(v) - before, u32::MAX));
        }
        let mut best: Option<(f64, u32, u32)> = None;
        for g in st.nodes[n].gpu_range() {
            if !s.gpu_fits(st, g) {
                continue;
            }
            let free = st.gpu_free[g];
            // GPUs with the same free milli and model score the same; try each value once
            let dup =
                (start..g).any(|h| st.gpu_free[h] == free && st.gpu_model[h] == st.gpu_model[g] && s.gpu_fits(st, h));
            if dup {
                continue;
            }
            v.gpus[g - start].0 -= s.need;
            let d = self.dist.frag(v) - before;
            v.gpus[g - start].0 += s.need;
            // ties: the fullest GPU
            if best.is_none_or(|(bd, _, bf)| d < bd - EPS || (d < bd + EPS && free < bf)) {
                best = Some((d, g as u32, free));
            }
        }
        best.map(|(d, g, _)| (d, g))
    }

    fn choose_fgd(&mut self, st: &State, s: &Shape) -> Option<Choice> {
        let cacheable = self.cache_on && s.gpu_ok.is_none() && s.node_ok.is_none() && s.user == 0;
        let ty = if cacheable {
            let key = (s.cpu, s.mem, s.need, s.count, s.models.clone());
            let next = self.types.len();
            let t = *self.types.entry(key).or_insert(next);
            if t == self.cache.len() {
                self.cache.push(vec![Entry::default(); st.nodes.len()]);
            }
            Some(t)
        } else {
            None
        };
        let epoch = self.dist.epoch;
        // without tasks restricted to models the pressure is zero everywhere: the term adds nothing
        let pressure = if self.pressure > 0.0 && s.count > 0 && self.dist.restricted() {
            let mut free = vec![0u64; st.models.len()];
            for (g, &f) in st.gpu_free.iter().enumerate() {
                free[st.gpu_model[g] as usize] += u64::from(f);
            }
            self.dist.pressure(&free)
        } else {
            Vec::new()
        };
        let mut best: Option<(f64, f64, usize, u32)> = None;
        for n in 0..st.nodes.len() {
            let version = st.nodes[n].version;
            let r = match ty {
                Some(t) => {
                    let e = self.cache[t][n];
                    if e.epoch == epoch && e.version == version {
                        e.feasible.then_some((e.delta, e.gpu))
                    } else {
                        let r = self.fgd_delta(st, n, s);
                        self.cache[t][n] = Entry {
                            version,
                            epoch,
                            delta: r.map_or(0.0, |x| x.0),
                            gpu: r.map_or(0, |x| x.1),
                            feasible: r.is_some(),
                        };
                        r
                    }
                }
                None => self.fgd_delta(st, n, s),
            };
            let Some((mut d, g)) = r else { continue };
            if !pressure.is_empty() {
                let gpu = if g == u32::MAX { st.nodes[n].gpu_start as usize } else { g as usize };
                d += self.pressure * s.milli() as f64 * pressure[st.gpu_model[gpu] as usize];
            }
            let better = match best {
                None => true,
                Some((bd, bl, _, _)) => d < bd - EPS || (d < bd + EPS && leftover(st, n, s) < bl - EPS),
            };
            if better {
                best = Some((d, leftover(st, n, s), n, g));
            }
        }
        let (_, _, n, g) = best?;
        let gpus = if g == u32::MAX { pick_gpus(st, n, s, false) } else { vec![g] };
        Some(Choice { node: n as u32, gpus })
    }
}

/// What node `n` would have left after `s`, as a weighted sum of fractions of its capacity (GPU counts
/// most, then CPUs, then memory).
pub fn leftover(st: &State, n: usize, s: &Shape) -> f64 {
    let node = &st.nodes[n];
    let gpu_total = f64::from(node.gpu_len) * f64::from(crate::model::WHOLE);
    let gpu = if gpu_total > 0.0 { (st.node_gpu_free(n) - s.milli()) as f64 / gpu_total } else { 0.0 };
    let cpu = if node.cpu_total > 0 { (node.cpu_free - s.cpu) as f64 / node.cpu_total as f64 } else { 0.0 };
    let mem = if node.mem_total > 0 { (node.mem_free - s.mem) as f64 / node.mem_total as f64 } else { 0.0 };
    4.0 * gpu + cpu + 0.5 * mem
}

/// The GPUs of node `n` for shape `s`: for a fraction the fullest (or, spreading, the emptiest) GPU that
/// fits; for whole GPUs the first fitting ones in index order.
pub fn pick_gpus(st: &State, n: usize, s: &Shape, spread: bool) -> Vec<u32> {
    let fitting = st.nodes[n].gpu_range().filter(|&g| s.gpu_fits(st, g));
    if s.count == 1 && s.need < crate::model::WHOLE {
        let g = if spread {
            fitting.max_by_key(|&g| (st.gpu_free[g], std::cmp::Reverse(g)))
        } else {
            fitting.min_by_key(|&g| (st.gpu_free[g], g))
        };
        g.map(|g| vec![g as u32]).unwrap_or_default()
    } else {
        fitting.take(s.count as usize).map(|g| g as u32).collect()
    }
}

#[cfg(test)]
mod tests;
