//! Workloads: submit, list, inspect, stop, start, delete, logs. A user sees only their own workloads
//! (another user's name answers 404); admins see all.

mod app_logs;
mod listing;

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::logfile;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use futures::StreamExt;
use gpuhub_core::api::{CreateWorkloadRequest, Problem, WorkloadView};
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::{AppSpec, Workload, WorkloadState};
use gpuhub_core::{admission, names};
use gpuhub_store::{CapReached, OwnerCaps, StoreError};
use listing::ListQuery;
use serde::Deserialize;
use utoipa::IntoParams;

/// `?owner=alice`: address another user's workload (admins only).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct OwnerQuery {
    #[serde(default)]
    owner: Option<String>,
}

/// `?follow=true`: keep streaming until the workload ends; `?tail=N`: only the last N lines;
/// `?limit_bytes=N`: at most N bytes (after `tail`).
#[derive(Debug, Deserialize, IntoParams)]
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
}

/// Finds a workload the caller may act on: their own, or (for admins) `owner`'s.
async fn lookup(st: &AppState, caller: &Caller, name: &str, owner: Option<&str>) -> Result<Workload, ApiError> {
    let owner = match owner {
        Some(o) if caller.0.is_admin() => o,
        _ => caller.0.username.as_str(),
    };
    match st.store.get_workload(owner, name).await {
        Ok(w) => Ok(w),
        Err(StoreError::NotFound { .. }) => Err(ApiError::not_found(format!("no workload named {name:?}"))),
        Err(e) => Err(e.into()),
    }
}

/// A workload with the scheduler's explanation when it waits.
fn view(st: &AppState, w: &Workload) -> WorkloadView {
    let mut v = WorkloadView::from(w);
    if w.state == WorkloadState::Queued {
        v.explanation = st.controller.explanation(&w.id);
    }
    v
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
    let views: Vec<WorkloadView> = page.workloads.iter().map(|w| view(&st, w)).collect();
    let mut resp = axum::Json(views).into_response();
    if let Some(next) = &page.next {
        listing::set_next(&mut resp, raw.as_deref(), next);
    }
    Ok(resp)
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Submits a job or a workspace. It is queued and starts as soon as its resources fit.
#[utoipa::path(post, path = "/api/v1/workloads", tag = "workloads", request_body = CreateWorkloadRequest,
    responses((status = 201, body = WorkloadView), (status = 400, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn create_workload(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateWorkloadRequest>,
) -> Result<Response, ApiError> {
    let owner = caller.0.username.clone();
    let id = short_id();
    let name = match &req.name {
        Some(n) => {
            names::validate("workload", n)?;
            n.clone()
        }
        None => format!("{}-{}", req.kind.as_str(), &id[..6]),
    };
    let resources = req.resources.resolve()?;
    if resources.gpu_milli_total() > 0 && st.config.gpu_mode == crate::config::GpuMode::None {
        return Err(ApiError::unprocessable("invalid resources.gpus: this server hands out no GPUs (gpu_mode = none)"));
    }
    admission::check_fits_node(&st.node, &resources)?;
    match req.members {
        None | Some(1) => {}
        Some(0) => return Err(ApiError::unprocessable("invalid members: a gang has at least 1 member")),
        Some(n) => {
            return Err(ApiError::unprocessable(format!(
                "invalid members: a gang of {n} members needs a multi-node engine (Slurm or Kubernetes); \
                 this server runs workloads on one node, so ask for the GPUs of all members in one workload"
            )));
        }
    }
    let live = st.live_config().await?; // the queues in force
    let queue = live
        .queue_for(&caller.0.username, caller.0.is_admin(), req.queue.as_deref())
        .map_err(|e| ApiError::unprocessable(format!("invalid queue: {e}")))?;
    let constraint = match req.constraint.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(c) => {
            gpuhub_sched::expr::Compiled::new(c)
                .map_err(|e| ApiError::unprocessable(format!("invalid constraint: {e}")))?;
            Some(c.to_owned())
        }
    };
    if req.runtime_limit.is_some_and(|l| l.0 == 0 || l.0 > 366 * 86_400) {
        return Err(ApiError::unprocessable("invalid runtime_limit: must be from 1s to 366d"));
    }
    let priority = live
        .priority_for(&queue, caller.0.is_admin(), req.priority, req.priority_class.as_deref())
        .map_err(ApiError::unprocessable)?;
    gpuhub_core::env::check_user_env(&req.env)?;
    listing::check_sizes(&st.config.limits, &req)?;
    let command = req.command.clone().unwrap_or_default();
    if command.iter().any(|a| a.contains('\0')) {
        return Err(ApiError::unprocessable("invalid command: arguments must not contain NUL"));
    }
    let (image, mut apps) = resolve_image(&st, &req.image).await?;
    for app in &req.apps {
        app.validate()?;
        if apps.iter().any(|a| a.name == app.name) {
            return Err(ApiError::unprocessable(format!("invalid apps: {} is declared twice", app.name)));
        }
        apps.push(app.clone());
    }
    let now = Utc::now();
    let w = Workload {
        id,
        name,
        owner,
        kind: req.kind,
        image,
        command,
        env: req.env.clone(),
        resources,
        priority,
        queue,
        constraint,
        runtime_limit: req.runtime_limit,
        apps,
        state: WorkloadState::Queued,
        gpus: Vec::new(),
        container_id: None,
        exit_code: None,
        message: Some("queued".into()),
        interruption: None,
        created_at: now,
        queued_at: now,
        started_at: None,
        finished_at: None,
    };
    if let Some(why) = crate::unmet::never(&st.node, &w, &live.scheduler) {
        return Err(ApiError::unprocessable(format!("this workload can never start here: {why}")));
    }
    let limits = &st.config.limits;
    let caps = OwnerCaps { total: limits.max_workloads_per_user, queued: limits.max_queued_per_user };
    let inserted = if caller.0.is_admin() {
        st.store.insert_workload(&w).await.map(|()| None)
    } else {
        st.store.insert_workload_capped(&w, caps).await
    };
    match inserted {
        Ok(None) => {}
        Ok(Some(cap)) => return Err(listing::cap_error(&w.owner, limits, cap)),
        Err(StoreError::Conflict(_)) => {
            return Err(ApiError::conflict(format!("you already have a workload named {:?}", w.name)));
        }
        Err(e) => return Err(e.into()),
    }
    st.controller.kick();
    let mut resp = (StatusCode::CREATED, axum::Json(WorkloadView::from(&w))).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/api/v1/workloads/{}", w.name)) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// Longest image reference accepted (Docker's own limit on a repository name is 255 bytes, plus tag
/// and digest).
const MAX_IMAGE_BYTES: usize = 512;

/// A catalog name becomes its image reference and apps; a reference must be allowed by policy and present.
async fn resolve_image(st: &AppState, image: &str) -> Result<(String, Vec<AppSpec>), ApiError> {
    if image.trim().is_empty() {
        return Err(ApiError::unprocessable("invalid image: must not be empty"));
    }
    if image.len() > MAX_IMAGE_BYTES || !image.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::unprocessable(format!(
            "invalid image: {:?} is not an image reference (at most {MAX_IMAGE_BYTES} bytes of printable ASCII, no spaces)",
            image.chars().take(80).collect::<String>()
        )));
    }
    let (reference, apps) = match st.store.get_image(image).await {
        Ok(entry) => (entry.image, entry.apps),
        Err(StoreError::NotFound { .. }) if st.config.allow_any_image => (image.to_owned(), Vec::new()),
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::unprocessable(format!(
                "invalid image: {image:?} is not in the catalog (see GET /api/v1/images), and this server runs catalog images only"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    if !st.runtime.image_exists(&reference).await? {
        return Err(ApiError::unprocessable(format!(
            "invalid image: {reference:?} is neither a catalog name nor an image the container engine has"
        )));
    }
    Ok((reference, apps))
}

/// One workload.
#[utoipa::path(get, path = "/api/v1/workloads/{name}", tag = "workloads", params(("name" = String, Path), OwnerQuery),
    responses((status = 200, body = WorkloadView), (status = 404, body = Problem)))]
pub async fn get_workload(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<OwnerQuery>,
) -> Result<axum::Json<WorkloadView>, ApiError> {
    Ok(axum::Json(view(&st, &lookup(&st, &caller, &name, q.owner.as_deref()).await?)))
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
    Ok(axum::Json(WorkloadView::from(
        &st.controller.stop(&w.id, StopReason::User { by: caller.0.username.clone(), at: Utc::now() }).await?,
    )))
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
    if !caller.0.is_admin() && w.state.is_terminal() {
        // queuing an ended workload again counts against the owner's queued cap, as a submission does
        let counts = st.store.count_owner_workloads(&w.owner).await?;
        let limits = &st.config.limits;
        if counts.queued >= limits.max_queued_per_user {
            return Err(listing::cap_error(&w.owner, limits, CapReached::Queued { count: counts.queued }));
        }
    }
    let w = st.controller.start(&w.id).await?;
    st.controller.kick();
    Ok(axum::Json(WorkloadView::from(&w)))
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
    st.controller.delete(&w.id).await?;
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
    let mut w = lookup(&st, &caller, &name, q.owner.as_deref()).await?;
    // wait (signalled, no polling) until the workload has a container of this run or has ended; a
    // re-queued workload may still name its previous run's container
    let waiting = |w: &Workload| {
        w.state == WorkloadState::Queued || (w.state == WorkloadState::Starting && w.container_id.is_none())
    };
    while q.follow && waiting(&w) {
        loop {
            match changes.recv().await {
                Ok(id) if id == w.id => break,
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                Err(_) => return Err(ApiError::internal("controller is gone")),
            }
        }
        w = st.store.get_workload_by_id(&w.id).await?;
    }
    let limit = q.limit_bytes.unwrap_or(u64::MAX);
    let text_plain = |body: Body| {
        let mut r = Response::new(body);
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r
    };
    if let Some(app) = &q.app {
        let follow = q.follow && w.state.holds_resources();
        let stream = app_logs::stream(&st, &w, app, q.tail, limit, follow).await?;
        return Ok(text_plain(Body::from_stream(stream)));
    }
    if let Some(cid) = &w.container_id {
        let follow = q.follow && w.state.holds_resources();
        match st.runtime.logs(cid, follow, q.tail).await {
            Ok(stream) => {
                // passed on chunk by chunk as the engine delivers them, never collected
                let stream = logfile::take_bytes(stream, limit).map(|r| r.map_err(std::io::Error::other));
                return Ok(text_plain(Body::from_stream(stream)));
            }
            Err(gpuhub_driver::RuntimeError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let archived = st.data_dir.join("logs").join(format!("{}.log", w.id));
    let mut file = match tokio::fs::File::open(&archived).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(text_plain(Body::empty())),
        Err(e) => return Err(ApiError::internal(e)),
    };
    let len = file.metadata().await.map_err(ApiError::internal)?.len();
    let start = match q.tail {
        Some(n) => logfile::tail_offset(&mut file, len, n).await.map_err(ApiError::internal)?,
        None => 0,
    };
    let stream = logfile::read_range(file, start, (len - start).min(limit));
    Ok(text_plain(Body::from_stream(stream)))
}
