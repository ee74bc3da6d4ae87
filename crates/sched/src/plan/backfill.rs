//! Reserved starts for blocked workloads: when the run-time limits of what runs say a workload will fit,
//! and the cluster as it will be then with the workload placed. Later workloads that would still run at
//! that time must leave its resources alone (see `Pass::try_place`).

use crate::config::Backfill;
use crate::model::Pending;
use crate::plan::{Live, Pass, Reserved, place_gang};
use crate::state::{Hold, Shape, State};

impl Pass<'_> {
    /// Estimates when `p` can start and, with `commit`, backfill on and room in the reservation depth,
    /// reserves that start. Returns the estimate.
    pub(crate) fn reserve(&mut self, p: &Pending, s: &Shape, members: u32, commit: bool) -> Option<i64> {
        if commit && self.reserved.len() >= self.config.reservation_depth {
            return None;
        }
        // the releases change only when work starts or is chosen as a victim: sorted once per such change
        let at = (self.started.len(), self.victim_count);
        let mut cache = self.releases.take().filter(|c| c.0 == at);
        let order = &cache
            .get_or_insert_with(|| {
                (at, releases(&self.live, &self.started, &self.victims, self.now, self.config.preemption.grace_ms))
            })
            .1;
        // the cluster with the earlier reserved starts placed (conservatively, for good)
        let mut base = self.reserved_base();
        let (live, started) = (&self.live, &self.started);
        let holds = |src: Source| -> &[Hold] {
            match src {
                Source::Live(i) => &live[i].holds[..],
                Source::Started(i) => &started[i].0,
            }
        };
        let rel = order.as_slice();
        // walk the releases in time order on one copy, counting how many members the cluster could take
        // (per node, updated only where a release lands); place for real once the count suffices
        let mut copies: Vec<u64> = (0..base.nodes.len()).map(|n| base.copies(n, s)).collect();
        let mut total: u64 = copies.iter().sum();
        let want = u64::from(members);
        let cached = self.placer.set_cache(false);
        let mut found = None;
        let mut hi = 0;
        loop {
            if total >= want {
                if let Some(holds) = place_gang(&mut self.placer, &base, s, members) {
                    found = Some(holds);
                    break;
                }
            }
            if hi == rel.len() {
                break;
            }
            // apply every release at this time
            let t = rel[hi].0;
            while hi < rel.len() && rel[hi].0 == t {
                for h in holds(rel[hi].1) {
                    base.unhold(h);
                    let n = h.node as usize;
                    total -= copies[n];
                    copies[n] = base.copies(n, s);
                    total += copies[n];
                }
                hi += 1;
            }
        }
        self.placer.set_cache(cached);
        let at = if hi == 0 { self.now } else { rel[hi - 1].0.max(self.now) };
        self.releases = cache;
        let holds = found?;
        let mut future = base;
        if commit && self.config.backfill == Backfill::On {
            for h in &holds {
                future.hold(h);
            }
            self.reserved.push(Reserved { id: p.id.clone(), at_ms: at, future, holds });
        }
        Some(at)
    }
}

impl Pass<'_> {
    /// The cluster now with the reserved starts placed in order (kept for the next call until
    /// something starts; reserved starts are only added to).
    pub(crate) fn reserved_base(&mut self) -> State {
        let (generation, mut done, mut base) = match self.reserved_base.take() {
            Some(b) if b.0 == self.generation => b,
            _ => (self.generation, 0, self.st.clone()),
        };
        for r in &self.reserved[done..] {
            for h in &r.holds {
                base.hold(h);
            }
        }
        done = self.reserved.len();
        let copy = base.clone();
        self.reserved_base = Some((generation, done, base));
        copy
    }
}

/// Where a release comes from: a running workload or one started in this pass (by index).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    Live(usize),
    Started(usize),
}

/// Resources expected back, soonest first: running workloads with a known end (victims and stopping ones
/// at the end of their grace) and workloads started in this pass with a run-time limit.
fn releases(
    live: &[Live],
    started: &[(Vec<Hold>, Option<i64>)],
    victims: &[bool],
    now: i64,
    grace: i64,
) -> Vec<(i64, Source)> {
    let mut rel: Vec<(i64, Source)> = Vec::new();
    for (i, l) in live.iter().enumerate() {
        let end = if victims[i] { Some(now + grace) } else { l.end_ms };
        if let Some(e) = end {
            rel.push((e, Source::Live(i)));
        }
    }
    for (i, (_, end)) in started.iter().enumerate() {
        if let Some(e) = end {
            rel.push((*e, Source::Started(i)));
        }
    }
    rel.sort_by_key(|r| r.0);
    rel
}
