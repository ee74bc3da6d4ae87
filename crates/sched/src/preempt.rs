//! Preemption: a queue below its guarantee reclaims capacity that other queues borrow, and a lower
//! priority yields to a higher one (in the same queue, or from a queue that borrows). Victims are told
//! to stop with a grace period; the workload they make room for keeps a reserved start meanwhile.
//!
//! Victims are chosen node by node (`Pass::victims_by_node`), so that borrowed work spread thinly over
//! many nodes never costs victims on nodes that still could not take a member; a greedy search over all
//! running workloads is the fallback for gangs the per-node count misjudges.

use crate::model::{Decisions, Pending, Preempt};
use crate::plan::{Pass, PreemptKey, Reserved, place_gang};
use crate::queue::Quota;
use crate::state::{Hold, NodeState, Shape, State};

/// The workload victims are sought for: the number of its queue in the pass, and its priority.
#[derive(Debug, Clone, Copy)]
struct Asker {
    queue: usize,
    priority: i32,
}

/// What freeing a node costs: highest victim priority, victims whose queue would drop below its
/// guarantee, victims, milli-GPU × milliseconds of work lost, node number; lower is cheaper.
type Cost = (i32, usize, usize, u128, usize);

/// The nodes a trial changed, as they were, to put back exactly.
#[derive(Debug, Default)]
struct Undo {
    saved: Vec<(usize, NodeState, Vec<u32>, Vec<u64>)>,
    used: Option<u64>,
}

impl Undo {
    /// Gives back what `h` holds on `st`, saving its node first.
    fn unhold(&mut self, st: &mut State, h: &Hold) {
        let n = h.node as usize;
        self.used.get_or_insert(st.gpu_milli_used);
        if !self.saved.iter().any(|x| x.0 == n) {
            let r = st.nodes[n].gpu_range();
            self.saved.push((n, st.nodes[n].clone(), st.gpu_free[r.clone()].to_vec(), st.gpu_mem_free[r].to_vec()));
        }
        st.unhold(h);
    }

    /// Puts the saved nodes back.
    fn undo(self, st: &mut State) {
        for (n, node, free, mem) in self.saved {
            let r = node.gpu_range();
            st.gpu_free[r.clone()].copy_from_slice(&free);
            st.gpu_mem_free[r].copy_from_slice(&mem);
            st.nodes[n] = node;
        }
        if let Some(u) = self.used {
            st.gpu_milli_used = u;
        }
    }
}

impl<'a> Pass<'a> {
    /// Whether running workload `r` may be stopped for `p` (which wants `want`), given what is already
    /// chosen to go (`gone`, per queue number).
    fn eligible(&self, i: usize, p: &Asker, want: Quota, gone: &[Quota]) -> bool {
        let r = &self.running[i];
        if !r.preemptible || r.stopping {
            return false;
        }
        // the victim's queue holds more than its guarantee (after the victims already chosen)
        let q = self.run_queue[i];
        let borrowed = || {
            let s = self.queues.at(q);
            s.used.minus(gone[q]).exceeds(s.spec.guarantee)
        };
        let same = p.queue == q;
        if r.priority < p.priority && ((same && !r.long_running) || borrowed()) {
            return true;
        }
        !same && self.reclaims(p.queue, want) && borrowed()
    }

    /// Whether preemption could help `p` at all: preemption is on and some workload is stopping, runs at
    /// a lower priority, or `p`'s queue may reclaim its guarantee.
    pub(crate) fn may_preempt(&self, p: &Pending, queue: usize, want: Quota) -> bool {
        self.config.preemption.enabled
            && (self.min_running_priority < p.priority
                || self.any_stopping
                || self.victim_count > 0
                || self.reclaims(queue, want))
    }

    /// Whether queue number `queue`, holding `want` more, stays within a guarantee it has: it may
    /// reclaim from queues that borrow.
    fn reclaims(&self, queue: usize, want: Quota) -> bool {
        let q = self.queues.at(queue);
        q.within_guarantee(want) && !q.spec.guarantee.within(Quota::default())
    }

    /// Tries to make room for `p` by preemption; returns the waiting message when it did (or when
    /// workloads already stopping will make room).
    pub(crate) fn preempt_for(
        &mut self,
        p: &'a Pending,
        queue: usize,
        s: &Shape,
        members: u32,
        want: Quota,
        out: &mut Decisions,
    ) -> Option<String> {
        if !self.config.preemption.enabled {
            return None;
        }
        let key = self.preempt_key(p, queue, s, members, want);
        if key.as_ref().is_some_and(|k| self.no_preempt.contains(k)) {
            return None;
        }
        let r = self.preempt_search(p, queue, s, members, want, out);
        if let (None, Some(k)) = (&r, key) {
            self.no_preempt.insert(k);
        }
        r
    }

    /// What a failed [`Pass::preempt_for`] of `p` depended on, when that can be remembered: an attempt
    /// that finds no room changes nothing, so the same workload shape, queue, priority and request fail
    /// again until something starts, gets a reserved start or is chosen as a victim. None (never
    /// remembered) for shapes with expression masks, and for gangs under the random policy (whose draws
    /// a skipped attempt would not consume). A single member is placed, and draws, only where some node
    /// fits it, and an attempt that finds such a node does not fail: a failed attempt for a single member
    /// draws nothing, so skipping it leaves every later draw as it was.
    pub(crate) fn preempt_key(
        &self,
        p: &Pending,
        queue: usize,
        s: &Shape,
        members: u32,
        want: Quota,
    ) -> Option<PreemptKey> {
        let ok = self.skips
            && s.gpu_ok.is_none()
            && s.node_ok.is_none()
            && s.user == 0
            && (members <= 1 || self.config.policy != crate::policy::Policy::Random);
        ok.then(|| {
            let shape = (s.cpu, s.mem, s.need, s.count, s.gpu_mem, s.models.clone(), members);
            let reclaim = self.reclaims(queue, want);
            // without victims to choose, only workloads already going can make room: queue, priority and
            // request do not matter then
            let (queue, priority, want) = if reclaim || self.min_running_priority < p.priority {
                (queue, p.priority, [want.gpu_milli, want.cpu_milli, want.memory])
            } else {
                (usize::MAX, i32::MIN, [0; 3])
            };
            (shape, queue, priority, want, self.generation, self.reserved.len(), self.victim_count)
        })
    }

    /// [`Pass::preempt_for`] without the memory of failed attempts.
    fn preempt_search(
        &mut self,
        p: &Pending,
        queue: usize,
        s: &Shape,
        members: u32,
        want: Quota,
        out: &mut Decisions,
    ) -> Option<String> {
        let running = self.running;
        // nothing to do unless some workload is stopping, runs at a lower priority, or p's queue may reclaim
        let reclaim = self.reclaims(queue, want);
        let lower = self.min_running_priority < p.priority;
        if !reclaim && !lower && !self.any_stopping && self.victim_count == 0 {
            return None;
        }
        // without what is already going; what earlier workloads of this pass already claimed (reserved
        // starts) is not ours
        let (stopping, soon) = self.soon_state();
        let mut soon = soon.clone();
        let cached = self.placer.set_cache(false);
        if stopping > 0 {
            if let Some(holds) = place_gang(&mut self.placer, &soon, s, members) {
                self.placer.set_cache(cached);
                let mut future = soon;
                for h in &holds {
                    future.hold(h);
                }
                let at = self.now + self.config.preemption.grace_ms;
                self.reserved.push(Reserved { id: p.id.clone(), at_ms: at, future, holds });
                return Some(format!("waiting for {stopping} stopping workload(s) to end"));
            }
        }
        if !reclaim && !lower {
            self.placer.set_cache(cached);
            return None;
        }
        // what is already going (stopping, or chosen earlier in this pass) no longer counts as borrowed
        let mut gone: Vec<Quota> = vec![Quota::default(); self.queues.len()];
        for (i, r) in running.iter().enumerate() {
            if r.stopping || self.victims[i] {
                let g = &mut gone[self.run_queue[i]];
                *g = g.plus(self.live[i].quota);
            }
        }
        let gone0 = gone.clone();
        let base = soon.clone();
        let asker = Asker { queue, priority: p.priority };
        let mut chosen = self.victims_by_node(&asker, s, members, want, &mut soon, &mut gone);
        let mut fit = None;
        if !chosen.is_empty() {
            fit = place_gang(&mut self.placer, &soon, s, members);
            if fit.is_none() {
                // the per-node count was too hopeful (a gang): start over with the greedy search
                soon = base;
                chosen.clear();
                gone = gone0;
            }
        }
        if fit.is_none() {
            fit = self.victims_greedy(&asker, s, members, want, &mut soon, &mut gone, &mut chosen);
        }
        if fit.is_none() {
            self.placer.set_cache(cached);
            return None;
        }
        // drop victims that turn out not to be needed, last chosen first
        for k in (0..chosen.len()).rev() {
            let i = chosen[k];
            let mut trial = soon.clone();
            for h in self.live[i].holds.iter() {
                trial.hold(h);
            }
            if let Some(h) = place_gang(&mut self.placer, &trial, s, members) {
                soon = trial;
                fit = Some(h);
                chosen.remove(k);
            }
        }
        self.placer.set_cache(cached);
        let holds = fit?;
        for &i in &chosen {
            self.victims[i] = true;
            self.victim_count += 1;
            let r = &running[i];
            let why = if r.priority < p.priority {
                format!("preempted for {} (priority {} over {})", p.id, p.priority, r.priority)
            } else {
                format!("preempted: queue {:?} reclaims its guarantee from borrowing queue {:?}", p.queue, r.queue)
            };
            out.preemptions.push(Preempt {
                id: r.id.clone(),
                for_id: p.id.clone(),
                reason: why,
                grace_ms: self.config.preemption.grace_ms,
            });
        }
        let mut future = soon;
        for h in &holds {
            future.hold(h);
        }
        let at = self.now + self.config.preemption.grace_ms;
        self.reserved.push(Reserved { id: p.id.clone(), at_ms: at, future, holds });
        Some(format!("preempting {} workload(s) to make room", chosen.len()))
    }

    /// Whether stopping running workload `i` would take its queue from above its guarantee to below it in
    /// some resource (given what is already chosen to go), so that the queue would reclaim in turn.
    fn cascades(&self, i: usize, gone: &[Quota]) -> bool {
        let q = self.run_queue[i];
        let v = self.live[i].quota;
        Some(self.queues.at(q)).is_some_and(|s| {
            let u = s.used.minus(gone[q]);
            let after = u.minus(v);
            let g = s.spec.guarantee;
            let dim = |u: u64, after: u64, g: u64| u > g && after < g;
            dim(u.gpu_milli, after.gpu_milli, g.gpu_milli)
                || dim(u.cpu_milli, after.cpu_milli, g.cpu_milli)
                || dim(u.memory, after.memory, g.memory)
        })
    }

    /// Chooses victims node by node: while the cluster (as `soon` has it) cannot take all members, it
    /// frees room for one more member on the node where that is cheapest, stopping only eligible
    /// workloads there. Cheapest: the lowest victim priority, then the fewest victims whose queue would
    /// drop below its guarantee (they would reclaim in turn), the fewest victims, the least work lost
    /// (milli-GPU × run time), the first node. Borrowed work spread thinly over many nodes thus never
    /// leads to victims on nodes that still cannot take a member. The chosen victims are taken off
    /// `soon` and counted in `gone`; none found (empty): both are left as they were.
    fn victims_by_node(
        &mut self,
        p: &Asker,
        s: &Shape,
        members: u32,
        want: Quota,
        soon: &mut State,
        gone: &mut [Quota],
    ) -> Vec<usize> {
        let running = self.running;
        let on_node = self.on_node.take().unwrap_or_else(|| {
            let mut v: Vec<Vec<usize>> = vec![Vec::new(); self.st.nodes.len()];
            for (i, l) in self.live.iter().enumerate() {
                for h in l.holds.iter() {
                    let list = &mut v[h.node as usize];
                    if list.last() != Some(&i) {
                        list.push(i);
                    }
                }
            }
            v
        });
        let usable: Vec<usize> =
            (0..soon.nodes.len()).filter(|&n| soon.fits_empty(n, s, &self.gpu_mem_total)).collect();
        let (base, gone0) = (soon.clone(), gone.to_vec());
        let mut have: u64 = usable.iter().map(|&n| soon.copies(n, s)).sum();
        let mut chosen: Vec<usize> = Vec::new();
        while have < u64::from(members) {
            let mut best: Option<(Cost, Vec<usize>)> = None;
            for &n in &usable {
                let cands: Vec<usize> = on_node[n]
                    .iter()
                    .copied()
                    .filter(|&i| !self.victims[i] && !running[i].stopping && !chosen.contains(&i))
                    .collect();
                if cands.is_empty() {
                    continue;
                }
                if let Some((cost, picked)) = self.free_node(n, cands, p, s, want, soon, gone) {
                    if best.as_ref().is_none_or(|b| cost < b.0) {
                        best = Some((cost, picked));
                    }
                }
            }
            let Some((_, picked)) = best else {
                *soon = base;
                gone.copy_from_slice(&gone0);
                chosen.clear();
                break;
            };
            for i in picked {
                for h in self.live[i].holds.iter() {
                    soon.unhold(h);
                }
                let g = &mut gone[self.run_queue[i]];
                *g = g.plus(self.live[i].quota);
                chosen.push(i);
            }
            have = usable.iter().map(|&n| soon.copies(n, s)).sum();
        }
        self.on_node = Some(on_node);
        chosen
    }

    /// The cheapest eligible victims among `cands` (running on node `n`) that let node `n` take one more
    /// member of `s`, and their cost; `soon` is left as it was.
    #[allow(clippy::too_many_arguments)]
    fn free_node(
        &self,
        n: usize,
        mut cands: Vec<usize>,
        p: &Asker,
        s: &Shape,
        want: Quota,
        soon: &mut State,
        gone: &[Quota],
    ) -> Option<(Cost, Vec<usize>)> {
        let running = self.running;
        let before = soon.copies(n, s);
        // lowest priority, not cascading, latest start, id: each candidate's key computed once
        cands.sort_by_cached_key(|&i| {
            let r = &running[i];
            (r.priority, self.cascades(i, gone), std::cmp::Reverse(r.started_ms), r.id.as_str())
        });
        let mut undo = Undo::default();
        let mut g = gone.to_vec();
        let mut picked: Vec<usize> = Vec::new();
        let mut ok = false;
        for i in cands {
            if !self.eligible(i, p, want, &g) {
                continue;
            }
            for h in self.live[i].holds.iter() {
                undo.unhold(soon, h);
            }
            let e = &mut g[self.run_queue[i]];
            *e = e.plus(self.live[i].quota);
            picked.push(i);
            if soon.copies(n, s) > before {
                ok = true;
                break;
            }
        }
        if ok {
            // drop earlier picks the later ones made unnecessary
            for k in (0..picked.len().saturating_sub(1)).rev() {
                let i = picked[k];
                for h in self.live[i].holds.iter() {
                    soon.hold(h);
                }
                if soon.copies(n, s) > before {
                    picked.remove(k);
                } else {
                    for h in self.live[i].holds.iter() {
                        soon.unhold(h);
                    }
                }
            }
        }
        undo.undo(soon);
        if !ok {
            return None;
        }
        let mut g = gone.to_vec();
        let mut cost: Cost = (i32::MIN, 0, picked.len(), 0, n);
        for &i in &picked {
            let r = &running[i];
            cost.0 = cost.0.max(r.priority);
            cost.1 += usize::from(self.cascades(i, &g));
            let ran = u128::try_from(self.now.saturating_sub(r.started_ms)).unwrap_or(0);
            cost.3 += u128::from(self.live[i].quota.gpu_milli) * ran;
            let e = &mut g[self.run_queue[i]];
            *e = e.plus(self.live[i].quota);
        }
        Some((cost, picked))
    }

    /// The victims the greedy search considers, in order: lowest priority, latest start first.
    fn victim_order(&mut self) -> Vec<usize> {
        let running = self.running;
        let order = self.victim_order.get_or_insert_with(|| {
            let mut order: Vec<usize> = (0..running.len()).collect();
            order.sort_by(|&a, &b| {
                let (ra, rb) = (&running[a], &running[b]);
                ra.priority.cmp(&rb.priority).then(rb.started_ms.cmp(&ra.started_ms)).then_with(|| ra.id.cmp(&rb.id))
            });
            order
        });
        order.iter().copied().filter(|&i| !self.victims[i] && !running[i].stopping).collect()
    }

    /// The fallback search: stops eligible workloads in [`Pass::victim_order`] (up to 256) until the gang
    /// fits on `soon`; returns where it fits.
    #[allow(clippy::too_many_arguments)]
    fn victims_greedy(
        &mut self,
        p: &Asker,
        s: &Shape,
        members: u32,
        want: Quota,
        soon: &mut State,
        gone: &mut [Quota],
        chosen: &mut Vec<usize>,
    ) -> Option<Vec<Hold>> {
        // how many members each node could take (an upper bound: a gang fits only where they add up to
        // its members), kept up to date where victims leave, so that the placer runs only where it may
        // succeed; not for gangs under the random policy, whose failed placements still draw
        let mut copies = (members <= 1 || self.config.policy != crate::policy::Policy::Random).then(|| {
            let per: Vec<u64> = (0..soon.nodes.len()).map(|n| soon.copies(n, s)).collect();
            let total: u64 = per.iter().sum();
            (per, total)
        });
        for i in self.victim_order() {
            if !self.eligible(i, p, want, gone) {
                continue;
            }
            for h in self.live[i].holds.iter() {
                soon.unhold(h);
                if let Some((per, total)) = &mut copies {
                    let n = h.node as usize;
                    *total -= per[n];
                    per[n] = soon.copies(n, s);
                    *total += per[n];
                }
            }
            let g = &mut gone[self.run_queue[i]];
            *g = g.plus(self.live[i].quota);
            chosen.push(i);
            let may_fit = copies.as_ref().is_none_or(|(_, total)| *total >= u64::from(members.max(1)));
            if may_fit && let Some(h) = place_gang(&mut self.placer, soon, s, members) {
                return Some(h);
            }
            if chosen.len() >= 256 {
                break;
            }
        }
        None
    }
}
