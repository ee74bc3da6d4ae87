//! The monitoring loop. Every `interval` it measures each member of every running workload through
//! [`Engine::usage`] (CPU time, working set, limit, PIDs) and every GPU of this host through a
//! [`GpuSampler`] (NVML, or a scripted fake in tests), attributes GPU processes to members by their
//! PIDs, turns cumulative CPU time into cores, and publishes one [`MetricsSnapshot`] in [`Latest`] for
//! the API, `/metrics` and the idle-GPU rule. After publishing a round it writes it to the store's
//! history ([`Store::record_metrics`]) and, at most once a minute, thins the history out by age
//! ([`Store::downsample`], with [`HistoryRetention`]); a failed write is logged and the loop goes on.
//!
//! It runs beside the controller, never inside it: it only reads the store and the engine, so a slow
//! engine or GPU driver delays a sample, never a scheduling pass. Each engine call is bounded by the
//! interval; a member or run that cannot be measured is left out of that round.

pub mod guard;
mod idle;
mod round;

pub use guard::{GuardAction, GuardRule, GuardState, GuardTracker};
pub use idle::{Facts, IdleAction, IdleRule, IdleState, IdleTracker};
pub use round::{Round, attribute};

use chrono::{DateTime, Utc};
use gpuhub_core::metrics::MetricsSnapshot;
use gpuhub_driver::Engine;
use gpuhub_driver::clock::Clock;
use gpuhub_driver::inventory::Inventory;
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
    /// How long each tier of the history is kept.
    pub history: HistoryRetention,
}

impl Default for MonitorSettings {
    fn default() -> Self {
        Self { interval: Duration::from_secs(10), history: HistoryRetention::default() }
    }
}

/// How long the history keeps raw samples, 1-minute means and 1-hour means (each measured from now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryRetention {
    /// Raw samples are kept this long, then averaged into 1-minute means.
    pub raw: Duration,
    /// 1-minute means are kept this long, then averaged into 1-hour means.
    pub minute: Duration,
    /// 1-hour means are kept this long, then deleted.
    pub hour: Duration,
}

impl Default for HistoryRetention {
    fn default() -> Self {
        Self {
            raw: Duration::from_secs(24 * 3600),
            minute: Duration::from_secs(30 * 86_400),
            hour: Duration::from_secs(365 * 86_400),
        }
    }
}

/// The least time between two thinnings of the history.
pub const DOWNSAMPLE_EVERY: Duration = Duration::from_secs(60);

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
        self.publish_shared(Arc::new(snapshot));
    }

    /// [`Latest::publish`] of a snapshot already shared.
    pub fn publish_shared(&self, snapshot: Arc<MetricsSnapshot>) {
        *self.snapshot.write().unwrap_or_else(std::sync::PoisonError::into_inner) = snapshot;
        self.rounds.send_modify(|n| *n += 1);
    }

    /// A receiver that changes after every round (tests wait on it instead of sleeping). A round is
    /// published before it is written to the history: once round `n + 1` is published, round `n` is
    /// written (or its write failed and was logged).
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
    /// When the history was last thinned out (by the rounds' time).
    pub(crate) downsampled: Option<DateTime<Utc>>,
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
        let m = Self {
            store,
            engine,
            gpus,
            clock,
            inventory,
            settings,
            latest: latest.clone(),
            cpu: Default::default(),
            downsampled: None,
        };
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
                    let snapshot = Arc::new(self.sample().await);
                    self.latest.publish_shared(snapshot.clone());
                    self.write_history(&snapshot).await;
                }
            }
        }
    }

    /// One sampling round (public for tests and benchmarks).
    pub async fn sample(&mut self) -> MetricsSnapshot {
        Round::new(self).await.finish(self)
    }

    /// Writes a round to the history and, when the last thinning is at least [`DOWNSAMPLE_EVERY`] older
    /// than the round (by the round's time), thins the history out. Failures are logged, never
    /// returned: the history is a record, and the live figures go on without it. Public for tests and
    /// benchmarks; [`Monitor::run`] calls it after publishing each round.
    pub async fn write_history(&mut self, snapshot: &MetricsSnapshot) {
        let Some(at) = snapshot.at else { return };
        if let Err(e) = self.store.record_metrics(snapshot).await {
            tracing::warn!(error = %e, "monitor: cannot write the round to the history");
        }
        let every = chrono::Duration::from_std(DOWNSAMPLE_EVERY).unwrap_or(chrono::Duration::MAX);
        if self.downsampled.is_some_and(|last| at >= last && at - last < every) {
            return;
        }
        let h = self.settings.history;
        self.downsampled = Some(at);
        match self.store.downsample(at, h.raw, h.minute, h.hour).await {
            Ok(done) => {
                if done.more {
                    tracing::info!(?done, "monitor: the history has a backlog to thin out; more next minute");
                }
            }
            Err(e) => tracing::warn!(error = %e, "monitor: cannot thin out the history"),
        }
    }
}
