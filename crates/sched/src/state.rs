//! The compact, mutable view of a cluster that placement works on: free CPUs, memory and milli-GPU per
//! node and GPU, in flat arrays indexed by number so that scoring thousands of nodes stays cheap.
//!
//! A GPU is free for a whole-GPU request only when all of its 1000 milli are free, and a GPU held whole
//! has no milli left for fractions, so whole and fractional work never share a GPU.

use crate::fasthash::FastMap;
use crate::model::{Cluster, GpuRequest, GpuShare, Placement, Request, WHOLE};

/// Free and total resources of one node; its GPUs are `gpu_start .. gpu_start + gpu_len` in [`State`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Free CPUs, milli-cores.
    pub cpu_free: u64,
    /// Free memory, bytes.
    pub mem_free: u64,
    /// Total CPUs.
    pub cpu_total: u64,
    /// Total memory.
    pub mem_total: u64,
    /// First GPU of the node in the flat GPU arrays.
    pub gpu_start: u32,
    /// Number of GPUs.
    pub gpu_len: u32,
    /// Bumped on every change; lets policies cache per-node scores.
    pub version: u32,
    /// GPUs with all their milli free (kept by [`State`]'s methods, which recount it on every change).
    pub whole_free: u32,
}

impl NodeState {
    /// The flat GPU indices of this node.
    pub fn gpu_range(&self) -> std::ops::Range<usize> {
        self.gpu_start as usize..(self.gpu_start + self.gpu_len) as usize
    }
}

/// The whole cluster's free resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// Nodes, in cluster order.
    pub nodes: Vec<NodeState>,
    /// Free milli-GPU per GPU.
    pub gpu_free: Vec<u32>,
    /// Free GPU memory per GPU, bytes.
    pub gpu_mem_free: Vec<u64>,
    /// Model id (index into `models`) per GPU.
    pub gpu_model: Vec<u16>,
    /// Interned model names (shared by copies of the state).
    pub models: std::sync::Arc<Vec<String>>,
    /// Per GPU, whether its shares go to one user at a time ([`crate::model::Gpu::single_user`]).
    pub gpu_single_user: Vec<bool>,
    /// Per GPU, the user ([`user_key`]) whose shares a single-user GPU holds now; 0 when it holds none
    /// (and always 0 on other GPUs).
    pub gpu_user: Vec<u64>,
    /// Whether any GPU is single-user (else shapes carry no user and nothing else changes).
    pub any_single_user: bool,
    /// Total milli-GPU of the cluster.
    pub gpu_milli_total: u64,
    /// Milli-GPU allocated now.
    pub gpu_milli_used: u64,
}

/// A request compiled against a [`State`]: numbers plus which nodes and GPUs it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// CPUs, milli-cores.
    pub cpu: u64,
    /// Memory, bytes.
    pub mem: u64,
    /// Milli-GPU needed on each chosen GPU (1000 for whole GPUs, 0 for none).
    pub need: u32,
    /// Number of GPUs (0 for none).
    pub count: u32,
    /// GPU memory needed on each chosen GPU, bytes.
    pub gpu_mem: u64,
    /// Allowed model ids (indexed by model id); none: any.
    pub models: Option<Vec<bool>>,
    /// Allowed GPUs (flat index); none: any. Set by resource expressions.
    pub gpu_ok: Option<Vec<bool>>,
    /// Allowed nodes; none: any. Set by resource expressions.
    pub node_ok: Option<Vec<bool>>,
    /// The requesting user ([`user_key`]) where the cluster has single-user GPUs; 0: not checked.
    pub user: u64,
}

/// A user's key for single-user GPUs: a stable 64-bit FNV-1a hash of the name, never 0.
pub fn user_key(name: &str) -> u64 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    h.max(1)
}

impl Shape {
    /// Total milli-GPU of the shape.
    pub fn milli(&self) -> u64 {
        u64::from(self.need) * u64::from(self.count)
    }

    /// Whether GPU `g` is of an allowed model and allowed by the expression.
    #[inline]
    pub fn gpu_allowed(&self, st: &State, g: usize) -> bool {
        self.models.as_ref().is_none_or(|m| m[st.gpu_model[g] as usize]) && self.gpu_ok.as_ref().is_none_or(|m| m[g])
    }

    /// Whether GPU `g` can take one unit of this shape now.
    #[inline]
    pub fn gpu_fits(&self, st: &State, g: usize) -> bool {
        st.gpu_free[g] >= self.need
            && st.gpu_mem_free[g] >= self.gpu_mem
            && self.gpu_allowed(st, g)
            && self.same_user(st, g)
    }

    /// Whether GPU `g` holds no other user's shares that exclude this shape's (single-user GPUs).
    #[inline]
    pub fn same_user(&self, st: &State, g: usize) -> bool {
        self.user == 0 || st.gpu_user[g] == 0 || st.gpu_user[g] == self.user
    }
}

/// A chosen place for one member: node number and flat GPU indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Node number.
    pub node: u32,
    /// Flat GPU indices (as many as the shape's count).
    pub gpus: Vec<u32>,
}

impl State {
    /// Builds the state of an empty cluster.
    pub fn new(cluster: &Cluster) -> Self {
        let mut models: Vec<String> = Vec::new();
        let mut model_ids: FastMap<String, u16> = FastMap::default();
        let gpus: usize = cluster.nodes.iter().map(|n| n.gpus.len()).sum();
        let mut st = State {
            nodes: Vec::with_capacity(cluster.nodes.len()),
            gpu_free: Vec::with_capacity(gpus),
            gpu_mem_free: Vec::with_capacity(gpus),
            gpu_model: Vec::with_capacity(gpus),
            models: Default::default(),
            gpu_milli_total: 0,
            gpu_milli_used: 0,
            gpu_single_user: Vec::with_capacity(gpus),
            gpu_user: vec![0; gpus],
            any_single_user: false,
        };
        for n in &cluster.nodes {
            let start = st.gpu_free.len() as u32;
            for g in &n.gpus {
                let id = match st.gpu_model.last() {
                    Some(&last) if models[last as usize] == g.model => last,
                    _ => *model_ids.entry(g.model.clone()).or_insert_with(|| {
                        models.push(g.model.clone());
                        (models.len() - 1) as u16
                    }),
                };
                st.gpu_free.push(WHOLE);
                st.gpu_mem_free.push(g.memory);
                st.gpu_model.push(id);
                st.gpu_single_user.push(g.single_user);
                st.any_single_user |= g.single_user;
                st.gpu_milli_total += u64::from(WHOLE);
            }
            st.nodes.push(NodeState {
                cpu_free: n.cpu_milli,
                mem_free: n.memory,
                cpu_total: n.cpu_milli,
                mem_total: n.memory,
                gpu_start: start,
                gpu_len: n.gpus.len() as u32,
                version: 0,
                whole_free: n.gpus.len() as u32,
            });
        }
        st.models = std::sync::Arc::new(models);
        st
    }

    /// The model id of a model name, if any GPU has it.
    pub fn model_id(&self, name: &str) -> Option<u16> {
        self.models.iter().position(|m| m == name).map(|i| i as u16)
    }

    /// Compiles a request's numbers and model list (expressions are applied by the caller).
    pub fn shape(&self, r: &Request) -> Shape {
        let (need, count) = r.gpu.shape();
        let gpu_mem = match r.gpu {
            GpuRequest::Fraction { memory: Some(m), .. } => m,
            _ => 0,
        };
        let models = (!r.gpu_models.is_empty())
            .then(|| self.models.iter().map(|m| r.gpu_models.iter().any(|a| a == m)).collect());
        Shape { cpu: r.cpu_milli, mem: r.memory, need, count, gpu_mem, models, gpu_ok: None, node_ok: None, user: 0 }
    }

    /// Whether node `n` could hold the shape now; counts GPUs that fit, up to `count`.
    #[inline]
    pub fn fits(&self, n: usize, s: &Shape) -> bool {
        let node = &self.nodes[n];
        if node.cpu_free < s.cpu || node.mem_free < s.mem || node.gpu_len < s.count {
            return false;
        }
        if s.node_ok.as_ref().is_some_and(|m| !m[n]) {
            return false;
        }
        if s.count == 0 {
            return true;
        }
        if let Some(k) = self.whole_fitting(n, s) {
            return k >= s.count;
        }
        let mut k = 0;
        for g in node.gpu_range() {
            if s.gpu_fits(self, g) {
                k += 1;
                if k >= s.count {
                    return true;
                }
            }
        }
        false
    }

    /// Whether node `n` could hold the shape if it were empty.
    pub fn fits_empty(&self, n: usize, s: &Shape, cluster_gpu_mem: &[u64]) -> bool {
        let node = &self.nodes[n];
        if node.cpu_total < s.cpu || node.mem_total < s.mem || s.node_ok.as_ref().is_some_and(|m| !m[n]) {
            return false;
        }
        let ok = node.gpu_range().filter(|&g| s.gpu_allowed(self, g) && cluster_gpu_mem[g] >= s.gpu_mem).count();
        ok >= s.count as usize
    }

    /// Takes the shape's resources at `c`.
    pub fn apply(&mut self, c: &Choice, s: &Shape) {
        let node = &mut self.nodes[c.node as usize];
        node.cpu_free -= s.cpu;
        node.mem_free -= s.mem;
        node.version = node.version.wrapping_add(1);
        for &g in &c.gpus {
            let g = g as usize;
            debug_assert!(self.gpu_free[g] >= s.need);
            self.gpu_free[g] -= s.need;
            self.gpu_mem_free[g] -= s.gpu_mem;
            self.mark_user(g, s.need, s.user);
        }
        self.gpu_milli_used += u64::from(s.need) * c.gpus.len() as u64;
        self.recount(c.node);
    }

    /// Gives back what [`State::apply`] took.
    pub fn release(&mut self, c: &Choice, s: &Shape) {
        let node = &mut self.nodes[c.node as usize];
        node.cpu_free += s.cpu;
        node.mem_free += s.mem;
        node.version = node.version.wrapping_add(1);
        for &g in &c.gpus {
            let g = g as usize;
            self.gpu_free[g] += s.need;
            self.gpu_mem_free[g] += s.gpu_mem;
            self.clear_user(g);
        }
        self.gpu_milli_used -= u64::from(s.need) * c.gpus.len() as u64;
        self.recount(c.node);
    }

    /// Records that GPU `g` now holds a share (`milli` below a whole GPU) of `user`, if it is single-user.
    #[inline]
    fn mark_user(&mut self, g: usize, milli: u32, user: u64) {
        if self.any_single_user && milli < WHOLE && user != 0 && self.gpu_single_user[g] {
            self.gpu_user[g] = user;
        }
    }

    /// Forgets GPU `g`'s user once all of it is free again.
    #[inline]
    fn clear_user(&mut self, g: usize) {
        if self.gpu_free[g] >= WHOLE {
            self.gpu_user[g] = 0;
        }
    }

    /// Counts node `n`'s wholly free GPUs again ([`NodeState::whole_free`]).
    fn recount(&mut self, n: u32) {
        let node = &self.nodes[n as usize];
        let k = self.gpu_free[node.gpu_range()].iter().filter(|&&f| f >= WHOLE).count() as u32;
        self.nodes[n as usize].whole_free = k;
    }

    /// GPUs of node `n` that can take one unit of `s` now, when that is its wholly free GPUs: `s` asks
    /// for whole GPUs without GPU memory, models or expression.
    #[inline]
    fn whole_fitting(&self, n: usize, s: &Shape) -> Option<u32> {
        let plain = s.need == WHOLE && s.gpu_mem == 0 && s.models.is_none() && s.gpu_ok.is_none();
        plain.then(|| self.nodes[n].whole_free)
    }

    /// Free milli-GPU of node `n`.
    pub fn node_gpu_free(&self, n: usize) -> u64 {
        self.nodes[n].gpu_range().map(|g| u64::from(self.gpu_free[g])).sum()
    }

    /// Turns a choice into the public placement.
    pub fn placement(&self, cluster: &Cluster, c: &Choice, s: &Shape) -> Placement {
        let node = &cluster.nodes[c.node as usize];
        let start = self.nodes[c.node as usize].gpu_start;
        Placement {
            node: node.name.clone(),
            gpus: c
                .gpus
                .iter()
                .map(|&g| GpuShare {
                    uuid: node.gpus[(g - start) as usize].uuid.clone(),
                    milli: s.need,
                    memory: s.gpu_mem,
                })
                .collect(),
            cpu_milli: s.cpu,
            memory: s.mem,
        }
    }
}

/// Resources held on one node: CPUs, memory and `(flat GPU, milli, GPU memory)` shares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hold {
    /// Node number.
    pub node: u32,
    /// Milli-CPU.
    pub cpu: u64,
    /// Memory, bytes.
    pub mem: u64,
    /// GPU shares.
    pub gpus: Vec<(u32, u32, u64)>,
    /// Whose shares they are ([`user_key`]; 0 where no GPU is single-user).
    pub user: u64,
}

impl Hold {
    /// What placing shape `s` at `c` holds.
    pub fn of(c: &Choice, s: &Shape) -> Hold {
        Hold {
            node: c.node,
            cpu: s.cpu,
            mem: s.mem,
            gpus: c.gpus.iter().map(|&g| (g, s.need, s.gpu_mem)).collect(),
            user: s.user,
        }
    }
}

impl State {
    /// Takes what `h` holds (saturating, so inconsistent input never underflows).
    pub fn hold(&mut self, h: &Hold) {
        let node = &mut self.nodes[h.node as usize];
        node.cpu_free = node.cpu_free.saturating_sub(h.cpu);
        node.mem_free = node.mem_free.saturating_sub(h.mem);
        node.version = node.version.wrapping_add(1);
        for &(g, milli, mem) in &h.gpus {
            let g = g as usize;
            let take = self.gpu_free[g].min(milli);
            self.gpu_free[g] -= take;
            self.gpu_mem_free[g] = self.gpu_mem_free[g].saturating_sub(mem);
            self.gpu_milli_used += u64::from(take);
            self.mark_user(g, milli, h.user);
        }
        self.recount(h.node);
    }

    /// Gives back what `h` holds (never above the node's totals or a whole GPU).
    pub fn unhold(&mut self, h: &Hold) {
        let node = &mut self.nodes[h.node as usize];
        node.cpu_free = (node.cpu_free + h.cpu).min(node.cpu_total);
        node.mem_free = (node.mem_free + h.mem).min(node.mem_total);
        node.version = node.version.wrapping_add(1);
        for &(g, milli, mem) in &h.gpus {
            let g = g as usize;
            let give = milli.min(WHOLE - self.gpu_free[g]);
            self.gpu_free[g] += give;
            self.gpu_mem_free[g] += mem;
            self.gpu_milli_used -= u64::from(give).min(self.gpu_milli_used);
            self.clear_user(g);
        }
        self.recount(h.node);
    }

    /// The node number of flat GPU `g`.
    pub fn node_of_gpu(&self, g: u32) -> u32 {
        self.nodes.partition_point(|n| n.gpu_start + n.gpu_len <= g) as u32
    }

    /// Whether everything `h` holds is free now.
    pub fn can_hold(&self, h: &Hold) -> bool {
        let node = &self.nodes[h.node as usize];
        node.cpu_free >= h.cpu
            && node.mem_free >= h.mem
            && h.gpus
                .iter()
                .all(|&(g, milli, mem)| self.gpu_free[g as usize] >= milli && self.gpu_mem_free[g as usize] >= mem)
    }
}

/// What [`State::take`] actually took, so that [`State::restore`] gives back exactly that.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Taken {
    node: u32,
    cpu: u64,
    mem: u64,
    gpus: Vec<(u32, u32, u64)>,
    /// Whose shares were taken (see [`Hold::user`]).
    user: u64,
}

impl State {
    /// Takes what `h` holds, as far as it is free, and records how much.
    pub fn take(&mut self, h: &Hold) -> Taken {
        let node = &mut self.nodes[h.node as usize];
        let cpu = node.cpu_free.min(h.cpu);
        let mem = node.mem_free.min(h.mem);
        node.cpu_free -= cpu;
        node.mem_free -= mem;
        node.version = node.version.wrapping_add(1);
        let mut gpus = Vec::with_capacity(h.gpus.len());
        for &(g, milli, gmem) in &h.gpus {
            let i = g as usize;
            let m = self.gpu_free[i].min(milli);
            let gm = self.gpu_mem_free[i].min(gmem);
            self.gpu_free[i] -= m;
            self.gpu_mem_free[i] -= gm;
            self.gpu_milli_used += u64::from(m);
            self.mark_user(i, milli, h.user);
            gpus.push((g, m, gm));
        }
        self.recount(h.node);
        Taken { node: h.node, cpu, mem, gpus, user: h.user }
    }

    /// Gives back exactly what [`State::take`] took.
    pub fn restore(&mut self, t: &Taken) {
        let node = &mut self.nodes[t.node as usize];
        node.cpu_free += t.cpu;
        node.mem_free += t.mem;
        node.version = node.version.wrapping_add(1);
        for &(g, m, gm) in &t.gpus {
            self.gpu_free[g as usize] += m;
            self.gpu_mem_free[g as usize] += gm;
            self.gpu_milli_used -= u64::from(m);
            self.clear_user(g as usize);
        }
        self.recount(t.node);
    }

    /// How many members of shape `s` node `n` could take now.
    pub fn copies(&self, n: usize, s: &Shape) -> u64 {
        let node = &self.nodes[n];
        if s.node_ok.as_ref().is_some_and(|m| !m[n]) {
            return 0;
        }
        let by_gpu = if s.count == 0 {
            u64::MAX
        } else if let Some(k) = self.whole_fitting(n, s) {
            u64::from(k) / u64::from(s.count)
        } else if s.need >= WHOLE || s.count > 1 {
            node.gpu_range().filter(|&g| s.gpu_fits(self, g)).count() as u64 / u64::from(s.count)
        } else {
            node.gpu_range()
                .filter(|&g| s.gpu_allowed(self, g) && s.same_user(self, g))
                .map(|g| {
                    let by_milli = u64::from(self.gpu_free[g] / s.need.max(1));
                    let by_gmem = self.gpu_mem_free[g].checked_div(s.gpu_mem).unwrap_or(u64::MAX);
                    by_milli.min(by_gmem)
                })
                .sum()
        };
        // min(free / per, cap), dividing only when the CPUs or memory hold fewer than `cap`
        let within = |free: u64, per: u64, cap: u64| match cap.checked_mul(per) {
            _ if per == 0 => cap,
            Some(need) if need <= free => cap,
            _ => free / per,
        };
        within(node.mem_free, s.mem, within(node.cpu_free, s.cpu, by_gpu))
    }
}

#[cfg(test)]
mod tests;
