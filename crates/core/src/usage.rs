//! Accounting: what was held, by whom, for how long.
//!
//! A **holding** is one uninterrupted interval in which a workload's run held resources (from the
//! moment it entered `starting` or `running` to the moment it left; see `Workload::apply`). GPU-,
//! CPU- and memory-hours are sums over holdings clipped to a window, computed in integer milli-units ×
//! milliseconds and divided once at the end, so the figures are exact and independent of sampling.
//! A preempted run that starts again is a second holding; a holding still open counts up to `now`.

use crate::CoreError;
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// One interval during which a workload's run held resources, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The workload's id.
    pub workload_id: String,
    /// The workload's name (kept after the workload is deleted).
    pub workload: String,
    /// Its owner's username.
    pub owner: String,
    /// The team queue it was charged to; empty is the default queue.
    pub queue: String,
    /// The GPUs the run held (UUIDs or engine names), as many entries as GPUs.
    pub gpus: Vec<String>,
    /// Milli-GPUs held by the whole run (1000 per whole GPU, the share otherwise; all members together).
    pub gpu_milli: u64,
    /// CPUs held by the whole run, in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory held by the whole run, in bytes.
    pub memory: u64,
    /// When the holding began.
    pub since: DateTime<Utc>,
    /// When it ended; `None` while it still holds.
    pub until: Option<DateTime<Utc>>,
}

/// A dimension usage is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum UsageKey {
    /// The owner.
    User,
    /// The team queue (`default` for the default queue).
    Queue,
    /// The GPU model (`none` for CPU-only work, `unknown` for a GPU no inventory ever named).
    Model,
    /// The UTC day.
    Day,
}

impl UsageKey {
    /// Parses a comma-separated list (`user,day`) into distinct keys in a fixed order.
    pub fn parse_list(s: &str) -> Result<Vec<UsageKey>, CoreError> {
        let mut keys = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let k = match part {
                "user" => UsageKey::User,
                "queue" => UsageKey::Queue,
                "model" => UsageKey::Model,
                "day" => UsageKey::Day,
                other => {
                    return Err(CoreError::invalid(
                        "by",
                        format!("{other:?} is not one of user, queue, model, day (comma-separated)"),
                    ));
                }
            };
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        if keys.is_empty() {
            return Err(CoreError::invalid("by", "name at least one of user, queue, model, day"));
        }
        keys.sort();
        Ok(keys)
    }
}

/// One row of a usage report: the values of the grouped-by keys and the hours in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageRow {
    /// The owner, when grouped by user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The queue, when grouped by queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The GPU model, when grouped by model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The UTC day (`2026-11-24`), when grouped by day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub day: Option<NaiveDate>,
    /// GPU-hours held (a whole GPU for an hour is 1; half a GPU for an hour 0.5).
    pub gpu_hours: f64,
    /// CPU-hours held (one core for an hour is 1).
    pub cpu_hours: f64,
    /// GiB-hours of memory held.
    pub memory_gib_hours: f64,
    /// GPU-hours actually used: each holding's GPU-hours × the mean utilisation measured on its GPUs
    /// over the window (0 where nothing was measured; a share counts its GPU's whole utilisation, up
    /// to its share).
    pub gpu_used_hours: f64,
    /// CPU-hours actually used: each holding's hours × the mean cores its members used.
    pub cpu_used_hours: f64,
    /// GiB-hours of memory actually used: each holding's hours × the mean memory its members used.
    pub memory_used_gib_hours: f64,
    /// How many holdings (runs, or restarts of a run) contributed.
    pub holdings: u64,
}

/// What the monitor measured of one workload over a window, as means over its samples there (its
/// members' CPU and memory added up, their GPU utilisation averaged).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Measured {
    /// Mean utilisation of its GPUs, percent.
    pub gpu_util_pct: Option<f64>,
    /// Mean cores in use.
    pub cpu_cores: Option<f64>,
    /// Mean memory in use, bytes.
    pub memory_bytes: Option<f64>,
}

/// A usage report: `GET /api/v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageReport {
    /// Start of the window (inclusive).
    pub from: DateTime<Utc>,
    /// End of the window (exclusive).
    pub to: DateTime<Utc>,
    /// What the rows are grouped by.
    pub by: Vec<UsageKey>,
    /// One row per group with any holding in the window, sorted by the keys.
    pub rows: Vec<UsageRow>,
    /// The sum of the rows.
    pub total: UsageRow,
}

/// Exact sums in integer units (milli-GPU·ms, milli-CPU·ms, byte·ms), and what was used in hours.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    gpu: u128,
    cpu: u128,
    mem: u128,
    gpu_used: f64,
    cpu_used: f64,
    mem_used: f64,
    holdings: u64,
}

const MS_PER_HOUR: f64 = 3_600_000.0;
const GIB: f64 = (1u64 << 30) as f64;

impl Sums {
    fn row(self) -> (f64, f64, f64) {
        (
            self.gpu as f64 / 1000.0 / MS_PER_HOUR,
            self.cpu as f64 / 1000.0 / MS_PER_HOUR,
            self.mem as f64 / GIB / MS_PER_HOUR,
        )
    }
}

/// The group a contribution falls into: one optional value per key.
type Group = (Option<String>, Option<String>, Option<String>, Option<NaiveDate>);

/// Sums `holdings` clipped to `[from, to)` (open holdings count up to `now`), grouped by `by`.
///
/// `model_of` names a GPU's model; a holding's GPU-time is split evenly over the GPUs it names (a
/// holding of GPU time without named GPUs is the model `unknown`). `measured` says what the monitor
/// measured of a workload (by id) over the window, for the used figures. Rows are sorted by their keys.
pub fn aggregate(
    holdings: &[Holding],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    by: &[UsageKey],
    model_of: &dyn Fn(&str) -> Option<String>,
    measured: &dyn Fn(&str) -> Option<Measured>,
) -> Vec<UsageRow> {
    let has = |k| by.contains(&k);
    let mut groups: BTreeMap<Group, Sums> = BTreeMap::new();
    for h in holdings {
        let start = h.since.max(from);
        let end = h.until.unwrap_or(now).min(to);
        if end <= start {
            continue;
        }
        let m = measured(&h.workload_id).unwrap_or_default();
        let user = has(UsageKey::User).then(|| h.owner.clone());
        let queue = has(UsageKey::Queue).then(|| if h.queue.is_empty() { "default".into() } else { h.queue.clone() });
        // the GPU-time per model: milli-GPU of this holding per model
        let per_model: Vec<(Option<String>, u128, bool)> = if !has(UsageKey::Model) {
            vec![(None, u128::from(h.gpu_milli), true)]
        } else if h.gpu_milli == 0 {
            vec![(Some("none".into()), 0, true)]
        } else if h.gpus.is_empty() {
            vec![(Some("unknown".into()), u128::from(h.gpu_milli), true)]
        } else {
            let mut by_model: HashMap<String, u128> = HashMap::new();
            for g in &h.gpus {
                *by_model.entry(model_of(g).unwrap_or_else(|| "unknown".into())).or_default() += 1;
            }
            let n = h.gpus.len() as u128;
            let mut models: Vec<_> = by_model.into_iter().collect();
            models.sort();
            // CPU and memory are charged to the first model's row only, so they are counted once
            models
                .into_iter()
                .enumerate()
                .map(|(i, (m, count))| (Some(m), u128::from(h.gpu_milli) * count / n, i == 0))
                .collect()
        };
        for (day, a, b) in split(start, end, has(UsageKey::Day)) {
            let ms = (b - a).num_milliseconds().max(0) as u128;
            let hours = ms as f64 / MS_PER_HOUR;
            for (model, gpu_milli, carries_rest) in &per_model {
                let s = groups.entry((user.clone(), queue.clone(), model.clone(), day)).or_default();
                s.gpu += gpu_milli * ms;
                let held_gpus = *gpu_milli as f64 / 1000.0;
                // a share's GPU may be busy with others' work too: it used at most its share
                let used = m.gpu_util_pct.map_or(0.0, |u| (u / 100.0).clamp(0.0, 1.0));
                s.gpu_used += held_gpus * hours * used;
                if *carries_rest {
                    s.cpu += u128::from(h.cpu_milli) * ms;
                    s.mem += u128::from(h.memory) * ms;
                    s.cpu_used += m.cpu_cores.unwrap_or(0.0) * hours;
                    s.mem_used += m.memory_bytes.unwrap_or(0.0) / GIB * hours;
                    s.holdings += 1;
                }
            }
        }
    }
    groups
        .into_iter()
        .map(|((user, queue, model, day), s)| {
            let (gpu_hours, cpu_hours, memory_gib_hours) = s.row();
            UsageRow {
                user,
                queue,
                model,
                day,
                gpu_hours,
                cpu_hours,
                memory_gib_hours,
                gpu_used_hours: s.gpu_used,
                cpu_used_hours: s.cpu_used,
                memory_used_gib_hours: s.mem_used,
                holdings: s.holdings,
            }
        })
        .collect()
}

/// `[start, end)` cut at UTC midnights when `by_day`, each piece with its day.
fn split(
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    by_day: bool,
) -> Vec<(Option<NaiveDate>, DateTime<Utc>, DateTime<Utc>)> {
    if !by_day {
        return vec![(None, start, end)];
    }
    let mut out = Vec::new();
    let mut a = start;
    while a < end {
        let day = a.date_naive();
        let midnight = day.succ_opt().and_then(|d| d.and_hms_opt(0, 0, 0)).map(|t| t.and_utc());
        let b = midnight.unwrap_or(end).min(end);
        out.push((Some(day), a, b));
        if b <= a {
            break;
        }
        a = b;
    }
    out
}

/// The totals of a report's rows.
pub fn total(rows: &[UsageRow]) -> UsageRow {
    let mut t = UsageRow {
        user: None,
        queue: None,
        model: None,
        day: None,
        gpu_hours: 0.0,
        cpu_hours: 0.0,
        memory_gib_hours: 0.0,
        gpu_used_hours: 0.0,
        cpu_used_hours: 0.0,
        memory_used_gib_hours: 0.0,
        holdings: 0,
    };
    for r in rows {
        t.gpu_hours += r.gpu_hours;
        t.cpu_hours += r.cpu_hours;
        t.memory_gib_hours += r.memory_gib_hours;
        t.gpu_used_hours += r.gpu_used_hours;
        t.cpu_used_hours += r.cpu_used_hours;
        t.memory_used_gib_hours += r.memory_used_gib_hours;
    }
    t.holdings = rows.iter().map(|r| r.holdings).sum();
    t
}

/// The default window of a report: from the start of `now`'s UTC month to `now`.
pub fn this_month(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    use chrono::Datelike;
    let first = NaiveDate::from_ymd_opt(now.year(), now.month(), 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .unwrap_or(now - TimeDelta::days(30));
    (first, now)
}

#[cfg(test)]
mod tests;
