//! The `guard` mode on a real GPU: a worker allocates more than a grant; every round NVML is sampled,
//! the worker's memory attributed to a synthetic member and fed to gpuhub's guard rule
//! ([`gpuhub_monitor::guard`]); when the rule says stop, gpu-check kills the worker, as the controller
//! stops a workload, and checks that it happened within the grace plus two rounds and that the
//! process left the GPU.

use crate::launch::{Next, WorkerSpec};
use crate::report::{GpuInfo, Row, mib};
use crate::seams::Seams;
use crate::steps::{Options, as_uid, attributed, ready_and_allocated, seen};
use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_core::metrics::{MemberMetrics, MetricsSnapshot};
use gpuhub_monitor::guard::{GuardAction, GuardRule, GuardTracker};
use std::collections::HashMap;
use std::time::Duration;

/// The synthetic workload the guarded worker stands for.
const WORKLOAD: &str = "gpu-check";

/// How long a guarded worker is asked to run: longer than any stop can take.
const HOLD_SECONDS: f64 = 600.0;

/// The member the guard judges: the worker's attributed GPU memory (`None` when NVML failed this
/// round, so the member is not judged).
pub(crate) fn member(gpu: &GpuInfo, used: Option<u64>) -> MemberMetrics {
    MemberMetrics {
        workload_id: WORKLOAD.into(),
        workload: WORKLOAD.into(),
        owner: "gpu-check".into(),
        queue: "default".into(),
        member: 0,
        node: None,
        cpu_cores: None,
        memory_used: 0,
        memory_limit: None,
        gpus: vec![gpu.uuid.clone()],
        gpu_utilization_pct: None,
        gpu_memory_used: used,
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

fn secs(d: TimeDelta) -> f64 {
    d.as_seconds_f64()
}

/// Rows `gpuN guard warns` and `gpuN guard stops`.
pub fn guard_check(gpu: &GpuInfo, opts: &Options, seams: &mut Seams<'_>) -> Vec<Row> {
    let name = |what: &str| format!("gpu{} guard {what}", gpu.index);
    let grant = opts.guard_grant_mib << 20;
    let limit = delta(opts.guard_grace) + delta(opts.round) * 2;
    let expected_warn = format!("a worker {} over its {} grant is warned", as_uid(opts.uid), mib(grant));
    let expected_stop = format!(
        "stopped {:.0} s to {:.0} s after going over (grace + 2 rounds), then gone from the GPU",
        opts.guard_grace.as_secs_f64(),
        secs(limit)
    );
    let fail_both = |why: String| {
        vec![
            Row::new(name("warns"), expected_warn.clone(), why.clone(), false),
            Row::new(name("stops"), expected_stop.clone(), why, false),
        ]
    };
    let spec = WorkerSpec {
        uid: opts.uid,
        gpu: Some(gpu.uuid.clone()),
        mib: opts.guard_alloc_mib,
        seconds: HOLD_SECONDS,
        env: vec![],
        shm: None,
    };
    let mut w = match seams.launcher.spawn(&spec) {
        Ok(w) => w,
        Err(e) => return fail_both(e.to_string()),
    };
    let bytes = match ready_and_allocated(w.as_mut(), opts.init_timeout) {
        Ok((_, _, bytes)) => bytes,
        Err(e) => return fail_both(e),
    };
    let pid = w.pid();
    let rule = GuardRule { grace: delta(opts.guard_grace) };
    let grants = HashMap::from([(WORKLOAD.to_owned(), grant)]);
    let mut tracker = GuardTracker::default();
    let start = seams.clock.now();
    let give_up = start + limit + delta(opts.round) * 10;
    let mut over_since: Option<DateTime<Utc>> = None;
    // when it was warned, with the memory used then; when it was stopped, with the guard's words
    let mut warned: Option<(DateTime<Utc>, u64)> = None;
    let mut stopped: Option<(DateTime<Utc>, String)> = None;
    let mut exited = None;
    while stopped.is_none() && seams.clock.now() < give_up {
        if let Next::Closed(said) = w.next(opts.round) {
            exited = Some(said);
            break;
        }
        let now = seams.clock.now();
        let used = seams.sampler.sample().ok().map(|s| attributed(&s, pid).unwrap_or(0));
        if over_since.is_none() && used.is_some_and(|u| u > grant) {
            over_since = Some(now);
        }
        let snapshot = MetricsSnapshot { at: Some(now), members: vec![member(gpu, used)], gpus: Vec::new() };
        for action in tracker.observe(&rule, &snapshot, &grants, now) {
            match action {
                GuardAction::Warn { used, .. } => warned = warned.or(Some((now, used))),
                GuardAction::Stop { detail, .. } => {
                    w.kill();
                    stopped = Some((now, detail));
                }
            }
        }
    }
    w.kill();
    // the stopped process must leave the GPU
    let mut gone = None;
    if stopped.is_some() {
        let gone_by = seams.clock.now() + delta(opts.round) * 10;
        while seams.clock.now() < gone_by {
            if let Ok(samples) = seams.sampler.sample() {
                if seen(&samples, &gpu.uuid, pid).0.is_none() {
                    gone = Some(seams.clock.now());
                    break;
                }
            }
            seams.clock.sleep(opts.round / 2);
        }
    }
    let warn_row = match (warned, over_since) {
        (Some((at, used)), Some(since)) => Row::new(
            name("warns"),
            expected_warn,
            format!(
                "allocated {}, warned at {} used, {:.1} s after going over",
                mib(bytes),
                mib(used),
                secs(at - since)
            ),
            true,
        ),
        (None, Some(_)) => Row::new(name("warns"), expected_warn, "over its grant but never warned", false),
        (_, None) => Row::new(
            name("warns"),
            expected_warn,
            format!("allocated {} but never seen above {} by NVML", mib(bytes), mib(grant)),
            false,
        ),
    };
    let stop_row = match (stopped, over_since) {
        (Some((at, _)), Some(since)) => {
            let after = at - since;
            let in_time = after >= rule.grace && after <= limit;
            let gone_text = match gone {
                Some(g) => format!("gone from the GPU {:.1} s later", secs(g - at)),
                None => "still listed by NVML after being killed".into(),
            };
            Row::new(
                name("stops"),
                expected_stop,
                format!("stopped {:.1} s after going over, {gone_text}", secs(after)),
                in_time && gone.is_some(),
            )
        }
        (Some((_, detail)), None) => {
            Row::new(name("stops"), expected_stop, format!("stopped though never over: {detail}"), false)
        }
        (None, _) => Row::new(
            name("stops"),
            expected_stop,
            match exited {
                Some(said) => format!("the worker exited before any stop ({said})"),
                None => format!("not stopped within {:.0} s", secs(give_up - start)),
            },
            false,
        ),
    };
    vec![warn_row, stop_row]
}
