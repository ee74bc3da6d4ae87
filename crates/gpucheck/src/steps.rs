//! The steps the checks share: their [`Options`], and waiting on a worker and reading NVML's samples
//! for it. Apart from [`crate::checks`] so that the guard and MPS checks need nothing of the check list.

use crate::launch::{Next, Worker};
use crate::worker::WorkerEvent;
use gpuhub_gpu::GpuSample;
use std::time::Duration;

/// What to check and how hard.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Load only this GPU (by index), and run the guard and MPS checks on it; `None`: load every GPU,
    /// guard and MPS on the first.
    pub gpu: Option<u32>,
    /// The UID workers run as (`None`: as this process).
    pub uid: Option<u32>,
    /// The second user's UID for the MPS two-user check (`None`: that check cannot run).
    pub second_uid: Option<u32>,
    /// What the load allocates, MiB.
    pub load_mib: u64,
    /// How long the load runs, seconds.
    pub seconds: f64,
    /// Leave the MPS checks out.
    pub skip_mps: bool,
    /// Leave the guard check out.
    pub skip_guard: bool,
    /// The MPS client memory limit, MiB.
    pub mps_limit_mib: u64,
    /// The MPS active thread percentage.
    pub mps_threads_pct: u32,
    /// The guard's grant, MiB.
    pub guard_grant_mib: u64,
    /// What the guarded worker allocates, MiB (above the grant).
    pub guard_alloc_mib: u64,
    /// The guard's grace.
    pub guard_grace: Duration,
    /// Time between sampling rounds.
    pub round: Duration,
    /// How long a worker may take to initialise CUDA (and to allocate).
    pub init_timeout: Duration,
    /// How long the second MPS user must stay waiting while the first holds the GPU.
    pub blocked_window: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            gpu: None,
            uid: None,
            second_uid: None,
            load_mib: 2048,
            seconds: 5.0,
            skip_mps: false,
            skip_guard: false,
            mps_limit_mib: 2048,
            mps_threads_pct: 25,
            guard_grant_mib: 512,
            guard_alloc_mib: 1536,
            guard_grace: Duration::from_secs(5),
            round: Duration::from_secs(1),
            init_timeout: Duration::from_secs(60),
            blocked_window: Duration::from_secs(5),
        }
    }
}

/// How much more than its allocation NVML may show for a worker's process: its CUDA context.
pub const CONTEXT_SLACK: u64 = 1 << 30;

/// Who a worker runs as, in words.
pub(crate) fn as_uid(uid: Option<u32>) -> String {
    uid.map_or_else(|| "as this user".to_owned(), |u| format!("as uid {u}"))
}

/// The next event, or why there is none: a failure the worker reported, its end, or nothing in time.
pub(crate) fn next_event(w: &mut dyn Worker, timeout: Duration) -> Result<WorkerEvent, String> {
    match w.next(timeout) {
        Next::Event(WorkerEvent::Failed { stage, error }) => Err(format!("{stage} failed: {error}")),
        Next::Event(e) => Ok(e),
        Next::Timeout => Err(format!("nothing within {} s", timeout.as_secs_f64())),
        Next::Closed(said) if said.is_empty() => Err("the worker exited".into()),
        Next::Closed(said) => Err(format!("the worker exited ({said})")),
    }
}

/// Waits for a worker's `ready` then `allocated`: its SM count, total memory and allocated bytes.
pub(crate) fn ready_and_allocated(w: &mut dyn Worker, timeout: Duration) -> Result<(u32, u64, u64), String> {
    let (sms, total) = match next_event(w, timeout)? {
        WorkerEvent::Ready { sms, total_memory, .. } => (sms, total_memory),
        other => return Err(format!("expected cuda to initialise, got {other:?}")),
    };
    match next_event(w, timeout)? {
        WorkerEvent::Allocated { bytes } => Ok((sms, total, bytes)),
        other => Err(format!("expected the allocation, got {other:?}")),
    }
}

/// The GPU memory NVML shows for `pid` on GPU `uuid`, and that GPU's utilisation.
pub(crate) fn seen(samples: &[GpuSample], uuid: &str, pid: u32) -> (Option<u64>, f64) {
    let Some(g) = samples.iter().find(|g| g.uuid == uuid) else { return (None, 0.0) };
    (g.processes.iter().find(|p| p.pid == pid).map(|p| p.memory_used.0), g.utilization_pct)
}

/// What gpuhub's monitor attributes to a member whose only process is `pid`.
pub(crate) fn attributed(samples: &[GpuSample], pid: u32) -> Option<u64> {
    let pids = [pid];
    gpuhub_monitor::attribute(&[("gpu-check", &pids[..])], samples).get("gpu-check").copied()
}
