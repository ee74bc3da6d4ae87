//! GPU bookings: a queue books N GPUs (of a model) for a time window, and the scheduler keeps that many
//! free GPUs out of reach of everyone else whose run would overlap the window.
//!
//! Each pass picks concrete free GPUs to hold for every booking (nodes with the most suitable free GPUs
//! first, so that a booking stays together), minus what the booking queue already uses in the window.

use crate::config::Reservation;
use crate::model::{Cluster, Running, WHOLE};
use crate::state::{Hold, State};
use std::collections::BTreeSet;

/// One booking during a pass.
#[derive(Debug, Clone)]
struct Booking {
    queue: String,
    start: i64,
    end: i64,
    model: Option<Option<u16>>,
    /// GPUs still to keep free.
    want: u32,
    /// The flat GPUs held for it now.
    held: Vec<u32>,
}

/// All bookings of a pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bookings {
    items: Vec<Booking>,
}

impl Bookings {
    /// The bookings not yet over, with GPUs picked on `st` (which already holds what runs).
    pub(crate) fn new(res: &[Reservation], _cluster: &Cluster, st: &State, running: &[Running], now: i64) -> Self {
        let mut items = Vec::new();
        for r in res.iter().filter(|r| r.end_ms > now && r.gpus > 0) {
            let model = r.model.as_ref().map(|m| st.model_id(m));
            let mut want = r.gpus;
            if r.start_ms <= now {
                // what the queue already runs counts towards its booking
                let used: u64 = running
                    .iter()
                    .filter(|w| w.queue == r.queue)
                    .flat_map(|w| w.placements.iter().flat_map(|p| p.gpus.iter()))
                    .map(|g| u64::from(g.milli))
                    .sum();
                want = want.saturating_sub((used / u64::from(WHOLE)) as u32);
            }
            items.push(Booking { queue: r.queue.clone(), start: r.start_ms, end: r.end_ms, model, want, held: vec![] });
        }
        let mut b = Bookings { items };
        b.refresh(st);
        b
    }

    /// Re-picks held GPUs: drops those no longer wholly free and tops up from free GPUs.
    fn refresh(&mut self, st: &State) {
        let mut taken: BTreeSet<u32> = BTreeSet::new();
        for b in &mut self.items {
            b.held.retain(|&g| st.gpu_free[g as usize] == WHOLE);
            b.held.truncate(b.want as usize);
            taken.extend(b.held.iter().copied());
        }
        for b in &mut self.items {
            if b.held.len() >= b.want as usize {
                continue;
            }
            let ok = |g: usize| match b.model {
                None => true,
                Some(None) => false,
                Some(Some(m)) => st.gpu_model[g] == m,
            };
            let mut nodes: Vec<(usize, Vec<u32>)> = (0..st.nodes.len())
                .map(|n| {
                    let free = st.nodes[n]
                        .gpu_range()
                        .filter(|&g| ok(g) && st.gpu_free[g] == WHOLE && !taken.contains(&(g as u32)))
                        .map(|g| g as u32)
                        .collect();
                    (n, free)
                })
                .filter(|(_, f): &(usize, Vec<u32>)| !f.is_empty())
                .collect();
            nodes.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
            for (_, free) in nodes {
                for g in free {
                    if b.held.len() < b.want as usize {
                        b.held.push(g);
                        taken.insert(g);
                    }
                }
            }
        }
    }

    /// What a workload of `queue` running from `now` to `end` (none: open-ended) must leave free.
    pub(crate) fn holds_for(&self, st: &State, queue: &str, now: i64, end: Option<i64>) -> Vec<Hold> {
        let mut out: Vec<Hold> = Vec::new();
        for b in &self.items {
            let overlaps = end.is_none_or(|e| e > b.start) && now < b.end;
            if b.queue == queue || !overlaps {
                continue;
            }
            for &g in &b.held {
                out.push(Hold { node: st.node_of_gpu(g), cpu: 0, mem: 0, gpus: vec![(g, WHOLE, 0)], user: 0 });
            }
        }
        out
    }

    /// Notes a start (already held on `st`): the booking queue's use within the window counts towards its
    /// booking, and GPUs others took (outside the window) are replaced.
    pub(crate) fn used(&mut self, queue: &str, holds: &[Hold], st: &State, now: i64, end: Option<i64>) {
        if self.items.is_empty() {
            return;
        }
        for b in &mut self.items {
            let overlaps = end.is_none_or(|e| e > b.start) && now < b.end;
            if b.queue == queue && overlaps {
                let milli: u64 = holds.iter().flat_map(|h| h.gpus.iter()).map(|g| u64::from(g.1)).sum();
                b.want = b.want.saturating_sub((milli / u64::from(WHOLE)) as u32);
            }
        }
        self.refresh(st);
    }
}
