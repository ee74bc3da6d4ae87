//! Preemption: a queue below its guarantee reclaims capacity that other queues borrow, and a lower
//! priority yields to a higher one (in the same queue, or from a queue that borrows). Victims are told
//! to stop with a grace period; the workload they make room for keeps a reserved start meanwhile.

use crate::model::{Decisions, Pending, Preempt};
use crate::plan::{Pass, Reserved, place_gang};
use crate::queue::Quota;
use crate::state::Shape;
use std::collections::BTreeMap;

impl Pass<'_> {
    /// Whether running workload `r` may be stopped for `p` (which wants `want`), given what is already
    /// chosen to go (`gone`, per queue).
    fn eligible(&self, i: usize, p: &Pending, want: Quota, gone: &BTreeMap<String, Quota>) -> bool {
        let r = &self.running[i];
        if !r.preemptible || r.stopping {
            return false;
        }
        // the victim's queue holds more than its guarantee (after the victims already chosen)
        let borrowed = |q: &str| {
            self.queues
                .get(q)
                .is_some_and(|s| s.used.minus(gone.get(q).copied().unwrap_or_default()).exceeds(s.spec.guarantee))
        };
        if r.priority < p.priority && (r.queue == p.queue || borrowed(&r.queue)) {
            return true;
        }
        r.queue != p.queue
            && self
                .queues
                .get(&p.queue)
                .is_some_and(|s| s.within_guarantee(want) && !s.spec.guarantee.within(Quota::default()))
            && borrowed(&r.queue)
    }

    /// Whether preemption could help `p` at all: preemption is on and some workload is stopping, runs at
    /// a lower priority, or `p`'s queue may reclaim its guarantee.
    pub(crate) fn may_preempt(&self, p: &Pending, want: Quota) -> bool {
        self.config.preemption.enabled
            && (self.running.iter().any(|r| r.priority < p.priority || r.stopping)
                || self.victims.iter().any(|&v| v)
                || self
                    .queues
                    .get(&p.queue)
                    .is_some_and(|q| q.within_guarantee(want) && !q.spec.guarantee.within(Quota::default())))
    }

    /// Tries to make room for `p` by preemption; returns the waiting message when it did (or when
    /// workloads already stopping will make room).
    pub(crate) fn preempt_for(
        &mut self,
        p: &Pending,
        s: &Shape,
        members: u32,
        want: Quota,
        out: &mut Decisions,
    ) -> Option<String> {
        if !self.config.preemption.enabled {
            return None;
        }
        let running = self.running;
        // nothing to do unless some workload is stopping, runs at a lower priority, or p's queue may reclaim
        let reclaim = self
            .queues
            .get(&p.queue)
            .is_some_and(|q| q.within_guarantee(want) && !q.spec.guarantee.within(Quota::default()));
        let lower = running.iter().any(|r| r.priority < p.priority);
        if !reclaim && !lower && !running.iter().any(|r| r.stopping) && !self.victims.iter().any(|&v| v) {
            return None;
        }
        let mut soon = self.st.clone();
        let mut stopping = 0;
        for (i, r) in running.iter().enumerate() {
            if r.stopping || self.victims[i] {
                for h in &self.live[i].holds {
                    soon.unhold(h);
                }
                stopping += 1;
            }
        }
        // what earlier workloads of this pass already claimed (reserved starts) is not ours
        for r in &self.reserved {
            for h in &r.holds {
                soon.hold(h);
            }
        }
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
        let order = self.victim_order.get_or_insert_with(|| {
            let mut order: Vec<usize> = (0..running.len()).collect();
            order.sort_by(|&a, &b| {
                let (ra, rb) = (&running[a], &running[b]);
                ra.priority.cmp(&rb.priority).then(rb.started_ms.cmp(&ra.started_ms)).then(ra.id.cmp(&rb.id))
            });
            order
        });
        let order: Vec<usize> = order.iter().copied().filter(|&i| !self.victims[i] && !running[i].stopping).collect();
        let mut gone: BTreeMap<String, Quota> = BTreeMap::new();
        let mut chosen: Vec<usize> = Vec::new();
        let mut fit = None;
        for i in order {
            let r = &running[i];
            if !self.eligible(i, p, want, &gone) {
                continue;
            }
            for h in &self.live[i].holds {
                soon.unhold(h);
            }
            let g = gone.entry(r.queue.clone()).or_default();
            *g = g.plus(self.live[i].quota);
            chosen.push(i);
            if let Some(h) = place_gang(&mut self.placer, &soon, s, members) {
                fit = Some(h);
                break;
            }
            if chosen.len() >= 256 {
                break;
            }
        }
        if fit.is_none() {
            self.placer.set_cache(cached);
            return None;
        }
        // drop victims that turn out not to be needed, last chosen first
        for k in (0..chosen.len()).rev() {
            let i = chosen[k];
            let mut trial = soon.clone();
            for h in &self.live[i].holds {
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
}
