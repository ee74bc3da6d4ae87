//! Accounting's holdings: written with the workload's state, one per holding, idempotent, kept after
//! the workload is deleted; GPU models remembered.

use crate::common::t;
use crate::workloads::sample;
use gpuhub_core::lifecycle::Event;
use gpuhub_core::workload::{Member, WorkloadState};
use gpuhub_store::Store;

both!(holdings_follow_the_state_machine, gpu_models);

async fn holdings_follow_the_state_machine(s: Store) {
    let mut w = sample("alice", "job", "h1");
    w.size = 2;
    w.resources.gpus = 1;
    w.queue = "vision".into();
    s.insert_workload(&w).await.unwrap();
    assert!(s.holdings(t(0), t(1_000_000), None).await.unwrap().is_empty(), "queued holds nothing");

    // placed at 100: a holding opens, with both members' GPUs
    let mut members = vec![Member::pending(0), Member::pending(1)];
    members[0].gpus = vec!["GPU-a".into()];
    members[1].gpus = vec!["GPU-b".into()];
    w.apply(Event::Placed { members }, t(100)).unwrap();
    assert!(s.update_workload_if(&w, WorkloadState::Queued).await.unwrap());
    let open = s.holdings(t(0), t(1_000_000), None).await.unwrap();
    assert_eq!(open.len(), 1);
    let h = &open[0];
    assert_eq!((h.since, h.until, h.gpu_milli, h.queue.as_str()), (t(100), None, 2000, "vision"));
    assert_eq!(h.gpus, ["GPU-a", "GPU-b"]);
    assert_eq!((h.cpu_milli, h.memory), (2 * w.resources.cpu_milli.0, 2 * w.resources.memory.0));

    // preempted at 500: the holding closes (the GPUs it held stay named); writing again changes nothing
    w.apply(Event::Submitted { run: "r1".into(), members: vec![], ports: Default::default() }, t(110)).unwrap();
    let why = gpuhub_core::stop::StopReason::Preempted {
        by: "b/x".into(),
        queue: "q".into(),
        at: t(500),
        detail: "d".into(),
    };
    w.apply(Event::StopRequested { reason: why }, t(500)).unwrap();
    w.apply(Event::RunStopped { code: Some(143) }, t(500)).unwrap();
    assert_eq!(w.state(), WorkloadState::Queued);
    s.update_workload(&w).await.unwrap();
    s.update_workload(&w).await.unwrap();
    let hs = s.holdings(t(0), t(1_000_000), None).await.unwrap();
    assert_eq!(hs.len(), 1);
    assert_eq!((hs[0].since, hs[0].until), (t(100), Some(t(500))));
    assert_eq!(hs[0].gpus, ["GPU-a", "GPU-b"]);

    // placed again at 900: a second holding; deleting the workload at 1000 ends it, and both stay
    let mut members = vec![Member::pending(0), Member::pending(1)];
    members[0].gpus = vec!["GPU-c".into()];
    members[1].gpus = vec!["GPU-d".into()];
    w.apply(Event::Placed { members }, t(900)).unwrap();
    s.update_workload(&w).await.unwrap();
    s.delete_workload("h1", t(1000)).await.unwrap();
    let hs = s.holdings(t(0), t(1_000_000), None).await.unwrap();
    let spans: Vec<_> = hs.iter().map(|h| (h.since, h.until)).collect();
    assert_eq!(spans, [(t(100), Some(t(500))), (t(900), Some(t(1000)))]);

    // the window and the owner filter
    assert_eq!(s.holdings(t(500), t(900), None).await.unwrap().len(), 0, "touching ends do not overlap");
    assert_eq!(s.holdings(t(499), t(901), None).await.unwrap().len(), 2);
    assert_eq!(s.holdings(t(0), t(1_000_000), Some("bob")).await.unwrap().len(), 0);
    assert_eq!(s.holdings(t(0), t(1_000_000), Some("alice")).await.unwrap().len(), 2);
}

async fn gpu_models(s: Store) {
    assert!(s.gpu_models().await.unwrap().is_empty());
    s.remember_gpu_models(&[("GPU-a".into(), "H100".into()), ("n1/gpu0".into(), "A100".into())]).await.unwrap();
    s.remember_gpu_models(&[("GPU-a".into(), "H200".into())]).await.unwrap();
    let m = s.gpu_models().await.unwrap();
    assert_eq!((m["GPU-a"].as_str(), m["n1/gpu0"].as_str(), m.len()), ("H200", "A100", 2));
}

both!(measured_means);

/// What was measured of a workload over a window: members' CPU and memory added, GPU use averaged.
async fn measured_means(s: Store) {
    use gpuhub_core::metrics::{MemberMetrics, MetricsSnapshot};
    let member = |member: u32, cpu: f64, gpu: f64| MemberMetrics {
        workload_id: "w1".into(),
        workload: "train".into(),
        owner: "alice".into(),
        queue: "default".into(),
        member,
        node: None,
        cpu_cores: Some(cpu),
        memory_used: 1 << 30,
        memory_limit: None,
        gpus: vec![format!("GPU-{member}")],
        gpu_utilization_pct: Some(gpu),
        gpu_memory_used: None,
    };
    for (i, (cpu, gpu)) in [(1.0, 20.0), (3.0, 40.0)].into_iter().enumerate() {
        let at = t(1000 + i as i64 * 10_000);
        let snap =
            MetricsSnapshot { at: Some(at), members: vec![member(0, cpu, gpu), member(1, 0.5, 90.0)], gpus: vec![] };
        s.record_metrics(&snap).await.unwrap();
    }
    let m = s.measured(t(0), t(100_000), None).await.unwrap();
    let w = m["w1"];
    // member 0: 2 cores and 30 % on average; member 1: 0.5 cores and 90 %
    assert_eq!(w.cpu_cores, Some(2.5));
    assert_eq!(w.gpu_util_pct, Some(60.0));
    assert_eq!(w.memory_bytes, Some(2.0 * (1u64 << 30) as f64));
    // the window and the owner filter
    assert_eq!(s.measured(t(5000), t(100_000), None).await.unwrap()["w1"].cpu_cores, Some(3.5));
    assert!(s.measured(t(0), t(100_000), Some("bob")).await.unwrap().is_empty());
}
