//! Fragmentation of a node measured against the distribution of task sizes.
//!
//! The idea follows the FGD paper (Weng et al., ATC'23): a node's GPU capacity is *fragmented* for a task
//! when the task cannot use it: all of the node's free GPU capacity when the task does not fit on the node
//! at all (too few CPUs, memory or suitable GPUs), otherwise the free milli of each GPU too small for the
//! task's per-GPU demand. The node's expected fragmentation is the average of that over the task-size
//! distribution; a placement is good when it makes the expected fragmentation grow least.
//!
//! [`Measure::Mixture`] (the `fgd+` policy) adds what the paper leaves out: GPU capacity that the node's
//! remaining CPUs and memory cannot feed. Tasks arrive as a mixture, so a node can use at most
//! `free CPUs / (CPUs per milli-GPU of the mixture)` more milli-GPU (likewise for memory), with the
//! mixture's ratios taken over the tasks that may use the node's GPU model. GPU capacity beyond that is
//! fragmentation too, for every task type.
//!
//! [`Dist`] keeps the distribution, grouped into GPU classes (per-GPU demand, count, allowed models)
//! so that one evaluation costs a few hundred simple operations.

use crate::fasthash::FastMap;
use crate::state::{Shape, State};

/// One task type: CPU and memory demand within a GPU class.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Member {
    cpu: u64,
    mem: u64,
    weight: f64,
}

/// Tasks that ask for the same GPUs: `count` GPUs with `need` milli each, of the allowed models.
#[derive(Debug, Clone, PartialEq)]
struct Class {
    need: u32,
    count: u32,
    models: Option<Vec<bool>>,
    members: Vec<Member>,
    weight: f64,
}

/// Key of a task type: `(cpu, mem, need, count, models)`.
type TypeKey = (u64, u64, u32, u32, Option<Vec<bool>>);

/// Which fragmentation a [`Dist`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// As the paper.
    Paper,
    /// The paper's, plus GPU capacity the node's CPUs and memory cannot feed at the mixture's ratios.
    Mixture,
}

/// A task-size distribution, counted from the tasks seen so far.
#[derive(Debug, Clone)]
pub struct Dist {
    counts: FastMap<TypeKey, f64>,
    classes: Vec<Class>,
    cpu_only_weight: f64,
    measure: Measure,
    /// CPU and memory per milli-GPU of the GPU tasks.
    ratio: (f64, f64),
    /// The same per GPU model id, over the tasks that may use that model.
    ratio_by_model: Vec<(f64, f64)>,
    /// The share of the GPU demand (milli-GPU) asked for as fractions of a GPU.
    share_frac: f64,
    /// Bumped each time the classes are rebuilt from the counts.
    pub epoch: u32,
    seen: u64,
    next_refresh: u64,
}

/// A node's free resources, copied out so that hypothetical placements can be scored.
#[derive(Debug, Clone, Default)]
pub struct NodeView {
    /// Free CPUs.
    pub cpu: u64,
    /// Free memory.
    pub mem: u64,
    /// Free milli and model id of each GPU.
    pub gpus: Vec<(u32, u16)>,
}

impl NodeView {
    /// The current free resources of node `n`.
    pub fn of(st: &State, n: usize) -> Self {
        let node = &st.nodes[n];
        NodeView {
            cpu: node.cpu_free,
            mem: node.mem_free,
            gpus: node.gpu_range().map(|g| (st.gpu_free[g], st.gpu_model[g])).collect(),
        }
    }

    /// Makes this the view of node `n` now (the same as [`NodeView::of`], in place).
    pub fn fill(&mut self, st: &State, n: usize) {
        let node = &st.nodes[n];
        self.cpu = node.cpu_free;
        self.mem = node.mem_free;
        self.gpus.clear();
        self.gpus.extend(node.gpu_range().map(|g| (st.gpu_free[g], st.gpu_model[g])));
    }
}

/// CPU and memory per milli-GPU over the classes `keep` selects.
fn ratios<'a>(classes: impl Iterator<Item = &'a Class>) -> (f64, f64) {
    let (mut c, mut m, mut g) = (0.0, 0.0, 0.0);
    for cl in classes {
        let milli = f64::from(cl.need) * f64::from(cl.count);
        for t in &cl.members {
            c += t.weight * t.cpu as f64;
            m += t.weight * t.mem as f64;
            g += t.weight * milli;
        }
    }
    if g > 0.0 { (c / g, m / g) } else { (0.0, 0.0) }
}

impl Dist {
    /// An empty distribution.
    pub fn new(measure: Measure) -> Self {
        Dist {
            counts: FastMap::default(),
            classes: Vec::new(),
            cpu_only_weight: 0.0,
            measure,
            ratio: (0.0, 0.0),
            ratio_by_model: Vec::new(),
            share_frac: 0.0,
            epoch: 0,
            seen: 0,
            next_refresh: 1,
        }
    }

    /// Counts one more task of this shape. The classes used for scoring are rebuilt when the number of
    /// tasks seen doubles (and every 4096 tasks after that), so that cached scores stay valid in between.
    pub fn observe(&mut self, s: &Shape) {
        self.observe_n(s, 1);
    }

    /// The same as `n` calls of [`Dist::observe`] (the classes are rebuilt at the same points), with one
    /// count update per rebuild instead of one per task.
    pub fn observe_n(&mut self, s: &Shape, mut n: u64) {
        while n > 0 {
            let k = n.min(self.next_refresh.saturating_sub(self.seen).max(1));
            *self.counts.entry((s.cpu, s.mem, s.need, s.count, s.models.clone())).or_insert(0.0) += k as f64;
            self.seen += k;
            n -= k;
            if self.seen >= self.next_refresh {
                self.next_refresh = refresh_after(self.next_refresh);
                self.rebuild();
            }
        }
    }

    /// The same as [`Dist::observe_n`] for each of `tasks` in turn, with the classes built once: only the
    /// last rebuild a sequence of calls would make decides them (the earlier ones only count in
    /// [`Dist::epoch`]).
    pub fn observe_all(&mut self, tasks: &[(Shape, u64)]) {
        let end = self.seen + tasks.iter().map(|t| t.1).sum::<u64>();
        // the last count of tasks seen at which the classes would be rebuilt
        let (mut last, mut at) = (None, self.next_refresh);
        while at <= end {
            last = Some(at);
            at = refresh_after(at);
        }
        for (s, n) in tasks {
            let mut n = *n;
            while n > 0 {
                let k = n.min(self.next_refresh.saturating_sub(self.seen).max(1));
                *self.counts.entry((s.cpu, s.mem, s.need, s.count, s.models.clone())).or_insert(0.0) += k as f64;
                self.seen += k;
                n -= k;
                if self.seen >= self.next_refresh {
                    self.next_refresh = refresh_after(self.next_refresh);
                    if last == Some(self.seen) {
                        self.rebuild();
                    } else {
                        self.epoch += 1;
                    }
                }
            }
        }
    }

    /// Rebuilds the classes from the counts now.
    pub fn rebuild(&mut self) {
        let mut classes: Vec<Class> = Vec::new();
        let mut index: FastMap<(u32, u32, Option<Vec<bool>>), usize> = FastMap::default();
        let total: f64 = self.counts.values().sum();
        self.cpu_only_weight = 0.0;
        let mut keys: Vec<(&TypeKey, &f64)> = self.counts.iter().collect();
        keys.sort_by(|a, b| a.0.cmp(b.0));
        for ((cpu, mem, need, count, models), &c) in keys {
            let w = c / total;
            if *count == 0 {
                self.cpu_only_weight += w;
                continue;
            }
            let i = *index.entry((*need, *count, models.clone())).or_insert_with(|| {
                classes.push(Class {
                    need: *need,
                    count: *count,
                    models: models.clone(),
                    members: vec![],
                    weight: 0.0,
                });
                classes.len() - 1
            });
            classes[i].members.push(Member { cpu: *cpu, mem: *mem, weight: w });
            classes[i].weight += w;
        }
        self.ratio = ratios(classes.iter());
        let milli = |c: &Class| c.weight * f64::from(c.need) * f64::from(c.count);
        let demand: f64 = classes.iter().map(milli).sum();
        let shares: f64 = classes.iter().filter(|c| c.need < crate::model::WHOLE).map(milli).sum();
        self.share_frac = if demand > 0.0 { shares / demand } else { 0.0 };
        let models = classes.iter().filter_map(|c| c.models.as_ref().map(Vec::len)).max().unwrap_or(0);
        self.ratio_by_model =
            (0..models).map(|id| ratios(classes.iter().filter(|c| c.models.as_ref().is_none_or(|a| a[id])))).collect();
        self.classes = classes;
        self.epoch += 1;
    }

    /// Whether some class of tasks is restricted to GPU models (else [`Dist::pressure`] is zero).
    pub fn restricted(&self) -> bool {
        self.classes.iter().any(|c| c.models.is_some())
    }

    /// The share of the GPU demand (milli-GPU) that asks for fractions of a GPU, as of the last rebuild.
    pub fn share_fraction(&self) -> f64 {
        self.share_frac
    }

    /// Whether fragmentation can strand GPU capacity for this distribution: GPU shares carry at least
    /// [`SHARE_FLOOR`] of the GPU demand, or some task is restricted to GPU models. With whole GPUs of
    /// any model only, a free GPU fits every task's per-GPU demand ([`crate::Policy::Auto`] spreads).
    pub fn fragmenting(&self) -> bool {
        self.share_frac >= SHARE_FLOOR || self.restricted()
    }

    /// Whether any task has been counted.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// Per model id: how hard the tasks restricted to some models press on that model's free capacity,
    /// relative to the cluster: the sum, over restricted classes allowed on the model, of the class's share
    /// of GPU demand times (cluster free ÷ free on the models it allows). Zero without restrictions.
    pub fn pressure(&self, free_by_model: &[u64]) -> Vec<f64> {
        let mut p = vec![0.0; free_by_model.len()];
        let total_free: u64 = free_by_model.iter().sum();
        let demand: f64 = self.classes.iter().map(|c| c.weight * f64::from(c.need) * f64::from(c.count)).sum();
        if demand <= 0.0 || total_free == 0 {
            return p;
        }
        for c in &self.classes {
            let Some(mask) = &c.models else { continue };
            let allowed = |m: usize| mask.get(m).copied().unwrap_or(false);
            let cap: u64 = (0..free_by_model.len()).filter(|&m| allowed(m)).map(|m| free_by_model[m]).sum();
            let share = c.weight * f64::from(c.need) * f64::from(c.count) / demand;
            let press = share * total_free as f64 / cap.max(1) as f64;
            for (m, pm) in p.iter_mut().enumerate() {
                if allowed(m) {
                    *pm += press;
                }
            }
        }
        p
    }

    /// Expected fragmentation (milli-GPU) of a node with these free resources.
    pub fn frag(&self, v: &NodeView) -> f64 {
        let free: u64 = v.gpus.iter().map(|&(f, _)| u64::from(f)).sum();
        if free == 0 {
            return 0.0;
        }
        let free = free as f64;
        // tasks without GPUs can use none of it
        let mut frag = self.cpu_only_weight * free;
        let feedable = match self.measure {
            Measure::Paper => f64::MAX,
            Measure::Mixture => {
                let r = v.gpus.first().and_then(|g| self.ratio_by_model.get(g.1 as usize)).unwrap_or(&self.ratio);
                let by_cpu = if r.0 > 0.0 { v.cpu as f64 / r.0 } else { f64::MAX };
                let by_mem = if r.1 > 0.0 { v.mem as f64 / r.1 } else { f64::MAX };
                by_cpu.min(by_mem)
            }
        };
        for c in &self.classes {
            // GPUs that can take one unit of the class, and their free milli
            let mut usable = 0u32;
            let mut usable_milli = 0u64;
            for &(f, m) in &v.gpus {
                if f >= c.need && c.models.as_ref().is_none_or(|a| a[m as usize]) {
                    usable += 1;
                    usable_milli += u64::from(f);
                }
            }
            if usable < c.count {
                frag += c.weight * free;
                continue;
            }
            let mut fit = 0.0;
            for t in &c.members {
                if t.cpu <= v.cpu && t.mem <= v.mem {
                    fit += t.weight;
                }
            }
            frag += fit * (free - (usable_milli as f64).min(feedable)) + (c.weight - fit) * free;
        }
        frag
    }
}

/// The least share of the GPU demand asked for as fractions of a GPU at which `auto` places as `fgd+`:
/// a few notebooks on a whole-GPU cluster do not make it pack.
pub const SHARE_FLOOR: f64 = 0.05;

/// The next count of tasks seen at which the classes are rebuilt after the one at `at`: doubling up to
/// 4096, then every 4096.
fn refresh_after(at: u64) -> u64 {
    if at < 4096 { at * 2 } else { at + 4096 }
}

#[cfg(test)]
mod tests;
