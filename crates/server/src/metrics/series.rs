//! What `/metrics` says: the GPUs under dcgm-exporter's names, each running member, and gpuhub's own
//! workings (workloads per state and queue, the longest wait per queue, scheduling passes, API latency).

use super::text::{Exposition, Kind};
use crate::state::AppState;
use chrono::{DateTime, Utc};
use gpuhub_core::metrics::{GpuMetrics, MetricsSnapshot};
use gpuhub_core::workload::WorkloadState;
use gpuhub_store::ActiveCount;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The queue label of the default queue (stored as the empty name).
const DEFAULT_QUEUE: &str = "default";

/// A mebibyte, dcgm-exporter's unit of GPU memory.
const MIB: u64 = 1 << 20;

/// The families gpuhub exports (histograms by their base name), for documentation and tests.
pub const FAMILIES: &[&str] = &[
    "gpuhub_gpu_sharing_mode",
    "gpuhub_share_gpu_memory_granted_bytes",
    "gpuhub_guard_over_grant",
    "gpuhub_guard_warnings_total",
    "gpuhub_guard_stops_total",
    "gpuhub_mps_daemon_up",
    "gpuhub_mps_daemon_restarts_total",
    "gpuhub_dataset_mount_up",
    "gpuhub_dataset_mount_restarts_total",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "gpuhub_workload_cpu_cores",
    "gpuhub_workload_memory_bytes",
    "gpuhub_workload_memory_limit_bytes",
    "gpuhub_workload_gpu_utilization_percent",
    "gpuhub_workload_gpu_memory_bytes",
    "gpuhub_workloads",
    "gpuhub_queue_oldest_wait_seconds",
    "gpuhub_scheduler_pass_seconds",
    "gpuhub_http_request_duration_seconds",
    "gpuhub_monitor_last_sample_timestamp_seconds",
    "gpuhub_store_up",
];

/// What the store says at a scrape; `None` in the document's parts when it could not be read.
struct FromStore {
    counts: Vec<ActiveCount>,
    queues: Vec<String>,
    /// The running workloads (for the shares' grants).
    running: Vec<gpuhub_core::workload::Workload>,
    /// `owner/name` of each workload holding resources → its queue label.
    holders: HashMap<String, String>,
}

/// The queue label of a stored queue name.
fn queue_label(q: &str) -> &str {
    if q.is_empty() { DEFAULT_QUEUE } else { q }
}

async fn from_store(st: &AppState, guarded: bool) -> Result<FromStore, gpuhub_store::StoreError> {
    let counts = st.store.count_active_workloads().await?;
    let queues = st.store.list_queues().await?.into_iter().map(|q| q.name).collect();
    // the running workloads only for the grants of guarded GPUs' shares
    let running = match guarded {
        true => {
            let filter = gpuhub_store::WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Running]) };
            st.store.list_workloads(&filter).await?
        }
        false => Vec::new(),
    };
    let holders = st
        .store
        .list_holding_queues()
        .await?
        .into_iter()
        .map(|(owner, name, queue)| (format!("{owner}/{name}"), queue_label(&queue).to_owned()))
        .collect();
    Ok(FromStore { counts, queues, running, holders })
}

/// The whole document.
pub async fn render(st: &AppState) -> String {
    let snapshot = st.metrics.get();
    let now = st.clock.now();
    let nodes = st.controller.inventory().capacities();
    let store = match from_store(st, crate::guard::any_guarded(&nodes)).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "/metrics: cannot read the store; workload counts left out");
            None
        }
    };
    let interval = st.config.monitor.interval_secs;
    let mut x = Exposition::default();
    let fresh = is_fresh(&snapshot, now, interval);
    let empty = MetricsSnapshot::default();
    let measured = if fresh { &snapshot } else { &empty };
    let mut holder_queues: HashMap<String, String> =
        measured.members.iter().map(|m| (format!("{}/{}", m.owner, m.workload), m.queue.clone())).collect();
    if let Some(s) = &store {
        holder_queues.extend(s.holders.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    gpus(&mut x, &measured.gpus, &holder_queues);
    members(&mut x, measured);
    workloads(&mut x, store.as_ref(), now);
    super::sharing::write(&mut x, st, &nodes, store.as_ref().map(|s| s.running.as_slice()));
    datasets(&mut x, st);
    let mut f = x.family(
        "gpuhub_scheduler_pass_seconds",
        "Time one scheduling pass of the controller took (limits, placement or submission, explanations).",
        Kind::Histogram,
    );
    f.histogram(&[], &st.controller.pass_durations());
    let mut f = x.family(
        "gpuhub_http_request_duration_seconds",
        "Time from routing a request to its response's head, by method, route template and status.",
        Kind::Histogram,
    );
    for (method, route, status, h) in st.http_metrics.snapshot() {
        f.histogram(&[("method", method), ("route", &route), ("status", &status.to_string())], &h);
    }
    let mut f = x.family(
        "gpuhub_monitor_last_sample_timestamp_seconds",
        "When the monitor's latest sample was taken (unix seconds); GPU and member series are left out \
         when it is older than three sampling intervals.",
        Kind::Gauge,
    );
    if let Some(at) = snapshot.at {
        f.sample(&[], at.timestamp_millis() as f64 / 1000.0);
    }
    let mut f = x.family("gpuhub_store_up", "Whether this scrape could read the database (1) or not (0).", Kind::Gauge);
    f.sample(&[], if store.is_some() { 1.0 } else { 0.0 });
    x.finish()
}

/// Whether the snapshot is recent enough to be reported: taken within three sampling intervals (at
/// least 30 s). A monitor that stopped sampling then reports nothing rather than old figures.
fn is_fresh(s: &MetricsSnapshot, now: DateTime<Utc>, interval_secs: u64) -> bool {
    let limit = i64::try_from(interval_secs.saturating_mul(3).max(30)).unwrap_or(i64::MAX);
    s.at.is_some_and(|at| (now - at).num_seconds() <= limit)
}

/// The DCGM families: one series per GPU and holder (a GPU nobody holds has empty holder labels).
fn gpus(x: &mut Exposition, gpus: &[GpuMetrics], holder_queues: &HashMap<String, String>) {
    type Value = fn(&GpuMetrics) -> Option<f64>;
    let families: [(&'static str, &str, Value); 5] = [
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |g| Some(g.utilization_pct)),
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", |g| Some((g.memory_used / MIB) as f64)),
        ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", |g| {
            Some((g.memory_total.saturating_sub(g.memory_used) / MIB) as f64)
        }),
        ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |g| g.power_watts),
        ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |g| g.temperature_c),
    ];
    for (name, help, value) in families {
        let mut f = x.family(name, help, Kind::Gauge);
        for g in gpus {
            let Some(v) = value(g) else { continue };
            let (index, device) = (g.index.to_string(), format!("nvidia{}", g.index));
            let base = [
                ("gpu", index.as_str()),
                ("UUID", g.uuid.as_str()),
                ("device", device.as_str()),
                ("modelName", g.model.as_str()),
                ("Hostname", g.node.as_str()),
            ];
            if g.holders.is_empty() {
                f.sample(&[&base[..], &[("owner", ""), ("workload", ""), ("queue", "")]].concat(), v);
            }
            for h in &g.holders {
                let (owner, workload) = h.split_once('/').unwrap_or((h.as_str(), ""));
                let queue = holder_queues.get(h).map_or("", String::as_str);
                f.sample(&[&base[..], &[("owner", owner), ("workload", workload), ("queue", queue)]].concat(), v);
            }
        }
    }
}

/// One series per member of a running workload and figure.
fn members(x: &mut Exposition, s: &MetricsSnapshot) {
    type Value = fn(&gpuhub_core::metrics::MemberMetrics) -> Option<f64>;
    let families: [(&'static str, &str, Value); 5] = [
        ("gpuhub_workload_cpu_cores", "CPU in use by a member, in cores, since the previous sample.", |m| m.cpu_cores),
        ("gpuhub_workload_memory_bytes", "Memory a member uses (working set), bytes.", |m| Some(m.memory_used as f64)),
        ("gpuhub_workload_memory_limit_bytes", "A member's memory limit, bytes.", |m| m.memory_limit.map(|b| b as f64)),
        (
            "gpuhub_workload_gpu_utilization_percent",
            "Mean utilization of the GPUs a member holds, percent (a share sees its whole GPU).",
            |m| m.gpu_utilization_pct,
        ),
        ("gpuhub_workload_gpu_memory_bytes", "GPU memory used by a member's own processes, bytes.", |m| {
            m.gpu_memory_used.map(|b| b as f64)
        }),
    ];
    for (name, help, value) in families {
        let mut f = x.family(name, help, Kind::Gauge);
        for m in &s.members {
            let Some(v) = value(m) else { continue };
            let member = m.member.to_string();
            let labels = [
                ("owner", m.owner.as_str()),
                ("workload", m.workload.as_str()),
                ("queue", m.queue.as_str()),
                ("member", member.as_str()),
                ("node", m.node.as_deref().unwrap_or("")),
            ];
            f.sample(&labels, v);
        }
    }
}

/// Workloads per active state and queue (every known queue, zeros included, so that a series does not
/// vanish when its queue empties), and how long the longest-waiting workload of each queue waits.
fn workloads(x: &mut Exposition, store: Option<&FromStore>, now: DateTime<Utc>) {
    const STATES: [WorkloadState; 3] = [WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running];
    let mut counts: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    let mut oldest: BTreeMap<String, f64> = BTreeMap::new();
    if let Some(s) = store {
        let queues: BTreeSet<String> = std::iter::once(DEFAULT_QUEUE.to_owned())
            .chain(s.queues.iter().map(|q| queue_label(q).to_owned()))
            .chain(s.counts.iter().map(|c| queue_label(&c.queue).to_owned()))
            .collect();
        for q in queues {
            for state in STATES {
                counts.insert((q.clone(), state.as_str()), 0);
            }
            oldest.insert(q, 0.0);
        }
        for c in &s.counts {
            let q = queue_label(&c.queue).to_owned();
            *counts.entry((q.clone(), c.state.as_str())).or_default() += c.count;
            if c.state == WorkloadState::Queued {
                let waited = ((now - c.oldest_queued_at).num_milliseconds() as f64 / 1000.0).max(0.0);
                let e = oldest.entry(q).or_default();
                *e = e.max(waited);
            }
        }
    }
    let mut f = x.family(
        "gpuhub_workloads",
        "Workloads queued, starting or running, by state and team queue (ended ones are not counted).",
        Kind::Gauge,
    );
    for ((queue, state), n) in &counts {
        f.sample(&[("state", state), ("queue", queue)], *n as f64);
    }
    let mut f = x.family(
        "gpuhub_queue_oldest_wait_seconds",
        "How long the longest-waiting queued workload of a team queue has waited since it last entered \
         the queue, seconds (0 when none waits).",
        Kind::Gauge,
    );
    for (queue, secs) in &oldest {
        f.sample(&[("queue", queue)], *secs);
    }
}

/// The S3 datasets' mounts on this host.
fn datasets(x: &mut Exposition, st: &AppState) {
    let health = st.s3.health();
    let mut f = x.family(
        "gpuhub_dataset_mount_up",
        "Whether an S3 dataset is mounted on the hub's host (1) or not (0).",
        Kind::Gauge,
    );
    for (name, up, _) in &health {
        f.sample(&[("dataset", name.as_str())], if *up { 1.0 } else { 0.0 });
    }
    let mut f = x.family(
        "gpuhub_dataset_mount_restarts_total",
        "Times an S3 dataset was mounted again after its rclone died or failed to mount, since the server started.",
        Kind::Counter,
    );
    for (name, _, restarts) in &health {
        f.sample(&[("dataset", name.as_str())], f64::from(*restarts));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn an_old_snapshot_is_not_reported() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let at = |secs| MetricsSnapshot { at: Some(now - chrono::Duration::seconds(secs)), ..Default::default() };
        assert!(is_fresh(&at(30), now, 10));
        assert!(!is_fresh(&at(31), now, 10));
        assert!(is_fresh(&at(180), now, 60));
        assert!(!is_fresh(&MetricsSnapshot::default(), now, 10));
    }
}
