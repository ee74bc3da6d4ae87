//! Reconciliation: the store brought in line with what the engine has. A run the engine lost makes its
//! workload `lost` (and frees what it held); a run whose workload is gone is removed, one whose workload
//! has ended is stopped; another installation's runs are left alone.

use crate::kit::{INSTANCE, Site, engine_events, job, next_event, stray_run};
use anyhow::Result;
use gpuhub_controller::clock::Clock as _;
use gpuhub_core::workload::WorkloadState;
use gpuhub_driver::fake::Call;
use gpuhub_driver::{Engine, EngineEvent};
use std::collections::BTreeSet;

#[tokio::test]
async fn at_start_lost_runs_and_runs_without_a_workload_are_set_right() -> Result<()> {
    let site = Site::new(2).await?;
    let hub = site.start().await?;
    let t = site.clock.now();
    hub.submit(&job("w1", "alice", 1, t)).await?;
    hub.submit(&job("w2", "alice", 1, t)).await?;
    let w1 = hub.until_state("w1", WorkloadState::Running).await?;
    let w2 = hub.until_state("w2", WorkloadState::Running).await?;
    hub.shut_down().await?;

    // while the hub is down: w1's container is removed by hand; containers appear that no live
    // workload of ours owns
    site.engine.vanish(w1.run_id.as_deref().unwrap());
    let store = site.store().await?;
    let mut done = job("done", "bob", 0, t);
    done = done.restore(WorkloadState::Succeeded);
    done.exit_code = Some(0);
    done.finished_at = Some(t);
    store.insert_workload(&done).await?;
    for spec in [
        stray_run("ghost-run", INSTANCE, "ghost", 1),
        stray_run("done-run", INSTANCE, "done", 1),
        stray_run("foreign-run", "instance-of-another-hub", "ghost", 1),
    ] {
        site.engine.submit(&spec).await?;
    }
    let mut events = engine_events(&site.engine).await?;

    let hub = site.start().await?;
    let lost = hub.until_state("w1", WorkloadState::Lost).await?;
    assert_eq!(lost.message.as_deref(), Some("its run disappeared from the engine"));
    assert_eq!(lost.finished_at, Some(site.clock.now()), "ended at the clock's time");
    assert!(matches!(lost.interruption, Some(gpuhub_core::stop::StopReason::EngineFailure { .. })), "{lost:?}");
    // the ghost's run is removed, the ended workload's is stopped
    let mut seen = BTreeSet::new();
    while seen.len() < 2 {
        let ev = next_event(&mut events, "the ghost removed and done's run stopped", |ev| {
            matches!(ev, EngineEvent::Removed { run, .. } if run == "ghost-run")
                || matches!(ev, EngineEvent::Exited { run, .. } if run == "done-run")
        })
        .await?;
        seen.insert(ev.run().0.to_owned());
    }
    let calls = site.engine.calls();
    assert!(calls.contains(&Call::Remove("ghost-run".into())));
    assert!(calls.contains(&Call::Cancel("done-run".into())));
    assert!(!calls.contains(&Call::Remove("done-run".into())), "an ended workload's run keeps its logs");
    assert_eq!(hub.store.get_workload_by_id("done").await?.state(), WorkloadState::Succeeded);
    // another hub's run is none of ours
    let named_foreign = |c: &Call| matches!(c, Call::Cancel(r) | Call::Remove(r) if r == "foreign-run");
    assert!(!calls.iter().any(named_foreign), "{calls:?}");
    assert!(site.engine.running().contains(&"foreign-run".to_owned()));
    // w2 is untouched
    let w2_now = hub.store.get_workload_by_id("w2").await?;
    assert_eq!((w2_now.state(), w2_now.run_id), (WorkloadState::Running, w2.run_id));
    hub.shut_down().await
}

#[tokio::test]
async fn a_run_removed_behind_the_hubs_back_is_lost_and_its_gpu_goes_to_the_next() -> Result<()> {
    let site = Site::new(1).await?;
    let hub = site.start().await?;
    let t = site.clock.now();
    hub.submit(&job("w1", "alice", 1, t)).await?;
    let w1 = hub.until_state("w1", WorkloadState::Running).await?;
    hub.submit(&job("w2", "bob", 1, t)).await?;
    hub.until("w2", "w2 to wait for the GPU", |w| w.message.is_some()).await?;

    site.engine.vanish(w1.run_id.as_deref().unwrap());
    let lost = hub.until_state("w1", WorkloadState::Lost).await?;
    assert!(lost.message.as_deref().is_some_and(|m| m.contains("removed outside gpuhub")), "{:?}", lost.message);
    let w2 = hub.until_state("w2", WorkloadState::Running).await?;
    assert_eq!(w2.gpus, w1.gpus);
    assert_eq!(hub.submits_of("w1").len(), 1, "a lost run is not started again by itself");
    hub.shut_down().await
}
