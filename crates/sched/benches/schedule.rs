//! One scheduling decision: placing one workload on a large cluster (per policy), one `schedule()`
//! pass of the server's single-node tick, and one pass with 5,000 workloads waiting on a full cluster
//! (`schedule()` and `decide()`).

use criterion::{Criterion, criterion_group, criterion_main};
use gpuhub_sched::*;
use std::hint::black_box;

fn cluster(nodes: usize, g: u32) -> Cluster {
    Cluster {
        nodes: (0..nodes)
            .map(|i| Node {
                name: format!("node-{i:05}"),
                cpu_milli: u64::from(g) * 16_000,
                memory: u64::from(g) * (128 << 30),
                labels: Default::default(),
                gpus: (0..g)
                    .map(|k| Gpu {
                        uuid: format!("node-{i:05}/{k}"),
                        index: k,
                        model: "H100".into(),
                        memory: 80 << 30,
                        single_user: false,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn req(gpu: GpuRequest, cores: u64) -> Request {
    Request { cpu_milli: cores * 1000, memory: cores << 32, gpu, ..Default::default() }
}

/// A half-full cluster of 5000 nodes x 8 GPUs and a placer that has seen the mix.
fn half_full(policy: Policy) -> (State, Placer, Vec<Shape>) {
    let c = cluster(5000, 8);
    let mut st = State::new(&c);
    let mix = [
        req(GpuRequest::Whole { count: 1 }, 8),
        req(GpuRequest::Fraction { milli: 500, memory: None }, 4),
        req(GpuRequest::Fraction { milli: 250, memory: None }, 2),
        req(GpuRequest::Whole { count: 2 }, 16),
        req(GpuRequest::None, 4),
        req(GpuRequest::Fraction { milli: 810, memory: None }, 6),
    ];
    let shapes: Vec<Shape> = mix.iter().map(|r| st.shape(r)).collect();
    let mut placer = Placer::new(policy, 1);
    for i in 0..20_000 {
        let s = &shapes[(i * 7) % shapes.len()];
        placer.observe(s);
        if let Some(ch) = placer.choose(&st, s) {
            st.apply(&ch, s);
        }
    }
    (st, placer, shapes)
}

fn decision(c: &mut Criterion) {
    for policy in [Policy::BestFit, Policy::Fgd, Policy::FgdPlus] {
        let (mut st, mut placer, shapes) = half_full(policy);
        let mut i = 0;
        c.bench_function(&format!("place one workload, 5000x8, {policy}"), |b| {
            b.iter(|| {
                let s = &shapes[i % shapes.len()];
                i += 1;
                // place and take back, so the cluster stays half full
                if let Some(ch) = placer.choose(&st, s) {
                    st.apply(&ch, s);
                    st.release(&ch, s);
                }
            })
        });
    }
}

fn server_tick(c: &mut Criterion) {
    let one = cluster(1, 8);
    let pending: Vec<Pending> = (0..50)
        .map(|i| Pending {
            id: format!("w{i}"),
            queue: String::new(),
            user: format!("u{}", i % 5),
            priority: (i % 3) as i32,
            submit_ms: i,
            request: req(GpuRequest::Whole { count: 1 + (i % 2) as u32 }, 2),
            members: 1,
            runtime_limit_ms: None,
        })
        .collect();
    let cfg = Config::default();
    c.bench_function("schedule(), one node x 8 GPUs, 50 pending", |b| {
        b.iter(|| black_box(schedule(&one, &[], &pending, &cfg, 0)))
    });
}

/// A full cluster of 60 nodes x 8 GPUs shared by 15 team queues with guarantees (one GPU each running
/// job, with run-time limits), and 5,000 waiting jobs in the Philly mix (mostly one GPU, some 2, 4 and
/// 8, and gangs of 2 x 8): the contended trace replay's steady state. Some teams hold less than their
/// guarantee, so the pass also chooses victims.
fn full_cluster_backlog() -> (Cluster, Vec<Running>, Vec<Pending>, Config) {
    let c = cluster(60, 8);
    let teams = 15;
    let queue = |i: usize| format!("team{:02}", i % teams);
    let gpus = |count: u32| Request {
        cpu_milli: u64::from(count) * 4000,
        memory: u64::from(count) * (32 << 30),
        gpu: GpuRequest::Whole { count },
        ..Default::default()
    };
    let mut running = Vec::new();
    for (n, node) in c.nodes.iter().enumerate() {
        for g in &node.gpus {
            let i = running.len();
            running.push(Running {
                id: format!("r{i}"),
                queue: queue(i * 7 + n),
                user: String::new(),
                priority: 0,
                started_ms: -((i as i64 * 7_919) % 3_600_000),
                runtime_limit_ms: Some(3_600_000 + (i as i64 * 104_729) % 36_000_000),
                placements: vec![Placement {
                    node: node.name.clone(),
                    gpus: vec![GpuShare { uuid: g.uuid.clone(), milli: WHOLE, memory: 0 }],
                    cpu_milli: 4000,
                    memory: 32 << 30,
                }],
                preemptible: true,
                long_running: false,
                stopping: false,
            });
        }
    }
    let pending: Vec<Pending> = (0..5000)
        .map(|i| {
            let (count, members) = match i % 50 {
                0 => (8, 2),
                1 | 2 => (8, 1),
                3 | 4 => (4, 1),
                5 | 6 => (2, 1),
                _ => (1, 1),
            };
            Pending {
                id: format!("p{i}"),
                queue: queue(i),
                user: String::new(),
                priority: 0,
                submit_ms: i as i64,
                request: gpus(count),
                members,
                runtime_limit_ms: Some(60_000 + (i as i64 * 7_727) % 86_400_000),
            }
        })
        .collect();
    let share = 480 / teams as u64;
    let cfg = Config {
        queues: (0..teams)
            .map(|t| QueueSpec {
                name: queue(t),
                guarantee: Quota { gpu_milli: share * 1000, cpu_milli: u64::MAX / 4, memory: u64::MAX / 4 },
                borrow_limit: None,
                weight: 1.0,
                user_limit: None,
            })
            .collect(),
        preemption: Preemption { enabled: true, grace_ms: 30_000 },
        ..Config::default()
    };
    (c, running, pending, cfg)
}

fn backlog(c: &mut Criterion) {
    let (cluster, running, pending, cfg) = full_cluster_backlog();
    let mut g = c.benchmark_group("full 60x8 cluster, 5000 pending");
    g.sample_size(20);
    g.bench_function("schedule()", |b| b.iter(|| black_box(schedule(&cluster, &running, &pending, &cfg, 0))));
    g.bench_function("decide()", |b| b.iter(|| black_box(decide(&cluster, &running, &pending, &cfg, 0))));
    g.finish();
}

criterion_group!(benches, decision, server_tick, backlog);
criterion_main!(benches);
