//! A hub restarted while its runs live on in the engine picks each up where it is: none is started
//! twice, none is lost, and what a crash left half-done is finished (a run made but not recorded) or
//! done again (an intent recorded, no run made).

use crate::kit::{INSTANCE, Site, job, stray_run};
use anyhow::Result;
use gpuhub_controller::clock::Clock as _;
use gpuhub_core::lifecycle::Event;
use gpuhub_core::workload::{Member, WorkloadState};
use gpuhub_driver::Engine;

#[tokio::test]
async fn a_restarted_hub_picks_up_every_run_none_twice_none_lost() -> Result<()> {
    let site = Site::new(2).await?;
    let hub = site.start().await?;
    let t = site.clock.now();
    hub.submit(&job("a", "alice", 1, t)).await?;
    hub.submit(&job("b", "alice", 1, t)).await?;
    let a = hub.until_state("a", WorkloadState::Running).await?;
    let b = hub.until_state("b", WorkloadState::Running).await?;
    // both GPUs are held: c waits, saying why
    hub.submit(&job("c", "bob", 1, t)).await?;
    hub.until("c", "c to wait for a GPU", |w| w.message.as_deref().is_some_and(|m| m.contains("GPU"))).await?;
    hub.shut_down().await?;

    // while the hub is down: a ends by itself and b runs on
    site.engine.exit(a.run_id.as_deref().unwrap(), 0);
    // a crash after d's intent was recorded and its run made, before the run's id was saved
    let store = site.store().await?;
    let placed = |n: u32| Event::Placed {
        members: (0..n).map(|i| Member { node: Some("n1".into()), ..Member::pending(i) }).collect(),
    };
    let mut d = job("d", "alice", 0, t);
    d.apply(placed(1), t)?;
    store.insert_workload(&d).await?;
    site.engine.submit(&stray_run("d-run", INSTANCE, "d", 1)).await?;
    // and one after e's intent was recorded, before its submit: e has no run anywhere
    let mut e = job("e", "bob", 0, t);
    e.size = 2;
    e.apply(placed(2), t)?;
    store.insert_workload(&e).await?;

    let hub = site.start().await?;
    let a = hub.until_state("a", WorkloadState::Succeeded).await?;
    assert_eq!(a.exit_code, Some(0));
    let c = hub.until_state("c", WorkloadState::Running).await?;
    assert_eq!(c.gpus, a.gpus, "c runs on the GPU a let go");
    let d = hub.until_state("d", WorkloadState::Running).await?;
    assert_eq!(d.run_id.as_deref(), Some("d-run"), "the run the crash left is d's");
    let e = hub.until("e", "e on a whole run", |w| w.state() == WorkloadState::Running && w.members.len() == 2).await?;
    assert_eq!(e.members.iter().filter(|m| m.engine_id.is_some()).count(), 2, "{e:?}");
    let b2 = hub.store.get_workload_by_id("b").await?;
    assert_eq!((b2.state(), &b2.run_id, &b2.started_at), (WorkloadState::Running, &b.run_id, &b.started_at));

    // none twice: one submit each (d's was the crash's), nothing removed or stopped
    let submits: Vec<usize> = ["a", "b", "c", "d", "e"].iter().map(|id| hub.submits_of(id).len()).collect();
    assert_eq!(submits, [1, 1, 1, 1, 1]);
    assert!(hub.removes().is_empty(), "{:?}", hub.removes());
    assert!(hub.cancels().is_empty(), "nothing was stopped: {:?}", hub.cancels());
    // none lost: exactly the live ones run in the engine
    let mut running = site.engine.running();
    running.sort();
    let mut live: Vec<String> = [&b2, &c, &d, &e].iter().filter_map(|w| w.run_id.clone()).collect();
    live.sort();
    assert_eq!(running, live);
    hub.shut_down().await
}

/// A stop asked for just before the hub went down is finished by the next one, on the same run.
#[tokio::test]
async fn a_stop_under_way_at_the_restart_is_finished_not_forgotten() -> Result<()> {
    let site = Site::new(1).await?;
    let hub = site.start().await?;
    let mut ws = job("ws", "alice", 1, site.clock.now());
    ws.kind = gpuhub_core::workload::WorkloadKind::Workspace;
    hub.submit(&ws).await?;
    let running = hub.until_state("ws", WorkloadState::Running).await?;
    let run = running.run_id.clone().unwrap();
    hub.shut_down().await?;
    // the stop was recorded; the hub went away before the run had ended
    let store = site.store().await?;
    let mut w = store.get_workload_by_id("ws").await?;
    let at = site.clock.now();
    w.apply(Event::StopRequested { reason: gpuhub_core::stop::StopReason::User { by: "alice".into(), at } }, at)?;
    store.update_workload(&w).await?;
    site.engine.exit(&run, 143);

    let hub = site.start().await?;
    let w = hub.until_state("ws", WorkloadState::Stopped).await?;
    assert!(matches!(w.interruption, Some(gpuhub_core::stop::StopReason::User { .. })), "{:?}", w.interruption);
    assert_eq!(hub.submits_of("ws").len(), 1, "not started again");
    assert!(site.engine.running().is_empty());
    hub.shut_down().await
}
