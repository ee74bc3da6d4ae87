//! The lanes against the rule they implement, written out plainly: each queue's candidate is its first
//! workload of the top priority that fits within the guarantee, else its first one; the candidate of
//! least key (priority, outside the guarantee, share, submit time, id) goes next.

use super::*;
use crate::config::Config;
use crate::model::{Cluster, GpuRequest, Request};
use crate::queue::QueueSpec;
use rand::{Rng, SeedableRng};

/// The next workload by the rule, from what is left of each queue's workloads.
fn reference(pass: &Pass<'_>, left: &[Vec<&Pending>], qix: &[usize]) -> Option<(usize, usize)> {
    let mut best: Option<(OrderKey, &str, usize, usize)> = None;
    for (q, list) in left.iter().enumerate() {
        let mut sorted: Vec<(usize, &&Pending)> = list.iter().enumerate().collect();
        sorted.sort_by(|a, b| taken_order(a.1, b.1).then(b.0.cmp(&a.0)));
        let Some(&(_, head)) = sorted.first() else { continue };
        let (i, p) = sorted
            .iter()
            .find(|(_, p)| p.priority == head.priority && pass.within(p, qix[q]))
            .map_or((sorted[0].0, *head), |&(i, p)| (i, *p));
        let key = pass.key(p, qix[q]);
        let better = best.as_ref().is_none_or(|(k, id, _, _)| {
            let c = key.0.cmp(&k.0).then(key.1.cmp(&k.1)).then(key.2.total_cmp(&k.2)).then(key.3.cmp(&k.3));
            c.then_with(|| p.id.as_str().cmp(id)).is_lt()
        });
        if better {
            best = Some((key, p.id.as_str(), q, i));
        }
    }
    best.map(|(_, _, q, i)| (q, i))
}

#[test]
fn lanes_take_workloads_by_the_rule() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let cluster = Cluster::default();
    for case in 0..300 {
        let queues = rng.gen_range(1..4);
        let config = Config {
            queues: (0..queues)
                .map(|q| QueueSpec {
                    guarantee: Quota { gpu_milli: rng.gen_range(0..6) * 1000, cpu_milli: 1 << 40, memory: 1 << 60 },
                    weight: 1.0 + q as f64,
                    ..QueueSpec::open(&format!("q{q}"))
                })
                .collect(),
            ..Config::default()
        };
        let pending: Vec<Pending> = (0..rng.gen_range(1..40))
            .map(|i| Pending {
                id: format!("p{}", if case % 4 == 0 { i % 5 } else { i }),
                queue: format!("q{}", rng.gen_range(0..queues + 1)),
                user: String::new(),
                priority: rng.gen_range(0..3),
                submit_ms: rng.gen_range(0..10),
                request: Request { gpu: GpuRequest::Whole { count: rng.gen_range(1..4) }, ..Default::default() },
                members: 1,
                runtime_limit_ms: None,
            })
            .collect();
        let mut pass = Pass::new(&cluster, &[], &config, 0);
        let names: Vec<String> = (0..=queues).map(|q| format!("q{q}")).collect();
        let mut orders: Vec<Vec<u32>> = names
            .iter()
            .map(|q| (0..pending.len() as u32).filter(|&i| pending[i as usize].queue == *q).collect())
            .collect();
        for o in &mut orders {
            lane_order(&pending, o);
        }
        let mut left: Vec<Vec<&Pending>> =
            names.iter().map(|q| pending.iter().filter(|p| p.queue == *q).collect()).collect();
        let mut lanes = Vec::new();
        let mut qix = Vec::new();
        for (q, o) in names.iter().zip(&orders) {
            qix.push(pass.queue(q));
            let list: Vec<&Pending> = o.iter().map(|&i| &pending[i as usize]).collect();
            lanes.push(Lane::new(qix[qix.len() - 1], &pending, o, crate::plan::quiet::Bounds::of(list)));
        }
        let mut taken = 0;
        while let Some((p, pq)) = pass.next(&mut lanes) {
            let (q, i) = reference(&pass, &left, &qix).expect("the rule has a next workload too");
            assert_eq!(pq, qix[q]);
            let want = left[q].remove(i);
            assert_eq!(
                (&p.id, p.priority, p.submit_ms, &p.queue),
                (&want.id, want.priority, want.submit_ms, &want.queue)
            );
            assert!(std::ptr::eq(p, want), "case {case}: the same workload");
            if rng.gen_bool(0.5) {
                // it starts: its queue holds more
                pass.queues.at_mut(pq).take(&p.user, Quota::of_request(&p.request, p.members));
            }
            taken += 1;
        }
        assert_eq!(taken, pending.len());
    }
}
