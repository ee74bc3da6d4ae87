//! The controller: the single writer of workload state. The store holds the desired state, the runtime
//! the actual one; the controller follows the runtime's events, reconciles fully at start and
//! periodically, and starts queued work when the admission rule says it fits.
//!
//! Every transition records its intent in the store before acting on the runtime (`queued → starting`
//! with the GPUs assigned, then create), so a crash at any point is repaired by reconciliation.

mod burst;
mod start_error;

use burst::{next_event, until};
use start_error::StartError;

use crate::config::Config;
use crate::error::ApiError;
use crate::logfile;
use crate::spec::{self, SpecContext};
use chrono::Utc;
use futures::StreamExt;
use gpuhub_core::api::Explanation;
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::{ContainerInfo, ContainerStatus, EventStream, Runtime, RuntimeError, RuntimeEvent};
use gpuhub_store::{Store, StoreError, WorkloadFilter};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, mpsc, oneshot};

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

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
    /// A background stop finished.
    Stopped {
        id: String,
        result: Result<(), RuntimeError>,
    },
}

/// How handlers talk to the controller.
#[derive(Debug, Clone)]
pub struct ControllerHandle {
    tx: mpsc::Sender<Command>,
    kick: Arc<Notify>,
    changes: broadcast::Sender<String>,
    explanations: Explanations,
    passes: Arc<AtomicU64>,
}

/// The scheduler's explanation of every queued workload, by id, from its last pass.
pub type Explanations = Arc<RwLock<HashMap<String, Explanation>>>;

impl ControllerHandle {
    /// How many scheduling passes the controller has run (for tests and metrics).
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Asks for a scheduling pass soon (after a submit).
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// Why a queued workload waits (from the scheduler's last pass).
    pub fn explanation(&self, id: &str) -> Option<Explanation> {
        self.explanations.read().ok()?.get(id).cloned()
    }

    /// Ids of workloads whose state changed, as they change.
    pub fn changes(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| ApiError::internal("controller is gone"))?;
        rx.await.map_err(|_| ApiError::internal("controller dropped the request"))?
    }

    /// Stops a workload for `reason` (kept with it); returns once its container has stopped.
    pub async fn stop(&self, id: &str, reason: StopReason) -> Result<Workload, ApiError> {
        self.ask(|reply| Command::Stop { id: id.to_owned(), reason, reply }).await
    }

    /// Queues an ended workload again.
    pub async fn start(&self, id: &str) -> Result<Workload, ApiError> {
        self.ask(|reply| Command::Start { id: id.to_owned(), reply }).await
    }

    /// Removes a workload and its container.
    pub async fn delete(&self, id: &str) -> Result<(), ApiError> {
        self.ask(|reply| Command::Delete { id: id.to_owned(), reply }).await
    }
}

/// The controller task's state.
#[derive(Debug)]
pub struct Controller {
    store: Store,
    runtime: Arc<dyn Runtime>,
    config: Arc<Config>,
    node: Arc<NodeCapacity>,
    data_dir: PathBuf,
    /// This installation's id; only containers labelled with it are ours.
    instance: String,
    control_devices: Vec<String>,
    rx: mpsc::Receiver<Command>,
    tx: mpsc::Sender<Command>,
    kick: Arc<Notify>,
    changes: broadcast::Sender<String>,
    /// Workloads being stopped, with the callers waiting for it.
    stopping: HashMap<String, Vec<Reply<Workload>>>,
    /// Why each queued workload waits, shared with the API.
    explanations: Explanations,
    /// Decayed usage per queue, for fair share.
    usage: gpuhub_sched::Usage,
    /// When the next running workload reaches its run-time limit.
    next_deadline: Option<chrono::DateTime<Utc>>,
    /// Scheduling passes run, shared with the handle.
    passes: Arc<AtomicU64>,
}

/// Why a queued workload of a disabled account waits.
pub const OWNER_DISABLED: &str = "held: the owner's account is disabled";

impl Controller {
    /// A controller and the handle to reach it.
    pub fn new(
        store: Store,
        runtime: Arc<dyn Runtime>,
        config: Arc<Config>,
        node: Arc<NodeCapacity>,
        data_dir: PathBuf,
        instance: String,
    ) -> (Self, ControllerHandle) {
        let (tx, rx) = mpsc::channel(256);
        let kick = Arc::new(Notify::new());
        let (changes, _) = broadcast::channel(1024);
        let control_devices =
            spec::CONTROL_DEVICES.iter().filter(|d| std::path::Path::new(d).exists()).map(|d| d.to_string()).collect();
        let explanations = Explanations::default();
        let handle = ControllerHandle {
            tx: tx.clone(),
            kick: kick.clone(),
            changes: changes.clone(),
            explanations: explanations.clone(),
            passes: Arc::default(),
        };
        let c = Self {
            store,
            runtime,
            config,
            node,
            data_dir,
            instance,
            control_devices,
            rx,
            tx,
            kick,
            changes,
            stopping: HashMap::new(),
            explanations,
            usage: gpuhub_sched::Usage::default(),
            next_deadline: None,
            passes: handle.passes.clone(),
        };
        (c, handle)
    }

    /// Runs until `shutdown` resolves: reconcile, then follow events, commands and the periodic tick.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut events = self.subscribe().await;
        self.reconcile().await;
        self.schedule().await;
        let mut tick = tokio::time::interval(Duration::from_secs(self.config.reconcile_secs));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                Some(cmd) = self.rx.recv() => self.command(cmd).await,
                ev = next_event(&mut events) => match ev {
                    Some(Ok(ev)) => self.event(ev).await,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "runtime event stream failed; reconnecting at the next tick");
                        events = None;
                    }
                    None => events = None,
                },
                _ = self.kick.notified() => {}
                _ = until(self.next_deadline) => {}
                _ = tick.tick() => {
                    if events.is_none() {
                        events = self.subscribe().await;
                    }
                    self.reconcile().await;
                }
            }
            self.drain(&mut events).await;
            self.schedule().await;
        }
    }

    async fn subscribe(&self) -> Option<EventStream> {
        match self.runtime.events().await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow runtime events");
                None
            }
        }
    }

    fn changed(&self, id: &str) {
        let _ = self.changes.send(id.to_owned());
    }

    async fn save(&self, w: &Workload) -> Result<(), StoreError> {
        self.store.update_workload(w).await?;
        self.changed(&w.id);
        Ok(())
    }

    async fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Stop { id, reason, reply } => self.stop(id, reason, reply).await,
            Command::Start { id, reply } => {
                let _ = reply.send(self.start(&id).await);
            }
            Command::Delete { id, reply } => {
                let _ = reply.send(self.delete(&id).await);
            }
            Command::Stopped { id, result } => self.stopped(id, result).await,
        }
    }

    async fn stop(&mut self, id: String, reason: StopReason, reply: Reply<Workload>) {
        let mut w = match self.store.get_workload_by_id(&id).await {
            Ok(w) => w,
            Err(e) => return drop(reply.send(Err(e.into()))),
        };
        if let Err(e) = w.state.stop() {
            return drop(reply.send(Err(e.into())));
        }
        w.interruption = Some(reason);
        match (&w.container_id, w.state) {
            (Some(cid), WorkloadState::Starting | WorkloadState::Running) => {
                let cid = cid.clone();
                if let Err(e) = self.save(&w).await {
                    return drop(reply.send(Err(e.into())));
                }
                self.begin_stop(id, &cid, Duration::from_secs(self.config.stop_grace_secs), Some(reply));
            }
            _ => {
                w.state = WorkloadState::Stopped;
                w.gpus.clear();
                w.finished_at = Some(Utc::now());
                w.message = Some("stopped before it started".into());
                let r = self.save(&w).await.map(|_| w).map_err(ApiError::from);
                let _ = reply.send(r);
            }
        }
    }

    /// Stops a container in the background (SIGTERM, SIGKILL after `grace`); [`Command::Stopped`] records
    /// the outcome. `reply`, when given, is answered then.
    fn begin_stop(&mut self, id: String, cid: &str, grace: Duration, reply: Option<Reply<Workload>>) {
        let first = !self.stopping.contains_key(&id);
        let waiting = self.stopping.entry(id.clone()).or_default();
        waiting.extend(reply);
        if first {
            let (rt, tx, cid) = (self.runtime.clone(), self.tx.clone(), cid.to_owned());
            tokio::spawn(async move {
                let result = rt.stop(&cid, grace).await;
                let _ = tx.send(Command::Stopped { id, result }).await;
            });
        }
    }

    async fn stopped(&mut self, id: String, result: Result<(), RuntimeError>) {
        let waiting = self.stopping.remove(&id).unwrap_or_default();
        let outcome = async {
            let mut w = self.store.get_workload_by_id(&id).await?;
            match result {
                Ok(()) | Err(RuntimeError::NotFound(_)) => {}
                Err(e) => return Err(ApiError::from(e)),
            }
            if w.state.holds_resources() {
                let code = match &w.container_id {
                    Some(cid) => match self.runtime.inspect(cid).await {
                        Ok(ContainerInfo { status: ContainerStatus::Exited(c), .. }) => Some(c),
                        _ => None,
                    },
                    None => None,
                };
                crate::interrupt::after_stop(&mut w, code, Utc::now());
                self.save(&w).await?;
                self.archive_logs(&w);
            }
            Ok(w)
        }
        .await;
        for reply in waiting {
            let _ = reply.send(match &outcome {
                Ok(w) => Ok(w.clone()),
                Err(e) => Err(ApiError::new(e.status, e.detail.clone())),
            });
        }
    }

    async fn start(&mut self, id: &str) -> Result<Workload, ApiError> {
        let mut w = self.store.get_workload_by_id(id).await?;
        let before = w.state;
        w.state = w.state.start()?;
        w.exit_code = None;
        w.gpus.clear();
        w.finished_at = None;
        w.queued_at = Utc::now();
        w.message = Some("queued".into());
        w.interruption = None;
        if !self.store.update_workload_if(&w, before).await? {
            return Err(ApiError::conflict("workload changed meanwhile; try again"));
        }
        self.changed(&w.id);
        Ok(w)
    }

    async fn delete(&mut self, id: &str) -> Result<(), ApiError> {
        let w = self.store.get_workload_by_id(id).await?;
        if let Some(cid) = &w.container_id {
            match self.runtime.remove(cid).await {
                Ok(()) | Err(RuntimeError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.store.delete_workload(id).await?;
        let _ = std::fs::remove_file(self.log_path(id));
        self.changed(id);
        Ok(())
    }

    async fn event(&mut self, ev: RuntimeEvent) {
        let (RuntimeEvent::Started { workload, .. }
        | RuntimeEvent::Died { workload, .. }
        | RuntimeEvent::Destroyed { workload, .. }) = &ev;
        if self.stopping.contains_key(workload) {
            return; // the stop's own completion records the outcome
        }
        let mut w = match self.store.get_workload_by_id(workload).await {
            Ok(w) => w,
            Err(StoreError::NotFound { .. }) => return,
            Err(e) => return tracing::error!(error = %e, "event for {workload}"),
        };
        let from_this_container = |id: &str| w.container_id.as_deref() == Some(id);
        let result = match &ev {
            RuntimeEvent::Started { id, .. } if w.state == WorkloadState::Starting && from_this_container(id) => {
                w.state = WorkloadState::Running;
                w.started_at.get_or_insert_with(Utc::now);
                self.save(&w).await
            }
            RuntimeEvent::Died { id, exit_code, .. } if w.state.holds_resources() && from_this_container(id) => {
                self.finish(&mut w, *exit_code).await
            }
            RuntimeEvent::Destroyed { id, .. } if w.state.holds_resources() && from_this_container(id) => {
                self.lose(&mut w, "container was removed outside gpuhub").await
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(error = %e, workload = %w.id, "cannot record event");
        }
    }

    async fn finish(&self, w: &mut Workload, code: i64) -> Result<(), StoreError> {
        w.state = w.state.exited(w.kind, code);
        w.exit_code = Some(code);
        w.gpus.clear();
        w.finished_at = Some(Utc::now());
        w.message = Some(match (w.state, code) {
            (WorkloadState::Succeeded, _) => "exited with code 0".into(),
            (_, 137) => "killed (exit code 137; out of memory or SIGKILL)".into(),
            (_, c) => format!("exited with code {c}"),
        });
        self.save(w).await?;
        self.archive_logs(w);
        Ok(())
    }

    async fn lose(&self, w: &mut Workload, why: &str) -> Result<(), StoreError> {
        w.state = WorkloadState::Lost;
        w.gpus.clear();
        w.finished_at = Some(Utc::now());
        w.message = Some(why.to_owned());
        w.interruption = Some(crate::interrupt::engine_failure(why));
        self.save(w).await
    }

    /// Where a finished workload's logs are kept when its container is gone.
    fn log_path(&self, id: &str) -> PathBuf {
        self.data_dir.join("logs").join(format!("{id}.log"))
    }

    /// Copies a finished workload's output to the data dir, so it outlives the container: streamed chunk
    /// by chunk into a private (0600) file, cut at `log_max_bytes` with a line saying so, then renamed
    /// into place. Announces the workload on the change feed once the archive is there.
    fn archive_logs(&self, w: &Workload) {
        let (Some(cid), rt, path) = (w.container_id.clone(), self.runtime.clone(), self.log_path(&w.id)) else {
            return;
        };
        let (cap, changes, id) = (self.config.log_max_bytes.0, self.changes.clone(), w.id.clone());
        tokio::spawn(async move {
            let stream = match rt.logs(&cid, false, None).await {
                Ok(s) => s,
                Err(e) => return tracing::warn!(error = %e, "cannot archive logs of {cid}"),
            };
            // a name of its own, so that two archives of one workload never write the same file
            let tmp = path.with_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
            let write = async {
                let mut file = logfile::create_private(&tmp).await?;
                let archived = logfile::copy_capped(stream, &mut file, cap).await?;
                file.sync_all().await?;
                tokio::fs::rename(&tmp, &path).await?;
                Ok::<_, std::io::Error>(archived)
            };
            match write.await {
                Ok(a) if a.truncated => tracing::info!(workload = %id, bytes = a.bytes, "log archived, truncated"),
                Ok(_) => {}
                Err(e) => {
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return tracing::warn!(error = %e, "cannot write {}", path.display());
                }
            }
            let _ = changes.send(id);
        });
    }

    /// Brings the store in line with what the runtime has.
    pub async fn reconcile(&mut self) {
        if let Err(e) = self.try_reconcile().await {
            tracing::error!(error = %e, "reconciliation failed");
        }
    }

    async fn try_reconcile(&mut self) -> Result<(), ApiError> {
        let containers = self.runtime.list_managed().await?;
        let mut by_workload: BTreeMap<String, Vec<ContainerInfo>> = BTreeMap::new();
        // containers of other installations sharing this engine are none of our business
        let ours = |c: &ContainerInfo| c.labels.get(spec::LABEL_INSTANCE) == Some(&self.instance);
        for c in containers.into_iter().filter(ours) {
            if let Some(w) = c.labels.get(gpuhub_driver::LABEL_WORKLOAD) {
                by_workload.entry(w.clone()).or_default().push(c);
            }
        }
        let filter =
            WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Starting, WorkloadState::Running]) };
        for mut w in self.store.list_workloads(&filter).await? {
            if self.stopping.contains_key(&w.id) {
                continue;
            }
            let found = by_workload
                .get(&w.id)
                .and_then(|cs| cs.iter().find(|c| Some(&c.id) == w.container_id.as_ref()).or_else(|| cs.first()));
            match (found, w.state) {
                (Some(c), _) => {
                    w.container_id = Some(c.id.clone());
                    match c.status {
                        ContainerStatus::Running => {
                            if w.state != WorkloadState::Running {
                                w.state = WorkloadState::Running;
                                w.started_at.get_or_insert_with(Utc::now);
                                self.save(&w).await?;
                            }
                        }
                        ContainerStatus::Exited(code) => self.finish(&mut w, code).await?,
                        ContainerStatus::Created => {
                            self.save(&w).await?;
                            if let Err(e) = self.runtime.start(&c.id).await {
                                w.state = WorkloadState::Failed;
                                w.gpus.clear();
                                w.message = Some(format!("could not start: {e}"));
                                w.interruption = Some(crate::interrupt::engine_failure(e.to_string()));
                                self.save(&w).await?;
                            } else {
                                w.state = WorkloadState::Running;
                                w.started_at = Some(Utc::now());
                                self.save(&w).await?;
                            }
                        }
                    }
                }
                (None, WorkloadState::Starting) => {
                    // the intent was recorded but no container was made: queue it again
                    w.state = WorkloadState::Queued;
                    w.gpus.clear();
                    w.container_id = None;
                    w.message = Some("queued again after a restart".into());
                    self.save(&w).await?;
                }
                (None, _) => self.lose(&mut w, "container disappeared").await?,
            }
        }
        // containers whose workload is gone or has ended
        for (wid, cs) in by_workload {
            match self.store.get_workload_by_id(&wid).await {
                Err(StoreError::NotFound { .. }) => {
                    for c in cs {
                        tracing::info!(container = %c.id, "removing container of deleted workload {wid}");
                        let _ = self.runtime.remove(&c.id).await;
                    }
                }
                Ok(w) if w.state.is_terminal() && !self.stopping.contains_key(&wid) => {
                    for c in cs.iter().filter(|c| c.status == ContainerStatus::Running) {
                        tracing::info!(container = %c.id, "stopping container of ended workload {wid}");
                        let _ = self.runtime.stop(&c.id, Duration::from_secs(self.config.stop_grace_secs)).await;
                    }
                }
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Starts what fits, in queue order, and records why the rest waits.
    pub async fn schedule(&mut self) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.try_schedule().await {
            tracing::error!(error = %e, "scheduling pass failed");
        }
    }

    async fn try_schedule(&mut self) -> Result<(), ApiError> {
        let filter = WorkloadFilter {
            owner: None,
            states: Some(vec![WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running]),
        };
        let active = self.store.list_workloads(&filter).await?;
        let now = Utc::now();
        let now_ms = now.timestamp_millis();
        let running: Vec<gpuhub_sched::Running> = active
            .iter()
            .filter(|w| w.state.holds_resources())
            .map(|w| crate::scheduling::running(&self.node, w, self.stopping.contains_key(&w.id)))
            .collect();
        let (over, next) = crate::scheduling::over_limit(&active, now);
        self.next_deadline = next;
        for w in over {
            let Some(cid) = w.container_id.clone() else { continue };
            if self.stopping.contains_key(&w.id) {
                continue;
            }
            let limit = w.runtime_limit.unwrap_or_default();
            tracing::info!(workload = %w.id, %limit, "run-time limit reached; stopping");
            let mut w = w.clone();
            w.message = Some(format!("{} of {limit}", crate::scheduling::TIME_LIMIT));
            w.interruption = Some(StopReason::TimeLimit { limit, at: now });
            self.save(&w).await?;
            self.begin_stop(w.id.clone(), &cid, Duration::from_secs(self.config.stop_grace_secs), None);
        }
        let half_life = (self.config.fair_share_half_life_hours * 3_600_000.0) as i64;
        self.usage.advance(&running, now_ms, half_life.max(1));
        if !active.iter().any(|w| w.state == WorkloadState::Queued) {
            self.explanations.write().map_err(ApiError::internal)?.clear();
            return Ok(());
        }
        // a disabled account's queued work never starts (it waits, saying why, until re-enabled)
        let disabled: std::collections::HashSet<String> =
            self.store.list_users().await?.into_iter().filter(|u| u.disabled).map(|u| u.username).collect();
        let pending: Vec<gpuhub_sched::Pending> = active
            .iter()
            .filter(|w| w.state == WorkloadState::Queued && !disabled.contains(&w.owner))
            .map(crate::scheduling::pending)
            .collect();
        for w in active.iter().filter(|w| w.state == WorkloadState::Queued && disabled.contains(&w.owner)) {
            if w.message.as_deref() != Some(OWNER_DISABLED) {
                let mut w = w.clone();
                w.message = Some(OWNER_DISABLED.into());
                if self.store.update_workload_if(&w, WorkloadState::Queued).await? {
                    self.changed(&w.id);
                }
            }
        }
        let mut config = self.config.scheduler.clone();
        // the queues in force are the store's: an admin's edit takes effect on the next pass
        config.queues = self.store.list_queues().await?.iter().map(crate::queues::spec).collect();
        config.usage = self.usage.clone();
        config
            .reservations
            .extend(self.store.list_reservations(now).await?.into_iter().map(crate::scheduling::reservation));
        let decisions =
            gpuhub_sched::schedule(&crate::scheduling::cluster(&self.node), &running, &pending, &config, now_ms);
        let by_id: HashMap<&str, &Workload> = active.iter().map(|w| (w.id.as_str(), w)).collect();

        let explained: HashMap<String, Explanation> = (decisions.pending.iter())
            .map(|e| {
                let w = by_id.get(e.id.as_str()).copied();
                (e.id.clone(), crate::unmet::explain(e, w, &active, &self.node, &config, now))
            })
            .collect();
        for (id, e) in &explained {
            let Some(w) = by_id.get(id.as_str()) else { continue };
            if w.message.as_deref() != Some(e.message.as_str()) {
                let mut w = (*w).clone();
                w.message = Some(e.message.clone());
                if self.store.update_workload_if(&w, WorkloadState::Queued).await? {
                    self.changed(&w.id);
                }
            }
        }
        *self.explanations.write().map_err(ApiError::internal)? = explained;

        for p in decisions.preemptions {
            let Some(w) = by_id.get(p.id.as_str()) else { continue };
            let Some(cid) = w.container_id.clone() else { continue };
            if self.stopping.contains_key(&p.id) {
                continue;
            }
            tracing::info!(victim = %p.id, for_id = %p.for_id, reason = %p.reason, "preempting");
            let mut victim = (*w).clone();
            let by = by_id.get(p.for_id.as_str());
            victim.interruption = Some(StopReason::Preempted {
                by: by.map_or_else(|| p.for_id.clone(), |b| format!("{}/{}", b.owner, b.name)),
                queue: by.map(|b| b.queue.clone()).unwrap_or_default(),
                at: now,
                detail: p.reason.clone(),
            });
            victim.message = Some(format!("preempted: {}", p.reason));
            self.save(&victim).await?;
            let grace = Duration::from_millis(u64::try_from(p.grace_ms).unwrap_or(0));
            self.begin_stop(p.id.clone(), &cid, grace, None);
        }
        for start in decisions.starts {
            let Some(w) = by_id.get(start.id.as_str()) else { continue };
            let gpus = start.placements.iter().flat_map(|p| p.gpus.iter().map(|g| g.uuid.clone())).collect();
            self.launch((*w).clone(), gpus).await?;
        }
        Ok(())
    }

    async fn launch(&mut self, mut w: Workload, gpus: Vec<String>) -> Result<(), ApiError> {
        w.state = WorkloadState::Starting;
        w.gpus = gpus;
        w.message = None;
        w.interruption = None;
        let old = w.container_id.take();
        if !self.store.update_workload_if(&w, WorkloadState::Queued).await? {
            return Ok(()); // stopped or deleted meanwhile
        }
        self.changed(&w.id);
        if let Some(old) = old {
            match self.runtime.remove(&old).await {
                Ok(()) | Err(RuntimeError::NotFound(_)) => {}
                Err(e) => tracing::warn!(error = %e, "cannot remove old container {old}"),
            }
        }
        let outcome = self.create_and_start(&mut w).await;
        match outcome {
            Ok(()) => {
                w.state = WorkloadState::Running;
                w.started_at = Some(Utc::now());
                w.message = None;
            }
            Err(StartError::Retry(e)) => {
                // nothing ran: it waits in the queue again and starts once the engine answers
                tracing::warn!(workload = %w.id, error = %e, "cannot reach the engine to start workload; queued again");
                w.state = WorkloadState::Queued;
                w.gpus.clear();
                w.message = Some(format!("queued again: {e}"));
            }
            Err(StartError::Failed(e)) => {
                tracing::warn!(workload = %w.id, error = %e, "cannot start workload");
                w.state = WorkloadState::Failed;
                w.gpus.clear();
                w.finished_at = Some(Utc::now());
                w.message = Some(format!("could not start: {e}"));
                w.interruption = Some(crate::interrupt::engine_failure(e.to_string()));
            }
        }
        // a Died event may already have been handled if the container ended at once; keep its result
        match self.store.get_workload_by_id(&w.id).await {
            Ok(cur) if cur.state != WorkloadState::Starting => return Ok(()),
            Err(StoreError::NotFound { .. }) => return Ok(()),
            _ => {}
        }
        self.save(&w).await?;
        Ok(())
    }

    async fn create_and_start(&self, w: &mut Workload) -> Result<(), StartError> {
        let user = self.store.get_user(&w.owner).await?;
        ensure_home(&spec::home_on_host(&self.data_dir, &w.owner), user.uid)
            .map_err(|e| StartError::Failed(format!("home directory: {e}")))?;
        let network = spec::user_network(&self.instance, &w.owner);
        let labels = spec::network_labels(&self.instance, &w.owner);
        self.runtime.ensure_network(&network, &labels).await?;
        let share = match (&self.config.gpu_share_library, w.resources.gpu_milli > 0) {
            (Some(lib), true) => Some((lib.clone(), self.share_preload(lib).map_err(StartError::Failed)?)),
            _ => None,
        };
        let cx = SpecContext {
            instance: &self.instance,
            uid: user.uid,
            data_dir: &self.data_dir,
            node: &self.node,
            gpu_mode: self.config.gpu_mode,
            control_devices: &self.control_devices,
            pids_limit: self.config.pids_limit,
            log_max_bytes: self.config.log_max_bytes.0,
            share_library: share.as_ref().map(|(l, p)| (l.as_path(), p.as_path())),
        };
        let spec = spec::container_spec(w, &cx);
        let cid = self.runtime.create(&spec).await?;
        w.container_id = Some(cid.clone());
        self.store.update_workload(w).await?;
        self.runtime.start(&cid).await?;
        self.start_apps(w, user.uid, &cid).await;
        Ok(())
    }

    /// The host file a container mounts as `/etc/ld.so.preload` to load the GPU-sharing library `lib`,
    /// written on first use.
    fn share_preload(&self, lib: &std::path::Path) -> Result<PathBuf, String> {
        if !lib.is_file() {
            return Err(format!("gpu_share_library {} is not a file on this host", lib.display()));
        }
        let path = self.data_dir.join("gpu-share").join("ld.so.preload");
        let want = format!("{}\n", spec::SHARE_LIBRARY_TARGET);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            let write = || -> std::io::Result<()> {
                std::fs::create_dir_all(path.parent().unwrap_or(&self.data_dir))?;
                std::fs::write(&path, &want)
            };
            write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Ok(path)
    }

    /// Starts the workload's apps that have a start command, as the owner, each writing its output to
    /// `<data>/logs/<id>.<app>.log` (0600, cut at `log_max_bytes`). An app that fails to start is logged;
    /// the workload keeps running.
    async fn start_apps(&self, w: &Workload, uid: u32, cid: &str) {
        for app in w.apps.iter().filter(|a| !a.command.is_empty()) {
            let home = format!("/home/{}", w.owner);
            let exec = gpuhub_driver::ExecSpec {
                command: app.start_command(&w.owner, &w.name),
                user: format!("{uid}:{uid}"),
                // the app learns where the hub serves it, for frameworks that need their base URL
                env: std::collections::BTreeMap::from([
                    ("HOME".to_owned(), home.clone()),
                    ("GPUHUB_BASE_URL".to_owned(), app.base_url(&w.owner, &w.name)),
                    ("GPUHUB_PORT".to_owned(), app.port.to_string()),
                ]),
                working_dir: Some(home),
                tty: None,
            };
            match self.runtime.exec(cid, &exec).await {
                Ok(handle) => {
                    let path = self.data_dir.join("logs").join(format!("{}.{}.log", w.id, app.name));
                    let cap = self.config.log_max_bytes.0;
                    tokio::spawn(async move {
                        let mut out = handle.output;
                        let copy = async {
                            let mut file = logfile::create_private(&path).await?;
                            logfile::copy_capped(&mut out, &mut file, cap).await
                        };
                        if let Err(e) = copy.await {
                            tracing::warn!(error = %e, "cannot write {}", path.display());
                        }
                        // past the cap (or a failed file), keep reading and drop it: the app must not
                        // find its output closed
                        while out.next().await.is_some() {}
                    });
                }
                Err(e) => tracing::warn!(workload = %w.id, app = %app.name, error = %e, "cannot start app"),
            }
        }
    }
}

/// Makes `<data>/homes/<user>` owned by the user's UID/GID, mode 0700.
pub fn ensure_home(path: &std::path::Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)?;
    std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}
