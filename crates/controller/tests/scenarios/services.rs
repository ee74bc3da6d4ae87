//! A service on an engine that places and restarts it itself (as Kubernetes runs a service's
//! Deployment): an update is the engine's rollout of the same run, under way until the engine reports
//! it complete (the new terms in the workload and its history) or failed (the reason in the update,
//! the engine rolled back to the old terms); the engine's count of restarts is counted into the service's; an engine
//! that does not roll (Slurm) leaves the update to stop-then-start, saying why.

use crate::kit::{Site, job};
use anyhow::{Result, ensure};
use gpuhub_controller::clock::Clock as _;
use gpuhub_controller::{Terms, Update};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::service::{
    LABEL_RESTARTS, LABEL_ROLLOUT, LABEL_ROLLOUT_WHY, ROLLOUT_COMPLETE, ROLLOUT_FAILED, Service, ServiceAccess,
    ServiceSpec, UpdateState,
};
use gpuhub_core::workload::{Workload, WorkloadKind, WorkloadState};
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

/// Where a service's last update stands.
fn updated(w: &Workload) -> Option<UpdateState> {
    w.service.as_ref()?.update.as_ref().map(|u| u.state)
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
    ensure!(update.state == UpdateState::Rolling, "under way until the engine says: {update:?}");
    ensure!(w.run_id.as_deref() == Some(run.as_str()) && w.image == "busybox:latest", "the old terms serve: {w:?}");
    ensure!(site.engine.spec(&run).is_some_and(|s| s.image == "busybox:2" && s.command == ["serve"]));
    // the engine's rollout completes: the same run, the new terms, stored
    site.engine.set_run_label(&run, LABEL_ROLLOUT, ROLLOUT_COMPLETE);
    let w = hub.until("web", "the update done", |w| updated(w) == Some(UpdateState::Done)).await?;
    ensure!(w.run_id.as_deref() == Some(run.as_str()) && w.image == "busybox:2", "the same run, new terms: {w:?}");
    ensure!(w.state() == WorkloadState::Running, "{w:?}");
    let stored = hub.store.get_workload_by_id("web").await?;
    ensure!(stored.image == "busybox:2", "the terms are stored: {stored:?}");

    // the engine reports its next rollout failed: the update fails with its reason, the engine is
    // rolled back to the old terms, and the run serves on
    site.engine.set_run_label(&run, LABEL_ROLLOUT, "progressing");
    hub.handle.update("web", terms("busybox:3")).await?;
    ensure!(site.engine.spec(&run).is_some_and(|s| s.image == "busybox:3"));
    site.engine.set_run_label(&run, LABEL_ROLLOUT_WHY, "the new pod web-2 crash-loops (CrashLoopBackOff)");
    site.engine.set_run_label(&run, LABEL_ROLLOUT, ROLLOUT_FAILED);
    let w = hub.until("web", "the update failed", |w| updated(w) == Some(UpdateState::Failed)).await?;
    let message = w.service.as_ref().and_then(|s| s.update.as_ref()).map(|u| u.message.clone()).unwrap_or_default();
    ensure!(message.contains("the new pod web-2 crash-loops (CrashLoopBackOff)"), "{message}");
    ensure!(w.state() == WorkloadState::Running && w.image == "busybox:2", "the old terms serve on: {w:?}");
    let back = async {
        while site.engine.spec(&run).is_none_or(|s| s.image != "busybox:2") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    ensure!(tokio::time::timeout(Duration::from_secs(10), back).await.is_ok(), "rolled back to the old terms");

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
