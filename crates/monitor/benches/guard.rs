//! The GPU memory guard's cost per sampling round, at 8 GPUs × 64 processes (512 shares of 1/64 GPU
//! each, one process per member, every eighth member above its grant): attributing the processes to
//! members by PID ([`gpuhub_monitor::attribute`]), then one [`GuardTracker::observe`] of the round. A
//! fixed workload; the numbers go into the notes, never into a test.

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use gpuhub_core::Bytes;
use gpuhub_core::metrics::{MemberMetrics, MetricsSnapshot};
use gpuhub_gpu::{GpuProcess, GpuSample};
use gpuhub_monitor::{GuardRule, GuardTracker, attribute};
use std::collections::HashMap;
use std::hint::black_box;

const GPUS: u32 = 8;
const PER_GPU: u32 = 64;
const GIB: u64 = 1 << 30;

/// Members: workload id, its GPU and its PIDs.
type Members = Vec<(String, String, Vec<u32>)>;

/// The GPUs' samples, the members, and each workload's grant.
fn round() -> (Vec<GpuSample>, Members, HashMap<String, u64>) {
    let grant = 2 * GIB;
    let mut gpus = Vec::new();
    let mut members = Vec::new();
    let mut grants = HashMap::new();
    for g in 0..GPUS {
        let mut processes = Vec::new();
        for p in 0..PER_GPU {
            let pid = 10_000 + g * PER_GPU + p;
            let used = if p % 8 == 0 { grant + GIB } else { grant / 2 };
            processes.push(GpuProcess { pid, memory_used: Bytes(used) });
            let id = format!("w-{g}-{p}");
            // the container's init and the CUDA process
            members.push((id.clone(), format!("GPU-{g}"), vec![pid + 100_000, pid]));
            grants.insert(id, grant);
        }
        gpus.push(GpuSample {
            uuid: format!("GPU-{g}"),
            index: g,
            model: "H200".into(),
            utilization_pct: 90.0,
            memory_used: Bytes(80 * GIB),
            memory_total: Bytes(141 * GIB),
            power_watts: Some(500.0),
            temperature_c: Some(60.0),
            processes,
        });
    }
    (gpus, members, grants)
}

/// The round's snapshot of the members, their GPU memory attributed by PID.
fn snapshot(gpus: &[GpuSample], members: &Members, at: DateTime<Utc>) -> MetricsSnapshot {
    let keys: Vec<(&str, &[u32])> = members.iter().map(|(id, _, p)| (id.as_str(), p.as_slice())).collect();
    let used = attribute(&keys, gpus);
    let members = members
        .iter()
        .map(|(id, gpu, _)| MemberMetrics {
            workload_id: id.clone(),
            workload: id.clone(),
            owner: "alice".into(),
            queue: "default".into(),
            member: 0,
            node: Some("local".into()),
            cpu_cores: None,
            memory_used: 0,
            memory_limit: None,
            gpus: vec![gpu.clone()],
            gpu_utilization_pct: Some(90.0),
            gpu_memory_used: used.get(id.as_str()).copied(),
        })
        .collect();
    MetricsSnapshot { at: Some(at), members, gpus: Vec::new() }
}

fn guard(c: &mut Criterion) {
    let (gpus, members, grants) = round();
    let rule = GuardRule { grace: TimeDelta::seconds(60) };
    let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
    let later = t0 + TimeDelta::seconds(10);
    let mut g = c.benchmark_group("guard");
    let keys: Vec<(&str, &[u32])> = members.iter().map(|(id, _, p)| (id.as_str(), p.as_slice())).collect();
    g.bench_function("attribute 8 GPUs x 64 processes", |b| {
        b.iter(|| black_box(attribute(black_box(&keys), black_box(&gpus))))
    });
    let snap = snapshot(&gpus, &members, t0);
    // a steady round: 64 members already warned, none due yet
    let mut tracker = GuardTracker::default();
    let warned = tracker.observe(&rule, &snap, &grants, t0);
    assert_eq!(warned.len(), (GPUS * PER_GPU / 8) as usize);
    g.bench_function("observe 512 shares, 64 over their grant", |b| {
        b.iter(|| black_box(tracker.observe(&rule, black_box(&snap), black_box(&grants), later)))
    });
    g.bench_function("a whole round: attribute, snapshot and observe", |b| {
        let mut tracker = GuardTracker::default();
        tracker.observe(&rule, &snap, &grants, t0);
        b.iter(|| {
            let s = snapshot(black_box(&gpus), black_box(&members), later);
            black_box(tracker.observe(&rule, &s, &grants, later))
        })
    });
    g.finish();
}

criterion_group!(benches, guard);
criterion_main!(benches);
