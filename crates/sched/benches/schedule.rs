//! One scheduling decision: placing one workload on a large cluster (per policy), and one `schedule()`
//! pass of the server's single-node tick.

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
                    .map(|k| Gpu { uuid: format!("node-{i:05}/{k}"), index: k, model: "H100".into(), memory: 80 << 30 })
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

criterion_group!(benches, decision, server_tick);
criterion_main!(benches);
