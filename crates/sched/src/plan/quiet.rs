//! The skips of a pass that wants only starts and preemptions ([`crate::decide`]): a workload whose
//! consideration provably changes nothing is not considered at all, and a queue's whole lane is passed
//! over once none of its workloads could change anything.
//!
//! Considering a workload changes the pass only when it starts, when it chooses victims, or when it
//! takes a reserved start (for backfill, or while workloads it waits for are stopping). A workload does
//! none of these when all of the following hold; each can only stay true as the pass goes on, until a
//! victim is chosen (which `Pass::victim_count` in the conditions accounts for):
//!
//! - it has no model list and no resource expression, and asks for GPUs;
//! - the free summary says it cannot fit now (`plan::quick_fail`, the same test the full consideration
//!   makes first; free resources only shrink during a pass);
//! - the reservation depth is used up (backfill on), so it would get no reserved start;
//! - preemption cannot help it: preemption is off, or it may not choose victims (no running workload
//!   has a lower priority, and its queue would not stay within a non-zero guarantee with it, so it
//!   cannot reclaim) and it would not fit even once the workloads already stopping and the victims of
//!   this pass are gone, with the reserved starts placed (the only room it would wait for); or an
//!   attempt with the same shape, queue, priority and request already found no room at the same
//!   progress of the pass (`Pass::no_preempt`).
//!
//! A lane's bounds (the smallest GPU count, gang total, fraction and request among its workloads, and
//! the highest priority) let the same test pass over the whole lane at once.

use crate::config::Backfill;
use crate::model::{Pending, WHOLE};
use crate::plan::{Pass, quick_fail, summary_of};
use crate::queue::Quota;
use crate::state::State;

/// What one lane's workloads need at least, for [`Pass::lane_dead`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bounds {
    /// Every workload has no model list and no expression and asks for GPUs.
    pub simple: bool,
    /// The highest priority.
    pub max_priority: i32,
    /// Whole-GPU workloads: the smallest GPU count per member and GPUs in all (none: there are none).
    pub whole: Option<(u32, u32)>,
    /// The smallest fraction asked (none: no fractional workload).
    pub fraction: Option<u32>,
    /// The smallest request in each resource.
    pub want: Quota,
}

impl Bounds {
    pub(crate) fn of<'p>(list: impl IntoIterator<Item = &'p Pending>) -> Bounds {
        let mut b =
            Bounds { simple: true, max_priority: i32::MIN, whole: None, fraction: None, want: Quota::UNLIMITED };
        for p in list {
            let (need, count) = p.request.gpu.shape();
            let members = p.members.max(1);
            b.simple &= count > 0 && p.request.gpu_models.is_empty() && p.request.constraint.is_none();
            b.max_priority = b.max_priority.max(p.priority);
            if need >= WHOLE {
                let total = count.saturating_mul(members);
                let (c, t) = b.whole.get_or_insert((u32::MAX, u32::MAX));
                (*c, *t) = ((*c).min(count), (*t).min(total));
            } else {
                b.fraction = Some(b.fraction.map_or(need, |f| f.min(need)));
            }
            let w = Quota::of_request(&p.request, members);
            b.want = Quota {
                gpu_milli: b.want.gpu_milli.min(w.gpu_milli),
                cpu_milli: b.want.cpu_milli.min(w.cpu_milli),
                memory: b.want.memory.min(w.memory),
            };
        }
        b
    }
}

impl<'a> Pass<'a> {
    /// Whether no reserved start can be taken any more (so blocked workloads change nothing by waiting).
    fn reservations_done(&self) -> bool {
        self.config.backfill == Backfill::On && self.reserved.len() >= self.config.reservation_depth
    }

    /// Whether preemption cannot help a workload of `priority` in `queue` asking `want`, for which
    /// `fails` says whether it cannot fit a state of the given free summary (see the module
    /// documentation): it may not choose victims, and it would not fit once the work already going is
    /// gone (the only room `Pass::preempt_for` then looks for).
    fn preemption_hopeless(
        &mut self,
        queue: usize,
        priority: i32,
        want: Quota,
        fails: impl Fn((u32, u32, u32)) -> bool,
    ) -> bool {
        if !self.config.preemption.enabled {
            return true;
        }
        let q = self.queues.at(queue);
        let reclaim = q.within_guarantee(want) && !q.spec.guarantee.within(Quota::default());
        if reclaim || self.min_running_priority < priority {
            return false;
        }
        if !self.any_stopping && self.victim_count == 0 {
            return true;
        }
        fails(self.soon_summary())
    }

    /// The free summary of the state `Pass::preempt_for` places on when it only waits for stopping work.
    fn soon_summary(&mut self) -> (u32, u32, u32) {
        let at = (self.generation, self.reserved.len(), self.victim_count);
        if let Some((k, s)) = self.soon_summary
            && k == at
        {
            return s;
        }
        let s = summary_of(self.soon_state().1);
        self.soon_summary = Some((at, s));
        s
    }

    /// The cluster once the workloads already going (stopping, or chosen as victims in this pass) are
    /// gone, with the reserved starts placed, and how many workloads are going: kept until something
    /// starts, takes a reserved start or is chosen as a victim.
    pub(crate) fn soon_state(&mut self) -> (usize, &State) {
        let at = (self.generation, self.reserved.len(), self.victim_count);
        if self.soon_state.as_ref().is_none_or(|(k, _, _)| *k != at) {
            let mut soon = self.st.clone();
            let mut going = 0;
            for (i, r) in self.running.iter().enumerate() {
                if r.stopping || self.victims[i] {
                    for h in self.live[i].holds.iter() {
                        soon.unhold(h);
                    }
                    going += 1;
                }
            }
            for r in &self.reserved {
                for h in &r.holds {
                    soon.hold(h);
                }
            }
            self.soon_state = Some((at, going, soon));
        }
        let (_, going, soon) = self.soon_state.as_ref().expect("kept just above");
        (*going, soon)
    }

    /// Whether considering `p` (of queue number `queue`) now would change nothing (see the module
    /// documentation).
    pub(crate) fn hopeless(&mut self, p: &'a Pending, queue: usize) -> bool {
        if !self.skips || !self.reservations_done() {
            return false;
        }
        let r = &p.request;
        let (need, count) = r.gpu.shape();
        if count == 0 || !r.gpu_models.is_empty() || r.constraint.is_some() {
            return false;
        }
        let members = p.members.max(1);
        if !quick_fail(need, count, members, self.free_summary()) {
            return false;
        }
        let want = Quota::of_request(r, members);
        if self.preemption_hopeless(queue, p.priority, want, |sum| quick_fail(need, count, members, sum)) {
            return true;
        }
        let s = self.st.shape(r);
        self.preempt_key(p, queue, &s, members, want).is_some_and(|k| self.no_preempt.contains(&k))
    }

    /// Whether every workload of the lane of queue number `queue` would change nothing now.
    pub(crate) fn lane_dead(&mut self, queue: usize, b: &Bounds) -> bool {
        if !self.skips || !b.simple || !self.reservations_done() {
            return false;
        }
        // the smallest count and total stand for every whole-GPU workload of the lane
        let (whole, fraction) = (b.whole, b.fraction);
        let fails = move |sum: (u32, u32, u32)| {
            whole.is_none_or(|(count, total)| quick_fail(WHOLE, count, 1, sum) || total > sum.1)
                && fraction.is_none_or(|need| quick_fail(need, 1, 1, sum))
        };
        fails(self.free_summary()) && self.preemption_hopeless(queue, b.max_priority, b.want, fails)
    }
}
