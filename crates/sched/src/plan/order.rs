//! The order in which one pass considers pending workloads: priority (high first), then workloads that
//! stay within their queue's guarantee, then the queue's weighted dominant share (low first, updated as
//! work starts), then submit time (then id).
//!
//! Each queue keeps its workloads in priority-then-submit order. Its candidate is its first workload,
//! except that a later workload of the same priority that fits within the queue's guarantee goes before
//! earlier ones that do not: a team below its guarantee is served what it is guaranteed before it
//! borrows, even when its oldest workload is too big to fit within the guarantee (that workload would
//! otherwise keep a reserved start that blocks the smaller one, and sort behind borrowing queues).

use crate::model::Pending;
use crate::plan::Pass;
use crate::queue::Quota;
use std::collections::VecDeque;

/// Order key: negated priority, outside the guarantee, dominant share, submit time.
type OrderKey = (i32, bool, f64, i64);

/// One queue's pending workloads during a pass: a cursor over them in the order they are taken.
#[derive(Debug)]
pub(crate) struct Lane<'a, 'l> {
    /// The number of its queue in the pass.
    queue: usize,
    /// The workloads.
    pending: &'a [Pending],
    /// Indices into `pending`, in the order they are taken: highest priority, then earliest, then id.
    order: &'l [u32],
    /// The first position of `order` not yet examined.
    next: usize,
    /// Workloads examined and known not to fit within the guarantee, still waiting (in order). A queue
    /// only takes more during a pass, so what did not fit stays so; they come before `order[next..]`.
    kept: VecDeque<u32>,
    /// None of its workloads can fit within the queue's guarantee: they are taken in order.
    all_kept: bool,
    /// The cached candidate: its key, and whether it is `order[next]` rather than the head.
    cached: Option<(OrderKey, bool)>,
    /// What its workloads need at least (for the skips of [`crate::decide`]).
    bounds: crate::plan::quiet::Bounds,
}

/// The order in which a lane takes its workloads: highest priority, then earliest, then id; equal
/// keys (the same id twice) last in the slice first.
fn taken_order(x: &Pending, y: &Pending) -> std::cmp::Ordering {
    y.priority.cmp(&x.priority).then(x.submit_ms.cmp(&y.submit_ms)).then_with(|| x.id.cmp(&y.id))
}

/// Sorts one lane's workloads (`pending[i]` for `i` in `list`) in the order [`Lane`] takes them.
pub(crate) fn lane_order(pending: &[Pending], list: &mut [u32]) {
    list.sort_by(|&a, &b| taken_order(&pending[a as usize], &pending[b as usize]).then(b.cmp(&a)));
}

/// Whether a lane takes `items[a]` before `items[b]`, where `ords` gives their places in the slice.
pub(crate) fn taken_before(items: &[Pending], ords: &[usize], a: u32, b: u32) -> bool {
    let (a, b) = (a as usize, b as usize);
    taken_order(&items[a], &items[b]).then(ords[b].cmp(&ords[a])).is_lt()
}

impl<'a, 'l> Lane<'a, 'l> {
    /// A lane of queue `queue` over `pending[i]` for `i` in `order` (sorted by [`lane_order`]), whose
    /// workloads need at least `bounds`; `order` is not empty.
    pub(crate) fn new(
        queue: usize,
        pending: &'a [Pending],
        order: &'l [u32],
        bounds: crate::plan::quiet::Bounds,
    ) -> Self {
        Lane { queue, pending, order, next: 0, kept: VecDeque::new(), all_kept: false, cached: None, bounds }
    }

    /// The first waiting workload.
    fn head(&self) -> Option<&'a Pending> {
        let i = self.kept.front().copied().or_else(|| self.order.get(self.next).copied())?;
        Some(&self.pending[i as usize])
    }

    /// The candidate cached as `at_next` (see [`Lane::cached`]).
    fn pick(&self, at_next: bool) -> Option<&'a Pending> {
        if at_next { self.order.get(self.next).map(|&i| &self.pending[i as usize]) } else { self.head() }
    }

    /// Whether every workload has been taken.
    fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.next == self.order.len()
    }
}

impl<'a> Pass<'a> {
    /// Whether `p`'s queue (number `queue`), holding `p` too, stays within its guarantee.
    pub(crate) fn within(&self, p: &Pending, queue: usize) -> bool {
        let want = Quota::of_request(&p.request, p.members);
        self.queues.at(queue).within_guarantee(want)
    }

    /// The order key of `p`, the candidate of its queue (number `queue`).
    pub(crate) fn key(&self, p: &Pending, queue: usize) -> OrderKey {
        let share = self.queues.at(queue).share(self.capacity);
        (-p.priority, !self.within(p, queue), share, p.submit_ms)
    }

    /// The lane's candidate: the first workload of the top priority that fits within the guarantee
    /// (true: `order[next]`), else the head (false).
    fn candidate(&self, lane: &mut Lane<'a, '_>) -> Option<bool> {
        let head = lane.head()?;
        if lane.all_kept {
            return Some(false);
        }
        // all of a lane's workloads are of one queue
        let q = self.queues.at(lane.queue);
        if !q.within_guarantee(lane.bounds.want) {
            // not even the least of its asks fits within the guarantee, and a queue only takes more
            // during a pass: none of its workloads will, and they are taken in order
            lane.all_kept = true;
            return Some(false);
        }
        while let Some(&i) = lane.order.get(lane.next) {
            let p = &lane.pending[i as usize];
            if p.priority != head.priority {
                break;
            }
            if q.within_guarantee(Quota::of_request(&p.request, p.members)) {
                return Some(!lane.kept.is_empty());
            }
            lane.kept.push_back(i);
            lane.next += 1;
        }
        Some(false)
    }

    /// Pops the next workload in order from the lanes, with the number of its queue.
    pub(crate) fn next(&mut self, lanes: &mut [Lane<'a, '_>]) -> Option<(&'a Pending, usize)> {
        let mut best: Option<(OrderKey, usize, &'a Pending)> = None;
        for (q, lane) in lanes.iter_mut().enumerate() {
            if lane.is_empty() {
                continue;
            }
            if self.quiet {
                // a lane none of whose workloads could change anything now is passed over
                if self.lane_dead(lane.queue, &lane.bounds) {
                    continue;
                }
            }
            if lane.cached.is_none() {
                let Some(p) = self.candidate(lane).and_then(|at_next| Some((lane.pick(at_next)?, at_next))) else {
                    continue;
                };
                lane.cached = Some((self.key(p.0, lane.queue), p.1));
            }
            let Some((key, at_next)) = lane.cached else { continue };
            let Some(p) = lane.pick(at_next) else { continue };
            let better = match &best {
                None => true,
                Some((k, _, b)) => {
                    let c = key.0.cmp(&k.0).then(key.1.cmp(&k.1)).then(key.2.total_cmp(&k.2)).then(key.3.cmp(&k.3));
                    c.then_with(|| p.id.cmp(&b.id)).is_lt()
                }
            };
            if better {
                best = Some((key, q, p));
            }
        }
        let (_, q, p) = best?;
        let lane = &mut lanes[q];
        let (_, at_next) = lane.cached.take()?;
        if at_next || lane.kept.pop_front().is_none() {
            lane.next += 1;
        }
        Some((p, lane.queue))
    }
}

#[cfg(test)]
mod tests;
