//! A service on an engine that places and restarts it itself (as Kubernetes runs a service's
//! Deployment): an update is the engine's rollout of the same run, with the new terms in the
//! workload and its history; the engine's count of restarts is counted into the service's; an engine
//! that does not roll (Slurm) leaves the update to stop-then-start, saying why.

use crate::kit::{Site, job};
use anyhow::{Result, ensure};
use gpuhub_controller::clock::Clock as _;
use gpuhub_controller::{Terms, Update};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::service::{LABEL_RESTARTS, Service, ServiceAccess, ServiceSpec, UpdateState};
use gpuhub_core::workload::{WorkloadKind, WorkloadState};
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::fake::FakeEngine;
use std::sync::Arc;
use std::time::Duration;

fn terms(image: &str) -> Terms {
    Terms {
        image: image.into(),
        command: vec!["serve".into()],
        env: Default::default(),
        change: "image (by alice)".into(),
    }
}

#[tokio::test]
async fn an_engine_that_rolls_takes_the_update_and_reports_its_restarts() -> Result<()> {
    let mut site = Site::new(0).await?;
    let node = NodeCapacity::uniform("n1", CpuMilli(8000), Bytes(32 << 30), 0, "H200", Bytes(141 << 30), "GPU-");
    site.engine = Arc::new(FakeEngine::engine_placed().with_nodes(vec![node]));
    site.engine.set_rolls(true);
    let hub = site.start_with(|s| s.reconcile = Duration::from_millis(50)).await?;
    let mut w = job("web", "alice", 0, site.clock.now());
    w.kind = WorkloadKind::Service;
    w.service = Some(Service::new(ServiceSpec { port: 8080, ready: None, access: ServiceAccess::Owner }));
    hub.submit(&w).await?;
    let queued = hub.until("web", "web submitted", |w| w.run_id.is_some()).await?;
    let run = queued.run_id.clone().unwrap_or_default();
    let spec = site.engine.spec(&run).expect("its run");
    ensure!(spec.labels.get("gpuhub.service.port").map(String::as_str) == Some("8080"), "{:?}", spec.labels);
    ensure!(spec.labels.get("gpuhub.service.ready").map(String::as_str) == Some(r#"{"http":"/"}"#));
    site.engine.start_pending(&run, "n1", &[&[]]);
    hub.until_state("web", WorkloadState::Running).await?;

    let Update::Rolling(w) = hub.handle.update("web", terms("busybox:2")).await? else {
        anyhow::bail!("an engine that rolls took no update");
    };
    let update = w.service.as_ref().and_then(|s| s.update.clone()).expect("an update report");
    ensure!(update.state == UpdateState::Done, "{update:?}");
    ensure!(
        update.message
            == "updated: image (by alice); the fake engine rolls it out: the new member starts beside the old one, which serves until the new one is ready",
        "{update:?}"
    );
    ensure!(w.run_id.as_deref() == Some(run.as_str()) && w.image == "busybox:2", "the same run, new terms: {w:?}");
    ensure!(site.engine.spec(&run).is_some_and(|s| s.image == "busybox:2" && s.command == ["serve"]));
    let stored = hub.store.get_workload_by_id("web").await?;
    ensure!(stored.image == "busybox:2", "the terms are stored: {stored:?}");

    // the engine's restarts of the member count as the service's
    site.engine.set_run_label(&run, LABEL_RESTARTS, "3");
    let w = hub.until("web", "3 restarts", |w| w.service.as_ref().is_some_and(|s| s.restarts == 3)).await?;
    ensure!(w.state() == WorkloadState::Running && w.run_id.as_deref() == Some(run.as_str()), "{w:?}");

    // an engine that does not roll: stop-then-start, and why
    site.engine.set_rolls(false);
    match hub.handle.update("web", terms("busybox:3")).await? {
        Update::NotRolled(why) => {
            ensure!(why == "the fake engine does not run two runs of a service side by side", "{why}")
        }
        Update::Rolling(w) => anyhow::bail!("rolled without the engine: {w:?}"),
    }
    hub.shut_down().await
}
