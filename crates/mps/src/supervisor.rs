//! [`Supervisor`]: one task per GPU that starts its daemon, waits on it, starts it again when it exits,
//! and stops it when told.

use crate::process;
use crate::{MpsConfig, MpsEndpoint, MpsError, MpsHealth, check_uuid};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where a GPU's daemon is, as `ensure` waits on it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    /// Being started (or about to be, after a backoff).
    Starting,
    /// Answering, with this PID.
    Ready(u32),
    /// The last start failed or the daemon exited: why. It is started again after the backoff.
    Failed(String),
    /// Stopped for good.
    Stopped,
}

/// What [`Supervisor::health`] reports of one daemon.
#[derive(Debug, Default)]
struct Record {
    pid: Option<u32>,
    restarts: u32,
    last_error: Option<String>,
    adopted: bool,
}

#[derive(Debug)]
struct Daemon {
    status: watch::Receiver<Status>,
    stop: watch::Sender<bool>,
    record: Arc<Mutex<Record>>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Inner {
    config: MpsConfig,
    daemons: Mutex<BTreeMap<String, Daemon>>,
    /// Tasks of daemons told to stop that may not have finished yet, by GPU.
    stopping: Mutex<BTreeMap<String, JoinHandle<()>>>,
    /// Bumped whenever a daemon's health changes.
    changes: watch::Sender<u64>,
    /// Daemons told to stop are left running ([`Supervisor::detach`]).
    detached: AtomicBool,
}

/// Runs and supervises one MPS control daemon per GPU (see the crate's documentation). Cheap to clone;
/// clones share the daemons.
#[derive(Debug, Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Supervisor {
    /// A supervisor running daemons as `config` says; it starts none until asked.
    pub fn new(config: MpsConfig) -> Self {
        let inner = Inner {
            config,
            daemons: Mutex::default(),
            stopping: Mutex::default(),
            changes: watch::Sender::new(0),
            detached: AtomicBool::new(false),
        };
        Self { inner: Arc::new(inner) }
    }

    /// How it runs daemons.
    pub fn config(&self) -> &MpsConfig {
        &self.inner.config
    }

    /// Makes GPU `uuid`'s daemon run and returns once it answers (a client that starts earlier would
    /// run without MPS). Starts it if it is not running; waits at most the start timeout. A daemon
    /// whose last start failed and that waits for its next try answers at once with that failure.
    pub async fn ensure(&self, uuid: &str) -> Result<MpsEndpoint, MpsError> {
        check_uuid(uuid)?;
        process::resolve_program(&self.inner.config.program)?;
        // a daemon of this GPU being stopped must be gone before another starts on its directories
        let previous = lock(&self.inner.stopping).remove(uuid);
        if let Some(task) = previous {
            let _ = task.await;
        }
        let mut status = {
            let mut daemons = lock(&self.inner.daemons);
            let daemon = daemons.entry(uuid.to_owned()).or_insert_with(|| self.spawn(uuid));
            daemon.status.clone()
        };
        let c = &self.inner.config;
        let limit = c.start_timeout + c.stop_timeout + Duration::from_secs(1);
        let settled = tokio::time::timeout(limit, status.wait_for(|s| *s != Status::Starting)).await;
        let not_running = |reason: String| MpsError::NotRunning { uuid: uuid.to_owned(), reason };
        let now = match settled {
            Err(_) => return Err(not_running(format!("it did not answer within {} s", limit.as_secs()))),
            Ok(Err(_)) => return Err(MpsError::Stopping { uuid: uuid.to_owned() }),
            Ok(Ok(s)) => s.clone(),
        };
        match now {
            Status::Ready(pid) => Ok(MpsEndpoint {
                uuid: uuid.to_owned(),
                pipe_dir: c.dirs.pipe_dir(uuid),
                shm_dir: c.dirs.shm_dir(uuid),
                log_dir: c.dirs.log_dir(uuid),
                pid,
            }),
            Status::Failed(why) => Err(not_running(why)),
            Status::Starting | Status::Stopped => Err(MpsError::Stopping { uuid: uuid.to_owned() }),
        }
    }

    /// Keeps the daemons of exactly the GPUs in `wanted` (those holding MPS shares): stops the others,
    /// and starts (or adopts, after a restart of gpuhub) any of `wanted` it does not supervise yet, so
    /// a daemon that work already runs through is watched and restarted again. Returns at once: starts
    /// and stops go on in the background (a stop is `quit`, then a kill after the stop timeout), and a
    /// later [`Supervisor::ensure`] of a GPU being stopped waits for it to be gone.
    pub fn retain(&self, wanted: &BTreeSet<String>) {
        let mut stopping = lock(&self.inner.stopping);
        stopping.retain(|_, t| !t.is_finished());
        let gone: Vec<(String, Daemon)> = {
            let mut daemons = lock(&self.inner.daemons);
            let names: Vec<String> = daemons.keys().filter(|u| !wanted.contains(*u)).cloned().collect();
            let gone = names.into_iter().filter_map(|u| daemons.remove(&u).map(|d| (u, d))).collect();
            for uuid in wanted.iter().filter(|u| check_uuid(u).is_ok() && !stopping.contains_key(*u)) {
                if !daemons.contains_key(uuid) {
                    tracing::info!(gpu = %uuid, "supervising the MPS daemon of a GPU that holds MPS shares");
                    daemons.insert(uuid.clone(), self.spawn(uuid));
                }
            }
            gone
        };
        for (uuid, d) in gone {
            tracing::info!(gpu = %uuid, "stopping the MPS daemon: the GPU holds no MPS share");
            let _ = d.stop.send(true);
            stopping.insert(uuid, d.task);
        }
        drop(stopping);
        self.inner.changes.send_modify(|n| *n += 1);
    }

    /// Each daemon, by GPU.
    pub fn health(&self) -> Vec<MpsHealth> {
        let c = &self.inner.config;
        let note = (!c.private_shm).then(|| {
            "no private /dev/shm (gpuhub does not run as root): containers cannot reach this daemon".to_owned()
        });
        let daemons = lock(&self.inner.daemons);
        daemons
            .iter()
            .map(|(uuid, d)| {
                let r = lock(&d.record);
                MpsHealth {
                    uuid: uuid.clone(),
                    running: matches!(*d.status.borrow(), Status::Ready(_)),
                    pid: r.pid,
                    restarts: r.restarts,
                    last_error: r.last_error.clone(),
                    adopted: r.adopted,
                    private_shm: c.private_shm,
                    note: note.clone(),
                }
            })
            .collect()
    }

    /// A counter bumped whenever a daemon starts, exits, fails or is told to stop: something to wait on
    /// ([`watch::Receiver::changed`]) before looking at [`Supervisor::health`] again.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Stops supervising and leaves every daemon running, with its directories and shared memory, for
    /// the next gpuhub to adopt: work running through it keeps its MPS server across a restart of
    /// gpuhub. What the server does when it exits; [`Supervisor::shutdown`] stops them instead.
    pub async fn detach(&self) {
        self.inner.detached.store(true, Ordering::SeqCst);
        self.shutdown().await;
    }

    /// Stops every daemon and waits until they are gone.
    pub async fn shutdown(&self) {
        self.retain(&BTreeSet::new());
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.inner.stopping)).into_values().collect();
        for t in tasks {
            let _ = t.await;
        }
    }

    fn spawn(&self, uuid: &str) -> Daemon {
        let (status_tx, status) = watch::channel(Status::Starting);
        let (stop, stop_rx) = watch::channel(false);
        let record = Arc::new(Mutex::new(Record::default()));
        let task = Watch {
            inner: self.inner.clone(),
            uuid: uuid.to_owned(),
            record: record.clone(),
            status: status_tx,
            stop: stop_rx,
        };
        Daemon { status, stop, record, task: tokio::spawn(task.run()) }
    }
}

/// A daemon that answers.
enum Running {
    /// This process's child.
    Child {
        child: Child,
        /// Where its output begins in the output file.
        from: u64,
    },
    /// Found running, started by an earlier gpuhub: watched by its PID.
    Adopted(u32),
}

/// The task of one GPU's daemon.
struct Watch {
    inner: Arc<Inner>,
    uuid: String,
    record: Arc<Mutex<Record>>,
    status: watch::Sender<Status>,
    stop: watch::Receiver<bool>,
}

impl Watch {
    fn set(&self, status: Status, change: impl FnOnce(&mut Record)) {
        change(&mut lock(&self.record));
        self.status.send_replace(status);
        self.inner.changes.send_modify(|n| *n += 1);
    }

    async fn stopped(stop: &mut watch::Receiver<bool>) {
        // a dropped sender (the supervisor is gone) stops it too
        let _ = stop.wait_for(|s| *s).await;
    }

    async fn run(self) {
        let c = self.inner.config.clone();
        let mut backoff = c.restart_backoff;
        let mut first = true;
        loop {
            if !first {
                self.set(Status::Starting, |r| r.restarts += 1);
            }
            first = false;
            let mut stop = self.stop.clone();
            let started = tokio::select! {
                r = self.start(&c) => r,
                _ = Self::stopped(&mut stop) => return self.finish(&c, None).await,
            };
            match started {
                Ok((running, pid)) => {
                    let since = tokio::time::Instant::now();
                    let adopted = matches!(running, Running::Adopted(_));
                    self.set(Status::Ready(pid), |r| {
                        r.pid = Some(pid);
                        r.adopted = adopted;
                    });
                    let mut running = running;
                    let exited = tokio::select! {
                        why = wait(&mut running, &c, &self.uuid) => why,
                        _ = Self::stopped(&mut stop) => return self.finish(&c, Some(running)).await,
                    };
                    // one that ran a while starts again soon; one that keeps dying right away, ever later
                    if since.elapsed() >= c.max_backoff {
                        backoff = c.restart_backoff;
                    }
                    tracing::warn!(gpu = %self.uuid, "the MPS daemon exited: {exited}; starting it again");
                    self.set(Status::Failed(exited.clone()), |r| {
                        r.pid = None;
                        r.last_error = Some(exited);
                    });
                }
                Err(why) => {
                    tracing::warn!(gpu = %self.uuid, "cannot start the MPS daemon: {why}");
                    self.set(Status::Failed(why.clone()), |r| r.last_error = Some(why));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = Self::stopped(&mut stop) => return self.finish(&c, None).await,
            }
            backoff = (backoff * 2).min(c.max_backoff.max(c.restart_backoff));
        }
    }

    /// Starts the daemon (or adopts one left running) and waits until it answers.
    async fn start(&self, c: &MpsConfig) -> Result<(Running, u32), String> {
        let uuid = self.uuid.as_str();
        let program = process::resolve_program(&c.program).map_err(|e| e.to_string())?;
        process::make_dirs(c, uuid).map_err(|e| e.to_string())?;
        if let Some(smi) = &c.exclusive_process {
            process::set_compute_mode(c, smi, uuid, "EXCLUSIVE_PROCESS").await?;
        }
        if process::control_exists(c, uuid) {
            if let Some(pid) = process::live_pid(c, uuid) {
                if process::command(c, &program, uuid, "get_server_list", c.stop_timeout).await.is_ok() {
                    tracing::info!(gpu = uuid, pid, "adopting the MPS daemon already running");
                    return Ok((Running::Adopted(pid), pid));
                }
            }
        }
        process::clear_pipe_dir(c, uuid).map_err(|e| e.to_string())?;
        if c.private_shm {
            process::mount_shm(c, uuid).await?;
        }
        let from = process::output_len(c, uuid);
        let mut child = process::spawn_daemon(c, &program, uuid)?;
        let pid = child.id().unwrap_or_default();
        let answered = async {
            // the control pipe appears once it listens; the daemon's exit ends the wait early
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            while !process::control_exists(c, uuid) {
                tokio::select! {
                    _ = tick.tick() => {}
                    status = child.wait() => {
                        let said = process::last_output(c, uuid, from);
                        return Err(format!("{} before it answered", process::describe_exit(status, said)));
                    }
                }
            }
            process::command(c, &program, uuid, "get_server_list", c.stop_timeout).await.map(|_| ())
        };
        match tokio::time::timeout(c.start_timeout, answered).await {
            Ok(Ok(())) => Ok((Running::Child { child, from }, pid)),
            Ok(Err(why)) => Err(why),
            Err(_) => Err(format!("it did not answer within {} s", c.start_timeout.as_secs_f32())),
        }
        // a child that did not answer is killed as it is dropped
    }

    /// Stops the daemon, if one runs: `quit`, then a kill once the stop timeout has passed. A detached
    /// supervisor leaves it running instead, with its shared memory, for the next one to adopt.
    async fn finish(self, c: &MpsConfig, running: Option<Running>) {
        let uuid = self.uuid.as_str();
        if self.inner.detached.load(Ordering::SeqCst) {
            if let Some(Running::Child { child, .. }) = running {
                // dropped, it would be killed (`kill_on_drop`); it must outlive this process instead
                std::mem::forget(child);
            }
            tracing::info!(gpu = uuid, "leaving the MPS daemon running for the next gpuhub to adopt");
            return self.set(Status::Stopped, |r| r.pid = None);
        }
        if let Some(mut running) = running {
            let program = process::resolve_program(&c.program).map(|p| p.to_path_buf());
            let quit = match &program {
                Ok(p) => process::command(c, p, uuid, "quit", c.stop_timeout).await.map(|_| ()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = quit {
                tracing::warn!(gpu = uuid, "the MPS daemon did not take quit: {e}");
            }
            let gone = tokio::time::timeout(c.stop_timeout, wait(&mut running, c, uuid)).await.is_ok();
            if !gone {
                tracing::warn!(
                    gpu = uuid,
                    "the MPS daemon did not quit within {} s; killing it",
                    c.stop_timeout.as_secs()
                );
                match &mut running {
                    Running::Child { child, .. } => {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                    }
                    Running::Adopted(pid) => process::kill(*pid),
                }
            }
        }
        if c.private_shm {
            process::unmount_shm(c, uuid).await;
        }
        if let Some(smi) = &c.exclusive_process {
            if let Err(e) = process::set_compute_mode(c, smi, uuid, "DEFAULT").await {
                tracing::warn!(gpu = uuid, "{e}");
            }
        }
        self.set(Status::Stopped, |r| r.pid = None);
    }
}

/// Waits until a running daemon exits; says how.
async fn wait(running: &mut Running, c: &MpsConfig, uuid: &str) -> String {
    match running {
        Running::Child { child, from } => {
            let status = child.wait().await;
            process::describe_exit(status, process::last_output(c, uuid, *from))
        }
        Running::Adopted(pid) => {
            let mut tick = tokio::time::interval(c.adopted_poll);
            while process::alive(*pid) {
                tick.tick().await;
            }
            format!("the adopted daemon (pid {pid}) is gone")
        }
    }
}
