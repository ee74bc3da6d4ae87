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

/// Order key: negated priority, outside the guarantee, dominant share, submit time.
type OrderKey = (i32, bool, f64, i64);

/// One queue's pending workloads during a pass.
#[derive(Debug)]
pub(crate) struct Lane<'a> {
    /// Popped from the back: highest priority, then earliest, last.
    list: Vec<&'a Pending>,
    /// How many workloads at the back are known not to fit within the guarantee. A queue only takes
    /// more during a pass, so what did not fit stays so.
    skip: usize,
    /// The cached candidate: its key and its index in `list`.
    cached: Option<(OrderKey, usize)>,
    /// What its workloads need at least (for the skips of [`crate::decide`]).
    bounds: crate::quiet::Bounds,
}

impl<'a> Lane<'a> {
    /// A lane of `list` (in any order).
    pub(crate) fn new(mut list: Vec<&'a Pending>) -> Self {
        list.sort_by(|a, b| {
            a.priority.cmp(&b.priority).then(b.submit_ms.cmp(&a.submit_ms)).then_with(|| b.id.cmp(&a.id))
        });
        let bounds = crate::quiet::Bounds::of(&list);
        Lane { list, skip: 0, cached: None, bounds }
    }
}

impl<'a> Pass<'a> {
    /// Whether `p`'s queue, holding `p` too, stays within its guarantee.
    fn within(&self, p: &Pending) -> bool {
        let want = Quota::of_request(&p.request, p.members);
        self.queues.get(&p.queue).is_some_and(|s| s.within_guarantee(want))
    }

    /// The order key of `p`, the candidate of its queue.
    fn key(&self, p: &Pending) -> OrderKey {
        let share = self.queues.get(&p.queue).map_or(0.0, |s| s.share(self.capacity));
        (-p.priority, !self.within(p), share, p.submit_ms)
    }

    /// The index of the lane's candidate: the first workload of the top priority that fits within the
    /// guarantee, else the first one.
    fn candidate(&self, lane: &mut Lane<'a>) -> Option<usize> {
        let n = lane.list.len();
        let head = *lane.list.last()?;
        // all of a lane's workloads are of one queue: look it up once
        let Some(q) = self.queues.get(&head.queue) else {
            lane.skip = n;
            return Some(n - 1);
        };
        while lane.skip < n {
            let i = n - 1 - lane.skip;
            let p = lane.list[i];
            if p.priority != head.priority {
                break;
            }
            if q.within_guarantee(Quota::of_request(&p.request, p.members)) {
                return Some(i);
            }
            lane.skip += 1;
        }
        Some(n - 1)
    }

    /// Pops the next workload in order from the lanes.
    pub(crate) fn next(&mut self, lanes: &mut [Lane<'a>]) -> Option<&'a Pending> {
        let mut best: Option<(OrderKey, usize, &'a Pending)> = None;
        for (q, lane) in lanes.iter_mut().enumerate() {
            if self.quiet {
                // a lane none of whose workloads could change anything now is passed over
                let Some(head) = lane.list.first() else { continue };
                if self.lane_dead(&head.queue, &lane.bounds) {
                    continue;
                }
            }
            if lane.cached.is_none() {
                let Some(i) = self.candidate(lane) else { continue };
                lane.cached = Some((self.key(lane.list[i]), i));
            }
            let Some((key, i)) = lane.cached else { continue };
            let p = lane.list[i];
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
        let (_, q, _) = best?;
        let lane = &mut lanes[q];
        let (_, i) = lane.cached.take()?;
        if i + 1 == lane.list.len() {
            lane.skip = lane.skip.saturating_sub(1);
        }
        Some(lane.list.remove(i))
    }
}
