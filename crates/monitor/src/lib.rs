//! The monitoring loop. Every `interval` it measures each member of every running workload through
//! [`Engine::usage`] (CPU time, working set, limit, PIDs) and every GPU of this host through a
//! [`GpuSampler`] (NVML, or a scripted fake in tests), attributes GPU processes to members by their
//! PIDs, turns cumulative CPU time into cores, and publishes one [`MetricsSnapshot`] in [`Latest`] for
//! the API, `/metrics` and the idle-GPU rule.
//!
//! It runs beside the controller, never inside it: it only reads the store and the engine, so a slow
//! engine or GPU driver delays a sample, never a scheduling pass. Each engine call is bounded by the
//! interval; a member or run that cannot be measured is left out of that round.

mod idle;
mod round;

pub use idle::{Facts, IdleAction, IdleRule, IdleState, IdleTracker};
pub use round::{Round, attribute};

use chrono::{DateTime, Utc};
use gpuhub_controller::clock::Clock;
use gpuhub_controller::inventory::Inventory;
use gpuhub_core::metrics::MetricsSnapshot;
use gpuhub_driver::Engine;
use gpuhub_gpu::GpuSampler;
use gpuhub_store::Store;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// How the monitor samples.
#[derive(Debug, Clone)]
pub struct MonitorSettings {
    /// Time between sampling rounds.
    pub interval: Duration,
}

impl Default for MonitorSettings {
    fn default() -> Self {
        Self { interval: Duration::from_secs(10) }
    }
}

/// The latest snapshot, shared with the API; cheap to clone. Readers may also wait for the next round.
#[derive(Debug, Clone)]
pub struct Latest {
    snapshot: Arc<RwLock<Arc<MetricsSnapshot>>>,
    rounds: watch::Sender<u64>,
}

impl Default for Latest {
    fn default() -> Self {
        Self { snapshot: Arc::default(), rounds: watch::channel(0).0 }
    }
}

impl Latest {
    /// The last snapshot (empty before the first round).
    pub fn get(&self) -> Arc<MetricsSnapshot> {
        self.snapshot.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// Publishes a new snapshot and wakes whoever waits for one.
    pub fn publish(&self, snapshot: MetricsSnapshot) {
        *self.snapshot.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(snapshot);
        self.rounds.send_modify(|n| *n += 1);
    }

    /// A receiver that changes after every round (tests wait on it instead of sleeping).
    pub fn rounds(&self) -> watch::Receiver<u64> {
        self.rounds.subscribe()
    }
}

/// The monitoring task's state.
#[derive(Debug)]
pub struct Monitor {
    pub(crate) store: Store,
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) gpus: Option<Arc<dyn GpuSampler>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) inventory: Inventory,
    pub(crate) settings: MonitorSettings,
    pub(crate) latest: Latest,
    /// Each member's cumulative CPU time at the previous round, to turn it into cores:
    /// `(run, member) → (cpu seconds, when)`.
    pub(crate) cpu: std::collections::HashMap<(String, u32), (f64, DateTime<Utc>)>,
}

impl Monitor {
    /// A monitor over `engine` (and this host's GPUs through `gpus`, when there is a sampler).
    pub fn new(
        store: Store,
        engine: Arc<dyn Engine>,
        gpus: Option<Arc<dyn GpuSampler>>,
        clock: Arc<dyn Clock>,
        inventory: Inventory,
        settings: MonitorSettings,
    ) -> (Self, Latest) {
        let latest = Latest::default();
        let m =
            Self { store, engine, gpus, clock, inventory, settings, latest: latest.clone(), cpu: Default::default() };
        (m, latest)
    }

    /// Samples every `interval` until `stop` completes.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = tick.tick() => {
                    let snapshot = self.sample().await;
                    self.latest.publish(snapshot);
                }
            }
        }
    }

    /// One sampling round (public for tests and benchmarks).
    pub async fn sample(&mut self) -> MetricsSnapshot {
        Round::new(self).await.finish(self)
    }
}
