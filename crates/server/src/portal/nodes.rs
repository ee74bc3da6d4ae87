//! Nodes as a grid of GPUs (`GET /nodes`): each GPU a tile with its model, utilisation, memory,
//! temperature, its sharing mode and its holders — whole, or shares with their grants and what they
//! use (over a grant marked) — and an idle flag, refreshed by the script while the page is open. A
//! node's page (`GET /nodes/{node}`) charts its GPUs' history from `GET /api/v1/nodes/metrics`.
//! What is shown is what `GET /api/v1/nodes` and the monitor's latest round show every signed-in user.

use super::charts::{self, Line, TimeChart};
use super::{Viewer, api_error_page, layout, only_navigation, page_error};
use crate::error::ApiError;
use crate::service::metrics::NodeMetricsQuery;
use crate::state::AppState;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::TimeDelta;
use gpuhub_api::{GpuView, NodeView};
use gpuhub_core::Bytes;
use gpuhub_core::metrics::{GpuMetrics, GpuPoint};
use gpuhub_core::node::GpuSharing;
use gpuhub_core::workload::WorkloadState;
use maud::{Markup, html};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

const GIB: f64 = (1u64 << 30) as f64;

/// How often the grid is fetched again while open, milliseconds.
const POLL_MS: u64 = 5000;

/// What the grid needs beside the nodes: the latest round's figures and who is idle.
struct Live {
    gpus: HashMap<String, GpuMetrics>,
    /// GPU memory each holder's processes use now on a GPU, by `(owner, name, GPU)` (its members on
    /// that GPU together).
    used: HashMap<(String, String, String), u64>,
    /// Holders the idle rule finds idle, as `owner/name`.
    idle: HashSet<String>,
}

/// `GET /nodes` (`?fragment=live`: the grid alone, for the script).
pub async fn page(
    st: AppState,
    viewer: Viewer,
    req: Request,
    views: Result<Vec<NodeView>, ApiError>,
    help: fn(Option<GpuSharing>) -> &'static str,
) -> Response {
    let fragment = req.uri().query().is_some_and(|q| q.split('&').any(|p| p == "fragment=live"));
    if !fragment {
        if let Some(r) = only_navigation(&req) {
            return r;
        }
    }
    let views = match views {
        Ok(v) => v,
        Err(e) => return api_error_page(e),
    };
    let snapshot = st.metrics.get();
    let active = match st.active().await {
        Ok(a) => a,
        Err(e) => return api_error_page(e.into()),
    };
    let now = st.clock.now();
    let live = Live {
        gpus: snapshot.gpus.iter().map(|g| (g.uuid.clone(), g.clone())).collect(),
        used: snapshot
            .members
            .iter()
            .filter_map(|m| Some((m, m.gpu_memory_used?)))
            .flat_map(|(m, used)| m.gpus.iter().map(move |g| ((m.owner.clone(), m.workload.clone(), g.clone()), used)))
            .fold(HashMap::new(), |mut acc, (k, v)| {
                *acc.entry(k).or_insert(0) += v;
                acc
            }),
        idle: active
            .iter()
            .filter(|w| w.state() == WorkloadState::Running && st.idle.view(&w.id, now).is_some())
            .map(|w| format!("{}/{}", w.owner, w.name))
            .collect(),
    };
    let grid = html! {
        div.grid-live data-poll=(POLL_MS) {
            @if let Some(at) = snapshot.at { p.measured { "Measured " (at.format("%Y-%m-%d %H:%M:%S UTC")) } }
            @for n in &views { (node(n, &live, help)) }
        }
    };
    if fragment {
        return grid.into_response();
    }
    let body = html! {
        h1 { "Nodes" }
        p { "Each tile is a GPU: its use now, and who holds it, whole or in shares. A share's grant is the \
             GPU memory it asked for, else its fraction of the GPU's." }
        div #live data-live="changes" { (grid) }
    };
    layout(&st, &viewer, "Nodes", body).into_response()
}

fn node(n: &NodeView, live: &Live, help: fn(Option<GpuSharing>) -> &'static str) -> Markup {
    html! {
        section.node data-node=(n.name) {
            h2 { a href={"/nodes/" (n.name)} { (n.name) } " " small { (n.state) } }
            p { (format!("{:.1}", n.cpus_free)) " of " (format!("{:.1}", n.cpus)) " CPUs free, "
                (n.memory_free) " of " (n.memory) " memory free" }
            @if n.gpus.is_empty() { p { "No GPUs." } } @else {
                div.gpu-grid { @for g in &n.gpus { (tile(g, live, help)) } }
            }
        }
    }
}

fn tile(g: &GpuView, live: &Live, help: fn(Option<GpuSharing>) -> &'static str) -> Markup {
    let m = live.gpus.get(&g.uuid);
    let mode = g.sharing.map_or("none", |m| m.as_str());
    let holders: Vec<String> = match &g.holder {
        Some(h) => vec![format!("{}/{}", h.owner, h.workload)],
        None => g.shares.iter().map(|s| format!("{}/{}", s.owner, s.workload)).collect(),
    };
    let idle = holders.iter().any(|h| live.idle.contains(h));
    let state = if holders.is_empty() {
        "free"
    } else if idle {
        "idle"
    } else {
        "held"
    };
    let enforced = g.sharing.is_some_and(|m| m != GpuSharing::Unenforced);
    html! {
        div class={"tile " (state)} data-gpu=(g.uuid) data-sharing=(mode) data-state=(state) {
            div.tile-head {
                strong { "GPU " (g.index) } " " (g.model)
                @if idle { " " span.badge.idle-flag title="the idle rule finds its holder idle" { "idle" } }
            }
            small.uuid { (g.uuid) }
            @if let Some(m) = m {
                div.figure { "Utilisation " meter min="0" max="100" value=(m.utilization_pct) {} " "
                    span data-util=(m.utilization_pct) { (format!("{:.0}", m.utilization_pct)) " %" } }
                div.figure { "Memory " meter min="0" max=(m.memory_total) value=(m.memory_used) {} " "
                    span data-memory-used=(m.memory_used) { (Bytes(m.memory_used)) " of " (Bytes(m.memory_total)) } }
                @if m.temperature_c.is_some() || m.power_watts.is_some() {
                    div.figure {
                        @if let Some(t) = m.temperature_c { span data-temperature=(t) { (format!("{t:.0}")) " °C" } }
                        @if let Some(p) = m.power_watts { " · " (format!("{p:.0}")) " W" }
                    }
                }
            } @else {
                div.figure { (g.memory) " memory; not measured yet" }
            }
            div.figure { "Sharing " span.badge.sharing title=(help(g.sharing)) { (mode) } }
            @if let Some(h) = &g.holder {
                ul.holders { li data-holder={(h.owner) "/" (h.workload)} data-whole="true" {
                    (h.owner) "/" (h.workload) " (whole)"
                } }
            } @else if g.shares.is_empty() {
                p.free { "free" }
            } @else {
                ul.holders { @for s in &g.shares {
                    @let granted = gpuhub_core::workload::share_memory(s.milli, s.memory, g.memory.0);
                    @let used = live.used.get(&(s.owner.clone(), s.workload.clone(), g.uuid.clone()));
                    @let over = used.is_some_and(|u| *u > granted) && enforced;
                    li data-holder={(s.owner) "/" (s.workload)} data-milli=(s.milli) data-over=[over.then_some("true")] {
                        (s.owner) "/" (s.workload) " " (format!("{}", f64::from(s.milli) / 1000.0)) " of the GPU"
                        " (grant " (Bytes(granted))
                        @if let Some(u) = used {
                            @if over { strong.over { ", uses " (Bytes(*u)) ": over its grant" } }
                            @else { ", uses " (Bytes(*u)) }
                        }
                        ")"
                    }
                } }
            }
        }
    }
}

/// `?range=hour|day|week`
#[derive(Debug, Deserialize)]
pub struct NodeQuery {
    range: Option<String>,
}

/// `GET /nodes/{node}`: the node's GPUs over the last hour, day or week.
pub async fn node_page(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<NodeQuery>,
    req: Request,
) -> Response {
    if let Some(r) = only_navigation(&req) {
        return r;
    }
    let range = q.range.as_deref().unwrap_or("day");
    let span = match range {
        "hour" => TimeDelta::hours(1),
        "day" => TimeDelta::days(1),
        "week" => TimeDelta::days(7),
        other => return page_error(StatusCode::BAD_REQUEST, &format!("invalid range {other:?}: hour, day or week")),
    };
    let now = st.clock.now();
    let query = NodeMetricsQuery {
        from: Some((now - span).to_rfc3339()),
        to: Some(now.to_rfc3339()),
        step: None,
        node: Some(name.clone()),
    };
    let h = match crate::service::metrics::node_history(&st, query).await {
        Ok(h) => h,
        Err(e) => return api_error_page(e.into()),
    };
    let mut uuids: Vec<&str> = h.points.iter().map(|p| p.uuid.as_str()).collect();
    uuids.sort_unstable();
    uuids.dedup();
    let series = |f: &dyn Fn(&GpuPoint) -> Option<f64>| -> Vec<Line> {
        uuids
            .iter()
            .map(|u| Line {
                label: (*u).to_owned(),
                points: h.points.iter().filter(|p| p.uuid == *u).map(|p| (p.at, f(p))).collect(),
                dashed: false,
            })
            .collect()
    };
    let chart = |title: &str, unit: &str, lines: Vec<Line>, y_max: Option<f64>| TimeChart {
        title: title.to_owned(),
        unit: unit.to_owned(),
        from: h.from,
        to: h.to,
        lines,
        marks: vec![],
        y_max,
    };
    let gib = |b: Option<u64>| b.map(|b| b as f64 / GIB);
    let figures = [
        chart("GPU utilisation", "%", series(&|p| p.utilization_pct), Some(100.0)),
        chart("GPU memory used", "GiB", series(&|p| gib(p.memory_used)), None),
        chart("Temperature", "°C", series(&|p| p.temperature_c), None),
    ];
    let opt = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), |x| format!("{x:.1}"));
    let body = html! {
        h1 { "Node " (name) }
        p { a href="/nodes" { "All nodes" } }
        nav.picker aria-label="window" {
            @for r in ["hour", "day", "week"] {
                a.button href={"/nodes/" (name) "?range=" (r)} aria-current=[(r == range).then_some("page")] { "Last " (r) }
            }
        }
        @if h.points.is_empty() { p { "Nothing measured in this window." } } @else {
            div.figures { @for f in &figures { (charts::time_chart(f)) } }
        }
        details.numbers {
            summary { "The charts' numbers (" (h.points.len()) " points, every " (h.step_secs) " s)" }
            table.gpu-history data-from=(h.from.to_rfc3339()) data-to=(h.to.to_rfc3339()) data-step=(h.step_secs) {
                thead { tr { th { "GPU" } th { "At" } th { "Utilisation %" } th { "Memory GiB" } th { "°C" } th { "W" } } }
                tbody { @for p in &h.points {
                    tr data-gpu=(p.uuid) data-at=(p.at.to_rfc3339()) {
                        td { (p.uuid) } td { (p.at.format("%Y-%m-%d %H:%M:%S")) }
                        td data-util=[p.utilization_pct] { (opt(p.utilization_pct)) }
                        td data-memory-used=[p.memory_used] { (opt(gib(p.memory_used))) }
                        td { (opt(p.temperature_c)) } td { (opt(p.power_watts)) }
                    }
                } }
            }
        }
    };
    layout(&st, &viewer, &format!("Node {name}"), body).into_response()
}
