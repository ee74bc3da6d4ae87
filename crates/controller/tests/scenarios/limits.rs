//! Run-time limits by the controller's clock: a run is stopped once its limit has passed on the clock,
//! not before, with the typed reason `time-limit`.

use crate::kit::{Site, job};
use anyhow::{Result, bail};
use chrono::TimeDelta;
use gpuhub_controller::clock::Clock as _;
use gpuhub_core::Seconds;
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::WorkloadState;

#[tokio::test]
async fn a_run_is_stopped_when_its_limit_has_passed_on_the_clock() -> Result<()> {
    let site = Site::new(1).await?;
    let hub = site.start().await?;
    let mut w = job("short", "alice", 1, site.clock.now());
    w.runtime_limit = Some(Seconds(3600));
    hub.submit(&w).await?;
    let running = hub.until_state("short", WorkloadState::Running).await?;
    let started = running.started_at.unwrap();
    // a pass a second before the limit stops nothing
    site.clock.set(started + TimeDelta::seconds(3599));
    hub.handle.kick();
    hub.submit(&job("probe", "bob", 0, site.clock.now())).await?;
    hub.until_state("probe", WorkloadState::Running).await?;
    assert!(hub.cancels().is_empty(), "stopped before its limit: {:?}", hub.cancels());
    // at the limit, the next pass stops it
    site.clock.set(started + TimeDelta::seconds(3600));
    hub.handle.kick();
    let ended = hub.until("short", "short to end at its limit", |w| w.state().is_terminal()).await?;
    match ended.interruption {
        Some(StopReason::TimeLimit { limit, at }) => assert_eq!((limit, at), (Seconds(3600), site.clock.now())),
        other => bail!("ended by its time limit: {other:?}"),
    }
    assert_eq!(hub.cancels(), [running.run_id.unwrap()]);
    hub.shut_down().await
}
