//! Preemption: a higher priority takes the GPU of a lower one, which is told to stop once, queued
//! again in its old place with the typed reason, and runs again on a new run once a GPU frees.

use crate::kit::{Site, job};
use anyhow::Result;
use chrono::TimeDelta;
use gpuhub_controller::clock::Clock as _;
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::WorkloadState;
use gpuhub_sched::Preemption;

#[tokio::test]
async fn a_higher_priority_preempts_once_and_the_victim_runs_again() -> Result<()> {
    let site = Site::new(1).await?;
    let hub = site.start_with(|s| s.scheduler.preemption = Preemption { enabled: true, grace_ms: 0 }).await?;
    let t = site.clock.now();
    hub.submit(&job("low", "bob", 1, t)).await?;
    let low = hub.until_state("low", WorkloadState::Running).await?;
    let low_run = low.run_id.clone().unwrap();

    site.clock.advance(TimeDelta::minutes(5));
    let at = site.clock.now();
    let mut high = job("high", "alice", 1, at);
    high.priority = 10;
    hub.submit(&high).await?;
    let high = hub.until_state("high", WorkloadState::Running).await?;
    assert_eq!(high.gpus, ["GPU-0"]);
    let victim = hub.until("low", "low queued again", |w| w.state() == WorkloadState::Queued).await?;
    match &victim.interruption {
        Some(StopReason::Preempted { by, at: when, .. }) => assert_eq!((by.as_str(), *when), ("alice/high", at)),
        other => panic!("preempted, with who and when: {other:?}"),
    }
    assert_eq!(victim.queued_at, t, "queued again in its old place");
    assert_eq!(hub.cancels(), std::slice::from_ref(&low_run), "one stop, of the victim");
    assert_eq!(site.engine.running(), [high.run_id.clone().unwrap()], "never two on one GPU");

    // the GPU frees: the victim runs again, on a new run, the old one removed first
    site.engine.exit(high.run_id.as_deref().unwrap(), 0);
    hub.until_state("high", WorkloadState::Succeeded).await?;
    let again = hub.until("low", "low running again", |w| w.state() == WorkloadState::Running).await?;
    assert_ne!(again.run_id.as_deref(), Some(low_run.as_str()));
    assert!(again.interruption.is_none(), "running again, no longer interrupted: {:?}", again.interruption);
    assert_eq!(hub.submits_of("low").len(), 2);
    assert_eq!(hub.submits_of("high").len(), 1);
    assert!(hub.removes().contains(&low_run));
    assert_eq!(site.engine.running(), [again.run_id.unwrap()]);
    hub.shut_down().await
}

#[tokio::test]
async fn without_preemption_the_higher_priority_waits() -> Result<()> {
    let site = Site::new(1).await?;
    let hub = site.start_with(|s| s.scheduler.preemption.enabled = false).await?;
    let t = site.clock.now();
    hub.submit(&job("low", "bob", 1, t)).await?;
    hub.until_state("low", WorkloadState::Running).await?;
    let mut high = job("high", "alice", 1, t);
    high.priority = 10;
    hub.submit(&high).await?;
    let high = hub.until("high", "high to wait", |w| w.message.is_some()).await?;
    assert_eq!(high.state(), WorkloadState::Queued);
    let why = high.message.unwrap_or_default();
    assert!(why.contains("GPU") && !why.contains("preempting"), "it waits for a GPU, preempting nobody: {why}");
    assert!(hub.cancels().is_empty());
    assert_eq!(hub.store.get_workload_by_id("low").await?.state(), WorkloadState::Running);
    hub.shut_down().await
}
