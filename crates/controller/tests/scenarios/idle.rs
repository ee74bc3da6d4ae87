//! Idle reclaim: a workspace whose GPU the monitor sees idle, with no use through the hub, is warned
//! after the rule's `after` and stopped after its grace, with the typed reason `idle`; its GPU goes to
//! the work waiting for it, and it can be started again. The monitor samples the fake engine and a
//! scripted GPU; the manual clock stands for the hours.

use crate::kit::{Site, job};
use anyhow::{Result, bail};
use chrono::TimeDelta;
use gpuhub_controller::clock::Clock as _;
use gpuhub_core::Bytes;
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::{WorkloadKind, WorkloadState};
use gpuhub_driver::{Engine, MemberUsage};
use gpuhub_gpu::FakeGpuSampler;
use gpuhub_monitor::{Facts, IdleAction, IdleRule, IdleTracker, Monitor, MonitorSettings};
use std::collections::HashMap;
use std::sync::Arc;

#[tokio::test]
async fn an_idle_workspace_is_warned_then_stopped_and_its_gpu_goes_to_the_waiting_job() -> Result<()> {
    let site = Site::new(1).await?;
    let hub = site.start().await?;
    let t = site.clock.now();
    let mut ws = job("ws", "alice", 1, t);
    ws.kind = WorkloadKind::Workspace;
    hub.submit(&ws).await?;
    let ws = hub.until_state("ws", WorkloadState::Running).await?;
    let run = ws.run_id.clone().unwrap();
    site.engine.set_usage(
        &run,
        vec![MemberUsage { index: 0, cpu_seconds: 1.0, memory_used: Bytes(1 << 20), memory_limit: None, pids: vec![] }],
    );
    hub.submit(&job("train", "bob", 1, t)).await?;
    hub.until("train", "train to wait for the GPU", |w| w.message.is_some()).await?;

    let gpus = site.engine.inventory().await?[0].capacity.gpus.clone();
    let sampler = Arc::new(FakeGpuSampler::new(gpus));
    sampler.set("GPU-0", 80.0, Bytes(1 << 30));
    let (mut monitor, _latest) = Monitor::new(
        hub.store.clone(),
        site.engine.clone(),
        Some(sampler.clone()),
        site.clock.clone(),
        hub.inventory.clone(),
        MonitorSettings::default(),
    );
    let rule = IdleRule {
        threshold_pct: 5.0,
        after: TimeDelta::hours(2),
        grace: TimeDelta::minutes(30),
        jobs: false,
        exempt_queues: vec![],
        queue_after: HashMap::new(),
    };
    let facts =
        HashMap::from([("ws".to_owned(), Facts { kind: WorkloadKind::Workspace, last_used: None, kept_until: None })]);
    let mut tracker = IdleTracker::default();
    let mut round = async |tracker: &mut IdleTracker| {
        let snapshot = monitor.sample().await;
        tracker.observe(&rule, &snapshot, &facts, site.clock.now())
    };

    // busy, then idle from 10:00: warned at 12:00, stopped at 12:30
    assert_eq!(round(&mut tracker).await, []);
    sampler.set("GPU-0", 0.0, Bytes(1 << 30));
    site.clock.advance(TimeDelta::minutes(1));
    let since = site.clock.now();
    assert_eq!(round(&mut tracker).await, []);
    site.clock.advance(TimeDelta::hours(2));
    let warned = round(&mut tracker).await;
    let stop_at = since + TimeDelta::hours(2) + TimeDelta::minutes(30);
    assert_eq!(warned, [IdleAction::Warn { workload_id: "ws".into(), since, stop_at }]);
    site.clock.advance(TimeDelta::minutes(29));
    assert_eq!(round(&mut tracker).await, []);
    site.clock.advance(TimeDelta::minutes(1));
    let stop = round(&mut tracker).await;
    let [IdleAction::Stop { workload_id, since: from, detail }] = stop.as_slice() else {
        bail!("a stop, once the grace has passed")
    };
    assert_eq!((workload_id.as_str(), *from), ("ws", since));

    let at = site.clock.now();
    let stopped = hub.handle.stop("ws", StopReason::Idle { since, at, detail: detail.clone() }).await?;
    assert_eq!(stopped.state(), WorkloadState::Stopped);
    match &stopped.interruption {
        Some(StopReason::Idle { since: s, at: a, .. }) => assert_eq!((*s, *a), (since, at)),
        other => bail!("stopped as idle: {other:?}"),
    }
    let train = hub.until_state("train", WorkloadState::Running).await?;
    assert_eq!(train.gpus, ["GPU-0"], "the GPU goes to the job waiting for it");
    assert_eq!(hub.cancels(), [run], "one stop");

    // the workspace can be started again, and waits for the GPU
    let again = hub.handle.start("ws").await?;
    assert_eq!(again.state(), WorkloadState::Queued);
    hub.until("ws", "ws to wait for the GPU", |w| w.message.is_some()).await?;
    hub.shut_down().await
}
