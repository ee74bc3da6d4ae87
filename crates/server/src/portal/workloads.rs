//! The workload pages: the list (live), one workload (live, with its logs, apps, terminal, SSH and
//! actions), the confirmation of stop/start/delete, and the change feed the script listens to.

use super::{Fields, Viewer, api_error_page, check_form, field, layout, only_navigation, page_error};
use crate::service;
use crate::state::AppState;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use gpuhub_api::WorkloadView;
use gpuhub_core::workload::{WorkloadKind, WorkloadState};
use gpuhub_store::WorkloadQuery;
use maud::{Markup, html};
use serde::Deserialize;

/// The most workloads one page of the list shows; the rest are on the next pages.
const PAGE: u32 = 200;

/// `?owner=` (admins: another user's), `?all=true` (admins: everyone's), `?cursor=`, `?fragment=live`
/// (only the part that changes, for the script).
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    owner: Option<String>,
    all: Option<bool>,
    cursor: Option<String>,
    fragment: Option<String>,
}

/// `GET /workloads`: the viewer's workloads (an admin's filter: `owner`, `all`), live.
pub async fn list(State(st): State<AppState>, viewer: Viewer, Query(q): Query<ListQuery>, req: Request) -> Response {
    if q.fragment.is_none() {
        if let Some(r) = only_navigation(&req) {
            return r;
        }
    }
    let me = &viewer.user;
    let owner = match (&q.owner, q.all.unwrap_or(false)) {
        (Some(o), _) if o != &me.username && !me.is_admin() => {
            return page_error(StatusCode::FORBIDDEN, "only admins see other users' workloads");
        }
        (Some(o), _) => Some(o.clone()),
        (None, true) if me.is_admin() => None,
        (None, true) => return page_error(StatusCode::FORBIDDEN, "only admins see everyone's workloads"),
        (None, false) => Some(me.username.clone()),
    };
    let after = match q.cursor.as_deref().map(service::listing::decode_cursor).transpose() {
        Ok(a) => a,
        Err(e) => return api_error_page(e.into()),
    };
    let query = WorkloadQuery {
        owner: owner.clone(),
        states: None,
        kind: None,
        queue: None,
        after,
        limit: PAGE,
        max_bytes: Some(service::listing::PAGE_MAX_BYTES),
    };
    let page = match st.store.list_workloads_page(&query).await {
        Ok(p) => p,
        Err(e) => return api_error_page(e.into()),
    };
    let now = st.clock.now();
    let views: Vec<WorkloadView> = page.workloads.iter().map(|w| service::view(&st, w)).collect();
    let show_owner = owner.as_deref() != Some(me.username.as_str());
    let next = page.next.as_ref().map(|c| {
        let mut url = format!("/workloads?cursor={}", service::listing::encode_cursor(c));
        match (&owner, show_owner) {
            (Some(o), true) => url.push_str(&format!("&owner={o}")),
            (None, _) => url.push_str("&all=true"),
            _ => {}
        }
        url
    });
    let live = html! {
        @if views.is_empty() {
            p.empty { "No workloads yet. " a href="/new" { "Start one" } "." }
        } @else {
            table.workloads {
                thead { tr {
                    th { "Name" } @if show_owner { th { "Owner" } } th { "Kind" } th { "State" } th { "Image" }
                    th { "GPUs" } th { "Queue" } th { "Age" }
                } }
                tbody {
                    @for v in &views { (row(v, show_owner, now)) }
                }
            }
            @if let Some(n) = &next { p { a href=(n) { "Next page" } } }
        }
    };
    if q.fragment.is_some() {
        return live.into_response();
    }
    let title = match &owner {
        Some(o) if o == &me.username => "My workloads".to_owned(),
        Some(o) => format!("Workloads of {o}"),
        None => "All workloads".to_owned(),
    };
    let body = html! {
        h1 { (title) }
        @if me.is_admin() {
            form.filter method="get" action="/workloads" {
                label { "Owner " input name="owner" value=(owner.clone().unwrap_or_default()) placeholder="user name"; }
                button type="submit" { "Show" }
                " " a href="/workloads?all=true" { "everyone's" }
            }
        }
        div #live data-live="changes" { (live) }
    };
    layout(&st, &viewer, &title, body).into_response()
}

/// A workload's URL in the portal, naming the owner when that is not the viewer.
fn href(v: &WorkloadView, show_owner: bool) -> String {
    if show_owner { format!("/workloads/{}?owner={}", v.name, v.owner) } else { format!("/workloads/{}", v.name) }
}

fn row(v: &WorkloadView, show_owner: bool, now: DateTime<Utc>) -> Markup {
    html! {
        tr data-name=(v.name) data-state=(v.state.as_str()) {
            td { a href=(href(v, show_owner)) { (v.name) } }
            @if show_owner { td { (v.owner) } }
            td { (kind(v.kind)) }
            td.state { span class={"badge " (v.state.as_str())} { (v.state.as_str()) } (why(v, now)) }
            td.image { (v.image) }
            td { (gpus(v)) }
            td { (queue(&v.queue)) }
            td title=(v.created_at.to_rfc3339()) { (age(now - v.created_at)) }
        }
    }
}

fn kind(k: WorkloadKind) -> &'static str {
    match k {
        WorkloadKind::Job => "job",
        WorkloadKind::Workspace => "workspace",
        WorkloadKind::Service => "service",
    }
}

fn queue(q: &str) -> &str {
    if q.is_empty() { "default" } else { q }
}

/// Why a workload is where it is, in a line: a queued one's obstacle, position and estimated start; an
/// interrupted one's cause; the GPU memory guard's warning; an idle one's warning.
fn why(v: &WorkloadView, now: DateTime<Utc>) -> Markup {
    html! {
        @if let Some(e) = &v.explanation {
            span.why {
                " — " (e.message) " (position " (e.position)
                @if let Some(at) = e.estimated_start { ", estimated start in " (age(at - now)) }
                ")"
            }
        } @else if let Some(i) = &v.interruption {
            span.why { " — " (i.reason) @if let Some(d) = &i.detail { ": " (d) } }
        } @else if let Some(g) = v.gpu_guard.first() {
            span.why.guard { " — uses " (gpuhub_core::Bytes(g.used_bytes)) " of GPU memory, above its grant of "
                (gpuhub_core::Bytes(g.granted_bytes)) "; stopped at " (g.stop_at.format("%Y-%m-%d %H:%M:%S UTC"))
                " unless it frees memory" }
        } @else if let Some(idle) = &v.idle {
            span.why { " — GPUs idle since " (idle.since.format("%Y-%m-%d %H:%M UTC"))
                @if let Some(at) = idle.stop_at { "; stopped at " (at.format("%Y-%m-%d %H:%M UTC")) " unless used" } }
        } @else if v.state.is_terminal() {
            @if let Some(code) = v.exit_code { span.why { " — exit code " (code) } }
        }
    }
}

/// What a workload asks for and holds: `2 × GPU-…`, `0.5 of GPU-…`, `—`.
fn gpus(v: &WorkloadView) -> Markup {
    let r = &v.resources;
    let held: Vec<&str> = v.gpus.iter().map(|g| g.as_str()).collect();
    html! {
        @if r.gpu_milli_total() == 0 { "—" }
        @else if r.gpu_milli > 0 {
            (r.gpu_display()) " of a GPU"
            @if !held.is_empty() { " (" (held.join(", ")) ")" }
        } @else {
            (r.gpus) " whole"
            @if !held.is_empty() { " (" (held.join(", ")) ")" }
        }
    }
}

/// `3d`, `5h`, `12m`, `40s`.
fn age(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// `GET /events`: server-sent events naming each change of a workload the viewer may see (their own;
/// an admin's, all) (`event: change`, `data: {"owner", "name", "state"}`); after a gap, or when one of
/// those is deleted, one `change` with `{}` (look again at everything). Of other users' workloads
/// nothing is sent, not even that something changed.
pub async fn events(State(st): State<AppState>, viewer: Viewer) -> Response {
    // subscribed before the viewer's workloads are listed, so that none made meanwhile is missed
    let rx = st.controller.changes();
    let user = viewer.user;
    let own: std::collections::HashSet<String> = if user.is_admin() {
        Default::default()
    } else {
        st.store.workload_ids_of(&user.username).await.unwrap_or_default().into_iter().collect()
    };
    let stream = futures::stream::unfold((rx, st, user, own), |(mut rx, st, user, mut own)| async move {
        loop {
            let data = match rx.recv().await {
                Ok(id) => match st.store.get_workload_by_id(&id).await {
                    Ok(w) if w.owner == user.username || user.is_admin() => {
                        own.insert(id);
                        serde_json::json!({"owner": w.owner, "name": w.name, "state": w.state().as_str()})
                    }
                    // another user's
                    Ok(_) => continue,
                    // deleted (or not readable now): said only to whom it was theirs to see
                    Err(_) if user.is_admin() || own.contains(&id) => serde_json::json!({}),
                    Err(_) => continue,
                },
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => serde_json::json!({}),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            };
            let event = Event::default().event("change").data(data.to_string());
            return Some((Ok::<_, std::convert::Infallible>(event), (rx, st, user, own)));
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

/// `?owner=` (admins) and `?fragment=live`.
#[derive(Debug, Deserialize)]
pub struct DetailQuery {
    owner: Option<String>,
    fragment: Option<String>,
}

/// `GET /workloads/{name}`: one workload: where it stands and why, what it holds, its apps, terminal,
/// SSH, logs and actions. Another user's is 404, as in the API.
pub async fn detail(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<DetailQuery>,
    req: Request,
) -> Response {
    if q.fragment.is_none() {
        if let Some(r) = only_navigation(&req) {
            return r;
        }
    }
    let w = match service::lookup(&st, &viewer.user, &name, q.owner.as_deref()).await {
        Ok(w) => w,
        Err(e) => return api_error_page(e.into()),
    };
    let mut v = service::view(&st, &w);
    v.history = match st.store.workload_history(&w.id).await {
        Ok(h) => h,
        Err(e) => return api_error_page(e.into()),
    };
    let now = st.clock.now();
    let own = v.owner == viewer.user.username;
    let suffix = if own { String::new() } else { format!("?owner={}", v.owner) };
    // the actions change with the state too: they are part of what is swapped in live (a stale Stop
    // button on an ended workload led to a 409 page)
    let live = html! { (live_detail(&v, now)) (actions(&v, own, &suffix)) };
    if q.fragment.is_some() {
        return live.into_response();
    }
    let host = req
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| h.rsplit_once(':').map_or(h, |(n, _)| n).to_owned())
        .unwrap_or_else(|| "HUB".into());
    let ssh_port = st.ssh_addr.map_or(22, |a| a.port());
    let workspace = v.kind == WorkloadKind::Workspace;
    let charts = super::workload_chart::section(&st, &viewer, &v).await;
    let body = html! {
        h1 { (v.name) @if !own { " " small { "of " (v.owner) } } }
        div #live data-live="changes" data-name=(v.name) { (live) }
        (charts)
        @if workspace {
            section.access {
                h2 { "Open" }
                ul {
                    @for app in &v.apps {
                        li { a href={"/w/" (v.owner) "/" (v.name) "/" (app.name) "/"} { (app.name) } " (port " (app.port) ")" }
                    }
                    li { a href={"/terminal/" (v.owner) "/" (v.name) "/"} { "Terminal" } }
                }
                h3 { "SSH" }
                pre.copy { "ssh -p " (ssh_port) " " (v.name) "@" (host) }
                h3 { "VS Code (Remote - SSH)" }
                p { "Add this to ~/.ssh/config (or run " code { "gpuhub ssh-config " (v.name) } "), then connect to " code { "gpuhub-" (v.name) } ":" }
                pre.copy { "Host gpuhub-" (v.name) "\n  HostName " (host) "\n  Port " (ssh_port) "\n  User " (v.name) }
            }
        }
        section.logs {
            h2 { "Logs" }
            pre #logs data-follow={"/workloads/" (v.name) "/logs" (suffix)} {}
            p { a href={"/workloads/" (v.name) "/logs" (suffix)} { "Whole log as text" } }
        }
    };
    layout(&st, &viewer, &v.name, body).into_response()
}

/// What can be done with a workload in its state: stop it or start it again, run it again with
/// changes, delete it.
fn actions(v: &WorkloadView, own: bool, suffix: &str) -> Markup {
    html! {
        section.actions {
            @if !v.state.is_terminal() {
                a.button href={"/workloads/" (v.name) "/stop" (suffix)} { "Stop…" }
                @if v.runtime_limit.is_some() {
                    a.button href={"/workloads/" (v.name) "/extend" (suffix)} { "Extend time limit…" }
                }
            } @else {
                a.button href={"/workloads/" (v.name) "/start" (suffix)} { "Start again" }
            }
            a.button href={"/new?from=" (v.name) @if !own { "&owner=" (v.owner) }} { "Run again with changes" }
            a.button.danger href={"/workloads/" (v.name) "/delete" (suffix)} { "Delete…" }
        }
    }
}

/// The part of a workload's page that changes with its state.
fn live_detail(v: &WorkloadView, now: DateTime<Utc>) -> Markup {
    let r = &v.resources;
    html! {
        p.state { span class={"badge " (v.state.as_str())} { (v.state.as_str()) } (why(v, now)) }
        @if let Some(m) = &v.message { p.message { (m) } }
        @if v.state == WorkloadState::Pulling {
            // progress comes without changes to the workload: the script asks for this part again
            p.pull data-poll="1000" {
                @if let Some(p) = v.pull.as_ref().filter(|p| p.total_bytes > 0) {
                    progress value=(p.current_bytes.min(p.total_bytes)) max=(p.total_bytes) {}
                    " "
                }
                "Pulling " (v.image) ": " (v.pull.as_ref().map_or_else(|| "starting".into(), |p| p.text()))
            }
        }
        table.facts {
            tr { th { "Kind" } td { (kind(v.kind)) } }
            tr { th { "Image" } td { (v.image) } }
            @if !v.command.is_empty() { tr { th { "Command" } td { code { (v.command.iter().map(|a| super::form::quote(a)).collect::<Vec<_>>().join(" ")) } } } }
            tr { th { "Queue" } td { (queue(&v.queue)) " (priority " (v.priority) ")" } }
            tr { th { "Asks for" } td {
                (r.cpu_milli.0 as f64 / 1000.0) " CPUs, " (r.memory) ", GPUs: " (gpus(v))
                @if v.size > 1 { " — per member, " (v.size) " members" }
            } }
            @if let Some(c) = &v.constraint { tr { th { "Constraint" } td { code { (c) } } } }
            @if !v.datasets.is_empty() { tr { th { "Datasets" } td {
                @for d in &v.datasets { code { (d.target()) } " (" (d.path) ") " }
            } } }
            @if let Some(l) = v.runtime_limit { tr { th { "Time limit" } td { (l) } } }
            @if let Some(s) = &v.service { tr { th { "Service" } td {
                @if let Some(u) = &s.url { a href=(u) { (u) } " " }
                "(port " (s.port) ", " (format!("{:?}", s.access).to_lowercase()) "), restarts: " (v.restarts.unwrap_or(0))
                @if s.crash_loop { " " span.badge.failed { "crash-loop" } }
                @if let Some(u) = &s.update {
                    br; span.update data-update=(update_state(u.state)) { "Last update — " (u.message) }
                }
            } } }
            @for m in &v.members {
                tr { th { "Member " (m.index) } td {
                    (format!("{:?}", m.state).to_lowercase())
                    @if let Some(n) = &m.node { " on " (n) }
                    @if !m.gpus.is_empty() { ", GPUs " (m.gpus.join(", ")) }
                    @if let Some(c) = m.exit_code { ", exit code " (c) }
                } }
            }
        }
        h2 { "History" }
        ol.history {
            @for e in &v.history {
                li data-state=(e.state.as_str()) { (e.state.as_str()) " " (e.at.format("%Y-%m-%d %H:%M:%S UTC"))
                    @if let Some(m) = &e.message { " — " (m) } }
            }
        }
        @if v.history.is_empty() { ol.history {
            li { "submitted " (v.created_at.format("%Y-%m-%d %H:%M:%S UTC")) }
            @if let Some(t) = v.started_at { li { "started " (t.format("%Y-%m-%d %H:%M:%S UTC")) } }
            @if let Some(i) = &v.interruption {
                li { (i.reason) " " (i.at.format("%Y-%m-%d %H:%M:%S UTC")) @if let Some(by) = &i.by { " by " (by) } }
            }
            @if let Some(t) = v.finished_at {
                li { (v.state.as_str()) " " (t.format("%Y-%m-%d %H:%M:%S UTC"))
                    @if let Some(c) = v.exit_code { " (exit code " (c) ")" } }
            }
        } }
    }
}

/// `GET /workloads/{name}/logs?follow=true`: the output as text, as the API streams it.
pub async fn logs(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    q: Result<Query<service::logs::LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return crate::error::query_error(&e.body_text()).into_response(),
    };
    match service::logs::open(&st, &viewer.user, &name, &q).await {
        Ok(body) => {
            let mut r = Response::new(axum::body::Body::from_stream(body));
            let headers = r.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            r
        }
        Err(e) => crate::error::ApiError::from(e).into_response(),
    }
}

/// Lengthens `w`'s time limit by `by` (`1h`), as `PATCH /api/v1/workloads/{name}` does.
async fn extend(
    st: &AppState,
    viewer: &Viewer,
    w: &gpuhub_core::workload::Workload,
    by: Option<&str>,
) -> Result<(), service::ServiceError> {
    let by = gpuhub_core::Seconds::parse(by.unwrap_or_default().trim())
        .map_err(|e| service::ServiceError::invalid_at("runtime_limit", format!("invalid time: {e}")))?;
    let limit = w.runtime_limit.map(|l| gpuhub_core::Seconds(l.0.saturating_add(by.0)));
    let req = gpuhub_api::EditWorkloadRequest { runtime_limit: limit.or(Some(by)), ..Default::default() };
    service::edit(st, &viewer.user, w, &req).await.map(drop)
}

/// The actions a workload page offers.
fn action(a: &str) -> Option<(&'static str, &'static str)> {
    match a {
        "stop" => Some(("Stop", "Its processes get SIGTERM, then SIGKILL after the grace period.")),
        "start" => Some(("Start again", "It is queued again; a workspace keeps its home.")),
        "delete" => Some(("Delete", "It is stopped if it runs, and removed with its logs. This cannot be undone.")),
        "extend" => Some(("Extend", "Its time limit grows by this much, within its queue's longest run time.")),
        _ => None,
    }
}

/// `GET /workloads/{name}/{stop|start|delete}`: asks to confirm, with the form that does it.
pub async fn confirm(
    State(st): State<AppState>,
    viewer: Viewer,
    Path((name, act)): Path<(String, String)>,
    Query(q): Query<DetailQuery>,
    req: Request,
) -> Response {
    if let Some(r) = only_navigation(&req) {
        return r;
    }
    let Some((label, what)) = action(&act) else { return page_error(StatusCode::NOT_FOUND, "no such page") };
    let w = match service::lookup(&st, &viewer.user, &name, q.owner.as_deref()).await {
        Ok(w) => w,
        Err(e) => return api_error_page(e.into()),
    };
    let back = if w.owner == viewer.user.username {
        format!("/workloads/{name}")
    } else {
        format!("/workloads/{name}?owner={}", w.owner)
    };
    let body = html! {
        h1 { (label) " " (name) "?" }
        p { (what) }
        form method="post" {
            input type="hidden" name="_csrf" value=(viewer.csrf);
            @if w.owner != viewer.user.username { input type="hidden" name="owner" value=(w.owner); }
            @if act == "extend" {
                p { label { "Extend the time limit (now " (w.runtime_limit.map_or_else(|| "none".into(), |l| l.to_string())) ") by "
                    input name="by" value="1h" required; } }
            }
            button type="submit" class=@if act == "delete" { "danger" } #confirm { (label) }
            " " a href=(back) { "Cancel" }
        }
    };
    layout(&st, &viewer, &format!("{label} {name}"), body).into_response()
}

/// `POST /workloads/{name}/{stop|start|delete}`: does it, then shows the workload (or the list).
pub async fn act(
    State(st): State<AppState>,
    viewer: Viewer,
    Path((name, act)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if action(&act).is_none() {
        return page_error(StatusCode::NOT_FOUND, "no such action");
    }
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let w = match service::lookup(&st, &viewer.user, &name, field(&f, "owner")).await {
        Ok(w) => w,
        Err(e) => return api_error_page(e.into()),
    };
    let done = match act.as_str() {
        "stop" => service::stop(&st, &viewer.user, &w).await.map(drop),
        "start" => service::start(&st, &viewer.user, &w).await.map(drop),
        "extend" => extend(&st, &viewer, &w, field(&f, "by")).await,
        _ => service::delete(&st, &w).await,
    };
    if let Err(e) = done {
        return api_error_page(e.into());
    }
    let own = w.owner == viewer.user.username;
    let to = match (act.as_str(), own) {
        ("delete", true) => "/workloads".to_owned(),
        ("delete", false) => format!("/workloads?owner={}", w.owner),
        (_, true) => format!("/workloads/{name}"),
        (_, false) => format!("/workloads/{name}?owner={}", w.owner),
    };
    Redirect::to(&to).into_response()
}

/// A service update's state as the API writes it (`rolling`, `done`, `failed`, `stop-then-start`).
fn update_state(state: gpuhub_core::service::UpdateState) -> &'static str {
    use gpuhub_core::service::UpdateState;
    match state {
        UpdateState::Rolling => "rolling",
        UpdateState::Done => "done",
        UpdateState::Failed => "failed",
        UpdateState::StopThenStart => "stop-then-start",
    }
}
