//! The checks, in the order they run: each GPU's inventory and a CUDA load on it (seen by NVML and
//! attributed by gpuhub), then on one GPU the memory guard and the MPS mode. Everything outside goes
//! through [`Seams`], so the decisions are tested with fakes.

use crate::launch::{Next, WorkerSpec};
use crate::report::{GpuInfo, Row, gib, mib};
use crate::seams::Seams;
pub use crate::steps::{CONTEXT_SLACK, Options};
use crate::steps::{as_uid, attributed, ready_and_allocated, seen};
use crate::worker::WorkerEvent;
use std::time::Duration;

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
            Next::Event(WorkerEvent::Done { seconds, rounds, kernels, kernel_error }) => {
                let kernel = match kernel_error {
                    Some(e) => format!("its kernel failed: {e}"),
                    None => format!("{kernels} kernel launches"),
                };
                done = Some(Ok(format!("busy {seconds:.1} s ({rounds} rounds, {kernel})")));
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
