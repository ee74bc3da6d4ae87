//! The FGD protocol (Weng et al., ATC'23) on Alibaba GPU-sharing traces: the cluster is the node list;
//! the workload is the pod list "tuned" to a multiple of the cluster's milli-GPU (copies drawn with
//! replacement, or thinned at random) and shuffled; tasks arrive one by one, never leave, and either
//! fit somewhere or fail. The metric is the GPU allocation ratio as arrived demand grows.

use crate::trace::Task;
use gpuhub_sched::{Cluster, Placer, Policy, Shape, State};
use rand::Rng;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

/// The outcome of one seed.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedRun {
    /// Allocation ratio (%) when arrived demand first reaches 100% of capacity.
    pub alloc_at_100: f64,
    /// `curve[p]`: allocation ratio (%) when arrived demand first reaches `p`% of capacity.
    pub curve: Vec<f64>,
    /// Tasks in the tuned workload.
    pub tasks: usize,
    /// Tasks that found no place.
    pub failed: usize,
    /// Wall-clock seconds of the run (placement only).
    pub seconds: f64,
}

/// The task order for `seed`: every task kept and copies drawn with replacement appended until the next
/// would pass `tune` × capacity (or tasks removed at random while above it), then shuffled.
pub fn tuned_order(tasks: &[Task], capacity: u64, tune: f64, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let target = (capacity as f64 * tune).floor() as u64;
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    let mut total: u64 = tasks.iter().map(Task::milli).sum();
    if total > target {
        order.shuffle(rng);
        while total > target {
            let Some(i) = order.pop() else { break };
            total -= tasks[i].milli();
        }
    } else if tasks.iter().any(|t| t.milli() > 0) {
        loop {
            let i = rng.gen_range(0..tasks.len());
            if total + tasks[i].milli() > target {
                break;
            }
            total += tasks[i].milli();
            order.push(i);
        }
    }
    order.shuffle(rng);
    order
}

/// Runs one seed of the protocol with `policy`.
pub fn run_seed(cluster: &Cluster, tasks: &[Task], tune: f64, seed: u64, policy: Policy) -> SeedRun {
    let mut st = State::new(cluster);
    let capacity = st.gpu_milli_total.max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let order = tuned_order(tasks, capacity, tune, &mut rng);
    let shapes: Vec<Shape> = tasks.iter().map(|t| st.shape(&t.request)).collect();
    let started = Instant::now();
    let mut placer = Placer::new(policy, seed);
    let mut arrived: u64 = 0;
    let mut curve = vec![0.0];
    let mut failed = 0;
    for &i in &order {
        let s = &shapes[i];
        placer.observe(s);
        arrived += s.milli();
        match placer.choose(&st, s) {
            Some(c) => st.apply(&c, s),
            None => failed += 1,
        }
        let alloc = st.gpu_milli_used as f64 * 100.0 / capacity as f64;
        while (curve.len() as u64) * capacity <= arrived * 100 {
            curve.push(alloc);
        }
    }
    let alloc_at_100 = curve.get(100).copied().unwrap_or(st.gpu_milli_used as f64 * 100.0 / capacity as f64);
    SeedRun { alloc_at_100, curve, tasks: order.len(), failed, seconds: started.elapsed().as_secs_f64() }
}
