//! Workloads: submit, list, inspect, stop, start, delete, logs. A user sees only their own workloads
//! (another user's name answers 404); admins see all.

pub(crate) mod listing;

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::service;
use crate::service::logs::LogsQuery;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpuhub_api::{CreateWorkloadRequest, EditWorkloadRequest, Problem, WorkloadView};
use gpuhub_core::workload::Workload;
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
    let body = service::logs::open(&st, &caller.0, &name, &q).await?;
    let mut r = Response::new(Body::from_stream(body));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(r)
}
