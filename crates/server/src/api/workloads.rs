//! Workloads: submit, list, inspect, stop, start, delete, logs. A user sees only their own workloads
//! (another user's name answers 404); admins see all.

mod app_logs;
pub(crate) mod listing;

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::service;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use gpuhub_controller::logfile;
use gpuhub_core::api::{CreateWorkloadRequest, EditWorkloadRequest, Problem, WorkloadView};
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::{EngineError, MemberRef};
use listing::ListQuery;
use serde::Deserialize;
use utoipa::IntoParams;

/// `?owner=alice`: address another user's workload (admins only).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct OwnerQuery {
    #[serde(default)]
    pub(crate) owner: Option<String>,
}

/// `?follow=true`: keep streaming until the workload ends; `?tail=N`: only the last N lines;
/// `?limit_bytes=N`: at most N bytes (after `tail`).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Keep streaming until the workload ends.
    #[serde(default)]
    follow: bool,
    /// Another user's workload (admins only).
    #[serde(default)]
    owner: Option<String>,
    /// Only the last N lines of output (0: none).
    #[serde(default)]
    tail: Option<u64>,
    /// At most this many bytes (at least 1), counted from the start of what is returned.
    #[serde(default)]
    limit_bytes: Option<u64>,
    /// The output of this app of the workspace instead of the workload's own.
    #[serde(default)]
    app: Option<String>,
    /// The output of this member of a gang (0-based; default 0).
    #[serde(default)]
    member: Option<u32>,
}

/// Finds a workload the caller may act on: their own, or (for admins) `owner`'s.
async fn lookup(st: &AppState, caller: &Caller, name: &str, owner: Option<&str>) -> Result<Workload, ApiError> {
    Ok(service::lookup(st, &caller.0, name, owner).await?)
}

/// A page of the caller's workloads, oldest first; admins may ask for everyone's (`all=true`) or one
/// user's (`owner=`). Filters: `state` (comma-separated), `kind`, `queue`. When more follow, the
/// `X-Next-Cursor` header holds the `cursor` of the next page and `Link` its URL (`rel="next"`).
#[utoipa::path(get, path = "/api/v1/workloads", tag = "workloads", params(ListQuery),
    responses(
        (status = 200, body = [WorkloadView], headers(
            ("x-next-cursor" = String, description = "the cursor of the next page; absent on the last page"),
            ("link" = String, description = "`<URL of the next page>; rel=\"next\"`; absent on the last page"))),
        (status = 400, body = Problem), (status = 401, body = Problem), (status = 403, body = Problem)))]
pub async fn list_workloads(
    State(st): State<AppState>,
    caller: Caller,
    RawQuery(raw): RawQuery,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(listing::query_error)?;
    let page = st.store.list_workloads_page(&q.resolve(&caller)?).await?;
    let views: Vec<WorkloadView> = page.workloads.iter().map(|w| service::view(&st, w)).collect();
    let mut resp = axum::Json(views).into_response();
    if let Some(next) = &page.next {
        listing::set_next(&mut resp, raw.as_deref(), next);
    }
    Ok(resp)
}

/// Submits a job or a workspace. It is queued and starts as soon as its resources fit.
#[utoipa::path(post, path = "/api/v1/workloads", tag = "workloads", request_body = CreateWorkloadRequest,
    responses((status = 201, body = WorkloadView), (status = 400, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn create_workload(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateWorkloadRequest>,
) -> Result<Response, ApiError> {
    let w = service::submit(&st, &caller.0, &req).await?;
    let mut resp = (StatusCode::CREATED, axum::Json(service::view(&st, &w))).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/api/v1/workloads/{}", w.name)) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// One workload, with the states it went through (`history`).
#[utoipa::path(get, path = "/api/v1/workloads/{name}", tag = "workloads", params(("name" = String, Path), OwnerQuery),
    responses((status = 200, body = WorkloadView), (status = 404, body = Problem)))]
pub async fn get_workload(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<OwnerQuery>,
) -> Result<axum::Json<WorkloadView>, ApiError> {
    let w = lookup(&st, &caller, &name, q.owner.as_deref()).await?;
    let mut v = service::view(&st, &w);
    v.history = st.store.workload_history(&w.id).await?;
    if let Some(s) = v.service.as_mut() {
        s.ready = service::ready::check(&st, &w).await;
    }
    Ok(axum::Json(v))
}

/// Changes a workload's terms: its owner may lengthen the run-time limit of a queued or running
/// workload (`{"runtime_limit": "3h"}`, within its queue's `max_runtime`); an admin may also change a
/// queued workload's `priority` or `queue`. A service's `image`, `command` or `env` (changed alone) is its
/// update: a live service's run is stopped and a new one started with them. Each change is recorded in
/// its `history`.
#[utoipa::path(patch, path = "/api/v1/workloads/{name}", tag = "workloads", params(("name" = String, Path), OwnerQuery),
    request_body = EditWorkloadRequest,
    responses((status = 200, body = WorkloadView), (status = 400, body = Problem), (status = 403, body = Problem),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn edit_workload(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<OwnerQuery>,
    ApiJson(req): ApiJson<EditWorkloadRequest>,
) -> Result<axum::Json<WorkloadView>, ApiError> {
    let w = lookup(&st, &caller, &name, q.owner.as_deref()).await?;
    let w = service::edit(&st, &caller.0, &w, &req).await?;
    let mut v = service::view(&st, &w);
    v.history = st.store.workload_history(&w.id).await?;
    Ok(axum::Json(v))
}

/// Stops a workload (SIGTERM, then SIGKILL after the grace period); answers once it has stopped.
#[utoipa::path(post, path = "/api/v1/workloads/{name}/stop", tag = "workloads", params(("name" = String, Path), OwnerQuery),
    responses((status = 200, body = WorkloadView), (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn stop_workload(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<OwnerQuery>,
) -> Result<axum::Json<WorkloadView>, ApiError> {
    let w = lookup(&st, &caller, &name, q.owner.as_deref()).await?;
    Ok(axum::Json(WorkloadView::from(&service::stop(&st, &caller.0, &w).await?)))
}

/// Queues an ended workload again (a workspace keeps its home).
#[utoipa::path(post, path = "/api/v1/workloads/{name}/start", tag = "workloads", params(("name" = String, Path), OwnerQuery),
    responses((status = 200, body = WorkloadView), (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn start_workload(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<OwnerQuery>,
) -> Result<axum::Json<WorkloadView>, ApiError> {
    let w = lookup(&st, &caller, &name, q.owner.as_deref()).await?;
    Ok(axum::Json(WorkloadView::from(&service::start(&st, &caller.0, &w).await?)))
}

/// Deletes a workload, killing its container if it runs, with its logs.
#[utoipa::path(delete, path = "/api/v1/workloads/{name}", tag = "workloads", params(("name" = String, Path), OwnerQuery),
    responses((status = 204), (status = 404, body = Problem)))]
pub async fn delete_workload(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<OwnerQuery>,
) -> Result<StatusCode, ApiError> {
    let w = lookup(&st, &caller, &name, q.owner.as_deref()).await?;
    service::delete(&st, &w).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Output of a workload (stdout and stderr), streamed: from the container while it exists, else from
/// the run's archive (at most `log_max_bytes`, ending with a line that says so when cut). With
/// `follow=true` the response streams until it ends; a queued workload's stream waits for it to start.
/// `app=NAME` serves that app's output instead (404 naming the apps when it has no such app).
#[utoipa::path(get, path = "/api/v1/workloads/{name}/logs", tag = "workloads", params(("name" = String, Path), LogsQuery),
    responses((status = 200, content_type = "text/plain", body = String), (status = 400, body = Problem),
        (status = 404, body = Problem)))]
pub async fn workload_logs(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    q: Result<Query<LogsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| crate::error::query_error(&e.body_text()))?;
    if q.limit_bytes == Some(0) {
        return Err(ApiError::bad_request("invalid query: limit_bytes must be at least 1"));
    }
    let mut changes = st.controller.changes();
    let w = lookup(&st, &caller, &name, q.owner.as_deref()).await?;
    let member = q.member.unwrap_or(0);
    if member >= w.size.max(1) {
        return Err(ApiError::not_found(format!(
            "workload {} has no member {member} (it has {} member{}, 0 to {})",
            w.name,
            w.size,
            if w.size == 1 { "" } else { "s" },
            w.size.max(1) - 1
        )));
    }
    let text_plain = |body: Body| {
        let mut r = Response::new(body);
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r
    };
    let what = LogSource {
        app: q.app.clone(),
        member,
        tail: q.tail,
        follow: q.follow,
        limit: q.limit_bytes.unwrap_or(u64::MAX),
    };
    if !(q.follow && waiting_for_a_run(&w)) {
        return Ok(text_plain(Body::from_stream(ends_cleanly(log_stream(&st, &w, &what).await?))));
    }
    // followed before it has a run: answered at once (a client cannot tell an answer that says nothing
    // from a hang), then the body waits (signalled, no polling) until the workload has a run of its own
    // or has ended (through its image's pull too); a re-queued workload may still name its previous run
    let body = futures::stream::once(async move {
        let mut w = w;
        while waiting_for_a_run(&w) {
            loop {
                match changes.recv().await {
                    Ok(id) if id == w.id => break,
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(_) => return Err(ApiError::internal("controller is gone")),
                }
            }
            w = match st.store.get_workload_by_id(&w.id).await {
                Ok(w) => w,
                // deleted before it ran: its log is empty and ends here
                Err(gpuhub_store::StoreError::NotFound { .. }) => return Ok(futures::stream::empty().boxed()),
                Err(e) => return Err(e.into()),
            };
        }
        log_stream(&st, &w, &what).await
    })
    .map(|r: Result<_, ApiError>| match r {
        Ok(s) => s,
        Err(e) => futures::stream::once(futures::future::ready(Err(std::io::Error::other(e.detail)))).boxed(),
    })
    .flatten()
    .boxed();
    Ok(text_plain(Body::from_stream(ends_cleanly(body))))
}

/// A log body that fails part-way (its container removed under it, the engine gone) ends with a line
/// that says why, and cleanly: a connection cut inside a chunked body tells a client nothing, and
/// HTTP clients report it as a broken connection, not as the end of a log.
fn ends_cleanly(
    log: futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    log.scan(false, |stopped, chunk| {
        let next = if *stopped {
            None
        } else {
            Some(Ok(chunk.unwrap_or_else(|e| {
                *stopped = true;
                bytes::Bytes::from(format!("\n[gpuhub: the log stopped early: {e}]\n"))
            })))
        };
        futures::future::ready(next)
    })
}

/// Whether a followed log must wait for the workload's run: it has none of its own yet.
fn waiting_for_a_run(w: &Workload) -> bool {
    matches!(w.state, WorkloadState::Pulling | WorkloadState::Queued)
        || (w.state == WorkloadState::Starting && w.run_id.is_none())
}

/// Which log a request reads and how.
struct LogSource {
    app: Option<String>,
    member: u32,
    tail: Option<u64>,
    follow: bool,
    limit: u64,
}

/// The log `what` names of `w`: an app's (gpuhub's file), the engine's for its run, else the archived
/// one (empty when there is none), at most `limit` bytes, followed while it holds resources.
async fn log_stream(
    st: &AppState,
    w: &Workload,
    what: &LogSource,
) -> Result<futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>, ApiError> {
    let follow = what.follow && w.state.holds_resources();
    if let Some(app) = &what.app {
        return Ok(app_logs::stream(st, w, app, what.tail, what.limit, follow).await?.boxed());
    }
    if let Some(run) = &w.run_id {
        match st.engine.logs(&MemberRef::new(run, what.member), follow, what.tail).await {
            // passed on chunk by chunk as the engine delivers them, never collected
            Ok(stream) => {
                return Ok(logfile::take_bytes(stream, what.limit).map(|r| r.map_err(std::io::Error::other)).boxed());
            }
            Err(EngineError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let archived = gpuhub_controller::archive_path(&st.data_dir, &w.id, what.member);
    let mut file = match tokio::fs::File::open(&archived).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(futures::stream::empty().boxed()),
        Err(e) => return Err(ApiError::internal(e)),
    };
    let len = file.metadata().await.map_err(ApiError::internal)?.len();
    let start = match what.tail {
        Some(n) => logfile::tail_offset(&mut file, len, n).await.map_err(ApiError::internal)?,
        None => 0,
    };
    Ok(logfile::read_range(file, start, (len - start).min(what.limit)).boxed())
}
