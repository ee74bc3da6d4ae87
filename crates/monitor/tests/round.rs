//! A monitoring round over the recording fake engine, a scripted GPU sampler and a real (SQLite) store,
//! on the kit's node `n1` and run fixture, with a manual clock:
//! CPU seconds become cores between rounds, GPU processes count for the member whose PID they carry,
//! a member's GPU utilisation is its GPUs', and GPUs name their holders.

use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_core::Bytes;
use gpuhub_core::workload::{Member, MemberPhase, Resources, Workload, WorkloadKind, WorkloadState};
use gpuhub_driver::clock::ManualClock;
use gpuhub_driver::fake::FakeEngine;
use gpuhub_driver::inventory::Inventory;
use gpuhub_driver::{Engine, EngineNode, GpuGrant, MemberUsage, RunSpec};
use gpuhub_gpu::{FakeGpuSampler, GpuProcess};
use gpuhub_monitor::{Monitor, MonitorSettings};
use gpuhub_store::Store;
use gpuhub_testkit::controller::{n1, t0};
use gpuhub_testkit::run_spec;
use std::sync::Arc;

/// Two members of alice's on `n1`, member `i` holding `GPU-i`.
fn spec(name: &str) -> RunSpec {
    let mut spec = run_spec(name, 2);
    for m in &mut spec.members {
        m.gpus = GpuGrant::Whole { count: 1, uuids: vec![format!("GPU-{}", m.index)] };
    }
    spec
}

fn running(run: &str, at: DateTime<Utc>) -> Workload {
    let member = |index: u32| Member {
        node: Some("n1".into()),
        state: MemberPhase::Running,
        gpus: vec![format!("GPU-{index}")],
        engine_id: Some(format!("{run}-{index}")),
        ..Member::pending(index)
    };
    let mut w =
        Workload::new("w1", "alice", "train", WorkloadKind::Job, "busybox:latest", at).restore(WorkloadState::Running);
    w.resources = Resources { gpus: 1, ..Resources::default() };
    w.queue = "vision".into();
    w.size = 2;
    w.gpus = vec!["GPU-0".into(), "GPU-1".into()];
    w.run_id = Some(run.into());
    w.members = vec![member(0), member(1)];
    w.started_at = Some(at);
    w.held_since = Some(at);
    w
}

fn usage(index: u32, cpu_seconds: f64, pids: Vec<u32>) -> MemberUsage {
    MemberUsage { index, cpu_seconds, memory_used: Bytes(300 << 20), memory_limit: Some(Bytes(1 << 30)), pids }
}

#[tokio::test]
async fn a_round_measures_members_and_gpus() {
    let t0 = t0();
    let clock = Arc::new(ManualClock::new(t0));
    let store = Store::open("sqlite::memory:").await.unwrap();
    let engine = Arc::new(FakeEngine::new());
    engine.submit(&spec("run-a")).await.unwrap();
    store.insert_workload(&running("run-a", t0)).await.unwrap();
    engine.set_usage("run-a", vec![usage(0, 10.0, vec![100, 101]), usage(1, 5.0, vec![200])]);
    let node = n1(3);
    let sampler = Arc::new(FakeGpuSampler::new(node.gpus.clone()));
    sampler.set("GPU-0", 60.0, Bytes(3 << 30));
    sampler.set("GPU-1", 20.0, Bytes(3 << 30));
    sampler.set_processes(
        "GPU-0",
        vec![
            GpuProcess { pid: 100, memory_used: Bytes(2 << 30) },
            GpuProcess { pid: 999, memory_used: Bytes(1 << 30) },
        ],
    );
    sampler.set_processes("GPU-1", vec![GpuProcess { pid: 200, memory_used: Bytes(3 << 30) }]);
    let inventory = Inventory::with(vec![EngineNode { capacity: node, up: true, state: "idle".into() }], t0);
    let settings = MonitorSettings::default();
    let (mut monitor, latest) = Monitor::new(store, engine.clone(), Some(sampler), clock.clone(), inventory, settings);

    let s = monitor.sample().await;
    assert_eq!(s.at, Some(t0));
    assert_eq!(s.members.len(), 2);
    let (m0, m1) = (&s.members[0], &s.members[1]);
    assert_eq!(
        (m0.member, m0.workload.as_str(), m0.queue.as_str(), m0.node.as_deref()),
        (0, "train", "vision", Some("n1"))
    );
    assert_eq!(m0.cpu_cores, None, "no earlier round to compare with");
    assert_eq!((m0.gpu_utilization_pct, m1.gpu_utilization_pct), (Some(60.0), Some(20.0)));
    // pid 999 is nobody's: only pid 100's 2 GiB count for member 0
    assert_eq!((m0.gpu_memory_used, m1.gpu_memory_used), (Some(2 << 30), Some(3 << 30)));
    assert_eq!((m0.memory_used, m0.memory_limit), (300 << 20, Some(1 << 30)));
    assert_eq!(s.gpus.len(), 3);
    assert_eq!((s.gpus[0].node.as_str(), s.gpus[0].holders.clone()), ("n1", vec!["alice/train".to_string()]));
    assert!(s.gpus[2].holders.is_empty());

    // 10 s later member 0 used 20 more CPU seconds: 2 cores; member 1 none
    clock.advance(TimeDelta::seconds(10));
    engine.set_usage("run-a", vec![usage(0, 30.0, vec![100, 101]), usage(1, 5.0, vec![200])]);
    let s = monitor.sample().await;
    assert_eq!((s.members[0].cpu_cores, s.members[1].cpu_cores), (Some(2.0), Some(0.0)));

    // published rounds wake who waits on them
    let mut rounds = latest.rounds();
    latest.publish(s.clone());
    rounds.changed().await.unwrap();
    assert_eq!(*latest.get(), s);
}
