//! The checks, in the order they run: each GPU's inventory and a CUDA load on it (seen by NVML and
//! attributed by gpuhub), then on one GPU the memory guard and the MPS mode. Everything outside goes
//! through [`Seams`], so the decisions are tested with fakes.

use crate::launch::{Next, Worker, WorkerSpec};
use crate::report::{GpuInfo, Row, gib, mib};
use crate::seams::Seams;
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

/// Runs every check on `gpus` and returns the rows, in order. Workers are killed on every path (a
/// [`Worker`] is killed when dropped) and the MPS daemon is stopped when it was started.
pub fn run_checks(gpus: &[GpuInfo], opts: &Options, seams: &mut Seams<'_>) -> Vec<Row> {
    let mut rows = Vec::new();
    let chosen: Vec<&GpuInfo> = gpus.iter().filter(|g| opts.gpu.is_none_or(|i| g.index == i)).collect();
    if chosen.is_empty() {
        let listed: Vec<String> = gpus.iter().map(|g| g.index.to_string()).collect();
        rows.push(Row::new(
            "gpu choice",
            format!("gpu {} exists", opts.gpu.unwrap_or(0)),
            format!("NVML lists gpus {}", listed.join(", ")),
            false,
        ));
        return rows;
    }
    let mut sms = Vec::new();
    for gpu in &chosen {
        rows.push(inventory_row(gpu));
        if gpu.mig == Some(true) {
            rows.push(Row::new(
                format!("gpu{} cuda load", gpu.index),
                "a whole GPU to load",
                "skipped: MIG is enabled (gpuhub shares whole GPUs)",
                false,
            ));
            sms.push(None);
            continue;
        }
        (seams.say)(&format!("gpu{}: a {} MiB CUDA load for {} s", gpu.index, opts.load_mib, opts.seconds));
        let (load_rows, seen_sms) = load_check(gpu, opts, seams);
        rows.extend(load_rows);
        sms.push(seen_sms);
    }
    let (target, target_sms) = (chosen[0], sms[0]);
    if target.mig != Some(true) {
        if !opts.skip_guard {
            (seams.say)(&format!("gpu{}: the memory guard", target.index));
            rows.extend(crate::guard::guard_check(target, opts, seams));
        }
        if !opts.skip_mps {
            (seams.say)(&format!("gpu{}: gpuhub's MPS daemon and its clients", target.index));
            rows.extend(crate::mps::mps_checks(target, target_sms, opts, seams));
        }
    }
    rows
}

fn inventory_row(gpu: &GpuInfo) -> Row {
    let mig = match gpu.mig {
        Some(true) => "MIG enabled",
        Some(false) => "MIG disabled",
        None => "no MIG",
    };
    Row::new(
        format!("gpu{} inventory", gpu.index),
        "a uuid, memory, MIG disabled",
        format!("{} {}, {}, {mig}", gpu.model, gpu.uuid, gib(gpu.memory)),
        !gpu.uuid.is_empty() && gpu.memory > 0 && gpu.mig != Some(true),
    )
}

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

/// Starts a worker that allocates and keeps the GPU busy, samples NVML while it runs, and judges the
/// load, NVML's view of it, the utilisation and the attribution. Also the SM count CUDA reported.
fn load_check(gpu: &GpuInfo, opts: &Options, seams: &mut Seams<'_>) -> (Vec<Row>, Option<u32>) {
    let name = |what: &str| format!("gpu{} {what}", gpu.index);
    let want = opts.load_mib << 20;
    let expected_load =
        format!("a worker {} allocates {} and stays busy {} s", as_uid(opts.uid), mib(want), opts.seconds);
    let spec = WorkerSpec {
        uid: opts.uid,
        gpu: Some(gpu.uuid.clone()),
        mib: opts.load_mib,
        seconds: opts.seconds,
        env: vec![],
        shm: None,
    };
    // the GPU's utilisation before the load, to see it rise
    let idle = seams.sampler.sample().ok().map_or(0.0, |s| seen(&s, &gpu.uuid, 0).1);
    let mut w = match seams.launcher.spawn(&spec) {
        Ok(w) => w,
        Err(e) => return (vec![Row::new(name("cuda load"), expected_load, e.to_string(), false)], None),
    };
    let (sms, total, bytes) = match ready_and_allocated(w.as_mut(), opts.init_timeout) {
        Ok(got) => got,
        Err(e) => return (vec![Row::new(name("cuda load"), expected_load, e, false)], None),
    };
    let pid = w.pid();
    let (mut most_seen, mut most_util, mut most_attributed) = (None::<u64>, 0.0f64, None::<u64>);
    let mut sample_error = None;
    let mut done = None;
    let deadline = seams.clock.now()
        + chrono::TimeDelta::from_std(Duration::from_secs_f64(opts.seconds.max(0.0)) + opts.init_timeout)
            .unwrap_or(chrono::TimeDelta::MAX);
    let half_round = opts.round / 2;
    loop {
        let next = w.next(half_round);
        match seams.sampler.sample() {
            Ok(samples) => {
                let (mem, util) = seen(&samples, &gpu.uuid, pid);
                most_seen = most_seen.max(mem);
                most_util = most_util.max(util);
                most_attributed = most_attributed.max(attributed(&samples, pid));
            }
            Err(e) => sample_error = Some(e.to_string()),
        }
        match next {
            Next::Event(WorkerEvent::Done { seconds, rounds }) => {
                done = Some(Ok(format!("busy {seconds:.1} s ({rounds} rounds)")));
                break;
            }
            Next::Event(WorkerEvent::Failed { stage, error }) => {
                done = Some(Err(format!("{stage} failed: {error}")));
                break;
            }
            Next::Closed(said) => {
                done = Some(Err(format!("the worker exited before its end ({said})")));
                break;
            }
            Next::Event(_) | Next::Timeout => {}
        }
        if seams.clock.now() > deadline {
            break;
        }
    }
    w.kill();
    let load_seen = format!("allocated {} ({sms} SMs, {} in all)", mib(bytes), gib(total));
    let (load_ok, load_seen) = match done {
        Some(Ok(busy)) => (true, format!("{load_seen}, {busy}")),
        Some(Err(e)) => (false, format!("{load_seen}; then {e}")),
        None => (false, format!("{load_seen}; still running past its time, killed")),
    };
    let nvml_note = sample_error.map(|e| format!(" (nvml: {e})")).unwrap_or_default();
    let rows = vec![
        Row::new(name("cuda load"), expected_load, load_seen, load_ok),
        Row::new(
            name("nvml sees it"),
            format!("pid {pid} listed with at least {}", mib(bytes)),
            match most_seen {
                Some(m) => format!("pid {pid} with {}{nvml_note}", mib(m)),
                None => format!("pid {pid} never listed{nvml_note}"),
            },
            most_seen.is_some_and(|m| m >= bytes),
        ),
        Row::new(
            name("utilisation"),
            "rises under the load",
            format!("{idle:.0} % before, up to {most_util:.0} % under the load{nvml_note}"),
            most_util > idle,
        ),
        Row::new(
            name("attribution"),
            format!("the worker's member holds {} to {}", mib(bytes), mib(bytes + CONTEXT_SLACK)),
            match most_attributed {
                Some(m) => mib(m),
                None => "nothing attributed".into(),
            },
            most_attributed.is_some_and(|m| m >= bytes && m <= bytes + CONTEXT_SLACK),
        ),
    ];
    (rows, Some(sms))
}
