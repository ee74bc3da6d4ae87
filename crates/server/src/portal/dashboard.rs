//! `GET /admin/dashboard` (admins only): over the last day (by hour) or week (by UTC day), how many
//! workloads waited and how long they waited before they started, GPUs held vs used vs idle, the top
//! users of the last seven days, and the workloads the idle rule or the GPU-memory guard stopped.
//!
//! Nothing is counted twice here: GPU-hours held and used are `GET /api/v1/usage`'s (its handler is
//! called per bucket, or by day in one report); the waits are the workloads' own state histories (the
//! store's `state_changes`, what `GET /api/v1/workloads/{name}`'s `history` shows); the reclaims are
//! the workloads' stop reasons. Every chart is drawn from the table beside it.

use super::charts::{self, Line, Mark, TimeChart};
use super::usage::report;
use super::{Viewer, api_error_page, layout, only_navigation, page_error};
use crate::state::AppState;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::WorkloadState;
use gpuhub_store::{StateChange, WorkloadFilter};
use maud::{Markup, html};
use serde::Deserialize;
use std::borrow::Borrow;
use std::collections::BTreeMap;

/// `?range=day|week`
#[derive(Debug, Default, Deserialize)]
pub struct DashboardQuery {
    range: Option<String>,
}

/// The window's buckets: the last 24 hours by hour, or the last 7 UTC days by day, the current one
/// last.
fn buckets(range: &str, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let (step, n) = if range == "week" { (TimeDelta::days(1), 7) } else { (TimeDelta::hours(1), 24) };
    let to = now.duration_trunc(step).unwrap_or(now) + step;
    (0..n).map(|i| (to - step * (n - i), to - step * (n - i - 1))).collect()
}

/// What waited in one bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Waiting {
    /// Workloads waiting (queued or pulling), on average over the bucket (up to now).
    pub mean_waiting: f64,
    /// Workloads that started (left the queue for starting or running) in the bucket.
    pub starts: u32,
    /// Their mean wait, seconds, from when they began to wait.
    pub mean_wait_s: Option<f64>,
    /// The longest of them.
    pub max_wait_s: Option<f64>,
}

/// Seconds of `a`–`b` within `c`–`d`.
fn overlap(a: DateTime<Utc>, b: DateTime<Utc>, c: DateTime<Utc>, d: DateTime<Utc>) -> f64 {
    let (s, e) = (a.max(c), b.min(d));
    if e > s { (e - s).num_milliseconds() as f64 / 1000.0 } else { 0.0 }
}

/// Per bucket, from the workloads' states (each workload's in order, as `state_changes` gives them):
/// a spell of waiting begins when a workload is queued (or pulls its image) and ends when it starts
/// or ends; spells still open end now.
pub fn waiting<C: Borrow<StateChange>>(
    changes: &[C],
    buckets: &[(DateTime<Utc>, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> Vec<Waiting> {
    let mut spells = Vec::new();
    let mut starts: Vec<(DateTime<Utc>, f64)> = Vec::new();
    let mut i = 0;
    while i < changes.len() {
        let id = &changes[i].borrow().workload_id;
        let mut since: Option<DateTime<Utc>> = None;
        while i < changes.len() && &changes[i].borrow().workload_id == id {
            let c = changes[i].borrow();
            match c.state {
                WorkloadState::Queued | WorkloadState::Pulling => {
                    since.get_or_insert(c.at);
                }
                state => {
                    if let Some(s) = since.take() {
                        spells.push((s, c.at));
                        if matches!(state, WorkloadState::Starting | WorkloadState::Running) {
                            starts.push((c.at, (c.at - s).num_milliseconds() as f64 / 1000.0));
                        }
                    }
                }
            }
            i += 1;
        }
        if let Some(s) = since {
            spells.push((s, now.max(s)));
        }
    }
    buckets
        .iter()
        .map(|&(from, to)| {
            let end = to.min(now);
            let span = (end - from).num_milliseconds() as f64 / 1000.0;
            let waited: f64 = spells.iter().map(|&(a, b)| overlap(a, b, from, end)).sum();
            let here: Vec<f64> = starts.iter().filter(|(at, _)| *at >= from && *at < to).map(|(_, w)| *w).collect();
            Waiting {
                mean_waiting: if span > 0.0 { waited / span } else { 0.0 },
                starts: here.len() as u32,
                mean_wait_s: (!here.is_empty()).then(|| here.iter().sum::<f64>() / here.len() as f64),
                max_wait_s: here.iter().copied().reduce(f64::max),
            }
        })
        .collect()
}

/// [`waiting`] per team queue (the default queue as `default`), by name: each workload counts in the
/// queue it is charged to now.
pub fn waiting_by_queue<C: Borrow<StateChange>>(
    changes: &[C],
    buckets: &[(DateTime<Utc>, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> Vec<(String, Vec<Waiting>)> {
    let mut by: BTreeMap<&str, Vec<&StateChange>> = BTreeMap::new();
    for c in changes.iter().map(Borrow::borrow) {
        by.entry(if c.queue.is_empty() { "default" } else { c.queue.as_str() }).or_default().push(c);
    }
    by.into_iter().map(|(q, changes)| (q.to_owned(), waiting(&changes, buckets, now))).collect()
}

/// A reclaim: a workload the idle rule or the guard stopped.
struct Reclaim {
    at: DateTime<Utc>,
    owner: String,
    name: String,
    rule: &'static str,
    detail: String,
}

/// `GET /admin/dashboard`.
pub async fn page(
    State(st): State<AppState>,
    viewer: Viewer,
    Query(q): Query<DashboardQuery>,
    req: Request,
) -> Response {
    if let Some(r) = (!viewer.user.is_admin())
        .then(|| page_error(StatusCode::FORBIDDEN, "only admins may open this page"))
        .or_else(|| only_navigation(&req))
    {
        return r;
    }
    let range = q.range.as_deref().unwrap_or("day");
    if range != "day" && range != "week" {
        return page_error(StatusCode::BAD_REQUEST, &format!("invalid range {range:?}: day or week"));
    }
    let now = st.clock.now();
    let buckets = buckets(range, now);
    let window = (buckets[0].0, buckets[buckets.len() - 1].1);
    // GPU-hours held and used per bucket: the usage API's, from one read of the holdings of the window
    // and of the last seven days (the top users)
    let week = (now - TimeDelta::days(7), now);
    let held = match super::usage::held(&st, &viewer, (window.0.min(week.0), window.1.max(week.1)), None).await {
        Ok(h) => h,
        Err(e) => return api_error_page(e),
    };
    let mut sums = vec![(0.0, 0.0); buckets.len()];
    if range == "day" {
        for (i, b) in buckets.iter().enumerate() {
            match report(&st, &held, "user", *b).await {
                Ok(r) => sums[i] = r.rows.iter().fold((0.0, 0.0), |(h, u), r| (h + r.gpu_hours, u + r.gpu_used_hours)),
                Err(e) => return api_error_page(e),
            }
        }
    } else {
        match report(&st, &held, "day", window).await {
            Ok(r) => {
                for row in &r.rows {
                    let Some(day) = row.day.and_then(|d| d.and_hms_opt(0, 0, 0)).map(|d| d.and_utc()) else { continue };
                    if let Some(i) = buckets.iter().position(|b| b.0 == day) {
                        sums[i].0 += row.gpu_hours;
                        sums[i].1 += row.gpu_used_hours;
                    }
                }
            }
            Err(e) => return api_error_page(e),
        }
    }
    let capacity: usize = st.nodes().iter().map(|n| n.gpus.len()).sum();
    let changes = match st.state_changes(window).await {
        Ok(c) => c,
        Err(e) => return api_error_page(e.into()),
    };
    let waits = waiting(&changes, &buckets, now);
    let queues = waiting_by_queue(&changes, &buckets, now);
    // the top users of the last seven days
    let mut top = match report(&st, &held, "user", week).await {
        Ok(r) => r.rows,
        Err(e) => return api_error_page(e),
    };
    top.sort_by(|a, b| b.gpu_hours.total_cmp(&a.gpu_hours).then(a.user.cmp(&b.user)));
    top.truncate(10);
    let reclaims = match reclaims(&st, window).await {
        Ok(r) => r,
        Err(e) => return api_error_page(e),
    };
    let body = render(range, &buckets, &sums, capacity, (&waits, &queues), &top, &reclaims, now);
    layout(&st, &viewer, "Dashboard", body).into_response()
}

/// The workloads the idle rule or the guard stopped within `window`, latest first.
async fn reclaims(
    st: &AppState,
    window: (DateTime<Utc>, DateTime<Utc>),
) -> Result<Vec<Reclaim>, crate::error::ApiError> {
    // the ended from the store, the queued (a reclaimed service waits again) from the active workloads
    // kept between requests
    let filter = WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Stopped, WorkloadState::Failed]) };
    let ended = st.store.list_workloads(&filter).await?;
    let active = st.active().await?;
    let queued = active.iter().map(|w| &**w).filter(|w| w.state() == WorkloadState::Queued);
    let mut out: Vec<Reclaim> = ended
        .iter()
        .chain(queued)
        .filter_map(|w| {
            let (at, rule, detail) = match w.interruption.clone()? {
                StopReason::Idle { at, detail, .. } => (at, "idle", detail),
                StopReason::GpuMemoryExceeded { at, detail, .. } => (at, "guard", detail),
                _ => return None,
            };
            let (owner, name) = (w.owner.clone(), w.name.clone());
            (at >= window.0 && at < window.1).then_some(Reclaim { at, owner, name, rule, detail })
        })
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.at));
    Ok(out)
}

/// Per team queue: what waited over the window (the mean of its buckets' means up to now), how many
/// started, their mean and longest wait; each bucket's figures under it, for the charts.
fn queue_table(queues: &[(String, Vec<Waiting>)], buckets: &[(DateTime<Utc>, DateTime<Utc>)], fmt: &str) -> Markup {
    let opt = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), charts::num);
    let summary = |w: &[Waiting]| {
        let starts: u32 = w.iter().map(|b| b.starts).sum();
        let waited: f64 = w.iter().filter_map(|b| Some(b.mean_wait_s? * f64::from(b.starts))).sum();
        let mean = (starts > 0).then(|| waited / f64::from(starts));
        let longest = w.iter().filter_map(|b| b.max_wait_s).reduce(f64::max);
        let waiting = w.iter().map(|b| b.mean_waiting).sum::<f64>() / w.len().max(1) as f64;
        (waiting, starts, mean, longest)
    };
    html! {
        table.queue-waits {
            thead { tr { th { "Queue" } th { "Waiting (mean)" } th { "Started" } th { "Mean wait, s" } th { "Longest wait, s" } } }
            tbody { @for (q, w) in queues {
                @let (waiting, starts, mean, longest) = summary(w);
                tr data-queue=(q) {
                    td { (q) } td data-waiting=(waiting) { (charts::num(waiting)) } td data-starts=(starts) { (starts) }
                    td data-mean-wait=[mean] { (opt(mean)) } td data-max-wait=[longest] { (opt(longest)) }
                }
            } }
        }
        details.numbers {
            summary { "The queue charts' numbers" }
            table.queue-buckets {
                thead { tr { th { "Queue" } th { "From" } th { "Waiting (mean)" } th { "Started" } th { "Mean wait, s" }
                    th { "Longest wait, s" } } }
                tbody { @for (q, w) in queues { @for (i, b) in buckets.iter().enumerate() {
                    tr data-queue=(q) data-from=(b.0.to_rfc3339()) {
                        td { (q) } td { (b.0.format(fmt)) }
                        td data-waiting=(w[i].mean_waiting) { (charts::num(w[i].mean_waiting)) }
                        td data-starts=(w[i].starts) { (w[i].starts) }
                        td data-mean-wait=[w[i].mean_wait_s] { (opt(w[i].mean_wait_s)) }
                        td data-max-wait=[w[i].max_wait_s] { (opt(w[i].max_wait_s)) }
                    }
                } } }
            }
        }
    }
}

/// Hours of `from`–`to` up to now.
fn hours(from: DateTime<Utc>, to: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    (to.min(now) - from).num_milliseconds().max(0) as f64 / 3_600_000.0
}

#[allow(clippy::too_many_arguments)]
fn render(
    range: &str,
    buckets: &[(DateTime<Utc>, DateTime<Utc>)],
    held: &[(f64, f64)],
    capacity: usize,
    (waits, queues): (&[Waiting], &[(String, Vec<Waiting>)]),
    top: &[gpuhub_core::usage::UsageRow],
    reclaims: &[Reclaim],
    now: DateTime<Utc>,
) -> Markup {
    let (from, to) = (buckets[0].0, buckets[buckets.len() - 1].1);
    let mean = |i: usize, v: f64| {
        let h = hours(buckets[i].0, buckets[i].1, now);
        if h > 0.0 { Some(v / h) } else { None }
    };
    let line = |label: &str, dashed: bool, f: &dyn Fn(usize) -> Option<f64>| Line {
        label: label.to_owned(),
        points: buckets.iter().enumerate().map(|(i, b)| (b.0, f(i))).collect(),
        dashed,
    };
    let marks: Vec<Mark> = reclaims
        .iter()
        .map(|r| Mark { at: r.at, label: r.rule.to_owned(), detail: Some(format!("{}/{}", r.owner, r.name)) })
        .collect();
    let gpus = TimeChart {
        title: "GPUs held, used and idle (mean per bucket)".to_owned(),
        unit: "GPUs".to_owned(),
        from,
        to,
        lines: vec![
            line("held", false, &|i| mean(i, held[i].0)),
            line("used", false, &|i| mean(i, held[i].1)),
            line("idle (not held)", false, &|i| mean(i, held[i].0).map(|h| (capacity as f64 - h).max(0.0))),
            line("GPUs", true, &|_| Some(capacity as f64)),
        ],
        marks,
        y_max: None,
    };
    let queue = TimeChart {
        title: "Waiting workloads (mean per bucket)".to_owned(),
        unit: "workloads".to_owned(),
        from,
        to,
        lines: vec![line("waiting", false, &|i| Some(waits[i].mean_waiting))],
        marks: vec![],
        y_max: None,
    };
    let wait = TimeChart {
        title: "Wait before starting".to_owned(),
        unit: "minutes".to_owned(),
        from,
        to,
        lines: vec![
            line("mean", false, &|i| waits[i].mean_wait_s.map(|s| s / 60.0)),
            line("longest", false, &|i| waits[i].max_wait_s.map(|s| s / 60.0)),
        ],
        marks: vec![],
        y_max: None,
    };
    let per_queue = |title: &str, unit: &str, f: &dyn Fn(&Waiting) -> Option<f64>| TimeChart {
        title: title.to_owned(),
        unit: unit.to_owned(),
        from,
        to,
        lines: queues.iter().map(|(q, w)| line(q, false, &|i| f(&w[i]))).collect(),
        marks: vec![],
        y_max: None,
    };
    let queue_lengths = per_queue("Waiting per team queue (mean per bucket)", "workloads", &|w| Some(w.mean_waiting));
    let queue_waits =
        per_queue("Mean wait before starting per team queue", "minutes", &|w| w.mean_wait_s.map(|s| s / 60.0));
    let opt = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), charts::num);
    let fmt = if range == "week" { "%Y-%m-%d" } else { "%m-%d %H:%M" };
    html! {
        h1 { "Dashboard" }
        nav.picker aria-label="window" {
            @for (r, label) in [("day", "Last day, by hour"), ("week", "Last week, by day")] {
                a.button href={"/admin/dashboard?range=" (r)} aria-current=[(r == range).then_some("page")] { (label) }
            }
        }
        div.figures #dashboard-charts {
            (charts::time_chart(&gpus)) (charts::time_chart(&queue)) (charts::time_chart(&wait))
        }
        details.numbers {
            summary { "The charts' numbers" }
            table.dashboard-buckets data-from=(from.to_rfc3339()) data-to=(to.to_rfc3339()) data-gpus=(capacity) {
                thead { tr { th { "From" } th { "GPU-hours held" } th { "GPU-hours used" } th { "Waiting (mean)" }
                    th { "Started" } th { "Mean wait, s" } th { "Longest wait, s" } } }
                tbody { @for (i, b) in buckets.iter().enumerate() {
                    tr data-from=(b.0.to_rfc3339()) data-to=(b.1.to_rfc3339()) {
                        td { (b.0.format(fmt)) }
                        td data-gpu-hours=(held[i].0) { (charts::num(held[i].0)) }
                        td data-gpu-used-hours=(held[i].1) { (charts::num(held[i].1)) }
                        td data-waiting=(waits[i].mean_waiting) { (charts::num(waits[i].mean_waiting)) }
                        td data-starts=(waits[i].starts) { (waits[i].starts) }
                        td.mean-wait data-mean-wait=[waits[i].mean_wait_s] { (opt(waits[i].mean_wait_s)) }
                        td.max-wait data-max-wait=[waits[i].max_wait_s] { (opt(waits[i].max_wait_s)) }
                    }
                } }
            }
        }
        h2 { "Team queues" }
        @if queues.is_empty() { p { "Nothing waited in this window." } } @else {
            div.figures #queue-charts { (charts::time_chart(&queue_lengths)) (charts::time_chart(&queue_waits)) }
            (queue_table(queues, buckets, fmt))
        }
        h2 { "Top users, last seven days" }
        @if top.is_empty() { p { "Nobody held a GPU, CPU or memory in the last seven days." } } @else {
            table.top-users {
                thead { tr { th { "#" } th { "User" } th { "GPU-hours held" } th { "GPU-hours used" } th { "CPU-hours" } } }
                tbody { @for (i, r) in top.iter().enumerate() {
                    tr data-user=(r.user.clone().unwrap_or_default()) {
                        td { (i + 1) }
                        td { a href={"/usage?user=" (r.user.clone().unwrap_or_default())} { (r.user.clone().unwrap_or_default()) } }
                        td data-gpu-hours=(r.gpu_hours) { (charts::num(r.gpu_hours)) }
                        td { (charts::num(r.gpu_used_hours)) } td { (charts::num(r.cpu_hours)) }
                    }
                } }
            }
        }
        h2 { "Reclaimed: stopped as idle or by the GPU-memory guard" }
        @if reclaims.is_empty() { p.none-reclaimed { "None in this window." } } @else {
            table.reclaims {
                thead { tr { th { "When" } th { "Workload" } th { "Rule" } th { "Why" } } }
                tbody { @for r in reclaims {
                    tr data-rule=(r.rule) data-workload={(r.owner) "/" (r.name)} {
                        td { (r.at.format("%Y-%m-%d %H:%M")) }
                        td { a href={"/workloads/" (r.name) "?owner=" (r.owner)} { (r.owner) "/" (r.name) } }
                        td { (r.rule) } td { (r.detail) }
                    }
                } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(min: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + TimeDelta::minutes(min)
    }

    fn change(id: &str, min: i64, state: WorkloadState) -> StateChange {
        let queue = if id.starts_with('t') { "team".into() } else { String::new() };
        StateChange {
            workload_id: id.into(),
            owner: "alice".into(),
            name: id.into(),
            queue,
            created_at: t(0),
            finished_at: None,
            at: t(min),
            state,
            message: None,
        }
    }

    #[test]
    fn waits_come_from_the_states() {
        use WorkloadState::*;
        // a waits 0–30 and starts; b waits 45–…, still waiting at 90 (now); c is queued again at 70
        // (a preemption) and starts at 80
        let changes = [
            change("a", 0, Queued),
            change("a", 30, Starting),
            change("a", 31, Running),
            change("b", 45, Queued),
            change("c", 0, Running),
            change("c", 70, Queued),
            change("c", 80, Running),
        ];
        let buckets = [(t(0), t(60)), (t(60), t(120))];
        let w = waiting(&changes, &buckets, t(90));
        // bucket 0: a 30 min + b 15 min over 60 → 0.75; one start after 30 min
        assert!((w[0].mean_waiting - 0.75).abs() < 1e-9, "{w:?}");
        assert_eq!((w[0].starts, w[0].mean_wait_s, w[0].max_wait_s), (1, Some(1800.0), Some(1800.0)));
        // bucket 1 up to now (30 min): b 30 min + c 10 min → 40/30; c started after 10 min
        assert!((w[1].mean_waiting - 40.0 / 30.0).abs() < 1e-9, "{w:?}");
        assert_eq!((w[1].starts, w[1].mean_wait_s), (1, Some(600.0)));
    }

    #[test]
    fn each_team_queue_waits_apart() {
        use WorkloadState::*;
        // a waits 0–30 in the default queue; t1 10–40 and t2 20–… (now 60) in team
        let changes = [
            change("a", 0, Queued),
            change("a", 30, Running),
            change("t1", 10, Queued),
            change("t1", 40, Running),
            change("t2", 20, Queued),
        ];
        let buckets = [(t(0), t(60))];
        let by = waiting_by_queue(&changes, &buckets, t(60));
        assert_eq!(by.iter().map(|(q, _)| q.as_str()).collect::<Vec<_>>(), ["default", "team"]);
        let (default, team) = (&by[0].1[0], &by[1].1[0]);
        assert!((default.mean_waiting - 0.5).abs() < 1e-9, "{default:?}");
        assert_eq!((default.starts, default.mean_wait_s), (1, Some(1800.0)));
        // t1 30 min + t2 40 min over 60
        assert!((team.mean_waiting - 70.0 / 60.0).abs() < 1e-9, "{team:?}");
        assert_eq!((team.starts, team.max_wait_s), (1, Some(1800.0)));
        // the queues' figures add up to everyone's
        let all = &waiting(&changes, &buckets, t(60))[0];
        assert!((all.mean_waiting - default.mean_waiting - team.mean_waiting).abs() < 1e-9);
    }
}
