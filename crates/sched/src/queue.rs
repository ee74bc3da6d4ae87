//! Teams (queues): guaranteed quotas, borrowing limits, per-user limits, and the weighted fair share on
//! decayed usage that orders work of the same priority.
//!
//! Quantities are counted in milli-GPU (so whole and fractional GPUs add up), milli-CPU and bytes.

use crate::model::Running;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An amount of the three resources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Milli-GPU (1000 per whole GPU).
    #[serde(default)]
    pub gpu_milli: u64,
    /// Milli-CPU.
    #[serde(default)]
    pub cpu_milli: u64,
    /// Memory, bytes.
    #[serde(default)]
    pub memory: u64,
}

impl Quota {
    /// No limit at all.
    pub const UNLIMITED: Quota = Quota { gpu_milli: u64::MAX, cpu_milli: u64::MAX, memory: u64::MAX };

    /// Component-wise sum (saturating).
    pub fn plus(self, o: Quota) -> Quota {
        Quota {
            gpu_milli: self.gpu_milli.saturating_add(o.gpu_milli),
            cpu_milli: self.cpu_milli.saturating_add(o.cpu_milli),
            memory: self.memory.saturating_add(o.memory),
        }
    }

    /// Component-wise difference (saturating at zero).
    pub fn minus(self, o: Quota) -> Quota {
        Quota {
            gpu_milli: self.gpu_milli.saturating_sub(o.gpu_milli),
            cpu_milli: self.cpu_milli.saturating_sub(o.cpu_milli),
            memory: self.memory.saturating_sub(o.memory),
        }
    }

    /// Whether every component is at most `o`'s.
    pub fn within(self, o: Quota) -> bool {
        self.gpu_milli <= o.gpu_milli && self.cpu_milli <= o.cpu_milli && self.memory <= o.memory
    }

    /// Whether any component is above `o`'s.
    pub fn exceeds(self, o: Quota) -> bool {
        !self.within(o)
    }

    /// The first resource (by name) where `self` is above `o`.
    pub fn first_excess(self, o: Quota) -> Option<&'static str> {
        if self.gpu_milli > o.gpu_milli {
            Some("gpu")
        } else if self.cpu_milli > o.cpu_milli {
            Some("cpu")
        } else if self.memory > o.memory {
            Some("memory")
        } else {
            None
        }
    }

    /// What a running workload holds.
    pub fn of_running(r: &Running) -> Quota {
        let mut q = Quota::default();
        for p in &r.placements {
            q.gpu_milli += p.gpus.iter().map(|g| u64::from(g.milli)).sum::<u64>();
            q.cpu_milli += p.cpu_milli;
            q.memory += p.memory;
        }
        q
    }

    /// What `members` copies of one request hold.
    pub fn of_request(r: &crate::model::Request, members: u32) -> Quota {
        let m = u64::from(members);
        Quota { gpu_milli: r.gpu.milli() * m, cpu_milli: r.cpu_milli * m, memory: r.memory * m }
    }
}

/// One team's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueSpec {
    /// Queue name (workloads name it in `queue`).
    pub name: String,
    /// Capacity the team is guaranteed: it may reclaim it by preemption from borrowers.
    #[serde(default)]
    pub guarantee: Quota,
    /// How much beyond the guarantee the team may borrow from idle capacity; none: no limit. A
    /// resource the limit does not name is not limited.
    #[serde(default, deserialize_with = "partial_limit")]
    pub borrow_limit: Option<Quota>,
    /// Fair-share weight (relative to other queues).
    #[serde(default = "one")]
    pub weight: f64,
    /// Most one user of the queue may hold at once; none: no limit. A resource the limit does not
    /// name is not limited (`{ gpu_milli = 2000 }` limits GPUs only).
    #[serde(default, deserialize_with = "partial_limit")]
    pub user_limit: Option<Quota>,
}

/// A limit as written: the resources it leaves out are unlimited, not zero.
fn partial_limit<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Quota>, D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Partial {
        gpu_milli: Option<u64>,
        cpu_milli: Option<u64>,
        memory: Option<u64>,
    }
    Ok(Option::<Partial>::deserialize(d)?.map(|p| Quota {
        gpu_milli: p.gpu_milli.unwrap_or(u64::MAX),
        cpu_milli: p.cpu_milli.unwrap_or(u64::MAX),
        memory: p.memory.unwrap_or(u64::MAX),
    }))
}

fn one() -> f64 {
    1.0
}

impl QueueSpec {
    /// A queue with no guarantee, no limits and weight 1 (used for queues not configured).
    pub fn open(name: &str) -> Self {
        QueueSpec {
            name: name.to_owned(),
            guarantee: Quota::default(),
            borrow_limit: None,
            weight: 1.0,
            user_limit: None,
        }
    }

    /// The most the queue may hold: guarantee plus borrowing limit.
    pub fn max(&self) -> Quota {
        self.borrow_limit.map_or(Quota::UNLIMITED, |b| self.guarantee.plus(b))
    }
}

/// Decayed usage per queue: an exponentially weighted average of what each queue held, with the given
/// half-life. The caller keeps one, advances it on every tick with what runs, and passes it in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Per queue: decayed average of milli-GPU, milli-CPU and bytes held.
    pub queues: BTreeMap<String, [f64; 3]>,
    /// When it was last advanced.
    pub at_ms: Option<i64>,
}

impl Usage {
    /// Advances the average to `now_ms`, assuming `running` held its resources since the last call.
    pub fn advance(&mut self, running: &[Running], now_ms: i64, half_life_ms: i64) {
        let dt = self.at_ms.map_or(0, |t| (now_ms - t).max(0));
        self.at_ms = Some(now_ms);
        if dt == 0 {
            return;
        }
        let keep = 0.5f64.powf(dt as f64 / half_life_ms.max(1) as f64);
        // per queue, summed in the order of `running` (the map's order does not matter)
        let mut held: crate::fasthash::FastMap<&str, [f64; 3]> = Default::default();
        for r in running {
            let q = Quota::of_running(r);
            let e = held.entry(r.queue.as_str()).or_default();
            e[0] += q.gpu_milli as f64;
            e[1] += q.cpu_milli as f64;
            e[2] += q.memory as f64;
        }
        for (name, v) in self.queues.iter_mut() {
            let h = held.remove(name.as_str()).unwrap_or_default();
            for i in 0..3 {
                v[i] = v[i] * keep + h[i] * (1.0 - keep);
            }
        }
        for (name, h) in held {
            self.queues.insert(name.to_owned(), h.map(|x| x * (1.0 - keep)));
        }
        self.queues.retain(|_, v| v.iter().any(|&x| x > 1e-9));
    }
}

/// The queues of a pass by name, each also under a number (the order they were added in), so that
/// the running workloads' queues are looked up once per pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queues {
    index: crate::fasthash::FastMap<String, usize>,
    states: Vec<QueueState>,
}

impl Queues {
    /// The number of queue `name`.
    pub(crate) fn index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Queue number `i`.
    pub(crate) fn at(&self, i: usize) -> &QueueState {
        &self.states[i]
    }

    /// Queue number `i`, to change.
    pub(crate) fn at_mut(&mut self, i: usize) -> &mut QueueState {
        &mut self.states[i]
    }

    /// Queues in all.
    pub(crate) fn len(&self) -> usize {
        self.states.len()
    }

    /// Room for `n` queues.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Queues {
            index: crate::fasthash::FastMap::with_capacity_and_hasher(n, Default::default()),
            states: Vec::with_capacity(n),
        }
    }

    /// Adds queue `name` (replacing one of that name, which keeps its number); returns its number.
    pub(crate) fn insert(&mut self, name: String, q: QueueState) -> usize {
        if let Some(i) = self.index(&name) {
            self.states[i] = q;
            return i;
        }
        self.states.push(q);
        self.index.insert(name, self.states.len() - 1);
        self.states.len() - 1
    }
}

/// The live accounting of one queue during a scheduling pass.
#[derive(Debug, Clone)]
pub struct QueueState {
    /// Its configuration.
    pub spec: QueueSpec,
    /// What it holds now (running plus started in this pass).
    pub used: Quota,
    /// What each user holds.
    pub users: BTreeMap<String, Quota>,
    /// Its decayed usage.
    pub decayed: [f64; 3],
}

impl QueueState {
    /// The weighted dominant share: the largest of (decayed + current) / capacity over the resources,
    /// divided by the weight. Lower goes first.
    pub fn share(&self, capacity: Quota) -> f64 {
        let cur = [self.used.gpu_milli as f64, self.used.cpu_milli as f64, self.used.memory as f64];
        let cap = [capacity.gpu_milli as f64, capacity.cpu_milli as f64, capacity.memory as f64];
        let mut dom: f64 = 0.0;
        for i in 0..3 {
            if cap[i] > 0.0 {
                dom = dom.max((self.decayed[i] + cur[i]) / cap[i]);
            }
        }
        dom / self.spec.weight.max(1e-9)
    }

    /// Why `want` more would break a limit of the queue or of `user`, if it would.
    pub fn limit_reason(&self, user: &str, want: Quota) -> Option<String> {
        let after = self.used.plus(want);
        let max = self.spec.max();
        if let Some(r) = after.first_excess(max) {
            return Some(format!("queue {:?} would exceed its {r} limit (guarantee plus borrowing)", self.spec.name));
        }
        if let Some(ul) = self.spec.user_limit {
            let u = self.users.get(user).copied().unwrap_or_default().plus(want);
            if let Some(r) = u.first_excess(ul) {
                return Some(format!(
                    "user {user:?} would exceed the per-user {r} limit of queue {:?}",
                    self.spec.name
                ));
            }
        }
        None
    }

    /// Whether the queue, holding `want` more, stays within its guarantee.
    pub fn within_guarantee(&self, want: Quota) -> bool {
        self.used.plus(want).within(self.spec.guarantee)
    }

    /// Whether the queue holds more than its guarantee (it borrows).
    pub fn borrowing(&self) -> bool {
        self.used.exceeds(self.spec.guarantee)
    }

    /// Counts `q` more for `user`.
    pub fn take(&mut self, user: &str, q: Quota) {
        self.used = self.used.plus(q);
        match self.users.get_mut(user) {
            Some(u) => *u = u.plus(q),
            None => {
                self.users.insert(user.to_owned(), Quota::default().plus(q));
            }
        }
    }

    /// Counts `q` less for `user`.
    pub fn give(&mut self, user: &str, q: Quota) {
        self.used = self.used.minus(q);
        if let Some(u) = self.users.get_mut(user) {
            *u = u.minus(q);
        }
    }
}
