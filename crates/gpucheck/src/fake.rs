//! Recording fakes of the seams, for tests without a GPU: a [`FakeClock`] that moves only when waited
//! on, a [`FakeLauncher`] whose workers follow scripts (and show their memory in a
//! [`FakeGpuSampler`] as NVML would) and a [`FakeMps`].

use crate::launch::{Launcher, Next, Worker, WorkerSpec};
use crate::seams::{Clock, MpsClient, MpsDaemon, SeamError};
use crate::worker::WorkerEvent;
use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_core::Bytes;
use gpuhub_gpu::{FakeGpuSampler, GpuProcess};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A clock that moves only when slept on (or advanced).
#[derive(Debug)]
pub struct FakeClock {
    now: Mutex<DateTime<Utc>>,
}

impl FakeClock {
    /// A clock at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self { now: Mutex::new(start) }
    }

    /// Moves it on by `d`.
    pub fn advance(&self, d: Duration) {
        *lock(&self.now) += TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        *lock(&self.now)
    }

    fn sleep(&self, d: Duration) {
        self.advance(d);
    }
}

/// One step of a fake worker's script, taken at each [`Worker::next`].
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// This event.
    Event(WorkerEvent),
    /// Nothing within the wait (the clock moves by it).
    Wait,
    /// Its output ends, with these words.
    Exit(String),
    /// From now on every NVML sample fails with these words (`Some`) or succeeds again (`None`) (taken
    /// with the step after it).
    Nvml(Option<String>),
    /// From now on NVML lists the worker on GPU `uuid` with `bytes` and the GPU at `utilization` %
    /// (taken with the step after it).
    Show {
        /// The GPU.
        uuid: String,
        /// Its memory, bytes.
        bytes: u64,
        /// The GPU's utilisation, percent.
        utilization: f64,
    },
}

#[derive(Debug, Default)]
struct LaunchState {
    scripts: VecDeque<Vec<Step>>,
    specs: Vec<WorkerSpec>,
    log: Vec<String>,
    next_pid: u32,
    /// What NVML shows, by GPU: pid → bytes.
    shown: BTreeMap<String, BTreeMap<u32, u64>>,
}

/// Starts scripted workers: each spawn takes the next script (none left: the spawn fails). Records the
/// specs and a log of spawns, events and kills; a killed worker leaves the fake NVML.
#[derive(Debug, Clone)]
pub struct FakeLauncher {
    state: Arc<Mutex<LaunchState>>,
    clock: Arc<FakeClock>,
    sampler: Arc<FakeGpuSampler>,
}

impl FakeLauncher {
    /// A launcher over `clock` and `sampler`.
    pub fn new(clock: Arc<FakeClock>, sampler: Arc<FakeGpuSampler>) -> Self {
        let state = LaunchState { next_pid: 1000, ..Default::default() };
        Self { state: Arc::new(Mutex::new(state)), clock, sampler }
    }

    /// Adds the script of the next worker.
    pub fn script(&self, steps: Vec<Step>) -> &Self {
        lock(&self.state).scripts.push_back(steps);
        self
    }

    /// The specs of every worker started, in order.
    pub fn specs(&self) -> Vec<WorkerSpec> {
        lock(&self.state).specs.clone()
    }

    /// What happened, in order: `spawn <pid>`, `<pid> <event>`, `<pid> wait`, `kill <pid>`.
    pub fn log(&self) -> Vec<String> {
        lock(&self.state).log.clone()
    }

    /// Scripts not taken yet.
    pub fn scripts_left(&self) -> usize {
        lock(&self.state).scripts.len()
    }

    fn publish(&self, state: &LaunchState, uuid: &str) {
        let procs = state
            .shown
            .get(uuid)
            .map(|m| m.iter().map(|(pid, b)| GpuProcess { pid: *pid, memory_used: Bytes(*b) }).collect())
            .unwrap_or_default();
        self.sampler.set_processes(uuid, procs);
    }
}

impl Launcher for FakeLauncher {
    fn spawn(&self, spec: &WorkerSpec) -> Result<Box<dyn Worker>, SeamError> {
        let mut state = lock(&self.state);
        let Some(steps) = state.scripts.pop_front() else {
            return Err(SeamError::Scripted("no worker scripted".into()));
        };
        state.next_pid += 1;
        let pid = state.next_pid;
        state.specs.push(spec.clone());
        state.log.push(format!("spawn {pid}"));
        Ok(Box::new(FakeWorker { pid, steps: steps.into(), launcher: self.clone(), killed: false }))
    }
}

#[derive(Debug)]
struct FakeWorker {
    pid: u32,
    steps: VecDeque<Step>,
    launcher: FakeLauncher,
    killed: bool,
}

fn event_name(e: &WorkerEvent) -> &'static str {
    match e {
        WorkerEvent::Ready { .. } => "ready",
        WorkerEvent::Allocated { .. } => "allocated",
        WorkerEvent::Failed { .. } => "failed",
        WorkerEvent::Done { .. } => "done",
    }
}

impl Worker for FakeWorker {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn next(&mut self, timeout: Duration) -> Next {
        if self.killed {
            return Next::Closed("killed".into());
        }
        loop {
            let step = self.steps.pop_front();
            let mut state = lock(&self.launcher.state);
            match step {
                Some(Step::Show { uuid, bytes, utilization }) => {
                    state.shown.entry(uuid.clone()).or_default().insert(self.pid, bytes);
                    self.launcher.publish(&state, &uuid);
                    self.launcher.sampler.set(&uuid, utilization, Bytes(bytes));
                }
                Some(Step::Nvml(failure)) => self.launcher.sampler.set_failure(failure.as_deref()),
                Some(Step::Event(e)) => {
                    state.log.push(format!("{} {}", self.pid, event_name(&e)));
                    return Next::Event(e);
                }
                Some(Step::Exit(said)) => {
                    state.log.push(format!("{} exit", self.pid));
                    return Next::Closed(said);
                }
                Some(Step::Wait) | None => {
                    state.log.push(format!("{} wait", self.pid));
                    drop(state);
                    self.launcher.clock.advance(timeout);
                    return Next::Timeout;
                }
            }
        }
    }

    fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        let mut state = lock(&self.launcher.state);
        state.log.push(format!("kill {}", self.pid));
        let gpus: Vec<String> =
            state.shown.iter().filter(|(_, m)| m.contains_key(&self.pid)).map(|(u, _)| u.clone()).collect();
        for uuid in gpus {
            if let Some(m) = state.shown.get_mut(&uuid) {
                m.remove(&self.pid);
            }
            self.launcher.publish(&state, &uuid);
            self.launcher.sampler.set(&uuid, 0.0, Bytes(0));
        }
    }
}

impl Drop for FakeWorker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A recording MPS daemon: `start` answers as set, every call is logged.
#[derive(Debug)]
pub struct FakeMps {
    /// What `start` answers (an error in these words).
    pub answer: Result<MpsClient, String>,
    /// `start <uuid>` and `stop`, in order.
    pub calls: Vec<String>,
}

impl FakeMps {
    /// A daemon that starts, with its pipe directory at `/run/fake-mps/pipe`.
    pub fn running() -> Self {
        let client = MpsClient { pipe_dir: "/run/fake-mps/pipe".into(), log_dir: None, shm_dir: None };
        Self { answer: Ok(client), calls: Vec::new() }
    }
}

impl MpsDaemon for FakeMps {
    fn start(&mut self, uuid: &str) -> Result<MpsClient, SeamError> {
        self.calls.push(format!("start {uuid}"));
        self.answer.clone().map_err(SeamError::Scripted)
    }

    fn stop(&mut self) -> Result<(), SeamError> {
        self.calls.push("stop".into());
        Ok(())
    }
}
