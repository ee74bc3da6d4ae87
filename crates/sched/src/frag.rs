//! Fragmentation of a node measured against the distribution of task sizes.
//!
//! The idea follows the FGD paper (Weng et al., ATC'23): a node's GPU capacity is *fragmented* for a task
//! when the task cannot use it: all of the node's free GPU capacity when the task does not fit on the node
//! at all (too few CPUs, memory or suitable GPUs), otherwise the free milli of each GPU too small for the
//! task's per-GPU demand. The node's expected fragmentation is the average of that over the task-size
//! distribution; a placement is good when it makes the expected fragmentation grow least.
//!
//! [`Dist`] keeps the distribution, grouped into GPU classes (per-GPU demand, count, allowed models)
//! so that one evaluation costs a few hundred simple operations.

use crate::state::{Shape, State};
use std::collections::HashMap;

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

/// How the expected fragmentation treats tasks that ask for no GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuOnly {
    /// As the paper: all free GPU capacity is fragmentation for them, whether they fit or not (a constant
    /// for ranking; their placement matters only through the CPUs it takes from GPU tasks).
    Paper,
    /// Ignore them.
    Ignore,
}

/// A task-size distribution, counted from the tasks seen so far.
#[derive(Debug, Clone)]
pub struct Dist {
    counts: HashMap<TypeKey, f64>,
    classes: Vec<Class>,
    cpu_only_weight: f64,
    total: f64,
    cpu_only: CpuOnly,
    /// Bumped each time the classes are rebuilt from the counts.
    pub epoch: u32,
    seen: u64,
    next_refresh: u64,
}

/// A node's free resources, copied out so that hypothetical placements can be scored.
#[derive(Debug, Clone)]
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
}

impl Dist {
    /// An empty distribution.
    pub fn new(cpu_only: CpuOnly) -> Self {
        Dist {
            counts: HashMap::new(),
            classes: Vec::new(),
            cpu_only_weight: 0.0,
            total: 0.0,
            cpu_only,
            epoch: 0,
            seen: 0,
            next_refresh: 1,
        }
    }

    /// Counts one more task of this shape. The classes used for scoring are rebuilt when the number of
    /// tasks seen doubles (and every 4096 tasks after that), so that cached scores stay valid in between.
    pub fn observe(&mut self, s: &Shape) {
        *self.counts.entry((s.cpu, s.mem, s.need, s.count, s.models.clone())).or_insert(0.0) += 1.0;
        self.seen += 1;
        if self.seen >= self.next_refresh {
            self.next_refresh = if self.next_refresh < 4096 { self.next_refresh * 2 } else { self.next_refresh + 4096 };
            self.rebuild();
        }
    }

    /// Rebuilds the classes from the counts now.
    pub fn rebuild(&mut self) {
        let mut classes: Vec<Class> = Vec::new();
        let mut index: HashMap<(u32, u32, Option<Vec<bool>>), usize> = HashMap::new();
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
        self.classes = classes;
        self.total = total;
        self.epoch += 1;
    }

    /// Whether any task has been counted.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// Expected fragmentation (milli-GPU) of a node with these free resources.
    pub fn frag(&self, v: &NodeView) -> f64 {
        let free: u64 = v.gpus.iter().map(|&(f, _)| u64::from(f)).sum();
        if free == 0 {
            return 0.0;
        }
        let free = free as f64;
        let mut frag = match self.cpu_only {
            CpuOnly::Paper => self.cpu_only_weight * free,
            CpuOnly::Ignore => 0.0,
        };
        for c in &self.classes {
            // GPUs usable by one unit of the class, and the free milli of the others
            let mut usable = 0u32;
            let mut stranded = 0u64;
            for &(f, m) in &v.gpus {
                if f >= c.need && c.models.as_ref().is_none_or(|a| a[m as usize]) {
                    usable += 1;
                } else {
                    stranded += u64::from(f);
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
            frag += fit * stranded as f64 + (c.weight - fit) * free;
        }
        frag
    }
}
