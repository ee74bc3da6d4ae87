//! A workload's charts on its page: GPU utilisation, GPU memory against its grant (a share's too), CPU
//! and memory against their limits, over the workload's life, from `GET
//! /api/v1/workloads/{name}/metrics` (its handler is called with the viewer as the caller, so who may
//! see what is the API's). Starts, restarts, preemptions, stops and the idle and GPU memory warnings
//! are marked on the time axis. Until the workload ends, the script fetches the section again
//! (`GET /workloads/{name}/chart`, `data-refresh`).

use super::charts::{self, Line, Mark, TimeChart};
use super::{Viewer, api_error_page};
use crate::service;
use crate::service::metrics::WorkloadMetricsQuery;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_api::{StateEvent, WorkloadView};
use gpuhub_core::metrics::{MemberPoint, WorkloadHistory};
use gpuhub_core::workload::WorkloadState;
use maud::{Markup, html};
use serde::Deserialize;

const GIB: f64 = (1u64 << 30) as f64;

/// How often a running workload's charts are fetched again, milliseconds.
const REFRESH_MS: u64 = 10_000;

/// `?owner=` (admins).
#[derive(Debug, Deserialize)]
pub struct ChartQuery {
    owner: Option<String>,
}

/// `GET /workloads/{name}/chart`: the charts' section alone (what the script swaps in).
pub async fn fragment(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<ChartQuery>,
) -> Response {
    let w = match service::lookup(&st, &viewer.user, &name, q.owner.as_deref()).await {
        Ok(w) => w,
        Err(e) => return api_error_page(e.into()),
    };
    let mut v = service::view(&st, &w);
    v.history = match st.store.workload_history(&w.id).await {
        Ok(h) => h,
        Err(e) => return api_error_page(e.into()),
    };
    section(&st, &viewer, &v).await.into_response()
}

/// The window of a workload's life: from its submission to its end (or now).
fn life(v: &WorkloadView, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let from = v.history.first().map_or(v.created_at, |e| e.at.min(v.created_at));
    let to = if v.state.is_terminal() { v.finished_at.unwrap_or(now) } else { now };
    (from, to.max(from + TimeDelta::minutes(1)))
}

/// What happened when, for the time axis: the starts (the first, then restarts), the returns to the
/// queue (a preemption, an engine failure), the end, the latest interruption's cause, and the idle and
/// GPU memory warnings.
fn marks(v: &WorkloadView) -> Vec<Mark> {
    let mut out = history_marks(&v.history);
    if let Some(i) = &v.interruption {
        out.push(Mark { at: i.at, label: i.reason.clone(), detail: i.detail.clone() });
    }
    if let Some(idle) = &v.idle {
        out.push(Mark { at: idle.since, label: "idle".into(), detail: None });
        if let Some(w) = idle.warned_at {
            out.push(Mark { at: w, label: "idle warning".into(), detail: idle.stop_at.map(stop_at) });
        }
    }
    for g in &v.gpu_guard {
        let label = format!("member {} over its GPU memory grant", g.member);
        out.push(Mark { at: g.since, label, detail: Some(stop_at(g.stop_at)) });
    }
    out.sort_by_key(|m| m.at);
    out
}

/// `stopped at …` unless it changes.
fn stop_at(t: DateTime<Utc>) -> String {
    format!("stopped at {} unless it changes", t.format("%Y-%m-%d %H:%M:%S UTC"))
}

/// The marks of a workload's state changes.
fn history_marks(history: &[StateEvent]) -> Vec<Mark> {
    let mut out: Vec<Mark> = Vec::new();
    let mut runs = 0;
    let mut was = None;
    for e in history {
        let before = was.replace(e.state);
        let label = match e.state {
            // running again without leaving it: a note under its state (an edit, a service's update),
            // not a new run
            WorkloadState::Running if before == Some(WorkloadState::Running) => match e.message {
                Some(_) => "changed".to_owned(),
                None => continue,
            },
            WorkloadState::Running => {
                runs += 1;
                if runs == 1 { "started".to_owned() } else { format!("restart {}", runs - 1) }
            }
            WorkloadState::Queued if runs > 0 => "requeued".to_owned(),
            s if s.is_terminal() => s.as_str().to_owned(),
            _ => continue,
        };
        if label == "changed" || out.last().is_none_or(|m| m.label != label) {
            out.push(Mark { at: e.at, label, detail: e.message.clone() });
        }
    }
    out
}

/// The GPU memory each member was granted, bytes: its whole GPUs' memory, or its share's (the memory it
/// asked for, else its fraction of the GPU's), as the GPU memory guard counts it.
fn gpu_grant(st: &AppState, v: &WorkloadView, gpus: &[String]) -> Option<f64> {
    let r = &v.resources;
    if r.gpu_milli_total() == 0 {
        return None;
    }
    let memory_of =
        |uuid: &str| st.nodes().iter().flat_map(|n| n.gpus.iter()).find(|g| g.uuid == uuid).map(|g| g.memory.0 as f64);
    if r.gpu_milli > 0 {
        if let Some(m) = r.gpu_memory {
            return Some(m.0 as f64);
        }
        return gpus.first().and_then(|g| memory_of(g)).map(|m| m * f64::from(r.gpu_milli) / 1000.0);
    }
    let sum: f64 = gpus.iter().filter_map(|g| memory_of(g)).sum();
    (sum > 0.0).then_some(sum)
}

/// One line per member of `figure`, and a dashed limit: one where all members have the same, else one
/// per member that has one.
fn lines(
    h: &WorkloadHistory,
    members: &[u32],
    figure: impl Fn(&MemberPoint) -> Option<f64>,
    limit: impl Fn(u32) -> Option<f64>,
    what: &str,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
) -> Vec<Line> {
    let mut out = Vec::new();
    for m in members {
        let points: Vec<_> = h.points.iter().filter(|p| p.member == *m).map(|p| (p.at, figure(p))).collect();
        let label = if members.len() > 1 { format!("member {m}") } else { "used".to_owned() };
        out.push(Line { label, points, dashed: false });
    }
    let limits: Vec<(u32, f64)> = members.iter().filter_map(|m| Some((*m, limit(*m)?))).collect();
    let same = limits.windows(2).all(|w| w[0].1 == w[1].1);
    for (m, l) in limits.iter().take(if same { 1 } else { limits.len() }) {
        let label = if same { what.to_owned() } else { format!("member {m} {what}") };
        out.push(Line { label, points: vec![(from, Some(*l)), (to, Some(*l))], dashed: true });
    }
    out
}

/// The charts' section of a workload's page, with the table of the same numbers.
pub async fn section(st: &AppState, viewer: &Viewer, v: &WorkloadView) -> Markup {
    let now = st.clock.now();
    let (from, to) = life(v, now);
    // until it ends: a queued one starts refreshing once it runs
    let live = !v.state.is_terminal();
    let own = v.owner == viewer.user.username;
    let refresh =
        format!("/workloads/{}/chart{}", v.name, if own { String::new() } else { format!("?owner={}", v.owner) });
    let q = WorkloadMetricsQuery {
        from: Some(from.to_rfc3339()),
        to: Some(to.to_rfc3339()),
        step: None,
        owner: (!own).then(|| v.owner.clone()),
    };
    let history = service::metrics::workload_history(st, &viewer.user, &v.name, &q).await;
    let body = match history {
        Err(e) => html! { p.error { "No measurements: " (e.detail) } },
        Ok(h) => render(st, v, &h, marks(v)),
    };
    html! {
        section.charts #charts data-refresh=[live.then_some(refresh)] data-every=[live.then_some(REFRESH_MS)] {
            h2 { "Use over its life" }
            (body)
        }
    }
}

fn render(st: &AppState, v: &WorkloadView, h: &WorkloadHistory, marks: Vec<Mark>) -> Markup {
    let window = (h.from, h.to);
    let mut members: Vec<u32> = h.points.iter().map(|p| p.member).collect();
    members.sort_unstable();
    members.dedup();
    let gpus_of = |m: u32| v.members.iter().find(|x| x.index == m).map_or(v.gpus.clone(), |x| x.gpus.clone());
    let cores = v.resources.cpu_milli.0 as f64 / 1000.0;
    let memory_limit = |m: u32| {
        let seen = h.points.iter().filter(|p| p.member == m).find_map(|p| p.memory_limit);
        Some(seen.unwrap_or(v.resources.memory.0) as f64 / GIB)
    };
    let has_gpu = v.resources.gpu_milli_total() > 0;
    let chart = |title: &str, unit: &str, lines: Vec<Line>, y_max: Option<f64>| TimeChart {
        title: title.to_owned(),
        unit: unit.to_owned(),
        from: h.from,
        to: h.to,
        lines,
        marks: marks.clone(),
        y_max,
    };
    let mut figures = Vec::new();
    if has_gpu {
        let util = lines(h, &members, |p| p.gpu_utilization_pct, |_| None, "", window);
        figures.push(chart("GPU utilisation", "%", util, Some(100.0)));
        let grant = |m: u32| gpu_grant(st, v, &gpus_of(m)).map(|g| g / GIB);
        let mem = lines(h, &members, |p| p.gpu_memory_used.map(|b| b as f64 / GIB), grant, "grant", window);
        figures.push(chart("GPU memory against its grant", "GiB", mem, None));
    }
    let cpu = lines(h, &members, |p| p.cpu_cores, |_| Some(cores), "limit", window);
    figures.push(chart("CPU against its limit", "cores", cpu, None));
    let mem = lines(h, &members, |p| p.memory_used.map(|b| b as f64 / GIB), memory_limit, "limit", window);
    figures.push(chart("Memory against its limit", "GiB", mem, None));
    let opt = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), |x| format!("{x:.2}"));
    html! {
        @if h.points.is_empty() {
            p { "Nothing measured yet: the monitor samples running workloads every "
                (st.config.monitor.interval_secs) " s." }
        } @else {
            div.figures { @for f in &figures { (charts::time_chart(f)) } }
        }
        @if !marks.is_empty() {
            ul.marks { @for m in &marks { li data-mark=(m.label) {
                    (m.at.format("%Y-%m-%d %H:%M:%S UTC")) " — " (m.label)
                    @if let Some(d) = &m.detail { ": " (d) }
                } } }
        }
        details.numbers {
            summary { "The charts' numbers (" (h.points.len()) " points, every " (h.step_secs) " s)" }
            table.metrics data-from=(h.from.to_rfc3339()) data-to=(h.to.to_rfc3339()) data-step=(h.step_secs) {
                thead { tr { th { "Member" } th { "At" } th { "GPU %" } th { "GPU memory GiB" } th { "CPU cores" }
                    th { "Memory GiB" } } }
                tbody { @for p in &h.points {
                    tr data-member=(p.member) data-at=(p.at.to_rfc3339()) {
                        td { (p.member) }
                        td { (p.at.format("%Y-%m-%d %H:%M:%S")) }
                        td data-gpu-util=[p.gpu_utilization_pct] { (opt(p.gpu_utilization_pct)) }
                        td data-gpu-memory=[p.gpu_memory_used] { (opt(p.gpu_memory_used.map(|b| b as f64 / GIB))) }
                        td data-cpu=[p.cpu_cores] { (opt(p.cpu_cores)) }
                        td data-memory=[p.memory_used] { (opt(p.memory_used.map(|b| b as f64 / GIB))) }
                    }
                } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_restarts_requeues_and_the_end_are_marked() {
        let t0 = DateTime::parse_from_rfc3339("2026-11-01T10:00:00Z").unwrap().with_timezone(&Utc);
        let at = |m: i64| t0 + TimeDelta::minutes(m);
        let e = |m: i64, state: WorkloadState| StateEvent { at: at(m), state, message: None };
        let history = [
            e(0, WorkloadState::Queued),
            e(1, WorkloadState::Starting),
            e(1, WorkloadState::Running),
            e(5, WorkloadState::Queued),
            e(6, WorkloadState::Queued),
            e(7, WorkloadState::Starting),
            e(8, WorkloadState::Running),
            // notes under its state (a time limit extended, a service's update), not runs
            StateEvent { message: Some("time limit 1h → 3h (by alice)".into()), ..e(8, WorkloadState::Running) },
            StateEvent { message: Some("updated: image (by alice)".into()), ..e(8, WorkloadState::Running) },
            e(8, WorkloadState::Running),
            e(9, WorkloadState::Succeeded),
        ];
        let marks: Vec<(i64, String)> =
            history_marks(&history).into_iter().map(|m| ((m.at - t0).num_minutes(), m.label)).collect();
        let want =
            [(1, "started"), (5, "requeued"), (8, "restart 1"), (8, "changed"), (8, "changed"), (9, "succeeded")];
        assert_eq!(marks, want.map(|(m, l)| (m, l.to_owned())));
    }
}
