//! The controller: the single writer of workload state. The store holds the desired state, the engine
//! the actual one; the controller follows the engine's member events, reconciles fully at start and
//! periodically, and starts queued work — placing it with the scheduler where gpuhub places (Docker),
//! submitting it to the engine's own queue where the engine places (Slurm).
//!
//! Every change of a workload's state goes through [`gpuhub_core::workload::Workload::apply`], and
//! every start records its intent in the store before acting on the engine (`queued → starting` with
//! the members' nodes and GPUs, then submit), so a crash at any point is repaired by reconciliation.
//! Time comes from a [`clock::Clock`].

/// The clock seam and the engine's nodes, kept beside the engine interface (`gpuhub_driver`) and
/// re-exported here, where the hub's code has always named them.
pub use gpuhub_driver::{clock, inventory};
pub mod error;
pub mod estimate;
pub mod logfile;
pub mod mps;
pub mod ready;
pub mod rollout;
pub mod scheduling;
pub mod settings;
pub mod spec;
pub mod unmet;

mod archive;
mod burst;
mod commands;
mod edit;
mod events;
mod launch;
mod pass;
mod pulls;
mod reconcile;
mod restart;
mod start_error;
#[cfg(test)]
mod testutil;

pub use archive::{archive_path, member_log_paths};
pub use error::ControlError;
pub use inventory::Inventory;
pub use rollout::{Terms, Update};
pub use settings::Settings;

use burst::{next_event, until};
use chrono::{DateTime, Utc};
use clock::Clock;
use gpuhub_core::histogram::{Histogram, HistogramSnapshot, PASS_BUCKETS};
use gpuhub_core::state::Explanation;
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::Workload;
use gpuhub_driver::{Engine, EngineError, EventStream, Placement};
use gpuhub_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::{Notify, broadcast, mpsc, oneshot};

type Reply<T> = oneshot::Sender<Result<T, ControlError>>;

/// Requests to the controller; user-driven transitions go through here so they never race its own.
#[derive(Debug)]
enum Command {
    Stop {
        id: String,
        reason: StopReason,
        reply: Reply<Workload>,
    },
    Start {
        id: String,
        reply: Reply<Workload>,
    },
    Delete {
        id: String,
        reply: Reply<()>,
    },
    /// An edit of a workload's terms, asked by `by`.
    Edit {
        id: String,
        edit: gpuhub_core::edit::EditWorkloadRequest,
        by: String,
        reply: Reply<Workload>,
    },
    /// A background cancel of a run finished.
    Stopped {
        id: String,
        result: Result<(), EngineError>,
    },
    /// A background pull of a workload's image finished.
    Pulled {
        id: String,
        result: Result<(), EngineError>,
    },
    /// A service's update to new terms (`rollout.rs`).
    Update {
        id: String,
        terms: rollout::Terms,
        reply: Reply<rollout::Update>,
    },
    /// The watch of a rolling update's new run `run` ended: ready (`Ok`) or not (why).
    RolloutEnded {
        id: String,
        run: String,
        outcome: Result<(), String>,
    },
}

/// How handlers talk to the controller.
#[derive(Debug, Clone)]
pub struct ControllerHandle {
    tx: mpsc::Sender<Command>,
    kick: Arc<Notify>,
    changes: broadcast::Sender<String>,
    generation: Arc<AtomicU64>,
    explanations: Explanations,
    passes: Arc<AtomicU64>,
    pass_seconds: Arc<Histogram>,
    inventory: Inventory,
    pulls: pulls::Pulls,
}

/// The explanation of every queued workload, by id: the scheduler's from its last pass, or the
/// engine's pending reason where the engine queues.
pub type Explanations = Arc<RwLock<HashMap<String, Explanation>>>;

impl ControllerHandle {
    /// How many scheduling passes the controller has run (for tests and metrics).
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// How long the scheduling passes took, in seconds (measured with [`std::time::Instant`], so a
    /// test's manual clock does not affect it), for `/metrics`.
    pub fn pass_durations(&self) -> HistogramSnapshot {
        self.pass_seconds.snapshot()
    }

    /// Asks for a scheduling pass soon (after a submit).
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// Why a queued workload waits.
    pub fn explanation(&self, id: &str) -> Option<Explanation> {
        self.explanations.read().ok()?.get(id).cloned()
    }

    /// Ids of workloads whose state changed, as they change.
    pub fn changes(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// How many changes the controller has announced on [`Self::changes`], counted before each is sent:
    /// what was read from the store while this stayed the same is still what the store holds (for
    /// caches of what the controller writes).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The engine's nodes as last seen.
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// How far the pull of a `pulling` workload's image is, once the engine has said.
    pub fn pull_progress(&self, id: &str) -> Option<gpuhub_driver::PullProgress> {
        self.pulls.read().ok()?.get(id).cloned()
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, ControlError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| ControlError::Gone)?;
        rx.await.map_err(|_| ControlError::Gone)?
    }

    /// Stops a workload for `reason` (kept with it); returns once its run has stopped.
    pub async fn stop(&self, id: &str, reason: StopReason) -> Result<Workload, ControlError> {
        self.ask(|reply| Command::Stop { id: id.to_owned(), reason, reply }).await
    }

    /// Queues an ended workload again.
    pub async fn start(&self, id: &str) -> Result<Workload, ControlError> {
        self.ask(|reply| Command::Start { id: id.to_owned(), reply }).await
    }

    /// Removes a workload and its run.
    pub async fn delete(&self, id: &str) -> Result<(), ControlError> {
        self.ask(|reply| Command::Delete { id: id.to_owned(), reply }).await
    }

    /// Updates service `id` to new terms: a rolling update where the engine and the nodes allow one,
    /// else [`Update::NotRolled`] with the reason (the caller stops and starts it).
    pub async fn update(&self, id: &str, terms: Terms) -> Result<Update, ControlError> {
        self.ask(|reply| Command::Update { id: id.to_owned(), terms, reply }).await
    }

    /// Edits a workload's terms for `by` (see [`Workload::amend`]); returns it as edited.
    pub async fn edit(
        &self,
        id: &str,
        edit: gpuhub_core::edit::EditWorkloadRequest,
        by: &str,
    ) -> Result<Workload, ControlError> {
        self.ask(|reply| Command::Edit { id: id.to_owned(), edit, by: by.to_owned(), reply }).await
    }
}

/// Why a queued workload of a disabled account waits.
pub const OWNER_DISABLED: &str = "held: the owner's account is disabled";

/// The controller task's state.
#[derive(Debug)]
pub struct Controller {
    store: Store,
    engine: Arc<dyn Engine>,
    placement: Placement,
    settings: Arc<Settings>,
    inventory: Inventory,
    /// This installation's id; only runs labelled with it are ours.
    instance: String,
    clock: Arc<dyn Clock>,
    rx: mpsc::Receiver<Command>,
    tx: mpsc::Sender<Command>,
    kick: Arc<Notify>,
    changes: broadcast::Sender<String>,
    /// Changes announced, shared with the handle.
    generation: Arc<AtomicU64>,
    /// Workloads whose run is being cancelled, with the callers waiting for it.
    stopping: HashMap<String, Vec<Reply<Workload>>>,
    /// Why each queued workload waits, shared with the API.
    explanations: Explanations,
    /// Why each workload waiting in an engine's own queue waits, from the engine's last report.
    engine_pending: HashMap<String, Explanation>,
    /// Decayed usage per queue, for fair share.
    usage: gpuhub_sched::Usage,
    /// When the next running workload reaches its run-time limit.
    next_deadline: Option<DateTime<Utc>>,
    /// Scheduling passes run, shared with the handle.
    passes: Arc<AtomicU64>,
    /// How long each pass took, shared with the handle.
    pass_seconds: Arc<Histogram>,
    /// The GPU models last written to the store (accounting by model), to write only changes.
    models_known: Vec<(String, String)>,
    /// Workloads whose image is being pulled now.
    pulling: std::collections::HashSet<String>,
    /// How far each pull is, shared with the handle.
    pulls: pulls::Pulls,
    /// The engine's outages and the exits held to see whether one comes (`restart.rs`).
    restarts: restart::Restarts,
    /// When the earliest held exit is recorded as its run's own.
    next_release: Option<DateTime<Utc>>,
    /// The readiness watch of each service's rolling update under way.
    rollouts: HashMap<String, tokio::task::AbortHandle>,
}

impl Controller {
    /// A controller over `engine` and the handle to reach it. `inventory` is shared with the API; it
    /// is refreshed from the engine at start and at every reconciliation.
    pub fn new(
        store: Store,
        engine: Arc<dyn Engine>,
        settings: Arc<Settings>,
        instance: String,
        clock: Arc<dyn Clock>,
        inventory: Inventory,
    ) -> (Self, ControllerHandle) {
        let (tx, rx) = mpsc::channel(256);
        let kick = Arc::new(Notify::new());
        let (changes, _) = broadcast::channel(1024);
        let explanations = Explanations::default();
        let generation = Arc::new(AtomicU64::new(0));
        let handle = ControllerHandle {
            tx: tx.clone(),
            kick: kick.clone(),
            changes: changes.clone(),
            generation: generation.clone(),
            explanations: explanations.clone(),
            passes: Arc::default(),
            pass_seconds: Arc::new(Histogram::new(PASS_BUCKETS)),
            inventory: inventory.clone(),
            pulls: pulls::Pulls::default(),
        };
        let placement = engine.capabilities().placement;
        let c = Self {
            store,
            engine,
            placement,
            settings,
            inventory,
            instance,
            clock,
            rx,
            tx,
            kick,
            changes,
            generation,
            stopping: HashMap::new(),
            explanations,
            engine_pending: HashMap::new(),
            usage: gpuhub_sched::Usage::default(),
            next_deadline: None,
            passes: handle.passes.clone(),
            pass_seconds: handle.pass_seconds.clone(),
            models_known: Vec::new(),
            pulling: Default::default(),
            pulls: handle.pulls.clone(),
            restarts: Default::default(),
            next_release: None,
            rollouts: HashMap::new(),
        };
        (c, handle)
    }

    /// Runs until `shutdown` resolves: reconcile, then follow events, commands and the periodic tick.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut events = self.subscribe().await;
        self.reconcile().await;
        self.schedule().await;
        self.retain_mps().await;
        let mut tick = tokio::time::interval(self.settings.reconcile);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            let now = self.clock.now();
            tokio::select! {
                _ = &mut shutdown => break,
                Some(cmd) = self.rx.recv() => self.command(cmd).await,
                ev = next_event(&mut events) => match ev {
                    Some(Ok(ev)) => self.event(ev).await,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "engine event stream failed; reconnecting at the next tick");
                        events = None;
                        self.engine_went_away().await;
                    }
                    None => {
                        events = None;
                        self.engine_went_away().await;
                    }
                },
                _ = self.kick.notified() => {}
                _ = until(self.next_deadline, now) => {}
                _ = until(self.next_release, now) => {}
                _ = tick.tick() => {
                    if events.is_none() {
                        events = self.subscribe().await;
                    }
                    self.reconcile().await;
                }
            }
            self.drain(&mut events).await;
            self.release_held().await;
            self.start_pulls().await;
            self.schedule().await;
            self.retain_mps().await;
        }
    }

    async fn subscribe(&self) -> Option<EventStream> {
        match self.engine.events().await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow engine events");
                None
            }
        }
    }

    fn changed(&self, id: &str) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let _ = self.changes.send(id.to_owned());
    }

    async fn save(&self, w: &Workload) -> Result<(), StoreError> {
        self.store.update_workload(w).await?;
        self.changed(&w.id);
        Ok(())
    }
}
