//! What the running workloads hold, compiled against the cluster (node names and GPU uuids turned into
//! numbers) and applied to a [`State`]; the compiled holds are kept between passes by
//! [`crate::Backlog`] for [`crate::decide_backlog`], so that a pass compiles only what started since the
//! last one.

use crate::fasthash::FastMap;
use crate::model::{Cluster, Running};
use crate::queue::Quota;
use crate::state::{Hold, State};
use std::sync::Arc;

/// How far ahead in the last pass's running list a running workload is looked for.
const LOOK_AHEAD: usize = 8;

/// The last pass's running workloads, in its order.
///
/// A workload's entry is found by a short look ahead in that list (callers keep their running list in
/// a stable order; a workload that moves further is compiled again, and its old entry counts as ended)
/// and matched by id and start time: a running workload keeps its placements while it runs, and a
/// workload started again (after a preemption) starts at another time. Another cluster shape empties
/// the cache.
#[derive(Debug, Clone, Default)]
pub(crate) struct HoldCache {
    /// Nodes and GPUs of the cluster the entries were compiled against.
    cluster: (usize, usize),
    /// (id, start, holds, quota) of the last pass's running workloads, in its order.
    last: Vec<Entry>,
    /// The state of the cluster with nothing running.
    empty: Option<State>,
}

/// A running workload's id, start, holds and quota.
type Entry = (String, i64, Arc<[Hold]>, Quota);

/// A running workload's holds and quota.
pub(crate) type Held = (Arc<[Hold]>, Quota);

/// The state of `cluster` with `running` held, and each running workload's holds and quota, in order;
/// taken from `cache` where it has them (and kept there for the next pass).
pub(crate) fn compile(cluster: &Cluster, running: &[Running], cache: Option<&mut HoldCache>) -> (State, Vec<Held>) {
    let Some(c) = cache else {
        let mut st = State::new(cluster);
        let ix = node_index(cluster);
        let out: Vec<Held> =
            running.iter().map(|r| (holds_of(cluster, &st, &ix, r).into(), Quota::of_running(r))).collect();
        for (holds, _) in &out {
            for h in holds.iter() {
                st.hold(h);
            }
        }
        return (st, out);
    };
    let shape = (cluster.nodes.len(), cluster.nodes.iter().map(|n| n.gpus.len()).sum::<usize>());
    if c.cluster != shape || c.empty.is_none() {
        *c = HoldCache { cluster: shape, empty: Some(State::new(cluster)), ..HoldCache::default() };
    }
    let mut last = std::mem::take(&mut c.last);
    let mut st = c.empty.clone().unwrap_or_else(|| State::new(cluster));
    let mut node_ix = None;
    let mut at = 0;
    let mut out = Vec::with_capacity(running.len());
    let mut entries = Vec::with_capacity(running.len());
    for r in running {
        let mut ahead = last.get(at..).unwrap_or_default().iter().take(LOOK_AHEAD);
        let found = ahead.position(|(id, started, _, _)| *started == r.started_ms && *id == r.id);
        let (id, holds, quota) = match found {
            Some(d) => {
                at += d + 1;
                let e = &mut last[at - 1];
                (std::mem::take(&mut e.0), e.2.clone(), e.3)
            }
            None => {
                let ix = node_ix.get_or_insert_with(|| node_index(cluster));
                let holds: Arc<[Hold]> = holds_of(cluster, &st, ix, r).into();
                (r.id.clone(), holds, Quota::of_running(r))
            }
        };
        for h in holds.iter() {
            st.hold(h);
        }
        entries.push((id, r.started_ms, holds.clone(), quota));
        out.push((holds, quota));
    }
    c.last = entries;
    (st, out)
}

/// Node numbers by name.
fn node_index(cluster: &Cluster) -> FastMap<&str, usize> {
    cluster.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect()
}

/// What running workload `r` holds, in numbers of `st` (placements on unknown nodes or GPUs are left out).
fn holds_of(cluster: &Cluster, st: &State, node_ix: &FastMap<&str, usize>, r: &Running) -> Vec<Hold> {
    let mut holds = Vec::with_capacity(r.placements.len());
    for p in &r.placements {
        let Some(&n) = node_ix.get(p.node.as_str()) else { continue };
        let node = &cluster.nodes[n];
        let start = st.nodes[n].gpu_start;
        let mut gpus = Vec::with_capacity(p.gpus.len());
        for g in &p.gpus {
            if let Some(k) = node.gpus.iter().position(|x| same_text(&x.uuid, &g.uuid)) {
                gpus.push((start + k as u32, g.milli, g.memory));
            }
        }
        let user = if st.any_single_user { crate::state::user_key(&r.user) } else { 0 };
        holds.push(Hold { node: n as u32, cpu: p.cpu_milli, mem: p.memory, gpus, user });
    }
    holds
}

/// Whether two strings are equal, compared from the end: GPU uuids of one node share their beginning.
fn same_text(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().rev().eq(b.bytes().rev())
}
