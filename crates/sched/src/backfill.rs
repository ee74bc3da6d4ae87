//! Reserved starts for blocked workloads: when the run-time limits of what runs say a workload will fit,
//! and the cluster as it will be then with the workload placed. Later workloads that would still run at
//! that time must leave its resources alone (see `Pass::try_place`).

use crate::config::Backfill;
use crate::model::Pending;
use crate::plan::{Live, Pass, Reserved, place_gang};
use crate::state::{Hold, Shape};

impl Pass<'_> {
    /// Estimates when `p` can start and, with backfill on and room in the reservation depth, reserves
    /// that start. Returns the estimate.
    pub(crate) fn reserve(&mut self, p: &Pending, s: &Shape, members: u32, end: Option<i64>) -> Option<i64> {
        if self.reserved.len() >= self.config.reservation_depth {
            return None;
        }
        let rel = releases(&self.live, &self.started, &self.victims, self.now, self.config.preemption.grace_ms);
        // the cluster with the earlier reserved starts placed (conservatively, for good)
        let mut base = self.st.clone();
        for r in &self.reserved {
            for h in &r.holds {
                base.hold(h);
            }
        }
        let placer = &mut self.placer;
        let cached = placer.set_cache(false);
        let fits_after = |k: usize, placer: &mut crate::policy::Placer| {
            let mut st = base.clone();
            for (_, holds) in &rel[..k] {
                for h in holds.iter() {
                    st.unhold(h);
                }
            }
            let holds = place_gang(placer, &st, s, members);
            holds.map(|h| (st, h))
        };
        let mut found = fits_after(rel.len(), placer);
        if found.is_none() {
            placer.set_cache(cached);
            return None;
        }
        let (mut lo, mut hi) = (0usize, rel.len());
        // smallest k with a fit: fits(hi) holds, search below
        while lo < hi {
            let mid = (lo + hi) / 2;
            match fits_after(mid, placer) {
                Some(f) => {
                    hi = mid;
                    found = Some(f);
                }
                None => lo = mid + 1,
            }
        }
        placer.set_cache(cached);
        let (mut future, holds) = found?;
        let at = if hi == 0 { self.now } else { rel[hi - 1].0.max(self.now) };
        let _ = end;
        if self.config.backfill == Backfill::On {
            for h in &holds {
                future.hold(h);
            }
            self.reserved.push(Reserved { id: p.id.clone(), at_ms: at, future, holds });
        }
        Some(at)
    }
}

/// Resources expected back, soonest first: running workloads with a known end (victims and stopping ones
/// at the end of their grace) and workloads started in this pass with a run-time limit.
fn releases<'p>(
    live: &'p [Live],
    started: &'p [(Vec<Hold>, Option<i64>)],
    victims: &[bool],
    now: i64,
    grace: i64,
) -> Vec<(i64, &'p [Hold])> {
    let mut rel: Vec<(i64, &[Hold])> = Vec::new();
    for (i, l) in live.iter().enumerate() {
        let end = if victims[i] { Some(now + grace) } else { l.end_ms };
        if let Some(e) = end {
            rel.push((e, &l.holds));
        }
    }
    for (holds, end) in started {
        if let Some(e) = end {
            rel.push((*e, holds));
        }
    }
    rel.sort_by_key(|r| r.0);
    rel
}
