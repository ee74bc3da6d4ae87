//! The controller alone, for the controller's scenarios (`crates/controller/tests/scenarios`): a
//! controller over the recording fake engine, a SQLite file store and a manual clock, which a test can
//! shut down and start again over the same store and engine (a restart of the hub with its runs alive
//! in the engine). Waits are on signals: the controller's change notices for workloads, the engine's
//! own event stream for what happens to runs; a minute is only a ceiling.

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use gpuhub_controller::clock::ManualClock;
use gpuhub_controller::{Controller, ControllerHandle, Inventory, Settings};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::user::Role;
use gpuhub_core::workload::{Resources, Workload, WorkloadKind, WorkloadState};
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::fake::{Call, FakeEngine};
use gpuhub_driver::{Engine, EngineEvent, EventStream, LABEL_INSTANCE, LABEL_WORKLOAD, RunSpec};
use gpuhub_store::Store;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// This installation's id: runs labelled with it are the hub's.
pub const INSTANCE: &str = "instance-scenarios0001";

/// The longest any wait may take before the test fails.
const CEILING: Duration = Duration::from_secs(60);

/// What outlives a hub: the data directory with the store's file, the engine and the clock.
#[derive(Debug)]
pub struct Site {
    pub dir: tempfile::TempDir,
    pub engine: Arc<FakeEngine>,
    pub clock: Arc<ManualClock>,
}

/// The time every scenario begins at.
pub fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("a valid time")
}

/// The node `n1`: `gpus` H200s of 141 GiB (`GPU-0`…), 8 CPUs and 32 GiB.
pub fn n1(gpus: u32) -> NodeCapacity {
    NodeCapacity::uniform("n1", CpuMilli(8000), Bytes(32 << 30), gpus, "H200", Bytes(141 << 30), "GPU-")
}

impl Site {
    /// One node [`n1`] with `gpus` GPUs; accounts alice and bob.
    pub async fn new(gpus: u32) -> Result<Site> {
        Site::with_node(n1(gpus)).await
    }

    /// One node, `node` (say [`n1`] with a GPU shared in some mode); accounts alice and bob.
    pub async fn with_node(node: NodeCapacity) -> Result<Site> {
        let dir = tempfile::tempdir()?;
        let site = Site {
            dir,
            engine: Arc::new(FakeEngine::new().with_nodes(vec![node])),
            clock: Arc::new(ManualClock::new(t0())),
        };
        let store = site.store().await?;
        for name in ["alice", "bob"] {
            store.create_user(name, "x", Role::User, t0()).await?;
        }
        Ok(site)
    }

    /// The store, opened afresh from its file.
    pub async fn store(&self) -> Result<Store> {
        let url = format!("sqlite://{}", self.dir.path().join("gpuhub.db").display());
        Ok(Store::open(&url).await?)
    }

    /// A hub (a controller with its store opened afresh) with the default settings.
    pub async fn start(&self) -> Result<Hub> {
        self.start_with(|_| {}).await
    }

    /// A hub whose settings `tune` changed (say the MPS daemons it asks, `settings.mps`).
    pub async fn start_with(&self, tune: impl FnOnce(&mut Settings)) -> Result<Hub> {
        let store = self.store().await?;
        let data = self.dir.path().join("data");
        let mut settings = Settings {
            data_dir: data.clone(),
            homes_dir: data.join("homes"),
            homes: Arc::new(gpuhub_homes::DirHomes::new(data.join("homes"))),
            ..Settings::default()
        };
        tune(&mut settings);
        let inventory = Inventory::default();
        let (controller, handle) = Controller::new(
            store.clone(),
            self.engine.clone(),
            Arc::new(settings),
            INSTANCE.into(),
            self.clock.clone(),
            inventory.clone(),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(controller.run(async move {
            let _ = stopped.await;
        }));
        Ok(Hub { store, engine: self.engine.clone(), handle, inventory, stop: Some(stop), task: Some(task) })
    }
}

/// A running controller.
#[derive(Debug)]
pub struct Hub {
    pub store: Store,
    pub engine: Arc<FakeEngine>,
    pub handle: ControllerHandle,
    pub inventory: Inventory,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Hub {
    /// Stops the controller and waits until its task has ended (nothing of it runs on after this).
    pub async fn shut_down(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(CEILING, task).await.context("the controller did not stop")??;
        }
        Ok(())
    }

    /// Stores `w` as submitted and asks for a pass.
    pub async fn submit(&self, w: &Workload) -> Result<()> {
        self.store.insert_workload(w).await?;
        self.handle.kick();
        Ok(())
    }

    /// Waits, on the controller's change notices, until workload `id` satisfies `done`.
    pub async fn until(&self, id: &str, what: &str, done: impl Fn(&Workload) -> bool) -> Result<Workload> {
        let mut changes = self.handle.changes();
        let wait = async {
            loop {
                let w = self.store.get_workload_by_id(id).await?;
                if done(&w) {
                    return Ok::<_, anyhow::Error>(w);
                }
                match changes.recv().await {
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => bail!("the controller is gone"),
                }
            }
        };
        let w = tokio::time::timeout(CEILING, wait).await;
        match w {
            Ok(w) => w,
            Err(_) => {
                let now = self.store.get_workload_by_id(id).await?;
                bail!("waiting for {what}: {id} is {:?} ({:?}) after {CEILING:?}", now.state(), now.message)
            }
        }
    }

    /// Waits until `id` is in `state`.
    pub async fn until_state(&self, id: &str, state: WorkloadState) -> Result<Workload> {
        self.until(id, &format!("{id} {state:?}"), |w| w.state() == state).await
    }

    /// The runs submitted for workload `id`, oldest first.
    pub fn submits_of(&self, id: &str) -> Vec<RunSpec> {
        self.engine
            .submitted()
            .into_iter()
            .filter(|s| s.labels.get(LABEL_WORKLOAD).map(String::as_str) == Some(id))
            .collect()
    }

    /// The ids of the runs the engine was asked to cancel.
    pub fn cancels(&self) -> Vec<String> {
        self.engine.calls().into_iter().filter_map(|c| if let Call::Cancel(r) = c { Some(r) } else { None }).collect()
    }

    /// The ids of the runs the engine was asked to remove.
    pub fn removes(&self) -> Vec<String> {
        self.engine.calls().into_iter().filter_map(|c| if let Call::Remove(r) = c { Some(r) } else { None }).collect()
    }
}

/// The engine's events from now on (subscribe before the action whose event is awaited).
pub async fn engine_events(engine: &FakeEngine) -> Result<EventStream> {
    Ok(engine.events().await?)
}

/// Waits for the engine's next event that satisfies `wanted`.
pub async fn next_event(
    events: &mut EventStream,
    what: &str,
    wanted: impl Fn(&EngineEvent) -> bool,
) -> Result<EngineEvent> {
    let wait = async {
        while let Some(ev) = events.next().await {
            let ev = ev?;
            if wanted(&ev) {
                return Ok::<_, anyhow::Error>(ev);
            }
        }
        bail!("the engine's event stream ended")
    };
    tokio::time::timeout(CEILING, wait).await.with_context(|| format!("waiting for {what}"))?
}

/// A queued one-member job of `owner`'s named `id`, asking for 1 CPU, 1 GiB and `gpus` whole GPUs,
/// submitted at the clock's `at`.
pub fn job(id: &str, owner: &str, gpus: u32, at: DateTime<Utc>) -> Workload {
    let mut w = Workload::new(id, owner, id, WorkloadKind::Job, "busybox:latest", at);
    w.command = vec!["true".into()];
    w.resources = Resources { cpu_milli: CpuMilli(1000), memory: Bytes(1 << 30), gpus, ..Resources::default() };
    w
}

/// A run made in the engine behind the hub's back, labelled for `workload` of `instance`, with
/// `members` members on `n1` holding no GPU (what a crash between a submit and its record leaves,
/// or a container nobody's workload owns).
pub fn stray_run(name: &str, instance: &str, workload: &str, members: u32) -> RunSpec {
    let labels = BTreeMap::from([
        (LABEL_INSTANCE.to_owned(), instance.to_owned()),
        (LABEL_WORKLOAD.to_owned(), workload.to_owned()),
    ]);
    RunSpec { labels, ..crate::run_spec(name, members) }
}
