use super::*;
use crate::frag::{Dist, Measure, NodeView};
use crate::model::{Gpu, GpuRequest, Node, Placement};
use crate::state::State;
use rand::{Rng, SeedableRng};

#[test]
fn rebuild_counts_follow_the_distribution() {
    // the counts of tasks seen at which `Dist::observe_n` rebuilds
    let mut d = Dist::new(Measure::Paper);
    let s =
        State::new(&Cluster::default()).shape(&Request { gpu: GpuRequest::Whole { count: 1 }, ..Default::default() });
    let mut last = 0;
    for n in 1..=20_000u64 {
        let epoch = d.epoch;
        d.observe_n(&s, 1);
        if d.epoch != epoch {
            last = n;
        }
        assert_eq!(last_rebuild(n), last, "after {n} tasks");
    }
    assert_eq!(last_rebuild(0), 0);
}

#[test]
fn trees_sum_and_reach() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for len in [1usize, 2, 3, 7, 64, 100] {
        let vals: Vec<u64> = (0..len).map(|_| rng.gen_range(0..4)).collect();
        let mut t = vec![0; len];
        for (i, &v) in vals.iter().enumerate() {
            tree_add(&mut t, i, v, true);
        }
        for n in 0..=len {
            assert_eq!(tree_prefix(&t, n), vals[..n].iter().sum::<u64>());
        }
        for r in 1..=vals.iter().sum::<u64>() {
            let (pos, before) = tree_reach(&t, r);
            assert_eq!(before, vals[..pos].iter().sum::<u64>());
            assert!(before < r && before + vals[pos] >= r, "len {len}, r {r}: pos {pos}");
        }
    }
}

fn cluster() -> Cluster {
    Cluster {
        nodes: (0..4)
            .map(|i| Node {
                name: format!("n{i}"),
                cpu_milli: 64_000,
                memory: 256 << 30,
                labels: Default::default(),
                gpus: (0..8)
                    .map(|k| Gpu {
                        uuid: format!("n{i}-{k}"),
                        index: k,
                        model: "V100".into(),
                        memory: 16 << 30,
                        single_user: false,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// A workload of `gpus` whole GPUs per member.
fn job(ord: usize, gpus: u32, members: u32) -> Pending {
    Pending {
        id: format!("j{ord}"),
        queue: format!("q{}", ord % 3),
        user: String::new(),
        priority: 0,
        submit_ms: ord as i64,
        request: Request {
            cpu_milli: u64::from(gpus) * 4000,
            memory: u64::from(gpus) * (32 << 30),
            gpu: GpuRequest::Whole { count: gpus },
            ..Default::default()
        },
        members,
        runtime_limit_ms: Some(1000),
    }
}

/// The size distribution a pass scores against, as numbers: its epoch and the fragmentation of a few
/// nodes.
fn scores(d: &Dist) -> Vec<f64> {
    let views = [(64_000, 256 << 30, 8), (8000, 64 << 30, 3), (20_000, 32 << 30, 5), (4000, 1 << 30, 1)];
    let mut v = vec![f64::from(d.epoch)];
    for (cpu, mem, free) in views {
        let gpus = (0..8).map(|g| (if g < free { 1000 } else { 0 }, 0)).collect();
        v.push(d.frag(&NodeView { cpu, mem, gpus }));
    }
    v
}

/// Backlogs of thousands of workloads of mixed sizes, with running placements: the distribution noted
/// from the backlog is the one a pass over the same workloads as a slice notes, around the counts where
/// it is rebuilt.
#[test]
fn the_backlog_notes_the_distribution_of_the_slice() {
    let c = cluster();
    let config = Config { policy: crate::Policy::FgdPlus, ..Config::default() };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut backlog = Backlog::new();
    let st = State::new(&c);
    let running: Vec<Running> = (0..40)
        .map(|i| Running {
            id: format!("r{i}"),
            queue: String::new(),
            user: String::new(),
            priority: 0,
            started_ms: 0,
            runtime_limit_ms: None,
            placements: vec![Placement {
                node: format!("n{}", i % 4),
                gpus: (0..1 + i % 3)
                    .map(|k| crate::model::GpuShare { uuid: format!("n{}-{k}", i % 4), milli: 1000, memory: 0 })
                    .collect(),
                cpu_milli: 2000 + 1000 * (i as u64 % 5),
                memory: 8 << 30,
            }],
            preemptible: true,
            long_running: false,
            stopping: false,
        })
        .collect();
    let mut checked = 0;
    for step in 0..6000usize {
        let ord = rng.gen_range(0..5000);
        if rng.gen_bool(0.2) {
            backlog.remove(ord);
        } else {
            let gpus = [1, 1, 1, 2, 4, 8][rng.gen_range(0..6)];
            backlog.insert(ord, job(ord, gpus, if gpus == 8 { rng.gen_range(1..3) } else { 1 }));
        }
        if step % 97 != 0 && !(4000..4200).contains(&step) {
            continue;
        }
        for run in [&running[..0], &running[..]] {
            let mut a = Pass::new(&c, run, &config, 0);
            backlog.observe(&mut a);
            let slice = backlog.to_vec();
            let mut b = Pass::new(&c, run, &config, 0);
            let shapes: Vec<_> = slice.iter().map(|p| (st.shape(&p.request), weight(p))).collect();
            b.observe(shapes.into_iter().chain(b.running_shapes()));
            assert_eq!(scores(&a.placer.dist), scores(&b.placer.dist), "{} waiting", backlog.len());
            checked += 1;
        }
    }
    assert!(checked > 100);
}

/// Each lane's order and bounds, kept as workloads come and go, are those a pass over the slice
/// computes.
#[test]
fn lanes_keep_the_order_and_bounds_of_the_slice() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let mut backlog = Backlog::new();
    for step in 0..3000usize {
        let ord = rng.gen_range(0..300);
        if rng.gen_bool(0.35) {
            backlog.remove(ord);
        } else {
            let mut p = job(ord, [1, 2, 4, 8][rng.gen_range(0..4)], rng.gen_range(1..4));
            p.priority = rng.gen_range(0..3);
            p.submit_ms = rng.gen_range(0..50);
            if rng.gen_bool(0.1) {
                p.request.gpu = GpuRequest::Fraction { milli: rng.gen_range(1..1000), memory: None };
            }
            if rng.gen_bool(0.05) {
                p.request.gpu_models = vec!["V100".into()];
            }
            if rng.gen_bool(0.2) {
                p.id = format!("j{}", ord % 7);
            }
            backlog.insert(ord, p);
        }
        if step % 10 != 0 {
            continue;
        }
        let slice = backlog.to_vec();
        let mut queues: Vec<&str> = slice.iter().map(|p| p.queue.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        let names: Vec<&str> = backlog.lanes.keys().map(String::as_str).collect();
        assert_eq!(names, queues);
        for (q, lane) in &backlog.lanes {
            let mut want: Vec<u32> = (0..slice.len() as u32).filter(|&i| slice[i as usize].queue == *q).collect();
            crate::plan::order::lane_order(&slice, &mut want);
            let got: Vec<&Pending> = lane.order.iter().map(|&s| &backlog.items[s as usize]).collect();
            let want: Vec<&Pending> = want.iter().map(|&i| &slice[i as usize]).collect();
            assert_eq!(got, want, "order of lane {q}");
            assert_eq!(lane.bounds(&backlog.items), Bounds::of(want), "bounds of lane {q}");
        }
    }
}
